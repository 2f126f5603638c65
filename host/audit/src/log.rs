//! The writer: open (taking the log's lock, recovering a torn tail), append with group
//! commit, checkpoint, close. One writer at a time, across processes: the lock on
//! `.lock` in the log directory is held for as long as the [`AuditLog`] lives.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::anchor::{Anchor, origin_dir};
use crate::consistent::{Head as Signed, Newest, Verdict};
use crate::entry::{Entry, ExportFailed, MAX_FIELD_BYTES, MAX_RECORD_BYTES, Recovered, bounded};
use crate::error::AuditError;
use crate::record::{GENESIS, Record, line_hash};
use crate::time::{day_of, format_rfc3339};
use crate::tree::{Hash, Tree, leaf_hash};

/// Records between two checkpoints of the head. Without checkpoints, cutting whole
/// records off the end of the log would go unnoticed; the checkpoint is also written at
/// close.
pub const CHECKPOINT_EVERY: u64 = 1000;

/// The longest last line read back at open (1 MiB, four times [`MAX_RECORD_BYTES`]).
/// The writer never writes a longer record, and verify reports one.
const MAX_TAIL_BYTES: u64 = 1 << 20;

/// The furthest back open looks for the last record (64 MiB): past that without one, the
/// file is not a log bx can continue.
const MAX_TORN_SCAN: u64 = 64 << 20;

/// The most leaf hashes kept in memory for exports that have not caught up (1 Mi, 32
/// MiB). Past it an export that lags reads its leaves back from the log.
const MAX_RECENT_LEAVES: usize = 1 << 20;

/// How far past [`MAX_RECENT_LEAVES`] the kept leaves may grow before the oldest go, so
/// that trimming costs one move per this many appends.
const RECENT_TRIM_STEP: usize = 1 << 16;

/// How often a waiting open tries the lock again.
const LOCK_POLL: Duration = Duration::from_millis(20);

/// Where time comes from; tests pass a clock that crosses midnight.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Proof that a record is on disk: its sequence number and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The record's sequence number.
    pub seq: u64,
    /// Hex SHA-256 of its line.
    pub hash: String,
}

struct Inner {
    /// The current day's file, opened for append; `None` before the first record.
    /// Shared with a sync in flight, which runs without the lock.
    file: Option<(String, Arc<File>)>,
    /// Sequence number and hash of the last record written (not necessarily synced).
    seq: u64,
    head: String,
    /// The highest sequence number known to be on disk.
    synced: u64,
    /// True while some thread is in fdatasync on behalf of everyone.
    syncing: bool,
    /// Sticky failure: once set, nothing is accepted.
    failed: Option<String>,
    /// The newest day that has a file; the writer never goes back to an earlier one.
    newest_day: Option<String>,
    since_checkpoint: u64,
    /// Bytes in the current day's file (where the next line starts).
    offset: u64,
    /// The Merkle tree over every line written.
    tree: Tree,
    /// Leaf hashes from `recent_start` on: what exports that lag need.
    recent: Vec<Hash>,
    recent_start: u64,
    /// Export directories whose newest signed checkpoint the tree is known to extend
    /// (checked at open, or before the first checkpoint signed while they are there).
    /// Nothing is signed while one that is there is not checked. Once checked, a
    /// directory stays so: the tree only grows by the writer's own records.
    checked: std::collections::BTreeSet<PathBuf>,
    /// Records the check at open against exported checkpoints read, when one ran.
    read_by_check: Option<u64>,
}

/// Why the writer's tree cannot be signed, found as it opens against exported
/// checkpoints: its text becomes the log's sticky failure.
#[derive(Debug, thiserror::Error)]
enum Unsigned {
    /// The check could not be made (a file could not be read) or could not decide.
    #[error("cannot check the log against its exported checkpoints ({0}); nothing is signed")]
    Unchecked(AuditError),
    /// The log is not the history the checkpoints vouch for
    /// ([`AuditError::AnchorMismatch`]).
    #[error("{0}")]
    Mismatch(AuditError),
}

/// One export of a signed checkpoint: where, and what went wrong if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The export directory, as configured or given.
    pub dir: PathBuf,
    /// Records the checkpoint covers.
    pub size: u64,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// A signed checkpoint waiting to be written to the export directories, taken under the
/// log's lock and written after it.
struct ExportJob {
    size: u64,
    note: Vec<u8>,
    recent: Vec<Hash>,
    recent_start: u64,
}

/// An open audit log. Share it behind an `Arc`; `append` may be called from many threads
/// and each call returns only once its record (and all before it) is synced.
pub struct AuditLog {
    dir: PathBuf,
    clock: Box<dyn Clock>,
    inner: Mutex<Inner>,
    synced: Condvar,
    /// The signing key and export directories, when the owner made a key.
    anchor: Option<Anchor>,
    /// One export at a time (they run outside `inner`, so appends go on meanwhile), and
    /// the largest size exported: an older job that lost the race is not run after it.
    exporting: Mutex<u64>,
    /// `.lock`, locked exclusively while this writer lives.
    _lock: File,
    /// Rewrites a record's line before it is hashed and written (the secret guard's
    /// redaction: no record holds a secret's value), when set.
    redactor: Mutex<Option<Redactor>>,
}

/// A function that returns a record line with what must not be kept replaced, or `None`
/// when there is nothing to replace. It must keep the line valid JSON of the same shape.
pub type Redactor = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// The day files in `dir` (`YYYY-MM-DD.jsonl` of a real day), oldest first; none when
/// `dir` is missing. Verify reports any other `*.jsonl` there.
pub fn day_files(dir: &Path) -> Result<Vec<PathBuf>, AuditError> {
    let mut files = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(AuditError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| AuditError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_day = name.strip_suffix(".jsonl").is_some_and(crate::time::is_valid_day);
        if is_day {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

pub(crate) fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join("checkpoint.json")
}

/// The checkpoint in `dir`, when there is a readable one (verify reports one that is not).
fn read_checkpoint_at(dir: &Path) -> Option<Checkpoint> {
    let mut text = String::new();
    crate::file::open_read(&checkpoint_path(dir))
        .and_then(|f| f.take(64 << 10).read_to_string(&mut text))
        .ok()?;
    serde_json::from_str(&text).ok()
}

/// The checkpoint of the head: how many records there were and the last one's hash,
/// and where the writer's tree stood (so that open need not rehash the whole log).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Checkpoint {
    pub(crate) seq: u64,
    pub(crate) hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tree: Option<TreeAt>,
}

/// The tree as it stood at a checkpoint: its size, its right edge (base64 hashes), and the
/// day file and byte offset where the next line would start. Only a shortcut: open
/// rebuilds the tree from every line when it does not fit, and verify never reads it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TreeAt {
    pub(crate) size: u64,
    pub(crate) edge: Vec<String>,
    pub(crate) file: String,
    pub(crate) offset: u64,
}

/// The least a writer waits for the lock, even when asked not to wait. A lock the last
/// writer of this process let go of can stay held for a moment by a child process that
/// another thread forked and that has not yet run `exec` (the child holds a copy of
/// every descriptor until then, and the lock lives as long as any copy): seen as rare
/// `Locked` errors when one test reopened a log beside another that spawned processes.
const LOCK_GRACE: Duration = Duration::from_millis(250);

/// Takes `.lock` in `dir`, waiting up to `wait` (at least [`LOCK_GRACE`]) for another
/// writer to let go.
fn take_lock(dir: &Path, wait: Duration) -> Result<File, AuditError> {
    let path = dir.join(".lock");
    let file =
        crate::file::open_with(OpenOptions::new().create(true).truncate(false).write(true), &path)
            .map_err(|e| AuditError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    let give_up = Instant::now() + wait.max(LOCK_GRACE);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < give_up => {
                std::thread::sleep(LOCK_POLL);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(AuditError::Locked(dir.display().to_string()));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(AuditError::Unavailable(format!("locking {}: {e}", path.display())));
            }
        }
    }
}

impl AuditLog {
    /// Opens the log in `dir` (created if missing) as its one writer, recovering a torn
    /// last line. Another writer holding it (a daemon, another command) is an error
    /// ([`AuditError::Locked`]).
    pub fn open(dir: &Path) -> Result<AuditLog, AuditError> {
        AuditLog::open_with(dir, Box::new(SystemClock), Duration::ZERO, true)
    }

    /// [`AuditLog::open`] without the check against the checkpoint: only for appending
    /// the break record the owner accepted after verify listed the cut.
    pub(crate) fn open_for_break(dir: &Path) -> Result<AuditLog, AuditError> {
        AuditLog::open_with(dir, Box::new(SystemClock), Duration::ZERO, false)
    }

    /// [`AuditLog::open`], waiting up to `wait` for another writer to close first: for
    /// one-shot commands, which take turns on the log.
    pub fn open_waiting(dir: &Path, wait: Duration) -> Result<AuditLog, AuditError> {
        AuditLog::open_with(dir, Box::new(SystemClock), wait, true)
    }

    /// Opens with a given clock (tests pass one that crosses midnight).
    pub fn open_with_clock(dir: &Path, clock: Box<dyn Clock>) -> Result<AuditLog, AuditError> {
        AuditLog::open_with(dir, clock, Duration::ZERO, true)
    }

    /// A torn last line (a crash mid-append) is moved to `recovered/` and replaced by a
    /// `recovered` record; it is never silently dropped.
    fn open_with(
        dir: &Path,
        clock: Box<dyn Clock>,
        wait: Duration,
        check_cut: bool,
    ) -> Result<AuditLog, AuditError> {
        let unavailable = |what: &str, e: &dyn std::fmt::Display| {
            AuditError::Unavailable(format!("{what} {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| unavailable("cannot create", &e))?;
        let lock = take_lock(dir, wait)?;
        let mut inner = Inner {
            file: None,
            seq: 0,
            head: GENESIS.to_owned(),
            synced: 0,
            syncing: false,
            failed: None,
            newest_day: None,
            since_checkpoint: 0,
            offset: 0,
            tree: Tree::new(),
            recent: Vec::new(),
            recent_start: 0,
            checked: std::collections::BTreeSet::new(),
            read_by_check: None,
        };
        let mut torn = None;
        if let Some(last) = day_files(dir)?.pop() {
            inner.newest_day = last.file_stem().map(|s| s.to_string_lossy().into_owned());
            let meta = std::fs::metadata(&last).map_err(|e| unavailable("cannot stat", &e))?;
            if !meta.is_file() {
                return Err(AuditError::Unavailable(format!(
                    "{} is not a regular file",
                    last.display()
                )));
            }
            let (head, tail) = read_tail(&last)?;
            if let Some((seq, hash)) = head {
                inner.seq = seq;
                inner.head = hash;
            } else if let Some(prev) = previous_head(dir, &last)? {
                // The last file holds no complete record: the head is in an earlier file.
                (inner.seq, inner.head) = prev;
            }
            inner.synced = inner.seq;
            torn = tail.map(|(offset, bytes)| (last.clone(), offset, bytes));
        }
        let checkpoint = read_checkpoint_at(dir);
        let (tree, recent_start, recent) = rebuild_tree(dir, checkpoint.as_ref())?;
        inner.tree = tree;
        inner.recent_start = recent_start;
        inner.recent = recent;
        // The checkpoint only ever names a record that was on disk: a head before it
        // means records were cut off, and appending would reuse their sequence numbers
        // and hide the cut under a fresh checkpoint. Refuse, as for any broken log.
        if let Some(cp) = checkpoint.filter(|_| check_cut) {
            let cut = cp.seq > inner.seq;
            let rewritten = cp.seq == inner.seq && cp.hash != inner.head;
            if cut || rewritten {
                return Err(AuditError::Unavailable(format!(
                    "{}: the checkpoint names record {} ({}) but the log ends at record {}; records were cut off or rewritten (run `bx audit verify`; see docs/runbook.md#audit-broken)",
                    dir.display(),
                    cp.seq,
                    if cut { "past the end" } else { "with another hash" },
                    inner.seq
                )));
            }
        }
        let log = AuditLog {
            dir: dir.to_path_buf(),
            clock,
            inner: Mutex::new(inner),
            synced: Condvar::new(),
            anchor: None,
            exporting: Mutex::new(0),
            _lock: lock,
            redactor: Mutex::new(None),
        };
        if let Some((file, offset, bytes)) = torn {
            log.recover(&file, offset, &bytes)?;
        }
        Ok(log)
    }

    /// Signs a checkpoint of the tree with `anchor`'s key at every checkpoint and close,
    /// and exports it to its directories.
    ///
    /// First it checks the log against the newest checkpoint in each export directory
    /// signed by the key (a consistency proof from its size to the writer's tree, over
    /// hashes computed from the records: see docs/audit.md). When the log is not the
    /// history one of them vouches for, the log is damaged: nothing is signed or exported
    /// and every append is refused, for good ([`AuditLog::failure`] says why, naming
    /// `docs/runbook.md#audit-anchor-mismatch`). This reads every record once.
    pub fn with_anchor(mut self, anchor: Anchor) -> AuditLog {
        let mut heads = Vec::new();
        let mut checked = std::collections::BTreeSet::new();
        let mut foreign = None;
        for export in anchor.exports() {
            // A directory that cannot be listed (not mounted) vouches for nothing now;
            // it is checked before the first checkpoint signed while it is there.
            match crate::consistent::newest_head(export, anchor.verifier()) {
                Ok(Newest::Head(head)) => heads.push(head),
                Ok(Newest::Nothing) => {}
                Ok(Newest::Foreign(path)) => foreign = Some(path),
                Err(_) => continue,
            }
            checked.insert(export.clone());
        }
        {
            let mut inner = self.lock();
            if let Some(path) = foreign {
                inner.failed = Some(crate::consistent::foreign_reason(&path));
            } else if heads.is_empty() {
                self.check_local_note(&mut inner, &anchor);
            } else if let Err(why) = self.check_heads(&mut inner, &heads, &anchor) {
                inner.failed = Some(why.to_string());
            }
            inner.checked = checked;
        }
        self.anchor = Some(anchor);
        self
    }

    /// With no exported checkpoint to trust: the tree's right edge came from
    /// `checkpoint.json`, which anyone who can write the log can edit, and the signed copy
    /// of the last checkpoint cannot be forged. When they cover the same records and
    /// disagree, rehash every line rather than sign a root the records do not have.
    fn check_local_note(&self, inner: &mut Inner, anchor: &Anchor) {
        let signed = crate::anchor::read_note(&self.dir.join("checkpoint.note"))
            .ok()
            .and_then(|n| crate::anchor::open_note(&n, anchor.verifier()).ok());
        if let Some(cp) = signed
            && cp.size == inner.tree.size()
            && cp.root != inner.tree.root()
            && let Ok((tree, start, recent)) = rebuild_tree(&self.dir, None)
        {
            inner.tree = tree;
            inner.recent_start = start;
            inner.recent = recent;
        }
    }

    /// Checks the writer's tree against signed checkpoints kept off the host; when the
    /// tree is not the records' own (an edited `checkpoint.json`), rebuilds it from every
    /// line first. Returns why the log cannot be signed, as the sticky failure's text.
    /// Reads only the records after what `checked.json` vouches for when it still holds
    /// (`crate::checked`), and records what this check read for the next.
    fn check_heads(
        &self,
        inner: &mut Inner,
        heads: &[Signed],
        anchor: &Anchor,
    ) -> Result<(), Unsigned> {
        let now = Some(self.clock.now());
        let check = |inner: &Inner, start: &crate::checked::Start| {
            crate::consistent::check_log(
                &self.dir,
                start,
                inner.tree.size(),
                inner.tree.root(),
                heads,
                now,
            )
        };
        let fail = Unsigned::Unchecked;
        let start = crate::checked::read(&self.dir, anchor.marker_key());
        let mut checked = check(inner, &start).map_err(fail)?;
        let mut read = checked.read;
        if checked.verdict != Verdict::Consistent && !start.files.is_empty() {
            // Unsure, or any verdict against the log reached from the start: the check
            // from the first record decides.
            checked = check(inner, &crate::checked::Start::default()).map_err(fail)?;
            read += checked.read;
        }
        if checked.verdict == Verdict::TreeDiffers {
            let (tree, start, recent) = rebuild_tree(&self.dir, None).map_err(fail)?;
            inner.tree = tree;
            inner.recent_start = start;
            inner.recent = recent;
            checked = check(inner, &crate::checked::Start::default()).map_err(fail)?;
            read += checked.read;
        }
        inner.read_by_check = Some(read);
        match checked.verdict {
            Verdict::Consistent => {
                crate::checked::write(&self.dir, anchor.marker_key(), &checked.next);
                Ok(())
            }
            Verdict::TreeDiffers => Err(Unsigned::Mismatch(AuditError::AnchorMismatch(
                "its files changed while it was read".into(),
            ))),
            Verdict::Contradicted(why) => Err(Unsigned::Mismatch(AuditError::AnchorMismatch(
                format!("{why}; the writer signs and exports nothing"),
            ))),
            // Only from a start, which the check from the first record replaced above.
            Verdict::Unsure => {
                Err(fail(AuditError::Unavailable("the check could not decide".into())))
            }
        }
    }

    /// How many records the check against the exported checkpoints read at open (those
    /// `checked.json` vouched for are not read); `None` when no such check ran.
    pub fn records_read_at_open(&self) -> Option<u64> {
        self.lock().read_by_check
    }

    /// The anchor, when there is one.
    pub fn anchor(&self) -> Option<&Anchor> {
        self.anchor.as_ref()
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn recover(&self, file: &Path, offset: u64, bytes: &[u8]) -> Result<(), AuditError> {
        let aside_dir = self.dir.join("recovered");
        std::fs::create_dir_all(&aside_dir)
            .map_err(|e| AuditError::Unavailable(format!("recovering: {e}")))?;
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let aside = aside_dir.join(format!("{name}.{offset}.torn"));
        let keep = || -> std::io::Result<()> {
            let mut out = File::create(&aside)?;
            out.write_all(bytes)?;
            out.sync_all()?;
            bx_fs::sync_dir(&aside_dir)?;
            let f = crate::file::open_with(OpenOptions::new().write(true), file)?;
            f.set_len(offset)?;
            f.sync_all()
        };
        keep().map_err(|e| {
            AuditError::Unavailable(format!("recovering torn tail of {}: {e}", file.display()))
        })?;
        let moved_to = format!(
            "recovered/{}",
            aside.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
        );
        let entry = Entry::Recovered(Recovered {
            file: name,
            offset,
            bytes: bytes.len() as u64,
            sha256: line_hash(bytes),
            moved_to,
        });
        self.append(&entry).map(drop)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves `Inner` consistent (every field is
        // updated after its I/O succeeded), so a poisoned lock is taken over.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the function every later record's line passes through before it is hashed
    /// and written ([`Redactor`]).
    pub fn set_redactor(&self, redactor: Redactor) {
        *self.redactor.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(redactor);
    }

    /// Appends one record and returns once it, and every record before it, is on disk.
    /// Concurrent appends share one fdatasync (group commit); none returns early. A
    /// record longer than [`MAX_RECORD_BYTES`] is refused ([`AuditError::TooLarge`]) and
    /// nothing is written; the log stays available.
    pub fn append(&self, entry: &Entry) -> Result<Receipt, AuditError> {
        let (inner, receipt) = self.write_record(entry)?;
        self.sync_through(inner, receipt.seq)?;
        Ok(receipt)
    }

    /// Appends one record without waiting for it to reach the disk: the next
    /// [`AuditLog::append`] (from any thread) returns only once this record is synced
    /// too, since a sync covers every record written before it. For a record whose own
    /// step has no effect until the next record is durable: a call's request is followed
    /// by its decision, and nothing acts on the decision before that append returns. A
    /// crash in between loses both, and the call never ran.
    pub fn append_deferred(&self, entry: &Entry) -> Result<Receipt, AuditError> {
        self.write_record(entry).map(|(_, receipt)| receipt)
    }

    /// Writes one record (not yet synced), holding the lock still.
    fn write_record(&self, entry: &Entry) -> Result<(MutexGuard<'_, Inner>, Receipt), AuditError> {
        let fields = entry.fields();
        let mut inner = self.lock();
        if let Some(why) = &inner.failed {
            return Err(AuditError::Unavailable(why.clone()));
        }
        let now = self.clock.now();
        let record = Record {
            seq: inner.seq + 1,
            time: format_rfc3339(now),
            prev: inner.head.clone(),
            kind: entry.kind(),
            fields,
        };
        let mut line = record.to_line();
        let redactor =
            self.redactor.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(clean) = redactor.and_then(|r| r(&line)) {
            line = clean;
        }
        if line.len() > MAX_RECORD_BYTES {
            return Err(AuditError::TooLarge { bytes: line.len(), max: MAX_RECORD_BYTES });
        }
        let hash = line_hash(line.as_bytes());
        let leaf = leaf_hash(line.as_bytes());
        line.push('\n');
        if let Err(e) = self.write_line(&mut inner, &day_of(now), line.as_bytes()) {
            let why = format!("write failed: {e}");
            inner.failed = Some(why.clone());
            self.synced.notify_all();
            return Err(AuditError::Unavailable(why));
        }
        inner.seq = record.seq;
        inner.head = hash.clone();
        inner.since_checkpoint += 1;
        inner.offset += line.len() as u64;
        inner.tree.push(leaf);
        // Only exports read these: a log without an anchor keeps none (it kept every leaf
        // of the writer's life, up to 32 MiB). Either way `recent` holds the leaves from
        // `recent_start` to the tree's end, which is how an export slices it.
        if self.anchor.is_some() {
            inner.recent.push(leaf);
        } else {
            inner.recent.clear();
            inner.recent_start = inner.tree.size();
        }
        // Trimmed in steps, not a leaf at a time: past the cap, dropping one leaf per
        // append moved all 32 MiB of them on every append.
        if inner.recent.len() > MAX_RECENT_LEAVES + RECENT_TRIM_STEP {
            let drop = inner.recent.len() - MAX_RECENT_LEAVES;
            inner.recent.drain(..drop);
            inner.recent_start += drop as u64;
        }
        let receipt = Receipt { seq: record.seq, hash };
        Ok((inner, receipt))
    }

    /// Waits until a sync covers record `mine`, syncing for everyone written so far when
    /// no sync is in flight; then writes a checkpoint when one is due.
    fn sync_through<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        mine: u64,
    ) -> Result<(), AuditError> {
        // Group commit: whoever finds no sync in flight syncs for everyone written so far;
        // the others wait until a sync covers their record (or the log fails).
        loop {
            if let Some(why) = &inner.failed {
                return Err(AuditError::Unavailable(why.clone()));
            }
            if inner.synced >= mine {
                break;
            }
            if inner.syncing {
                inner = self.synced.wait(inner).unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            let target = inner.seq;
            let Some((_, file)) = &inner.file else { break };
            let file = Arc::clone(file);
            inner.syncing = true;
            drop(inner);
            let result = file.sync_data();
            inner = self.lock();
            inner.syncing = false;
            match result {
                Ok(()) => inner.synced = inner.synced.max(target),
                // Never retried: after a failed fsync the kernel may have dropped the
                // dirty pages, so a later "success" would prove nothing.
                Err(e) => inner.failed = Some(format!("fdatasync failed: {e}")),
            }
            self.synced.notify_all();
        }
        if inner.since_checkpoint >= CHECKPOINT_EVERY {
            let job = self.write_checkpoint(&mut inner, &[])?;
            drop(inner);
            if let Some(job) = job {
                self.export(job, &[])?;
            }
        }
        Ok(())
    }

    fn write_line(&self, inner: &mut Inner, day: &str, line: &[u8]) -> std::io::Result<()> {
        let current = inner.file.as_ref().map(|(d, _)| d.clone());
        // Never write to an earlier day's file than the newest one: if the clock went
        // back, keep writing to the newest.
        let target = match &inner.newest_day {
            Some(newest) if newest.as_str() > day => newest.clone(),
            _ => day.to_owned(),
        };
        if current.as_deref() != Some(target.as_str()) {
            if let Some((_, old)) = &inner.file {
                // Everything in the old day's file is synced before the switch.
                old.sync_data()?;
                inner.synced = inner.seq;
            }
            let path = self.dir.join(format!("{target}.jsonl"));
            let is_new = !path.exists();
            let file = crate::file::open_with(OpenOptions::new().create(true).append(true), &path)?;
            if is_new {
                bx_fs::sync_dir(&self.dir)?;
            }
            inner.offset = file.metadata()?.len();
            inner.newest_day = Some(target.clone());
            inner.file = Some((target, Arc::new(file)));
        }
        match &mut inner.file {
            Some((_, file)) => (&**file).write_all(line),
            None => Err(std::io::Error::other("no day file")),
        }
    }

    /// Before signing: checks the tree against the newest signed checkpoint in each
    /// export directory (configured, and `extra`) not checked yet, reading the records.
    /// One that the tree does not extend makes the log damaged, for good.
    fn check_unchecked(&self, inner: &mut Inner, extra: &[PathBuf]) -> Result<(), AuditError> {
        let Some(anchor) = &self.anchor else { return Ok(()) };
        for dir in anchor.exports().iter().chain(extra) {
            if inner.checked.contains(dir) {
                continue;
            }
            // Not there: nothing to contradict, and its export fails and is recorded.
            let heads: Vec<Signed> = match crate::consistent::newest_head(dir, anchor.verifier()) {
                Ok(Newest::Head(head)) => vec![head],
                Ok(Newest::Nothing) => Vec::new(),
                Ok(Newest::Foreign(path)) => {
                    let why = crate::consistent::foreign_reason(&path);
                    inner.failed = Some(why.clone());
                    self.synced.notify_all();
                    return Err(AuditError::Unavailable(why));
                }
                Err(_) => continue,
            };
            let (size, root) = (inner.tree.size(), inner.tree.root());
            // From the first record, recording nothing: this runs under the writer's
            // lock, before a checkpoint is signed, and `checked.json` is the open's.
            let start = crate::checked::Start::default();
            let checked = crate::consistent::check_log(&self.dir, &start, size, root, &heads, None);
            let why = match checked.map(|c| c.verdict) {
                Ok(Verdict::Consistent) => {
                    inner.checked.insert(dir.clone());
                    continue;
                }
                Ok(Verdict::TreeDiffers) => AuditError::AnchorMismatch(
                    "the records on disk are not those the writer wrote; the writer signs and exports nothing more".into(),
                )
                .to_string(),
                Ok(Verdict::Contradicted(why)) => AuditError::AnchorMismatch(format!(
                    "{why}; the writer signs and exports nothing more"
                ))
                .to_string(),
                // Only from a start, and this check has none: fail closed all the same.
                Ok(Verdict::Unsure) => format!(
                    "cannot check the log against the checkpoints in {} (the check could not decide); nothing is signed",
                    dir.display()
                ),
                Err(e) => format!(
                    "cannot check the log against the checkpoints in {} ({e}); nothing is signed",
                    dir.display()
                ),
            };
            inner.failed = Some(why.clone());
            self.synced.notify_all();
            return Err(AuditError::Unavailable(why));
        }
        Ok(())
    }

    /// Writes `checkpoint.json` (and, with an anchor, the signed `checkpoint.note`), and
    /// returns the export to run once `inner` is let go; `extra` are export directories
    /// besides the configured ones.
    fn write_checkpoint(
        &self,
        inner: &mut Inner,
        extra: &[PathBuf],
    ) -> Result<Option<ExportJob>, AuditError> {
        self.check_unchecked(inner, extra)?;
        let (file, offset) = match (&inner.file, &inner.newest_day) {
            (Some((day, _)), _) => (format!("{day}.jsonl"), inner.offset),
            (None, Some(day)) => {
                let name = format!("{day}.jsonl");
                let len = std::fs::metadata(self.dir.join(&name)).map_or(0, |m| m.len());
                (name, len)
            }
            (None, None) => (String::new(), 0),
        };
        let tree = TreeAt {
            size: inner.tree.size(),
            edge: inner.tree.edge().iter().map(ToString::to_string).collect(),
            file,
            offset,
        };
        let cp = Checkpoint { seq: inner.seq, hash: inner.head.clone(), tree: Some(tree) };
        let note = match &self.anchor {
            Some(anchor) => Some(anchor.sign(&inner.tree)?),
            None => None,
        };
        let write = || -> std::io::Result<()> {
            write_replacing(
                &self.dir,
                "checkpoint.json",
                serde_json::to_string(&cp).unwrap_or_default().as_bytes(),
            )?;
            if let Some(note) = &note {
                write_replacing(&self.dir, "checkpoint.note", note)?;
            }
            Ok(())
        };
        if let Err(e) = write() {
            let why = format!("checkpoint write failed: {e}");
            inner.failed = Some(why.clone());
            return Err(AuditError::Unavailable(why));
        }
        inner.since_checkpoint = 0;
        Ok(note.map(|note| ExportJob {
            size: inner.tree.size(),
            note,
            recent: inner.recent.clone(),
            recent_start: inner.recent_start,
        }))
    }

    /// Writes a signed checkpoint to every export directory (and to `extra`), records
    /// each failure on the log, and writes `export.json` for `bx doctor`. A failed export
    /// never stops the log.
    fn export(&self, job: ExportJob, extra: &[PathBuf]) -> Result<Vec<Exported>, AuditError> {
        let Some(anchor) = &self.anchor else { return Ok(Vec::new()) };
        let results = {
            let mut newest =
                self.exporting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if job.size < *newest && extra.is_empty() {
                // A newer checkpoint was exported first; this one is in its leaves.
                return Ok(Vec::new());
            }
            *newest = job.size;
            let mut results = Vec::new();
            let dirs = anchor.exports().iter().chain(extra).cloned().collect::<Vec<_>>();
            for dir in dirs {
                let mut leaves = |from: u64, to: u64| -> Result<Vec<Hash>, AuditError> {
                    let start =
                        from.checked_sub(job.recent_start).and_then(|s| usize::try_from(s).ok());
                    let end = usize::try_from(to.saturating_sub(job.recent_start)).ok();
                    match (start, end) {
                        (Some(s), Some(e)) if e <= job.recent.len() => {
                            Ok(job.recent[s..e].to_vec())
                        }
                        _ => leaves_from_log(&self.dir, from, to),
                    }
                };
                let sub = origin_dir(&dir, anchor.origin());
                let error = crate::anchor::export(&sub, job.size, &job.note, &mut leaves)
                    .err()
                    .map(|e| e.to_string());
                results.push(Exported { dir, size: job.size, error });
            }
            let status = serde_json::json!({
                "time": format_rfc3339(self.clock.now()),
                "size": job.size,
                "exports": results.iter().map(|r| serde_json::json!({
                    "dir": r.dir.display().to_string(),
                    "error": r.error,
                })).collect::<Vec<_>>(),
            });
            // Best effort: `bx doctor` reads it, and every failure is also on the log.
            let _ = write_replacing(&self.dir, "export.json", status.to_string().as_bytes());
            results
        };
        if results.iter().all(|r| r.error.is_none()) {
            let mut inner = self.lock();
            let done =
                usize::try_from(job.size.saturating_sub(inner.recent_start)).unwrap_or(usize::MAX);
            let done = done.min(inner.recent.len());
            inner.recent.drain(..done);
            inner.recent_start += done as u64;
        }
        for r in results.iter().filter(|r| r.error.is_some()) {
            let entry = Entry::ExportFailed(ExportFailed {
                dir: bounded(&r.dir.display().to_string(), MAX_FIELD_BYTES),
                size: r.size,
                error: bounded(r.error.as_deref().unwrap_or_default(), MAX_FIELD_BYTES),
            });
            self.append(&entry)?;
        }
        Ok(results)
    }

    /// Writes the checkpoint of the head now (also done every [`CHECKPOINT_EVERY`]
    /// records and by [`AuditLog::close`]).
    pub fn checkpoint(&self) -> Result<(), AuditError> {
        self.checkpoint_exporting(&[]).map(drop)
    }

    /// [`AuditLog::checkpoint`], exporting the signed checkpoint to `extra` as well as
    /// to the configured directories; says how each export went. Without an anchor there
    /// is nothing to sign, and this exports nothing.
    pub fn checkpoint_exporting(&self, extra: &[PathBuf]) -> Result<Vec<Exported>, AuditError> {
        let mut inner = self.lock();
        if let Some(why) = &inner.failed {
            return Err(AuditError::Unavailable(why.clone()));
        }
        if inner.seq == 0 {
            // An empty log has no head to protect; a checkpoint of nothing would only
            // claim a record 0 that verify cannot find.
            return Ok(Vec::new());
        }
        let job = self.write_checkpoint(&mut inner, extra)?;
        drop(inner);
        match job {
            Some(job) => self.export(job, extra),
            None => Ok(Vec::new()),
        }
    }

    /// Syncs and writes the final checkpoint.
    pub fn close(self) -> Result<(), AuditError> {
        self.checkpoint()
    }

    /// The tree's size and root now.
    pub fn tree_head(&self) -> (u64, Hash) {
        let inner = self.lock();
        (inner.tree.size(), inner.tree.root())
    }

    /// The head: last sequence number and hash.
    pub fn head(&self) -> Receipt {
        let inner = self.lock();
        Receipt { seq: inner.seq, hash: inner.head.clone() }
    }

    /// The sequence number of the last record known to be on disk: every record up to
    /// it has been synced. Behind [`AuditLog::head`] only after
    /// [`AuditLog::append_deferred`], until the next append.
    pub fn synced(&self) -> u64 {
        self.lock().synced
    }

    /// Why the log is unavailable, if it is.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }
}

/// Writes `name` in `dir` whole ([`bx_fs::write_atomically`]). The log's lock makes
/// this process the one writer.
fn write_replacing(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    bx_fs::write_atomically(&dir.join(name), bytes)
}

/// The writer's tree at open: from the checkpoint's tree and the lines after it when
/// they fit, else from every line. Returns the tree, and the leaves read after the
/// checkpoint with the index of the first.
fn rebuild_tree(dir: &Path, cp: Option<&Checkpoint>) -> Result<(Tree, u64, Vec<Hash>), AuditError> {
    let files = day_files(dir)?;
    let start = cp.and_then(|c| c.tree.as_ref()).and_then(|t| {
        let edge = t.edge.iter().map(|h| Hash::parse_hash(h).ok()).collect::<Option<Vec<_>>>()?;
        let tree = Tree::from_edge(t.size, edge)?;
        let at = files.iter().position(|f| f.file_name().is_some_and(|n| n == t.file.as_str()))?;
        // The offset must start a line of that file.
        let mut file = crate::file::open_read(&files[at]).ok()?;
        if t.offset > 0 {
            let mut before = [0u8; 1];
            file.seek(SeekFrom::Start(t.offset - 1)).ok()?;
            file.read_exact(&mut before).ok()?;
            (before[0] == b'\n').then_some(())?;
        }
        Some((tree, at, t.offset))
    });
    let (mut tree, first, offset) = start.unwrap_or((Tree::new(), 0, 0));
    let recent_start = tree.size();
    let mut recent = Vec::new();
    for (i, path) in files.iter().enumerate().skip(first) {
        let mut file = crate::file::open_read(path).map_err(|e| AuditError::io(path, e))?;
        if i == first {
            file.seek(SeekFrom::Start(offset)).map_err(|e| AuditError::io(path, e))?;
        }
        crate::verify::each_leaf(&mut std::io::BufReader::new(file), path, |leaf| {
            tree.push(leaf);
            if recent.len() < MAX_RECENT_LEAVES {
                recent.push(leaf);
            }
        })?;
    }
    if recent.len() >= MAX_RECENT_LEAVES {
        // Too many to keep: a lagging export reads them back from the log.
        return Ok((tree.clone(), tree.size(), Vec::new()));
    }
    Ok((tree, recent_start, recent))
}

/// The leaf hashes of lines `from..to` of the log, read back from its files.
pub(crate) fn leaves_from_log(dir: &Path, from: u64, to: u64) -> Result<Vec<Hash>, AuditError> {
    let mut out = Vec::new();
    let mut index = 0u64;
    for path in day_files(dir)? {
        if index >= to {
            break;
        }
        let file = crate::file::open_read(&path).map_err(|e| AuditError::io(&path, e))?;
        crate::verify::each_leaf(&mut std::io::BufReader::new(file), &path, |leaf| {
            if (from..to).contains(&index) {
                out.push(leaf);
            }
            index += 1;
        })?;
    }
    if (out.len() as u64) < to - from {
        return Err(AuditError::Unavailable(format!(
            "the log has {index} lines, fewer than the {to} its tree counts"
        )));
    }
    Ok(out)
}

type Head = Option<(u64, String)>;
type Torn = Option<(u64, Vec<u8>)>;

/// Reads the end of a day file: the last complete record's (seq, hash), and any bytes
/// after the last newline (a torn append) with their offset.
fn read_tail(path: &Path) -> Result<(Head, Torn), AuditError> {
    let unavailable = |e: &dyn std::fmt::Display| {
        AuditError::Unavailable(format!("reading {}: {e}", path.display()))
    };
    let mut file = crate::file::open_read(path).map_err(|e| unavailable(&e))?;
    let len = file.metadata().map_err(|e| unavailable(&e))?.len();
    // The window must reach back past the start of the last complete line: widen it
    // while it holds fewer than two newlines (a torn tail longer than the window would
    // otherwise be taken for the whole file, and the sequence restarted).
    let mut window = MAX_TAIL_BYTES;
    let (start, buf) = loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start)).map_err(|e| unavailable(&e))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(|e| unavailable(&e))?;
        let newlines = buf.iter().rev().filter(|b| **b == b'\n').take(2).count();
        if start == 0 || newlines >= 2 {
            break (start, buf);
        }
        if window >= MAX_TORN_SCAN {
            return Err(AuditError::Unavailable(format!(
                "{}: no record in its last {MAX_TORN_SCAN} bytes",
                path.display()
            )));
        }
        window = window.saturating_mul(4).min(MAX_TORN_SCAN);
    };
    let cut = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let torn = (cut < buf.len()).then(|| (start + cut as u64, buf[cut..].to_vec()));
    let complete = &buf[..cut];
    let head = match complete.strip_suffix(b"\n") {
        Some(body) => {
            let line_start = body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let line = &body[line_start..];
            let text = std::str::from_utf8(line).map_err(|e| unavailable(&e))?;
            let record = Record::parse(text).map_err(|e| {
                AuditError::Unavailable(format!(
                    "last record of {} is damaged: {e}",
                    path.display()
                ))
            })?;
            Some((record.seq, line_hash(line)))
        }
        None => None,
    };
    Ok((head, torn))
}

/// The head of the newest day file before `last` that holds a record.
fn previous_head(dir: &Path, last: &Path) -> Result<Head, AuditError> {
    for file in day_files(dir)?.iter().rev().filter(|f| f.as_path() != last) {
        if let (Some(head), _) = read_tail(file)? {
            return Ok(Some(head));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log without an anchor keeps no leaves for exports: it kept every leaf of the
    /// writer's life, and past 1 Mi of them moved them all on every append.
    #[test]
    fn an_unanchored_writer_keeps_no_leaves_for_exports() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(dir.path()).unwrap();
        for i in 0..50 {
            let entry = Entry::Recovered(Recovered {
                file: format!("f{i}"),
                offset: i,
                bytes: 0,
                sha256: String::new(),
                moved_to: String::new(),
            });
            log.append_deferred(&entry).unwrap();
        }
        let inner = log.lock();
        assert!(inner.recent.is_empty());
        assert_eq!(inner.recent_start, inner.tree.size());
        assert_eq!(inner.tree.size(), 50);
    }
}
