//! `wasi:filesystem` for standard WASI components, through bx's checked filesystem.
//!
//! A component built by an ordinary toolchain (Rust's std, componentize-py's `open()`)
//! reaches files through `wasi:filesystem`. Here every operation that names a path goes
//! through the same code as `bx:host/fs` ([`CallState::open_checked`] and its siblings
//! in `host_fs.rs`): the path is the descriptor's path as the owner reads it joined with
//! the guest's relative path, routed by the grant (no `..`, no absolute path, no denied
//! name), opened beneath the granted root, and verified on the opened descriptor (bx's
//! own state by name and identity, deny rules where it really lies, regular files and
//! directories only, labelled per file touched). What the guest does with a descriptor
//! it was given (read, write, stat, list) goes to wasmtime-wasi's own implementation on
//! that verified descriptor; a listing never names a denied entry.
//!
//! The preopens are the decided grant's roots, named by their absolute paths, so a
//! guest's absolute paths are the owner's. Creating a hard link or a symlink is refused:
//! a second name would outlive the decision. Setting times is not offered.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::{Descriptor, Dir, File, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::clocks::wall_clock::Datetime;
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, ErrorCode,
    HostDescriptor, HostDirectoryEntryStream, MetadataHashValue, NewTimestamp, OpenFlags,
    PathFlags,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult};
use wasmtime_wasi::{FsPerms, OpenMode};

use crate::bindings::bx::host::types::Error;
use crate::host_fs::{OpenHow, Opened};
use crate::state::CallState;

/// Whether wasmtime-wasi runs a descriptor's operations on the calling thread rather than
/// tokio's blocking pool (see `push_descriptor`).
const BLOCK_HERE: bool = true;

/// A guest path's length, at most: Linux's `PATH_MAX`.
const MAX_PATH_BYTES: usize = 4096;

/// Refusals a call keeps the reasons of, for its report; past this only a count.
pub(crate) const MAX_REFUSALS: usize = 16;
/// Bytes of one refusal's reason kept.
const MAX_REFUSAL_BYTES: usize = 512;

/// What a standard WASI guest's filesystem needs beside the call's grant.
#[derive(Default)]
pub(crate) struct WasiFs {
    /// Whether the grant's roots are offered as preopens (standard WASI components); a
    /// `bx:tool` component gets none, as before.
    pub(crate) preopens: bool,
    /// wasmtime-wasi's context for the operations on verified descriptors (it holds no
    /// preopens: those are bx's).
    ctx: wasmtime_wasi::filesystem::WasiFilesystemCtx,
    /// Each live descriptor's path as the owner reads it, by resource id.
    paths: HashMap<u32, PathBuf>,
    /// Each directory listing's visible names, by resource id.
    listings: HashMap<u32, HashSet<String>>,
    /// Why operations were refused, bounded, for the call's report.
    pub(crate) refusals: Vec<String>,
    /// Refusals past [`MAX_REFUSALS`].
    pub(crate) refusals_more: u64,
}

impl WasiFs {
    /// The refusals kept, with a line for those past the bound.
    pub(crate) fn refusals_noted(&self) -> Vec<String> {
        let mut out = self.refusals.clone();
        if self.refusals_more > 0 {
            out.push(format!("and {} more", self.refusals_more));
        }
        out
    }

    /// Keeps why an operation was refused (bounded), for the call's report.
    pub(crate) fn note_refusal(&mut self, reason: String) {
        if self.refusals.len() < MAX_REFUSALS {
            self.refusals.push(crate::tool::bounded(reason, MAX_REFUSAL_BYTES));
        } else {
            self.refusals_more += 1;
        }
    }
}

impl CallState {
    /// Counts one host call, as a filesystem result (past the cap, the guest traps).
    fn count_fs(&mut self) -> FsResult<()> {
        self.count_host_call().map_err(FsError::trap)
    }

    fn inner_fs(&mut self) -> WasiFilesystemCtxView<'_> {
        WasiFilesystemCtxView { ctx: &mut self.fs.ctx, table: &mut self.table }
    }

    /// The path `path` names relative to descriptor `fd`, as the owner reads it. An
    /// absolute path is refused (WASI paths are relative to a descriptor); `..` and the
    /// rest are left to the grant's route, which refuses them.
    fn wasi_path(&mut self, fd: &Resource<Descriptor>, path: &str) -> FsResult<String> {
        let Some(base) = self.fs.paths.get(&fd.rep()) else {
            return Err(ErrorCode::BadDescriptor.into());
        };
        // Longer than the kernel resolves is refused before any copy is made of it.
        if path.len() > MAX_PATH_BYTES {
            return Err(ErrorCode::NameTooLong.into());
        }
        if path.starts_with('/') {
            let reason = format!("{path}: an absolute path under a descriptor");
            return Err(self.refused(Error::Denied(reason)));
        }
        let joined = if path.is_empty() || path == "." { base.clone() } else { base.join(path) };
        joined.to_str().map(str::to_owned).ok_or_else(|| ErrorCode::IllegalByteSequence.into())
    }

    /// The stat of `path` under descriptor `fd`, checked (`stat-at`, `metadata-hash-at`).
    fn wasi_stat(
        &mut self,
        fd: &Resource<Descriptor>,
        path_flags: PathFlags,
        path: &str,
    ) -> FsResult<cap_std::fs::Metadata> {
        self.count_fs()?;
        let path = self.wasi_path(fd, path)?;
        let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
        self.stat_checked(&path, follow).map_err(|e| self.refused(e))
    }

    /// The WASI error code for a refusal of bx's checked filesystem; a denial's reason is
    /// kept for the report (the guest sees only the code).
    fn refused(&mut self, err: Error) -> FsError {
        let code = match &err {
            Error::Denied(_) => ErrorCode::NotPermitted,
            Error::NotFound(_) => ErrorCode::NoEntry,
            Error::AlreadyExists(_) => ErrorCode::Exist,
            Error::Invalid(m) if m.ends_with("is a directory") => ErrorCode::IsDirectory,
            Error::Invalid(m) if m.ends_with("not a directory") => ErrorCode::NotDirectory,
            Error::Invalid(_) => ErrorCode::Invalid,
            Error::TooLarge(_) => ErrorCode::FileTooLarge,
            Error::Failed(m) if m.ends_with("permission denied by the OS") => ErrorCode::Access,
            Error::Failed(_) => ErrorCode::Io,
        };
        if let Error::Denied(reason) = err {
            self.fs.note_refusal(reason);
        }
        code.into()
    }

    /// Pushes a verified handle into the table as a descriptor known by `path`.
    fn push_descriptor(
        &mut self,
        opened: Opened,
        path: String,
        how: &OpenHow,
    ) -> FsResult<Resource<Descriptor>> {
        let perms = if how.writes() { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
        let mut mode = OpenMode::empty();
        if how.read || !how.writes() {
            mode |= OpenMode::READ;
        }
        if how.writes() {
            mode |= OpenMode::WRITE;
        }
        // Operations on it run on the call's own thread, as `bx:host/fs`'s do: only a
        // regular file or a directory is ever opened (never a FIFO or a device), and a
        // hop to the blocking pool for each chunk a guest reads cost 20 times the read
        // itself (`make bench`, 1 MiB via wasi:filesystem).
        let descriptor = match opened {
            Opened::File(f) => Descriptor::File(File::new(f.into_std(), perms, mode, BLOCK_HERE)),
            Opened::Dir(d) => Descriptor::Dir(Dir::new(d.into_std_file(), perms, mode, BLOCK_HERE)),
        };
        let fd = self.table.push(descriptor)?;
        self.fs.paths.insert(fd.rep(), PathBuf::from(path));
        Ok(fd)
    }
}

fn stat_of(meta: &cap_std::fs::Metadata) -> DescriptorStat {
    use cap_std::fs::MetadataExt as _;
    let ft = meta.file_type();
    let type_ = if ft.is_dir() {
        DescriptorType::Directory
    } else if ft.is_file() {
        DescriptorType::RegularFile
    } else if ft.is_symlink() {
        DescriptorType::SymbolicLink
    } else {
        DescriptorType::Unknown
    };
    let when = |t: std::io::Result<cap_std::time::SystemTime>| {
        let since = t.ok()?.into_std().duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(Datetime { seconds: since.as_secs(), nanoseconds: since.subsec_nanos() })
    };
    DescriptorStat {
        type_,
        link_count: meta.nlink(),
        size: meta.len(),
        data_access_timestamp: when(meta.accessed()),
        data_modification_timestamp: when(meta.modified()),
        status_change_timestamp: None,
    }
}

impl preopens::Host for CallState {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        self.count_host_call()?;
        if !self.fs.preopens {
            return Ok(Vec::new());
        }
        // A root that names a file is reached through its directory's preopen; every
        // operation under it is still routed by the grant, so only the file is reachable.
        let mut names: Vec<String> = Vec::new();
        for (root, _) in self.grant.roots() {
            let dir = match std::fs::metadata(root) {
                Ok(m) if m.is_dir() => root.to_path_buf(),
                _ => match root.parent() {
                    Some(parent) => parent.to_path_buf(),
                    None => continue,
                },
            };
            if let Some(name) = dir.to_str().map(str::to_owned)
                && !names.contains(&name)
            {
                names.push(name);
            }
        }
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            // Opened by name, outside the checked path: nothing is read through the
            // handle itself but the listing, which is checked by name as well.
            let auth = cap_std::ambient_authority();
            let Ok(dir) = cap_std::fs::Dir::open_ambient_dir(&name, auth) else { continue };
            let descriptor = Descriptor::Dir(Dir::new(
                dir.into_std_file(),
                FsPerms::ReadOnly,
                OpenMode::READ,
                BLOCK_HERE,
            ));
            let fd = self.table.push(descriptor)?;
            self.fs.paths.insert(fd.rep(), PathBuf::from(&name));
            out.push((fd, name));
        }
        Ok(out)
    }
}

impl types::Host for CallState {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        types::Host::convert_error_code(&mut self.inner_fs(), err)
    }

    fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        types::Host::filesystem_error_code(&mut self.inner_fs(), err)
    }
}

impl HostDescriptor for CallState {
    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        offset: u64,
        len: u64,
        advice: types::Advice,
    ) -> FsResult<()> {
        self.count_fs()?;
        self.inner_fs().advise(fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        self.count_fs()?;
        self.inner_fs().sync_data(fd).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        self.count_fs()?;
        self.inner_fs().get_flags(fd).await
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        self.count_fs()?;
        self.inner_fs().get_type(fd).await
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: u64) -> FsResult<()> {
        self.count_fs()?;
        self.inner_fs().set_size(fd, size).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atim: NewTimestamp,
        mtim: NewTimestamp,
    ) -> FsResult<()> {
        self.count_fs()?;
        self.inner_fs().set_times(fd, atim, mtim).await
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: u64,
        offset: u64,
    ) -> FsResult<(Vec<u8>, bool)> {
        self.count_fs()?;
        let len = len.min(self.limits.read_bytes);
        self.inner_fs().read(fd, len, offset).await
    }

    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buf: Vec<u8>,
        offset: u64,
    ) -> FsResult<u64> {
        self.count_fs()?;
        self.inner_fs().write(fd, buf, offset).await
    }

    async fn read_directory(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<types::DirectoryEntryStream>> {
        self.count_fs()?;
        let path = self.wasi_path(&fd, "")?;
        let visible = match self.visible_names(&path) {
            Ok(names) => names.into_iter().collect(),
            Err(e) => return Err(self.refused(e)),
        };
        let stream = self.inner_fs().read_directory(fd).await?;
        self.fs.listings.insert(stream.rep(), visible);
        Ok(stream)
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        self.count_fs()?;
        self.inner_fs().sync(fd).await
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.count_fs()?;
        let path = self.wasi_path(&fd, &path)?;
        let made = self.parent_for_change(&path).and_then(|c| {
            c.dir.create_dir(&c.name).map_err(|e| crate::host_fs::io_error(&path, &e))
        });
        made.map_err(|e| self.refused(e))
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        self.count_fs()?;
        self.inner_fs().stat(fd).await
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<DescriptorStat> {
        self.wasi_stat(&fd, path_flags, &path).map(|meta| stat_of(&meta))
    }

    async fn set_times_at(
        &mut self,
        _fd: Resource<Descriptor>,
        _path_flags: PathFlags,
        _path: String,
        _atim: NewTimestamp,
        _mtim: NewTimestamp,
    ) -> FsResult<()> {
        self.count_fs()?;
        Err(ErrorCode::Unsupported.into())
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        _old_path_flags: PathFlags,
        old_path: String,
        _new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.count_fs()?;
        let old = self.wasi_path(&fd, &old_path).unwrap_or(old_path);
        let reason =
            format!("{old}: a hard link ({new_path}) is a second name that outlives the decision");
        Err(self.refused(Error::Denied(reason)))
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        oflags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        self.count_fs()?;
        let path = self.wasi_path(&fd, &path)?;
        if flags.intersects(
            DescriptorFlags::FILE_INTEGRITY_SYNC
                | DescriptorFlags::DATA_INTEGRITY_SYNC
                | DescriptorFlags::REQUESTED_WRITE_SYNC,
        ) {
            return Err(ErrorCode::Unsupported.into());
        }
        let how = OpenHow {
            read: flags.contains(DescriptorFlags::READ) || !flags.contains(DescriptorFlags::WRITE),
            write: flags.contains(DescriptorFlags::WRITE),
            create: oflags.contains(OpenFlags::CREATE),
            exclusive: oflags.contains(OpenFlags::EXCLUSIVE),
            truncate: oflags.contains(OpenFlags::TRUNCATE),
            directory: oflags.contains(OpenFlags::DIRECTORY),
            follow: path_flags.contains(PathFlags::SYMLINK_FOLLOW),
        };
        if how.directory && how.writes() {
            return Err(ErrorCode::Invalid.into());
        }
        match self.open_checked(&path, &how) {
            Ok(opened) => self.push_descriptor(opened, path, &how),
            Err(e) => Err(self.refused(e)),
        }
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        self.fs.paths.remove(&fd.rep());
        HostDescriptor::drop(&mut self.inner_fs(), fd)
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        self.count_fs()?;
        let path = self.wasi_path(&fd, &path)?;
        match self.readlink_checked(&path) {
            Ok(target) => target
                .into_os_string()
                .into_string()
                .map_err(|_| ErrorCode::IllegalByteSequence.into()),
            Err(e) => Err(self.refused(e)),
        }
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.count_fs()?;
        let path = self.wasi_path(&fd, &path)?;
        let removed = self.parent_for_change(&path).and_then(|c| {
            c.dir.remove_dir(&c.name).map_err(|e| crate::host_fs::io_error(&path, &e))
        });
        removed.map_err(|e| self.refused(e))
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.count_fs()?;
        let old = self.wasi_path(&fd, &old_path)?;
        let new = self.wasi_path(&new_fd, &new_path)?;
        let renamed = self.rename_checked(&old, &new);
        renamed.map_err(|e| self.refused(e))
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_path: String,
    ) -> FsResult<()> {
        self.count_fs()?;
        let new = self.wasi_path(&fd, &new_path).unwrap_or(new_path);
        let reason =
            format!("{new}: a symlink (to {old_path}) is a second name that outlives the decision");
        Err(self.refused(Error::Denied(reason)))
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.count_fs()?;
        let path = self.wasi_path(&fd, &path)?;
        let removed = self.parent_for_change(&path).and_then(|c| {
            c.dir.remove_file(&c.name).map_err(|e| crate::host_fs::io_error(&path, &e))
        });
        removed.map_err(|e| self.refused(e))
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: u64,
    ) -> FsResult<Resource<DynInputStream>> {
        self.count_fs()?;
        self.inner_fs().read_via_stream(fd, offset)
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: u64,
    ) -> FsResult<Resource<DynOutputStream>> {
        self.count_fs()?;
        self.inner_fs().write_via_stream(fd, offset)
    }

    fn append_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        self.count_fs()?;
        self.inner_fs().append_via_stream(fd)
    }

    async fn is_same_object(
        &mut self,
        a: Resource<Descriptor>,
        b: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        self.count_host_call()?;
        self.inner_fs().is_same_object(a, b).await
    }

    async fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<MetadataHashValue> {
        self.count_fs()?;
        self.inner_fs().metadata_hash(fd).await
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<MetadataHashValue> {
        use cap_std::fs::MetadataExt as _;
        let meta = self.wasi_stat(&fd, path_flags, &path)?;
        Ok(MetadataHashValue { lower: meta.ino(), upper: meta.dev() })
    }
}

impl HostDirectoryEntryStream for CallState {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<types::DirectoryEntryStream>,
    ) -> FsResult<Option<DirectoryEntry>> {
        self.count_fs()?;
        let rep = stream.rep();
        loop {
            let next = self.inner_fs().read_directory_entry(Resource::new_borrow(rep)).await?;
            let Some(entry) = next else { return Ok(None) };
            // A name the checked listing did not show (a denied one, or one that
            // appeared since) is skipped.
            if self.fs.listings.get(&rep).is_some_and(|v| v.contains(&entry.name)) {
                return Ok(Some(entry));
            }
        }
    }

    fn drop(&mut self, stream: Resource<types::DirectoryEntryStream>) -> wasmtime::Result<()> {
        self.fs.listings.remove(&stream.rep());
        HostDirectoryEntryStream::drop(&mut self.inner_fs(), stream)
    }
}
