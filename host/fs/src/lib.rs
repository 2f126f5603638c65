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
pub fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
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
