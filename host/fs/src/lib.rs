//! File helpers bx's crates share, each written once: [`write_atomically`], the one way
//! bx replaces a file of its own, [`resolve_leniently`], the one way it learns where
//! a path that may not exist yet leads, and [`lock_waiting`], the one way a command
//! waits its turn to change a file of bx's.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Replaces `path` with `data` whole: a temporary file in the same directory (mode 0600,
/// as `tempfile` creates it), synced, renamed over `path`, and then the directory
/// synced, so that after a crash `path` holds either the old bytes or the new ones, and
/// the rename itself is on disk.
///
/// The file it replaces is never left holding bx's bytes under a name bx does not know.
/// A hard link to it made elsewhere (in a workspace, say) would otherwise keep the old
/// bytes after the rename, as a file with one link that nothing marks as bx's. So the
/// old file is held under a second name of bx's own ([`RETIRING_PREFIX`], beside it)
/// from before the rename until it is emptied or let go: while it has another name, its
/// link count stays above one (the runtime compares such a file with everything in bx's
/// directories, and finds this one), and once the rename is done, a file still linked
/// elsewhere is truncated before bx's name for it goes. Where no second name can be made
/// (a file system without hard links), the file is held by an open descriptor instead.
pub fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    replace_with(path, data, |from, to| std::fs::hard_link(from, to))
}

/// [`write_atomically`], holding the replaced file by `link` (a hard link, but for tests).
fn replace_with(
    path: &Path,
    data: &[u8],
    link: impl Fn(&Path, &Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    let held = hold(path, dir, link)?;
    tmp.persist(path).map_err(|e| e.error)?;
    match held {
        Some(Held::Name(name)) => {
            if let Some(file) = open_to_empty(&name) {
                empty_if_linked(&file, 1)?;
            }
            name.close()?;
        }
        Some(Held::Open(file)) => empty_if_linked(&file, 0)?,
        None => {}
    }
    sync_dir(dir)
}

/// How the second name that [`write_atomically`] holds a replaced file under begins (in
/// the file's own directory; nothing that lists bx's directories reads such a name).
pub const RETIRING_PREFIX: &str = ".retiring";

/// How a replaced file is held across its rename.
enum Held {
    /// Under a second name of bx's own, removed when dropped.
    Name(tempfile::TempPath),
    /// By an open descriptor, where no second name can be made: a file system without
    /// hard links (FAT, where nobody can link it elsewhere either), or a file at its
    /// link limit (then it is emptied just after the rename, not before its name goes).
    Open(File),
}

/// The replaced file at `path`, held; `None` when there is none (or it is no regular
/// file bx could have written: a symlink in its place is replaced, never followed).
fn hold(
    path: &Path,
    dir: &Path,
    link: impl Fn(&Path, &Path) -> std::io::Result<()>,
) -> std::io::Result<Option<Held>> {
    let made = tempfile::Builder::new().prefix(RETIRING_PREFIX).make_in(dir, |n| link(path, n));
    match made {
        Ok(file) => Ok(Some(Held::Name(file.into_temp_path()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(_) => Ok(open_to_empty(path).map(Held::Open)),
    }
}

/// `name` opened for writing without following a symlink or waiting on a FIFO; `None`
/// when that fails (a symlink, ELOOP, holds no bytes of bx's file).
fn open_to_empty(name: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    const O_NOFOLLOW: i32 = 0o400000;
    const O_NONBLOCK: i32 = 0o4000;
    std::fs::OpenOptions::new().write(true).custom_flags(O_NOFOLLOW | O_NONBLOCK).open(name).ok()
}

/// Truncates `file` when it has names beyond the `own` that bx holds: one made
/// elsewhere, the only one left once its place in bx's directories went to the rename.
/// Anything but a regular file is left.
fn empty_if_linked(file: &File, own: u64) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata()?;
    if meta.is_file() && meta.nlink() > own {
        file.set_len(0)?;
        file.sync_all()?;
    }
    Ok(())
}

/// Syncs directory `dir`, so the names created, renamed or removed in it are on disk.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// How many symlinks [`resolve_leniently`] follows before it gives up (the kernel's
/// `ELOOP` limit).
const MAX_LINKS: usize = 40;

/// Where `path` leads on disk: its canonical form when it exists, else (a dangling
/// symlink, or a path not yet created) its symlinks followed as far as they go with the
/// missing rest appended. A deny rule on a symlink whose target does not exist yet so
/// still covers that target once a tool creates it, and a dangling `core.md` link still
/// names the file a tool must not create. `None` past [`MAX_LINKS`] links.
pub fn resolve_leniently(path: &Path) -> Option<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        if let Ok(real) = std::fs::canonicalize(&current) {
            return Some(real);
        }
        let parent = current.parent()?.to_path_buf();
        let name = current.file_name()?.to_owned();
        match std::fs::read_link(&current) {
            Ok(target) => current = parent.join(target),
            Err(_) => return resolve_leniently(&parent).map(|p| p.join(name)),
        }
    }
    None
}

/// Takes an exclusive lock on `path` (created if missing, never truncated), waiting up to
/// `wait` for another process to let go: `Ok(Some(file))`, held until the file is closed,
/// or `Ok(None)` when the other holder kept it that long.
pub fn lock_waiting(path: &Path, wait: std::time::Duration) -> std::io::Result<Option<File>> {
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    let give_up = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < give_up => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replace_leaves_the_new_bytes_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomically(&path, b"old").unwrap();
        write_atomically(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// Regression (the own-state rule): a hard link to a file bx replaces, made anywhere,
    /// kept the old bytes after the rename under a name nothing marked as bx's.
    #[test]
    fn a_replaced_file_linked_elsewhere_is_emptied_and_no_second_name_is_left() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.json");
        write_atomically(&path, b"old state").unwrap();
        let link = elsewhere.path().join("copy");
        std::fs::hard_link(&path, &link).unwrap();
        write_atomically(&path, b"new state").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new state");
        assert_eq!(std::fs::read(&link).unwrap(), b"", "the link kept the old bytes");
        assert_eq!(std::fs::metadata(&link).unwrap().nlink(), 1);
        assert_eq!(std::fs::metadata(&path).unwrap().nlink(), 1);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // The neighbour: a file nobody linked keeps nothing behind, and a symlink in the
        // file's place is replaced, its target untouched.
        let target = elsewhere.path().join("target");
        std::fs::write(&target, b"owner's").unwrap();
        let sym = dir.path().join("sym");
        std::os::unix::fs::symlink(&target, &sym).unwrap();
        write_atomically(&sym, b"bx's").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"owner's");
        assert_eq!(std::fs::read(&sym).unwrap(), b"bx's");
    }

    /// Where no second name can be made (a file system without hard links, such as an
    /// export directory on a FAT stick; simulated here by a link that fails, since no
    /// such file system can be mounted for a test), a replace still works, and a link
    /// made elsewhere (where the file system has them) is still emptied.
    #[test]
    fn without_hard_links_a_replace_holds_the_file_open_instead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        let no_links = |_: &Path, _: &Path| Err(std::io::Error::from_raw_os_error(1));
        replace_with(&path, b"first", no_links).unwrap();
        let link = dir.path().join("elsewhere");
        std::fs::hard_link(&path, &link).unwrap();
        replace_with(&path, b"second", no_links).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert_eq!(std::fs::read(&link).unwrap(), b"", "the link kept the old bytes");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_dangling_link_resolves_to_its_target_and_a_loop_to_none() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink(real.join("later/target"), real.join("link")).unwrap();
        assert_eq!(resolve_leniently(&real.join("link/x")), Some(real.join("later/target/x")));
        std::os::unix::fs::symlink("b", real.join("a")).unwrap();
        std::os::unix::fs::symlink("a", real.join("b")).unwrap();
        assert_eq!(resolve_leniently(&real.join("a")), None);
    }
}
