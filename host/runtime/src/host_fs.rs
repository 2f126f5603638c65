//! `bx:host/fs`: filesystem operations under the grant's roots.
//!
//! Each operation is checked twice. First lexically by the broker's grant (normalised
//! path, no `..`, not under a denied sub-path, under a root of the right access). Then on
//! the object actually opened: every open goes through a `cap-std` directory handle rooted
//! at the granted path, so `..`, absolute paths and symlinks cannot leave the root, and
//! the opened descriptor's real path is read back from the kernel and checked against the
//! denied sub-paths (and bx's own state) before a byte moves. A symlink swapped between
//! the two checks changes nothing: the descriptor that was verified is the one that is
//! read or written. Writes never follow a symlink in the final component, and are
//! verified on the opened descriptor before anything is truncated or written, so a deny
//! rule holds for the target of a denied symlink in every mode.
//!
//! Only regular files are read or written, and every open is non-blocking: a FIFO or a
//! device under a grant is refused rather than left to hang the call.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::fd::{AsFd, AsRawFd as _};
use std::path::{Path, PathBuf};

use bx_broker::{FsAccess, Grant};
use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt as _};
use cap_std::fs::{Dir, MetadataExt as _, OpenOptions, OpenOptionsExt as _};

use crate::bindings::bx::host::fs::{Entry, EntryKind, Host, Metadata, TextChunk, WriteMode};
use crate::bindings::bx::host::types::Error;
use crate::state::CallState;
use crate::tool::Touched;

/// How a WASI guest asks to open a path (its open and descriptor flags, as bx reads them).
#[derive(Debug, Clone, Default)]
pub(crate) struct OpenHow {
    /// Read through the descriptor.
    pub(crate) read: bool,
    /// Write through the descriptor.
    pub(crate) write: bool,
    /// Create the file when missing.
    pub(crate) create: bool,
    /// Refuse when it exists.
    pub(crate) exclusive: bool,
    /// Cut it to nothing.
    pub(crate) truncate: bool,
    /// It must be a directory.
    pub(crate) directory: bool,
    /// Follow a symlink in the last component (a read only: a write never follows one).
    pub(crate) follow: bool,
}

impl OpenHow {
    /// Whether the open changes anything, so the path must be granted for writing.
    pub(crate) fn writes(&self) -> bool {
        self.write || self.create || self.truncate
    }
}

/// A name a WASI guest changes, checked: the directory that holds it (verified), the
/// name, and where it lies by name and on disk.
pub(crate) struct Change {
    pub(crate) dir: Dir,
    pub(crate) name: String,
    pub(crate) logical: PathBuf,
    pub(crate) real: PathBuf,
}

/// What [`CallState::open_checked`] opened.
pub(crate) enum Opened {
    /// A regular file.
    File(cap_std::fs::File),
    /// A directory.
    Dir(Dir),
}

/// Entries one `list-dir` may return; a bigger directory is refused as too large.
const MAX_LIST_ENTRIES: usize = 100_000;

/// A granted root, opened on first use.
struct OpenRoot {
    /// The directory handle every operation under this root goes through. For a root
    /// that names a file, the handle of its parent directory.
    dir: Dir,
    /// The kernel's path of the directory (or of the file, for a file root).
    real: PathBuf,
    /// For a root that names a file: its name inside `dir`.
    file: Option<String>,
}

/// The roots of one call's grant, opened lazily, and the denied sub-paths resolved.
pub(crate) struct Roots {
    slots: Vec<Option<Result<OpenRoot, Error>>>,
    /// The denied sub-paths and bx's own state as they resolve on disk, each with
    /// whether it is bx's own; resolved on first use.
    denied_real: Option<Vec<(PathBuf, bool)>>,
    /// (device, inode) of every directory and file inside bx's own directories (three
    /// levels deep), sorted; scanned only when an opened object could be a second name
    /// of one: a file with more than one link, a path under a bind mount, or an object
    /// reached through a mount that gives second names or that the table does not hold.
    own_deep: Option<OwnScan>,
    /// The policy's path labels as their paths resolve on disk: a grant named by a
    /// symlink labels what it leads to, whatever name a call reaches it by.
    labels_real: Option<Vec<(PathBuf, bx_broker::Label)>>,
    /// (device, inode) of each of bx's own paths that exists (the state and audit
    /// directories, the signing key and its `.pub`, the export directories): a second
    /// name for one of them (a bind mount, a hard link) is refused as the first is.
    own_ids: Option<Vec<(u64, u64)>>,
    /// Directories already found not to be one of bx's own by identity, this call.
    not_own: std::collections::HashSet<PathBuf>,
}

impl Roots {
    pub(crate) fn new(grant: &Grant) -> Roots {
        Roots {
            slots: grant.roots().map(|_| None).collect(),
            denied_real: None,
            own_deep: None,
            labels_real: None,
            own_ids: None,
            not_own: std::collections::HashSet::new(),
        }
    }
}

/// Entries of bx's own directories looked at for hard-linked files, at most.
const MAX_OWN_SCAN: usize = 100_000;

/// What one look through bx's own directories found: the (device, inode) of every
/// directory and regular file in them, sorted; whether all of them were seen (at most
/// [`MAX_OWN_SCAN`] entries are); and each directory read with how it stood then, so a
/// file bx wrote since (a session, a ledger replaced by rename) is not missed.
struct OwnScan {
    ids: Vec<(u64, u64)>,
    whole: bool,
    dirs: Vec<(PathBuf, Option<DirStamp>)>,
}

/// A directory's identity and the times that every entry made, renamed or removed in it
/// moves (nanoseconds: two changes within one second still differ).
type DirStamp = (u64, u64, i64, i64, i64, i64);

fn stamp(dir: &Path) -> Option<DirStamp> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::symlink_metadata(dir).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()))
}

impl OwnScan {
    /// Everything under `dirs` (and the dirs), three levels deep at most.
    fn of(dirs: &[PathBuf]) -> OwnScan {
        use std::os::unix::fs::MetadataExt as _;
        let mut scan = OwnScan { ids: Vec::new(), whole: true, dirs: Vec::new() };
        let mut stack: Vec<(PathBuf, u32)> = dirs.iter().map(|d| (d.clone(), 0)).collect();
        let mut seen = 0;
        'dirs: while let Some((dir, depth)) = stack.pop() {
            // Stamped before it is read: a change during the read moves it past this.
            scan.dirs.push((dir.clone(), stamp(&dir)));
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                seen += 1;
                if seen > MAX_OWN_SCAN {
                    // Past the bound, the rest is not scanned: the caller refuses what it
                    // cannot compare (see `check_identity`).
                    scan.whole = false;
                    break 'dirs;
                }
                let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
                if meta.is_dir() || meta.is_file() {
                    scan.ids.push((meta.dev(), meta.ino()));
                }
                if meta.is_dir() && depth < 3 {
                    stack.push((entry.path(), depth + 1));
                }
            }
        }
        scan.ids.sort_unstable();
        scan.ids.dedup();
        scan
    }

    /// Whether a directory it read has changed since.
    fn stale(&self) -> bool {
        self.dirs.iter().any(|(dir, was)| stamp(dir) != *was)
    }

    fn holds(&self, ids: &[(u64, u64)]) -> bool {
        ids.iter().any(|id| self.ids.binary_search(id).is_ok())
    }
}

/// `O_NONBLOCK`: opening a FIFO for reading or writing must not wait for its other end.
const O_NONBLOCK: i32 = 0o4000;
/// `O_NOCTTY`: a terminal a tool names never becomes the daemon's controlling terminal.
const O_NOCTTY: i32 = 0o400;
/// The flags every file open by a tool carries.
const OPEN_FLAGS: i32 = O_NONBLOCK | O_NOCTTY;

/// Refuses, before any open, a name that exists and is not a regular file: opening a
/// device can act on it (a tape rewinds, a modem line is raised). A symlink is left to
/// the open, which follows it or refuses it as before. What is opened is checked again
/// on the descriptor, so a swap after this check is still refused.
fn refuse_special(meta: std::io::Result<cap_std::fs::Metadata>, shown: &str) -> Result<(), Error> {
    match meta {
        Ok(m) if !m.is_file() && !m.file_type().is_symlink() => {
            Err(Error::Invalid(format!("{shown}: not a regular file")))
        }
        _ => Ok(()),
    }
}
/// Opens directory `rel` below `root` one component at a time, refusing a symlink at any
/// of them (what `openat2`'s `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` does in one call,
/// done portably with cap-std's no-follow open).
fn open_dir_beneath(root: &Dir, rel: &Path, shown: &str) -> Result<Dir, Error> {
    use cap_fs_ext::DirExt as _;
    let mut dir = root.try_clone().map_err(|e| io_error(shown, &e))?;
    for part in rel.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::Normal(name) => {
                dir = dir.open_dir_nofollow(name).map_err(|e| {
                    if dir.symlink_metadata(name).is_ok_and(|m| m.file_type().is_symlink()) {
                        Error::Denied(format!(
                            "{shown}: {} is a symlink; a write never passes through one (write to the path it leads to)",
                            Path::new(name).display()
                        ))
                    } else {
                        io_error(shown, &e)
                    }
                })?;
            }
            _ => return Err(Error::Denied(format!("{shown}: leads outside the granted root"))),
        }
    }
    Ok(dir)
}

/// The `/proc` name of an open descriptor.
fn real_fd_path(fd: std::os::fd::BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// What the kernel says of an opened object, in one `statx` of its descriptor.
#[derive(Debug, Clone, Copy)]
struct Identity {
    /// (device, inode): the object itself, however it was reached.
    id: (u64, u64),
    /// Its link count when it is a file; 1 for anything else (a directory always has
    /// several: "." and its subdirectories' ".."; only a file's count says it has
    /// another name).
    links: u64,
    /// The mount it was reached through (`STATX_MNT_ID`, mountinfo's first field), when
    /// the kernel says (Linux 5.8 and later).
    mount: Option<u64>,
    /// Whether it lies on an overlay file system (`fstatfs`); unknown counts as one.
    overlay: bool,
}

/// `OVERLAYFS_SUPER_MAGIC`.
const OVERLAY_FS: i64 = 0x794c_7630;

impl Identity {
    #[allow(clippy::useless_conversion, reason = "`f_type` is not an i64 on every target")]
    fn of(fd: std::os::fd::BorrowedFd<'_>) -> Result<Identity, Error> {
        use rustix::fs::{AtFlags, FileType, StatxFlags};
        let s = rustix::fs::statx(
            fd,
            "",
            AtFlags::EMPTY_PATH,
            StatxFlags::BASIC_STATS | StatxFlags::MNT_ID,
        )
        .map_err(|e| {
            Error::Denied(format!(
                "cannot verify what an opened path is ({e}); see docs/runbook.md#path-unverifiable"
            ))
        })?;
        let file = FileType::from_raw_mode(u32::from(s.stx_mode)) == FileType::RegularFile;
        Ok(Identity {
            id: (rustix::fs::makedev(s.stx_dev_major, s.stx_dev_minor), s.stx_ino),
            links: if file { u64::from(s.stx_nlink) } else { 1 },
            mount: (s.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(s.stx_mnt_id),
            overlay: rustix::fs::fstatfs(fd).map_or(true, |f| i64::from(f.f_type) == OVERLAY_FS),
        })
    }
}

/// The kernel's idea of where an open descriptor lives.
fn real_path(fd: impl AsFd) -> Result<PathBuf, Error> {
    std::fs::read_link(real_fd_path(fd.as_fd())).map_err(|e| {
        Error::Denied(format!(
            "cannot verify where an opened path lives ({e}); see docs/runbook.md#path-unverifiable"
        ))
    })
}

pub(crate) fn io_error(path: &str, err: &std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    const ELOOP: i32 = 40;
    const EXDEV: i32 = 18;
    if err.raw_os_error() == Some(ELOOP) {
        return Error::Denied(format!("{path}: is a symlink (writes never follow symlinks)"));
    }
    match err.kind() {
        K::NotFound => Error::NotFound(path.to_owned()),
        K::AlreadyExists => Error::AlreadyExists(path.to_owned()),
        // cap-std reports an escape attempt (`..`, absolute or symlink out of the root)
        // as a PermissionDenied error of its own, with no OS error code (EXDEV when
        // the kernel's RESOLVE_BENEATH refused it); the OS reports a file the owner
        // cannot read as PermissionDenied with EACCES.
        K::PermissionDenied if err.raw_os_error().is_none() => {
            Error::Denied(format!("{path}: leads outside the granted root"))
        }
        _ if err.raw_os_error() == Some(EXDEV) => {
            Error::Denied(format!("{path}: leads outside the granted root"))
        }
        K::PermissionDenied => Error::Failed(format!("{path}: permission denied by the OS")),
        _ => Error::Failed(format!("{path}: {err}")),
    }
}

fn kind_of(ft: cap_std::fs::FileType) -> EntryKind {
    if ft.is_symlink() {
        EntryKind::Symlink
    } else if ft.is_dir() {
        EntryKind::Directory
    } else if ft.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

fn modified_ms(meta: &cap_std::fs::Metadata) -> Option<u64> {
    let t = meta.modified().ok()?.into_std();
    t.duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_millis() as u64)
}

impl CallState {
    /// The lexical check: which root, which path below it.
    fn route(&self, path: &str, access: FsAccess) -> Result<(usize, PathBuf), Error> {
        let route =
            self.grant.route_path(path, access).map_err(|e| Error::Denied(e.to_string()))?;
        if access == FsAccess::Write {
            // Decided at what the call's declared reads reach; what it read since may
            // reach higher (a hard link, a symlink out of a folder it named).
            let target = self.grant.path_label(&self.logical(route.root, &route.relative));
            let what = format!("a write of {path}");
            if let Some(why) = self.flow.lock().refuse_send(&self.grant, &what, target) {
                return Err(Error::Denied(why));
            }
        }
        Ok((route.root, route.relative))
    }

    fn root_path(&self, idx: usize) -> PathBuf {
        self.grant.roots().nth(idx).map(|(p, _)| p.to_path_buf()).unwrap_or_default()
    }

    fn open_root(logical: &Path) -> Result<OpenRoot, Error> {
        let shown = logical.display().to_string();
        // A root that does not exist yet is a file a call declared it writes (a
        // narrowed grant's root): reached through its directory, like a file root.
        let meta = match std::fs::metadata(logical) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(&shown, &e)),
        };
        let auth = cap_std::ambient_authority();
        if meta.as_ref().is_some_and(std::fs::Metadata::is_dir) {
            let dir = Dir::open_ambient_dir(logical, auth).map_err(|e| io_error(&shown, &e))?;
            let real = real_path(&dir)?;
            return Ok(OpenRoot { dir, real, file: None });
        }
        let (Some(parent), Some(name)) = (logical.parent(), logical.file_name()) else {
            return Err(Error::Invalid(format!("{shown}: not a directory or file root")));
        };
        let dir = Dir::open_ambient_dir(parent, auth).map_err(|e| io_error(&shown, &e))?;
        let real = match meta {
            Some(_) => std::fs::canonicalize(logical),
            None => std::fs::canonicalize(parent).map(|p| p.join(name)),
        }
        .map_err(|e| io_error(&shown, &e))?;
        let name = name.to_str().ok_or_else(|| Error::Invalid(format!("{shown}: not UTF-8")))?;
        Ok(OpenRoot { dir, real, file: Some(name.to_owned()) })
    }

    fn root(&mut self, idx: usize) -> Result<&OpenRoot, Error> {
        if self.roots.slots[idx].is_none() {
            let opened = Self::open_root(&self.root_path(idx));
            self.roots.slots[idx] = Some(opened);
        }
        match &self.roots.slots[idx] {
            Some(Ok(root)) => Ok(root),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Error::Failed("root slot empty".into())),
        }
    }

    /// The second check, on what was actually opened: its real path must lie in the root
    /// and outside every denied sub-path (by name and by resolved location).
    fn verify(
        &mut self,
        idx: usize,
        fd: impl AsFd,
        shown: &str,
    ) -> Result<(PathBuf, PathBuf), Error> {
        let real = real_path(&fd)?;
        let logical_root = self.root_path(idx);
        let root = self.root(idx)?;
        let below = if root.file.is_some() {
            (real == root.real).then(PathBuf::new)
        } else {
            real.strip_prefix(&root.real).ok().map(Path::to_path_buf)
        };
        let Some(below) = below else {
            return Err(Error::Denied(format!("{shown}: resolves outside the granted root")));
        };
        let logical =
            if below.as_os_str().is_empty() { logical_root } else { logical_root.join(below) };
        if let Some(refusal) = self.grant.denied_prefix(&logical) {
            return Err(Error::Denied(format!(
                "{shown}: resolves to {} under {refusal}",
                logical.display()
            )));
        }
        // A root that is itself a symlink (a narrowed grant's `envlink -> .env`) names
        // one thing and opens another: the rules hold where it really lies too.
        if real != logical
            && let Some(refusal) = self.grant.denied_prefix(&real)
        {
            return Err(Error::Denied(format!(
                "{shown}: resolves to {} under {refusal}",
                real.display()
            )));
        }
        self.check_real(&real, shown)?;
        self.check_identity(Identity::of(fd.as_fd())?, &real, shown)?;
        Ok((logical, real))
    }

    /// Refuses an opened object that is one of bx's own paths, or lies in one, by
    /// (device, inode) rather than by name: the state directory bind-mounted into a
    /// workspace, or a hard link to the signing key, has a name no rule knows.
    fn check_identity(&mut self, opened: Identity, real: &Path, shown: &str) -> Result<(), Error> {
        let Identity { id, links, mount, overlay } = opened;
        let opened = &id;
        let grant = &self.grant;
        let own = self.roots.own_ids.get_or_insert_with(|| {
            let mut ids: Vec<(u64, u64)> = grant
                .denied()
                .filter(|d| grant.is_own(d))
                .filter_map(|d| std::fs::metadata(d).ok())
                .map(|m| {
                    use std::os::unix::fs::MetadataExt as _;
                    (m.dev(), m.ino())
                })
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        });
        let refuse = || {
            Error::Denied(format!(
                "{shown}: is bx's own state by another name (a bind mount or a hard link; see docs/runbook.md#own-state)"
            ))
        };
        if own.contains(opened) {
            return Err(refuse());
        }
        for dir in real.ancestors().skip(1) {
            if self.roots.not_own.contains(dir) {
                break; // it and everything above it were checked
            }
            let Ok(meta) = std::fs::metadata(dir) else { continue };
            use std::os::unix::fs::MetadataExt as _;
            if own.contains(&(meta.dev(), meta.ino())) {
                return Err(refuse());
            }
        }
        // Asked after the open, every time: the opened object holds its mount, so its ID
        // cannot be handed to another mount meanwhile, and a mount made or undone since
        // the table was last read makes it be read again (a table kept for the whole
        // call let a bind of a state file take the ID of a mount the table still held).
        let mounts = crate::mounts::table();
        // An overlay shows what its layers hold under device and inode numbers of its
        // own, and the mount table names its layers only by the strings given when it was
        // made (a layer can be a bind since detached, a symlink since retargeted, a
        // relative path): nothing tells whether bx's state is one of them. Only the root
        // file system's (a container's) is read through.
        let root = crate::mounts::root_mount();
        if overlay && (mount.is_none() || root.is_none()) {
            return Err(Error::Denied(format!(
                "{shown}: lies on an overlay, and the kernel does not say which mount it was reached through (statx has STATX_MNT_ID from Linux 5.8), so it could be bx's own state under another name (see docs/runbook.md#own-state)"
            )));
        }
        if overlay && mount != root {
            return Err(Error::Denied(format!(
                "{shown}: lies on an overlay mount other than the root file system, which can show bx's own state under another name (see docs/runbook.md#own-state)"
            )));
        }
        // Under a bind mount (of a directory inside bx's state, say), or a file with
        // another name: compare with everything inside bx's own directories too.
        let binds = &mounts.points;
        // Opened through a mount the table does not hold (one detached since, or made
        // after the table was read): what it shows is unknown, so compare everything.
        let second_mount = mount.is_none_or(|m| mounts.ids.get(&m) != Some(&false));
        if links > 1 || second_mount || binds.iter().any(|b| real.starts_with(b)) {
            let scan = || {
                let own: Vec<PathBuf> =
                    grant.denied().filter(|d| grant.is_own(d)).map(Path::to_path_buf).collect();
                OwnScan::of(&own)
            };
            let mut ids = vec![*opened];
            for dir in real.ancestors().skip(1).filter(|d| binds.iter().any(|b| d.starts_with(b))) {
                use std::os::unix::fs::MetadataExt as _;
                if let Ok(meta) = std::fs::metadata(dir) {
                    ids.push((meta.dev(), meta.ino()));
                }
            }
            let mut deep = self.roots.own_deep.take().unwrap_or_else(scan);
            // Kept for the call, and looked through again when bx's directories changed
            // since: a file bx wrote after it was made (a session, a file replaced by
            // rename) is compared too.
            if !deep.holds(&ids) && deep.stale() {
                deep = scan();
            }
            let (found, whole) = (deep.holds(&ids), deep.whole);
            self.roots.own_deep = Some(deep);
            if found {
                return Err(refuse());
            }
            if !whole {
                return Err(Error::Denied(format!(
                    "{shown}: has a second name, and bx's own directories hold more than {MAX_OWN_SCAN} entries to compare it with (see docs/runbook.md#own-state)"
                )));
            }
        }
        for dir in real.ancestors().skip(1) {
            if !self.roots.not_own.insert(dir.to_path_buf()) {
                break;
            }
        }
        Ok(())
    }

    /// The check on a real (kernel-resolved) path: outside every denied sub-path and
    /// bx's own state, as they resolve on disk.
    fn check_real(&mut self, real: &Path, shown: &str) -> Result<(), Error> {
        let grant = &self.grant;
        let denied_real = self.roots.denied_real.get_or_insert_with(|| {
            grant
                .denied()
                .filter_map(|d| Some((bx_fs::resolve_leniently(d)?, grant.is_own(d))))
                .collect()
        });
        if let Some((d, own)) = denied_real.iter().find(|(d, _)| real.starts_with(d)) {
            let what = if *own {
                "bx's own state (see docs/runbook.md#own-state)"
            } else {
                "a denied path"
            };
            return Err(Error::Denied(format!("{shown}: resolves under {what} {}", d.display())));
        }
        Ok(())
    }

    /// Opens the directory that holds `rel`'s last component, verified, with that name.
    /// For a write (`access` is [`FsAccess::Write`]) every directory below the root is
    /// opened one component at a time without following a symlink: a write lands at the
    /// path the owner was shown, or nowhere (`docs -> .git/hooks` in a workspace would
    /// otherwise turn an approved `docs/post-commit` into a git hook). Reads still follow
    /// in-root symlinks, and are labelled by where they lead. The name is refused if the
    /// grant refuses it for `access` where it really lies (a write never reaches a name an
    /// `[[ask]]` rule covers that the call did not name).
    fn open_parent(
        &mut self,
        idx: usize,
        rel: &Path,
        shown: &str,
        access: FsAccess,
    ) -> Result<(Dir, String), Error> {
        let logical_root = self.root_path(idx);
        let root = self.root(idx)?;
        // The root itself must still be where it was granted: a workspace swapped for a
        // symlink after the call was approved would carry the write somewhere else.
        if access == FsAccess::Write && root.real != logical_root {
            return Err(Error::Denied(format!(
                "{shown}: the granted root {} now resolves to {}; a write never passes through a symlink",
                logical_root.display(),
                root.real.display()
            )));
        }
        if let Some(file) = &root.file {
            if !rel.as_os_str().is_empty() {
                return Err(Error::NotFound(shown.to_owned()));
            }
            let (dir, name) =
                (root.dir.try_clone().map_err(|e| io_error(shown, &e))?, file.clone());
            return Ok((dir, name));
        }
        let (Some(name), parent) = (rel.file_name(), rel.parent()) else {
            return Err(Error::Invalid(format!("{shown}: is the granted root itself")));
        };
        let name = name.to_str().ok_or_else(|| Error::Invalid(format!("{shown}: not UTF-8")))?;
        let parent = match parent {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = match access {
            FsAccess::Read => root.dir.open_dir(parent).map_err(|e| io_error(shown, &e))?,
            FsAccess::Write => open_dir_beneath(&root.dir, parent, shown)?,
        };
        let (logical_parent, _) = self.verify(idx, &dir, shown)?;
        if let Some(refusal) = self.grant.refusal(&logical_parent.join(name), access) {
            return Err(Error::Denied(format!("{shown}: under {refusal}")));
        }
        // What the name will be once created: the verified parent's real path and the
        // name, checked before anything is created there.
        let parent_real = real_path(&dir)?;
        self.check_real(&parent_real.join(name), shown)?;
        Ok((dir, name.to_owned()))
    }

    /// The logical path of `rel` under root `idx`, for what a call touched.
    fn logical(&self, idx: usize, rel: &Path) -> PathBuf {
        let root = self.root_path(idx);
        if rel.as_os_str().is_empty() { root } else { root.join(rel) }
    }

    /// Records that the call reached `logical` (the path under the grant's root), which
    /// is `real` on disk as the kernel reported it for the opened descriptor (looked up
    /// when there was none), labelled by the most specific grant covering it by name and
    /// as it lies on disk (joined: a secret grant named by a symlink keeps its label for
    /// a read through the real path). The record names the file as it lies on disk: a
    /// workspace swapped for a symlink names the file actually read.
    ///
    /// A regular file with more than one link (`links`) has other names, anywhere on its
    /// file system, whose grants (a secret one, or none) cannot be seen from here: its
    /// label is unknown, and what cannot be known counts as the top label.
    ///
    /// A read is refused when it would carry the call past what may flow to a file it
    /// opened for writing before ([`crate::state::InCall::refuse_take`]).
    fn touch_path(
        &mut self,
        logical: PathBuf,
        real: Option<PathBuf>,
        access: FsAccess,
        links: u64,
    ) -> Result<(), Error> {
        let real = real.or_else(|| std::fs::canonicalize(&logical).ok());
        let mut label = self.label_of(&logical, real.as_deref());
        if links > 1 {
            label = bx_broker::Label::TOP;
        }
        if access == FsAccess::Read {
            let what = format!("a read of {}", logical.display());
            if let Some(why) = self.flow.lock().refuse_take(&self.grant, &what, label) {
                return Err(Error::Denied(why));
            }
        }
        let path = real.unwrap_or(logical);
        self.touch(Touched::Path { path, access, label });
        Ok(())
    }

    /// The label of a path: the most specific grant covering it by name (`logical`), and
    /// as the grants' paths resolve on disk (`real`, where it lies), joined.
    fn label_of(&mut self, logical: &Path, real: Option<&Path>) -> bx_broker::Label {
        let mut label = self.grant.path_label(logical);
        if let Some(real) = real {
            let grant = &self.grant;
            let rules = self.roots.labels_real.get_or_insert_with(|| {
                grant
                    .label_rules()
                    .filter_map(|(p, l)| Some((bx_fs::resolve_leniently(p)?, l)))
                    .collect()
            });
            let mut best: Option<(usize, bx_broker::Label)> = None;
            for (rule, l) in rules.iter().filter(|(rule, _)| real.starts_with(rule)) {
                let depth = rule.as_os_str().len();
                best = match best {
                    Some((d, b)) if d == depth => Some((d, b.join(*l))),
                    Some((d, _)) if d > depth => best,
                    _ => Some((depth, *l)),
                };
            }
            if let Some((_, l)) = best {
                label = label.join(l);
            }
        }
        label
    }

    /// A file opened under root `idx` for `access`, verified (`verify`: inside the root,
    /// outside every denied path and bx's own state), and only a regular file. One
    /// opened for a write must have no other name: the block showed one name, and the
    /// write would land under every other (`notes.md` hard-linked to a git hook), which
    /// may lie anywhere on the file system. Returns its metadata and where it lies (by
    /// name and on disk).
    fn verified_file(
        &mut self,
        idx: usize,
        file: &cap_std::fs::File,
        path: &str,
        access: FsAccess,
    ) -> Result<(cap_std::fs::Metadata, PathBuf, PathBuf), Error> {
        let (logical, real) = self.verify(idx, file, path)?;
        let meta = file.metadata().map_err(|e| io_error(path, &e))?;
        if !meta.is_file() {
            return Err(Error::Invalid(format!("{path}: not a regular file")));
        }
        if access == FsAccess::Write && meta.nlink() > 1 {
            return Err(Error::Denied(format!(
                "{path}: has {} names (hard links); a write never changes a file it does not show whole",
                meta.nlink()
            )));
        }
        Ok((meta, logical, real))
    }

    /// Opens the file at `path` for reading, verified; returns it and its length.
    fn open_for_read(&mut self, path: &str) -> Result<(cap_std::fs::File, u64), Error> {
        let (idx, rel) = self.route(path, FsAccess::Read)?;
        let root = self.root(idx)?;
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(OPEN_FLAGS);
        let name: &Path = match (&root.file, rel.as_os_str().is_empty()) {
            (Some(name), true) => Path::new(name),
            (Some(_), false) => return Err(Error::NotFound(path.to_owned())),
            (None, true) => return Err(Error::Invalid(format!("{path}: is a directory"))),
            (None, false) => &rel,
        };
        refuse_special(root.dir.metadata(name), path)?;
        let opened = root.dir.open_with(name, &options);
        let file = opened.map_err(|e| io_error(path, &e))?;
        let (meta, logical, real) = self.verified_file(idx, &file, path, FsAccess::Read)?;
        self.touch_path(logical, Some(real), FsAccess::Read, meta.nlink())?;
        Ok((file, meta.len()))
    }

    fn fs_read(&mut self, path: &str, offset: u64, len: u64) -> Result<(Vec<u8>, u64), Error> {
        if len > self.limits.read_bytes {
            let cap = self.limits.read_bytes;
            return Err(Error::TooLarge(format!("read of {len} bytes; at most {cap}")));
        }
        let (mut file, size) = self.open_for_read(path)?;
        // Size the buffer from the file's length so the read lands without regrowth.
        let expect = size.saturating_sub(offset).min(len);
        file.seek(SeekFrom::Start(offset)).map_err(|e| io_error(path, &e))?;
        let mut data = Vec::with_capacity(usize::try_from(expect).unwrap_or(0));
        file.take(len).read_to_end(&mut data).map_err(|e| io_error(path, &e))?;
        Ok((data, size))
    }

    fn fs_read_text(&mut self, path: &str, offset: u64, len: u64) -> Result<TextChunk, Error> {
        let (mut data, size) = self.fs_read(path, offset, len)?;
        let mut eof = offset.saturating_add(data.len() as u64) >= size;
        if !eof {
            // Leave a character cut by the window's end for the next window.
            let keep = utf8_complete_prefix(&data);
            if keep > 0 {
                data.truncate(keep);
            }
        }
        let bytes = data.len() as u64;
        if bytes == 0 {
            eof = true;
        }
        let text = match String::from_utf8(data) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        Ok(TextChunk { text, bytes, eof })
    }

    fn fs_write(&mut self, path: &str, data: &[u8], mode: WriteMode) -> Result<u64, Error> {
        if data.len() as u64 > self.limits.write_bytes {
            let cap = self.limits.write_bytes;
            return Err(Error::TooLarge(format!("write of {} bytes; at most {cap}", data.len())));
        }
        let (idx, rel) = self.route(path, FsAccess::Write)?;
        let (dir, name) = self.open_parent(idx, &rel, path, FsAccess::Write)?;
        let mut options = OpenOptions::new();
        options.follow(FollowSymlinks::No).custom_flags(OPEN_FLAGS);
        // Never truncate at open: the descriptor is verified first, then cut.
        match mode {
            WriteMode::Create => options.write(true).create_new(true),
            WriteMode::Overwrite => options.write(true).create(true),
            WriteMode::Append => options.append(true).create(true),
        };
        refuse_special(dir.symlink_metadata(&name), path)?;
        let mut file = dir.open_with(&name, &options).map_err(|e| io_error(path, &e))?;
        let (_, logical, real) = self.verified_file(idx, &file, path, FsAccess::Write)?;
        if mode == WriteMode::Overwrite {
            file.set_len(0).map_err(|e| io_error(path, &e))?;
        }
        self.touch_path(logical, Some(real), FsAccess::Write, 1)?;
        file.write_all(data).map_err(|e| io_error(path, &e))?;
        Ok(data.len() as u64)
    }

    /// Opens `path` (absolute, as the owner reads it) for a standard WASI guest, through
    /// the same checks as every `bx:host/fs` operation: routed by the grant for `access`,
    /// opened beneath the root (a write's directories without following a symlink),
    /// verified on the opened descriptor (inside the root, outside every denied path and
    /// bx's own state by name and by identity), only regular files and directories,
    /// labelled per file touched. A file opened for writing is truncated only after that,
    /// and never when it has another name.
    pub(crate) fn open_checked(&mut self, path: &str, how: &OpenHow) -> Result<Opened, Error> {
        let access = if how.writes() { FsAccess::Write } else { FsAccess::Read };
        if how.read && access == FsAccess::Write {
            // What a write-and-read descriptor reads back must be readable as well.
            self.route(path, FsAccess::Read)?;
        }
        let (idx, rel) = self.route(path, access)?;
        let root = self.root(idx)?;
        if root.file.is_none() && rel.as_os_str().is_empty() {
            if how.writes() && !how.directory {
                return Err(Error::Invalid(format!("{path}: is a directory")));
            }
            let dir = root.dir.try_clone().map_err(|e| io_error(path, &e))?;
            return self.opened_dir(idx, dir, path, access);
        }
        if access == FsAccess::Read {
            let name: &Path = match (&root.file, rel.as_os_str().is_empty()) {
                (Some(name), true) => Path::new(name),
                (Some(_), false) => return Err(Error::NotFound(path.to_owned())),
                (None, _) => &rel,
            };
            let meta =
                if how.follow { root.dir.metadata(name) } else { root.dir.symlink_metadata(name) };
            let meta = meta.map_err(|e| io_error(path, &e))?;
            if meta.is_dir() {
                let dir = root.dir.open_dir(name).map_err(|e| io_error(path, &e))?;
                return self.opened_dir(idx, dir, path, access);
            }
            if how.directory {
                return Err(Error::Invalid(format!("{path}: not a directory")));
            }
            if !meta.is_file() {
                return Err(Error::Invalid(format!("{path}: not a regular file")));
            }
            let mut options = OpenOptions::new();
            options.read(true).custom_flags(OPEN_FLAGS);
            if !how.follow {
                options.follow(FollowSymlinks::No);
            }
            let file = root.dir.open_with(name, &options).map_err(|e| io_error(path, &e))?;
            let (meta, logical, real) = self.verified_file(idx, &file, path, FsAccess::Read)?;
            self.touch_path(logical, Some(real), FsAccess::Read, meta.nlink())?;
            return Ok(Opened::File(file));
        }
        let (dir, name) = self.open_parent(idx, &rel, path, FsAccess::Write)?;
        let existing = dir.symlink_metadata(&name);
        if how.directory || existing.as_ref().is_ok_and(|m| m.is_dir()) {
            if how.create || how.truncate {
                return Err(Error::Invalid(format!("{path}: is a directory")));
            }
            let opened = open_dir_beneath(&dir, Path::new(&name), path)?;
            return self.opened_dir(idx, opened, path, FsAccess::Write);
        }
        refuse_special(existing, path)?;
        let mut options = OpenOptions::new();
        options.follow(FollowSymlinks::No).custom_flags(OPEN_FLAGS).write(true).read(how.read);
        if how.exclusive {
            options.create_new(true);
        } else if how.create {
            options.create(true);
        }
        let file = dir.open_with(&name, &options).map_err(|e| io_error(path, &e))?;
        let (_, logical, real) = self.verified_file(idx, &file, path, FsAccess::Write)?;
        if how.truncate {
            file.set_len(0).map_err(|e| io_error(path, &e))?;
        } else if how.read {
            // A descriptor that reads as well as writes (`open(p, 'r+')`) reads what the
            // file holds: that joins what the call has read, as any read does (a write
            // after it is held to its label).
            self.touch_path(logical.clone(), Some(real.clone()), FsAccess::Read, 1)?;
        }
        self.touch_path(logical, Some(real), FsAccess::Write, 1)?;
        Ok(Opened::File(file))
    }

    /// A directory opened for a WASI guest, verified; reading one is touching it.
    fn opened_dir(
        &mut self,
        idx: usize,
        dir: Dir,
        path: &str,
        access: FsAccess,
    ) -> Result<Opened, Error> {
        let (logical, real) = self.verify(idx, &dir, path)?;
        if access == FsAccess::Read {
            self.touch_path(logical, Some(real), FsAccess::Read, 1)?;
        }
        Ok(Opened::Dir(dir))
    }

    /// The names in directory `path` a WASI guest may see (the denied ones are not even
    /// named), checked and touched as `bx:host/fs`'s `list-dir` is.
    pub(crate) fn visible_names(&mut self, path: &str) -> Result<Vec<String>, Error> {
        Ok(self.fs_list(path)?.into_iter().map(|e| e.name).collect())
    }

    /// Stat of `path` for a WASI guest: of what it leads to (`follow`, opened and checked
    /// as a read is) or of the name itself (its directory checked, as `stat` is).
    pub(crate) fn stat_checked(
        &mut self,
        path: &str,
        follow: bool,
    ) -> Result<cap_std::fs::Metadata, Error> {
        if follow {
            let how = OpenHow { read: true, follow: true, ..OpenHow::default() };
            return match self.open_checked(path, &how)? {
                Opened::File(f) => f.metadata().map_err(|e| io_error(path, &e)),
                Opened::Dir(d) => d.dir_metadata().map_err(|e| io_error(path, &e)),
            };
        }
        let (idx, rel) = self.route(path, FsAccess::Read)?;
        let root = self.root(idx)?;
        if root.file.is_none() && rel.as_os_str().is_empty() {
            return root.dir.dir_metadata().map_err(|e| io_error(path, &e));
        }
        self.look_at(path, |dir, name| dir.symlink_metadata(name))
    }

    /// The target of symlink `path`, for a WASI guest (its directory checked as a read).
    pub(crate) fn readlink_checked(&mut self, path: &str) -> Result<PathBuf, Error> {
        self.look_at(path, |dir, name| dir.read_link(name))
    }

    /// `look` at the name `path` ends in, in its directory (routed and verified as a
    /// read), for a WASI guest. The name itself is what was looked at and is recorded as
    /// touched, not what a symlink there leads to.
    fn look_at<T>(
        &mut self,
        path: &str,
        look: impl FnOnce(&Dir, &str) -> std::io::Result<T>,
    ) -> Result<T, Error> {
        let (idx, rel) = self.route(path, FsAccess::Read)?;
        let (dir, name) = self.open_parent(idx, &rel, path, FsAccess::Read)?;
        let seen = look(&dir, &name).map_err(|e| io_error(path, &e))?;
        let real = real_path(&dir)?.join(&name);
        self.touch_path(self.logical(idx, &rel), Some(real), FsAccess::Read, 1)?;
        Ok(seen)
    }

    /// The verified directory holding `path` and its last name, for a WASI guest's
    /// changes by name (make or remove a directory, remove or rename a file): routed for
    /// writing, its directories opened without following a symlink. A path that bx's own
    /// state lies under (a directory above the state directory, or a symlink on the way
    /// to it) is refused: moving or removing it would take the policy, the log and the
    /// sessions with it, and bx would start afresh where they were.
    pub(crate) fn parent_for_change(&mut self, path: &str) -> Result<Change, Error> {
        let (idx, rel) = self.route(path, FsAccess::Write)?;
        let (dir, name) = self.open_parent(idx, &rel, path, FsAccess::Write)?;
        let logical = self.logical(idx, &rel);
        let real = real_path(&dir)?.join(&name);
        let grant = &self.grant;
        for own in grant.denied().filter(|d| grant.is_own(d)) {
            let resolved = bx_fs::resolve_leniently(own);
            if own.starts_with(&logical)
                || resolved.as_deref().is_some_and(|r| r.starts_with(&real))
            {
                return Err(Error::Denied(format!(
                    "{path}: bx's own state lies under it ({}); see docs/runbook.md#own-state",
                    own.display()
                )));
            }
        }
        self.touch_path(logical.clone(), Some(real.clone()), FsAccess::Write, 1)?;
        Ok(Change { dir, name, logical, real })
    }

    /// Renames the regular file `from` to `to` for a WASI guest: both checked as changes
    /// (`parent_for_change`). Only a regular file moves: renaming a directory would rename
    /// everything under it past the rules that name it (`.git` moved aside exposes
    /// `.git/config` under another name; a denied path's parent moved, the denied path
    /// with it). A file never moves to where it would be labelled lower than where it
    /// lies (out from under a secret grant into a public one).
    pub(crate) fn rename_checked(&mut self, from: &str, to: &str) -> Result<(), Error> {
        let source = self.parent_for_change(from)?;
        let meta = source.dir.symlink_metadata(&source.name).map_err(|e| io_error(from, &e))?;
        if !meta.is_file() {
            return Err(Error::Denied(format!(
                "{from}: only a regular file is renamed (a directory would take what lies under it past the rules that name it)"
            )));
        }
        if meta.nlink() > 1 {
            return Err(Error::Denied(format!("{from}: has other names (hard links)")));
        }
        let target = self.parent_for_change(to)?;
        let (was, will) = (
            self.label_of(&source.logical, Some(&source.real)),
            self.label_of(&target.logical, Some(&target.real)),
        );
        if !was.flows_to(will) {
            return Err(Error::Denied(format!(
                "{from}: is labelled {was}; at {to} it would be labelled {will}"
            )));
        }
        source.dir.rename(&source.name, &target.dir, &target.name).map_err(|e| io_error(from, &e))
    }

    fn fs_list(&mut self, path: &str) -> Result<Vec<Entry>, Error> {
        let (idx, rel) = self.route(path, FsAccess::Read)?;
        let root = self.root(idx)?;
        if root.file.is_some() {
            return Err(Error::Invalid(format!("{path}: is a file")));
        }
        let target = if rel.as_os_str().is_empty() { Path::new(".") } else { rel.as_path() };
        let dir = root.dir.open_dir(target).map_err(|e| io_error(path, &e))?;
        let (logical, real) = self.verify(idx, &dir, path)?;
        self.touch_path(logical.clone(), Some(real), FsAccess::Read, 1)?;
        let mut out = Vec::new();
        for entry in dir.entries().map_err(|e| io_error(path, &e))? {
            let entry = entry.map_err(|e| io_error(path, &e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if self.grant.denied_prefix(&logical.join(&name)).is_some() {
                continue; // a denied sub-path is not even named
            }
            let kind = entry.file_type().map(kind_of).unwrap_or(EntryKind::Other);
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            out.push(Entry { name, kind, size });
            if out.len() > MAX_LIST_ENTRIES {
                return Err(Error::TooLarge(format!(
                    "{path}: more than {MAX_LIST_ENTRIES} entries"
                )));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn fs_stat(&mut self, path: &str) -> Result<Metadata, Error> {
        let (idx, rel) = self.route(path, FsAccess::Read)?;
        let root = self.root(idx)?;
        let meta = if root.file.is_none() && rel.as_os_str().is_empty() {
            root.dir.dir_metadata().map_err(|e| io_error(path, &e))?
        } else {
            let (dir, name) = self.open_parent(idx, &rel, path, FsAccess::Read)?;
            dir.symlink_metadata(&name).map_err(|e| io_error(path, &e))?
        };
        self.touch_path(self.logical(idx, &rel), None, FsAccess::Read, 1)?;
        Ok(Metadata {
            kind: kind_of(meta.file_type()),
            size: meta.len(),
            modified_ms: modified_ms(&meta),
        })
    }

    fn fs_mkdir(&mut self, path: &str) -> Result<(), Error> {
        let (idx, rel) = self.route(path, FsAccess::Write)?;
        let (dir, name) = self.open_parent(idx, &rel, path, FsAccess::Write)?;
        dir.create_dir(&name).map_err(|e| io_error(path, &e))?;
        self.touch_path(self.logical(idx, &rel), None, FsAccess::Write, 1)?;
        Ok(())
    }
}

/// The length of `data` without a trailing, incomplete UTF-8 sequence (at most 3 bytes).
fn utf8_complete_prefix(data: &[u8]) -> usize {
    let n = data.len();
    for back in 1..=3.min(n) {
        let b = data[n - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back for the lead byte
        }
        let width = match b {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return n, // not a lead byte: invalid anyway, leave it to lossy decoding
        };
        return if width > back { n - back } else { n };
    }
    n
}

impl Host for CallState {
    async fn read(
        &mut self,
        path: String,
        offset: u64,
        len: u64,
    ) -> wasmtime::Result<Result<Vec<u8>, Error>> {
        self.count_host_call()?;
        Ok(self.fs_read(&path, offset, len).map(|(data, _)| data))
    }

    async fn read_text(
        &mut self,
        path: String,
        offset: u64,
        len: u64,
    ) -> wasmtime::Result<Result<TextChunk, Error>> {
        self.count_host_call()?;
        Ok(self.fs_read_text(&path, offset, len))
    }

    async fn write(
        &mut self,
        path: String,
        data: Vec<u8>,
        mode: WriteMode,
    ) -> wasmtime::Result<Result<u64, Error>> {
        self.count_host_call()?;
        Ok(self.fs_write(&path, &data, mode))
    }

    async fn list_dir(&mut self, path: String) -> wasmtime::Result<Result<Vec<Entry>, Error>> {
        self.count_host_call()?;
        Ok(self.fs_list(&path))
    }

    async fn stat(&mut self, path: String) -> wasmtime::Result<Result<Metadata, Error>> {
        self.count_host_call()?;
        Ok(self.fs_stat(&path))
    }

    async fn mkdir(&mut self, path: String) -> wasmtime::Result<Result<(), Error>> {
        self.count_host_call()?;
        Ok(self.fs_mkdir(&path))
    }
}

impl crate::bindings::bx::host::types::Host for CallState {}
impl crate::bindings::bx::tool::types::Host for CallState {}

#[cfg(test)]
mod tests {
    use super::utf8_complete_prefix;

    #[test]
    fn an_opened_objects_identity_is_what_stat_says_of_its_name() {
        // The own-state check compares this with `std::fs::metadata` of bx's own paths:
        // the device numbers must be encoded alike, and only a file's links count.
        use std::os::fd::AsFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        std::fs::hard_link(&file, dir.path().join("g")).unwrap();
        for (path, links) in [(&file, 2), (&dir.path().to_path_buf(), 1)] {
            let opened = std::fs::File::open(path).unwrap();
            let id = super::Identity::of(opened.as_fd()).unwrap();
            let meta = std::fs::metadata(path).unwrap();
            assert_eq!((id.id, id.links), ((meta.dev(), meta.ino()), links), "{path:?}");
            // The mount it was reached through is one the mount table names (Linux 5.8+).
            assert!(id.mount.is_some_and(|m| crate::mounts::table().ids.contains_key(&m)));
        }
    }

    #[test]
    fn keeps_only_complete_characters() {
        let euro = "€".as_bytes(); // three bytes
        assert_eq!(utf8_complete_prefix(b"abc"), 3);
        assert_eq!(utf8_complete_prefix(&[b'a', euro[0]]), 1);
        assert_eq!(utf8_complete_prefix(&[b'a', euro[0], euro[1]]), 1);
        assert_eq!(utf8_complete_prefix(&[b'a', euro[0], euro[1], euro[2]]), 4);
        assert_eq!(utf8_complete_prefix(&[0xff]), 1);
        assert_eq!(utf8_complete_prefix(&[]), 0);
    }
}
