//! What an anchored writer's open already checked, so the next open reads only what is
//! new: `checked.json` in the log's directory.
//!
//! An anchored open checks the records against the signed checkpoints kept off the host
//! (`crate::consistent`), and until now read every record to do it. After a check holds,
//! the writer records the day files it read whole that no writer appends to again (every
//! file but the newest), each by what the kernel says of it (device, inode, length,
//! modification and change times), with the tree's right edge after them and the
//! exported heads the records were found to extend. The next open trusts those files
//! without reading them when every one of them is still exactly so, and reads the rest.
//!
//! Why that holds against whoever can write the state directory (the one the anchor is
//! for):
//! - **It cannot be forged.** The file carries an HMAC-SHA256 over its body, under a key
//!   derived from the anchor's signing key ([`crate::Anchor`]), which only a key holder
//!   (who can sign checkpoints anyway) can make.
//! - **A changed file does not match.** Any write to a file sets its change time to the
//!   kernel's now, which no unprivileged process can set back (`utimensat` sets the
//!   access and modification times only; moving the clock needs `CAP_SYS_TIME`). A file
//!   put in its place by another name has another inode, or the same inode number
//!   reused with a new change time.
//! - **A change within the clock's tick.** Change times move in ticks of the kernel's
//!   coarse clock (a few milliseconds), so a write in the same tick as the file's last
//!   could keep it. A file is recorded only when its change time is [`SETTLED`] older
//!   than the open that read it, and only when its identity did not change while it was
//!   read.
//! - **A write through a mapping.** A page dirtied through a shared writable mapping
//!   takes later writes with no fault, and so no new change time, until writeback cleans
//!   it. Before a file is marked it is synced ([`settle`]), which cleans every page and
//!   write-protects it in every mapping; and only files on a file system whose fault
//!   handler updates the times are recorded ([`VOUCHABLE`]: not tmpfs, and not `/proc`
//!   behind a symlink, whose files change with no change time at all).
//! - **An old `checked.json` put back** names files that still are as it says, or it
//!   does not match; either way nothing unchecked is trusted.
//!
//! Anything that does not match, parse or verify means a full read, as before. `bx audit
//! verify` never reads this file: it reads every record.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::tree::{Hash, Tree};

/// The file's name in the log's directory.
pub(crate) const NAME: &str = "checked.json";

/// The most `checked.json` is read of: a record per day file, about 150 bytes each, for
/// decades of days.
const MAX_BYTES: u64 = 4 << 20;

/// How much older than the open that reads it a file's change time must be for the file
/// to be recorded: far more than any kernel's timestamp tick.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

/// The most heads kept: a head the records were found to extend, per export directory
/// and over time; the newest are kept.
const MAX_HEADS: usize = 64;

/// One day file as the kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Mark {
    pub(crate) name: String,
    len: u64,
    dev: u64,
    ino: u64,
    /// Modification time, seconds and nanoseconds.
    mtime: (i64, i64),
    /// Change time, seconds and nanoseconds.
    ctime: (i64, i64),
}

impl Mark {
    /// The mark of an open day file named `name`.
    pub(crate) fn of(file: &File, name: &str) -> std::io::Result<Mark> {
        let m = file.metadata()?;
        Ok(Mark {
            name: name.to_owned(),
            len: m.len(),
            dev: m.dev(),
            ino: m.ino(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// Whether the file's last change is [`SETTLED`] older than `now`.
    pub(crate) fn settled(&self, now: SystemTime) -> bool {
        let Ok(secs) = u64::try_from(self.ctime.0) else { return false };
        let nanos = u32::try_from(self.ctime.1).unwrap_or(0);
        let changed = UNIX_EPOCH + Duration::new(secs, nanos);
        now.duration_since(changed).is_ok_and(|age| age > SETTLED)
    }
}

/// The file systems (`statfs`'s `f_type`) whose change time moves on every write to a
/// file, through `write` and through a shared mapping alike: ext4, XFS and Btrfs. A write
/// through a mapping to a page that writeback has cleaned faults, and their fault handler
/// (`page_mkwrite`) updates the times. A file anywhere else (tmpfs, a network file
/// system, `/proc` behind a symlink) is never vouched for: it is read at every open.
const VOUCHABLE: [i64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];

/// Whether the open file `file` lies on a file system in [`VOUCHABLE`].
#[allow(clippy::useless_conversion, reason = "`f_type` is not an i64 on every target")]
pub(crate) fn vouchable(file: &File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|s| VOUCHABLE.contains(&i64::from(s.f_type)))
}

/// Makes every page of `file` clean before it is marked: a page a shared writable mapping
/// dirtied stays writable, with no fault and so no new change time, until writeback
/// cleans it (about 30 s by default). `fdatasync` writes it back now, which write-protects
/// it in every mapping, so any later write faults and moves the change time.
pub(crate) fn settle(file: &File) -> std::io::Result<()> {
    file.sync_data()
}

/// A head the records were found to extend: its size and root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeadMark {
    pub(crate) size: u64,
    pub(crate) root: String,
}

/// What was checked: the first day files, the tree over exactly their records, and the
/// heads that tree (or the log it began) was found to extend.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    files: Vec<Mark>,
    size: u64,
    edge: Vec<String>,
    heads: Vec<HeadMark>,
}

/// Where a check may start: the files trusted as checked, the tree after them, and the
/// heads known to be extended by their records. Empty for a check from the first record.
#[derive(Debug, Clone, Default)]
pub(crate) struct Start {
    pub(crate) files: Vec<Mark>,
    pub(crate) tree: Tree,
    pub(crate) heads: Vec<HeadMark>,
}

impl Start {
    /// Whether `size` records with `root` are a head known to be extended.
    pub(crate) fn knows(&self, size: u64, root: &Hash) -> bool {
        let root = root.to_string();
        self.heads.iter().any(|h| h.size == size && h.root == root)
    }
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8; 32], body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("any length"));
    mac.update(body);
    mac
}

/// The start `checked.json` in `dir` vouches for, when it verifies under `key` and reads
/// back; the empty start otherwise. Whether its files still match is the check's to see.
pub(crate) fn read(dir: &Path, key: &[u8; 32]) -> Start {
    let Some(text) = read_bytes(dir) else { return Start::default() };
    let Some(newline) = text.iter().position(|b| *b == b'\n') else { return Start::default() };
    let (tag, body) = (&text[..newline], &text[newline + 1..]);
    let Ok(tag) = hex::decode(tag) else { return Start::default() };
    if mac(key, body).verify_slice(&tag).is_err() {
        return Start::default();
    }
    let Ok(body) = serde_json::from_slice::<Body>(body) else { return Start::default() };
    let edge: Option<Vec<Hash>> = body.edge.iter().map(|h| Hash::parse_hash(h).ok()).collect();
    match edge.and_then(|edge| Tree::from_edge(body.size, edge)) {
        Some(tree) => Start { files: body.files, tree, heads: body.heads },
        None => Start::default(),
    }
}

/// Writes `checked.json` in `dir` for `start` (the files just found checked, the tree
/// after them and the heads they extend), under `key`. Only the log's writer calls this,
/// holding its lock. A failure to write only costs the next open a full read.
pub(crate) fn write(dir: &Path, key: &[u8; 32], start: &Start) {
    if start.files.is_empty() {
        // Nothing to vouch for; an older file (if any) still says only what is true.
        return;
    }
    let mut heads: Vec<HeadMark> =
        start.heads.iter().filter(|h| h.size <= start.tree.size()).cloned().collect();
    heads.sort_by_key(|h| std::cmp::Reverse(h.size));
    heads.dedup();
    heads.truncate(MAX_HEADS);
    let body = Body {
        files: start.files.clone(),
        size: start.tree.size(),
        edge: start.tree.edge().iter().map(ToString::to_string).collect(),
        heads,
    };
    let Ok(body) = serde_json::to_vec(&body) else { return };
    let mut out = hex::encode(mac(key, &body).finalize().into_bytes()).into_bytes();
    out.push(b'\n');
    out.extend_from_slice(&body);
    // Most opens vouch for what the last one did: no write, and no sync, for that.
    if read_bytes(dir).is_some_and(|old| old == out) {
        return;
    }
    let _ = bx_fs::write_atomically(&dir.join(NAME), &out);
}

/// The bytes of `checked.json` in `dir`, when it reads back whole within [`MAX_BYTES`].
fn read_bytes(dir: &Path) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    crate::file::open_read(&dir.join(NAME))
        .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes))
        .ok()
        .filter(|_| bytes.len() as u64 <= MAX_BYTES)?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Start {
        let mut tree = Tree::new();
        for i in 0..5u8 {
            tree.push(crate::tree::leaf_hash(&[i]));
        }
        let mark = Mark {
            name: "2026-12-01.jsonl".into(),
            len: 10,
            dev: 1,
            ino: 2,
            mtime: (3, 4),
            ctime: (5, 6),
        };
        let head = HeadMark { size: 5, root: tree.root().to_string() };
        Start { files: vec![mark], tree, heads: vec![head] }
    }

    #[test]
    fn reads_back_only_what_its_key_wrote_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (key, other) = ([7u8; 32], [8u8; 32]);
        write(dir.path(), &key, &start());
        // Writing the same again leaves the file alone (the same inode: no replace).
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let first = ino(&dir.path().join(NAME));
        write(dir.path(), &key, &start());
        assert_eq!(ino(&dir.path().join(NAME)), first);
        let back = read(dir.path(), &key);
        assert_eq!((back.files.clone(), back.tree.root()), (start().files, start().tree.root()));
        assert!(back.knows(5, &start().tree.root()));
        // Another key, a changed byte, a cut file, no tag line, too large: nothing.
        assert!(read(dir.path(), &other).files.is_empty());
        let path = dir.path().join(NAME);
        let bytes = std::fs::read(&path).unwrap();
        let edits: Vec<Vec<u8>> = vec![
            {
                let mut b = bytes.clone();
                let at = b.len() - 3;
                b[at] ^= 1;
                b
            },
            bytes[..bytes.len() - 1].to_vec(),
            bytes[65..].to_vec(),
            [&bytes[..], &vec![b' '; (MAX_BYTES as usize) + 1][..]].concat(),
        ];
        for edit in edits {
            std::fs::write(&path, &edit).unwrap();
            assert!(read(dir.path(), &key).files.is_empty(), "{}", edit.len());
        }
        // Nothing vouched for writes nothing.
        std::fs::remove_file(&path).unwrap();
        write(dir.path(), &key, &Start::default());
        assert!(!path.exists());
    }

    #[test]
    fn a_file_is_settled_only_well_after_its_last_change() {
        let mark = start().files.remove(0);
        let changed = UNIX_EPOCH + Duration::new(5, 6);
        assert!(!mark.settled(changed));
        assert!(!mark.settled(changed + SETTLED));
        assert!(mark.settled(changed + SETTLED + Duration::from_millis(1)));
        assert!(!mark.settled(UNIX_EPOCH));
    }
}
