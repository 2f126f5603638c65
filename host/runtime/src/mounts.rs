//! Where a directory has a second name, from the mount table: read once, and again only
//! when the kernel says the table changed.
//!
//! Every object a call opens is checked against the mounts that give something a second
//! name (`host_fs`'s check for bx's own state by another name). Reading and parsing
//! `/proc/self/mountinfo` on every call cost about 100 µs of a 1 MiB `fs.read` on the
//! development machine (`make bench`'s read rows, before and after: docs/runtime.md).
//! The kernel reports `POLLPRI | POLLERR` on an open mountinfo descriptor once the mount
//! namespace's table has changed since the descriptor was opened or last polled (proc(5),
//! `/proc/[pid]/mounts`; how util-linux and systemd watch it). So the table is kept with
//! the descriptor it was read from, and read again from a fresh descriptor whenever a
//! poll that does not wait reports anything or fails. The descriptor is opened before the
//! table is read: a change between the two is both in what was read and reported by the
//! next poll.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use rustix::event::{PollFd, PollFlags, Timespec, poll};

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// What the mount table says of second names, and the descriptor it was read from.
struct Watched {
    file: File,
    table: Arc<Table>,
}

/// The mounts that can give something a second name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Table {
    /// Mount points under which something can have another name with the same device
    /// and inode: a mount of part of a file system (its root is not `/`: a bind mount of
    /// a directory or a file), or one of a file system mounted at more than one place.
    pub(crate) points: Vec<PathBuf>,
    /// Every mount by its ID (mountinfo's first field; what `statx`'s `STATX_MNT_ID`
    /// says of an object opened through it), and whether it is one of those.
    pub(crate) ids: HashMap<u64, bool>,
}

impl Table {
    /// When the table cannot be read or parsed: every path counts as under a second
    /// name's mount (`/`), so the full comparison runs.
    fn unknown() -> Table {
        Table { points: vec![PathBuf::from("/")], ids: HashMap::new() }
    }
}

static WATCHED: Mutex<Option<Watched>> = Mutex::new(None);

static ROOT_MOUNT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();

/// The mount ID of the root file system as the process first asked (the runtime asks as
/// it starts; `statx`'s `STATX_MNT_ID`, mountinfo's first field; `None` on a kernel
/// before Linux 5.8): an overlay there is a container's, made before bx ran. A root
/// swapped in later (`pivot_root` onto an overlay that shows bx's state under another
/// name, as a probe did) is not that mount.
pub(crate) fn root_mount() -> Option<u64> {
    use rustix::fs::{AtFlags, CWD, StatxFlags, statx};
    *ROOT_MOUNT.get_or_init(|| {
        let s = statx(CWD, "/", AtFlags::empty(), StatxFlags::MNT_ID).ok()?;
        (s.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(s.stx_mnt_id)
    })
}

/// What `/proc/self/mountinfo` says of second names ([`Table`]). Read as bytes (a mount
/// point need not be UTF-8). When the table cannot be read or parsed, every path counts
/// as under a second name's mount, and nothing is kept.
pub(crate) fn table() -> Arc<Table> {
    let mut watched = WATCHED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(w) = watched.as_ref()
        && !changed(&w.file)
    {
        return Arc::clone(&w.table);
    }
    *watched = None;
    let read = || -> Option<Watched> {
        let mut file = File::open(MOUNTINFO).ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        Some(Watched { table: Arc::new(parse(&bytes)?), file })
    };
    match read() {
        Some(w) => Arc::clone(&watched.insert(w).table),
        None => Arc::new(Table::unknown()),
    }
}

/// Whether the table may have changed since `file` was opened or last polled: any event
/// at all, or a poll that fails, counts.
fn changed(file: &File) -> bool {
    let mut fds = [PollFd::new(file, PollFlags::PRI)];
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    match poll(&mut fds, Some(&now)) {
        Ok(_) => !fds[0].revents().is_empty(),
        Err(_) => true,
    }
}

/// The [`Table`] of a mountinfo table; `None` when a line does not parse.
fn parse(table: &[u8]) -> Option<Table> {
    let mut mounts: Vec<(u64, &[u8], &[u8], PathBuf)> = Vec::new();
    for line in table.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let mut fields = line.split(|b| *b == b' ');
        let id = fields.next().and_then(|f| std::str::from_utf8(f).ok()?.parse().ok());
        let (Some(id), Some(device), Some(root), Some(point)) =
            (id, fields.nth(1), fields.next(), fields.next())
        else {
            return None;
        };
        mounts.push((id, device, root, unescape_mountinfo(point)));
    }
    // How many times each file system is mounted whole (its root at the mount point).
    let mut whole: HashMap<&[u8], usize> = HashMap::new();
    for (_, device, root, _) in &mounts {
        if *root == b"/" {
            *whole.entry(device).or_default() += 1;
        }
    }
    let mut table = Table { points: Vec::new(), ids: HashMap::with_capacity(mounts.len()) };
    for (id, device, root, point) in mounts {
        let second = root != b"/" || whole.get(device).is_some_and(|n| *n > 1);
        table.ids.insert(id, second);
        if second {
            table.points.push(point);
        }
    }
    Some(table)
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone, as bytes.
fn unescape_mountinfo(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStringExt as _;
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push(
                    (d[0] - b'0').wrapping_mul(64).wrapping_add((d[1] - b'0') * 8 + (d[2] - b'0')),
                );
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    #[test]
    fn second_names_are_bind_mounts_and_file_systems_mounted_twice() {
        use std::os::unix::ffi::OsStrExt as _;
        let table = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
            30 22 8:1 /s/tools /w/m\\040x rw - ext4 /dev/sda1 rw\n\
            31 22 0:40 / /s/sessions rw - tmpfs none rw\n\
            32 22 0:40 / /w/\xff rw - tmpfs none rw\n\
            33 22 0:41 / /media rw - tmpfs none rw\n";
        let table = super::parse(table).unwrap();
        let shown: Vec<&[u8]> = table.points.iter().map(|p| p.as_os_str().as_bytes()).collect();
        assert_eq!(shown, [&b"/w/m x"[..], b"/s/sessions", b"/w/\xff"]);
        let mut ids: Vec<(u64, bool)> = table.ids.into_iter().collect();
        ids.sort_unstable();
        assert_eq!(ids, [(22, false), (30, true), (31, true), (32, true), (33, false)]);
        assert_eq!(super::parse(b"22 1 8:1\n"), None);
        assert_eq!(super::parse(b"x 1 8:1 / / rw - ext4 /dev/sda1 rw\n"), None);
    }

    #[test]
    fn the_table_is_read_again_only_when_it_changed() {
        // Nothing mounts in this process's namespace between the two: the same points.
        // (A mount made meanwhile is the daemon test's: host/cli/tests/suite/hardening.rs.)
        let first = super::table();
        let second = super::table();
        assert!(Arc::ptr_eq(&first, &second), "{first:?} was read twice");
    }
}
