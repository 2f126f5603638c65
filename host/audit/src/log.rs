//! The writer: open (taking the log's lock, recovering a torn tail), append with group
//! commit, checkpoint, close. One writer at a time, across processes: the lock on
//! `.lock` in the log directory is held for as long as the [`AuditLog`] lives.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::entry::{Entry, MAX_RECORD_BYTES, Recovered};
use crate::error::AuditError;
use crate::record::{GENESIS, Record, line_hash};
use crate::time::{day_of, format_rfc3339};

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
    file: Option<(String, File)>,
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
}

/// An open audit log. Share it behind an `Arc`; `append` may be called from many threads
/// and each call returns only once its record (and all before it) is synced.
pub struct AuditLog {
    dir: PathBuf,
    clock: Box<dyn Clock>,
    inner: Mutex<Inner>,
    synced: Condvar,
    /// `.lock`, locked exclusively while this writer lives.
    _lock: File,
}

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

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(crate) fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join("checkpoint.json")
}

/// The checkpoint in `dir`, when there is a readable one (verify reports one that is not).
fn read_checkpoint_at(dir: &Path) -> Option<Checkpoint> {
    let text = std::fs::read_to_string(checkpoint_path(dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The checkpoint of the head: how many records there were and the last one's hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Checkpoint {
    pub(crate) seq: u64,
    pub(crate) hash: String,
}

/// Takes `.lock` in `dir`, waiting up to `wait` for another writer to let go.
fn take_lock(dir: &Path, wait: Duration) -> Result<File, AuditError> {
    let path = dir.join(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| AuditError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    let give_up = Instant::now() + wait;
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
        // The checkpoint only ever names a record that was on disk: a head before it
        // means records were cut off, and appending would reuse their sequence numbers
        // and hide the cut under a fresh checkpoint. Refuse, as for any broken log.
        if let Some(cp) = read_checkpoint_at(dir).filter(|_| check_cut) {
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
            _lock: lock,
        };
        if let Some((file, offset, bytes)) = torn {
            log.recover(&file, offset, &bytes)?;
        }
        Ok(log)
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
            sync_dir(&aside_dir)?;
            let f = OpenOptions::new().write(true).open(file)?;
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

    /// Appends one record and returns once it, and every record before it, is on disk.
    /// Concurrent appends share one fdatasync (group commit); none returns early. A
    /// record longer than [`MAX_RECORD_BYTES`] is refused ([`AuditError::TooLarge`]) and
    /// nothing is written; the log stays available.
    pub fn append(&self, entry: &Entry) -> Result<Receipt, AuditError> {
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
        if line.len() > MAX_RECORD_BYTES {
            return Err(AuditError::TooLarge { bytes: line.len(), max: MAX_RECORD_BYTES });
        }
        let hash = line_hash(line.as_bytes());
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
        let mine = record.seq;
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
            let file = match file.try_clone() {
                Ok(f) => f,
                Err(e) => {
                    inner.failed = Some(format!("sync failed: {e}"));
                    self.synced.notify_all();
                    continue;
                }
            };
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
            self.write_checkpoint(&mut inner)?;
        }
        Ok(Receipt { seq: mine, hash })
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
            let file = OpenOptions::new().create(true).append(true).open(&path)?;
            if is_new {
                sync_dir(&self.dir)?;
            }
            inner.newest_day = Some(target.clone());
            inner.file = Some((target, file));
        }
        match &mut inner.file {
            Some((_, file)) => file.write_all(line),
            None => Err(std::io::Error::other("no day file")),
        }
    }

    fn write_checkpoint(&self, inner: &mut Inner) -> Result<(), AuditError> {
        let cp = Checkpoint { seq: inner.seq, hash: inner.head.clone() };
        let path = checkpoint_path(&self.dir);
        // The lock makes this process the one writer; the pid in the name keeps even a
        // stray second process from sharing the temporary file.
        let tmp = self.dir.join(format!("checkpoint.json.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(serde_json::to_string(&cp).unwrap_or_default().as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            sync_dir(&self.dir)
        };
        if let Err(e) = write() {
            let why = format!("checkpoint write failed: {e}");
            inner.failed = Some(why.clone());
            return Err(AuditError::Unavailable(why));
        }
        inner.since_checkpoint = 0;
        Ok(())
    }

    /// Writes the checkpoint of the head now (also done every [`CHECKPOINT_EVERY`]
    /// records and by [`AuditLog::close`]).
    pub fn checkpoint(&self) -> Result<(), AuditError> {
        let mut inner = self.lock();
        if let Some(why) = &inner.failed {
            return Err(AuditError::Unavailable(why.clone()));
        }
        if inner.seq == 0 {
            // An empty log has no head to protect; a checkpoint of nothing would only
            // claim a record 0 that verify cannot find.
            return Ok(());
        }
        self.write_checkpoint(&mut inner)
    }

    /// Syncs and writes the final checkpoint.
    pub fn close(self) -> Result<(), AuditError> {
        self.checkpoint()
    }

    /// The head: last sequence number and hash.
    pub fn head(&self) -> Receipt {
        let inner = self.lock();
        Receipt { seq: inner.seq, hash: inner.head.clone() }
    }

    /// Why the log is unavailable, if it is.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }
}

type Head = Option<(u64, String)>;
type Torn = Option<(u64, Vec<u8>)>;

/// Reads the end of a day file: the last complete record's (seq, hash), and any bytes
/// after the last newline (a torn append) with their offset.
fn read_tail(path: &Path) -> Result<(Head, Torn), AuditError> {
    let unavailable = |e: &dyn std::fmt::Display| {
        AuditError::Unavailable(format!("reading {}: {e}", path.display()))
    };
    let mut file = File::open(path).map_err(|e| unavailable(&e))?;
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
