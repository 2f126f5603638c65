//! `verify`: walk every day file, check every record (its line, its fields against its
//! kind, its time) and the chain between them, compare the head with the checkpoint,
//! check what recovery moved aside, and report what was found. Reading is streamed and
//! every list is bounded, so a hostile log cannot make verify take unbounded memory.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};

use crate::anchored::{Against, AnchorReport, Check, Place};
use crate::entry::{Break as BreakEntry, Entry, MAX_RECORD_BYTES, Settled, Verdict};
use crate::error::AuditError;
use crate::log::{AuditLog, Checkpoint, checkpoint_path, day_files};
use crate::record::{GENESIS, Kind, line_hash};
use crate::time::{is_valid_day, is_valid_time};
use crate::tree::{Hash, leaf_hash};

/// Problems listed at most (1,000); past that only a count is kept. Without a bound a
/// file of blank lines made verify build millions of entries.
pub const MAX_PROBLEMS: usize = 1000;
/// Open calls, breaks and recovered regions listed at most, for the same reason.
const MAX_LISTED: usize = 10_000;

/// Something wrong in the log. Problems listed in an accepted break record are reported
/// as accepted, not as problems.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    /// `parse`, `oversize`, `fields`, `time`, `seq`, `chain`, `torn-tail`, `stray-file`,
    /// `recovered`, `truncated`, `checkpoint`, `break-record`.
    pub kind: String,
    /// The day file, or `checkpoint.json`.
    pub file: String,
    /// 1-based line in that file (0 when the problem is not on a line).
    pub line: u64,
    /// What is wrong, with the values that disagree.
    pub detail: String,
}

/// A break the owner accepted, as found on this run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Break {
    /// Sequence number of the `break` record.
    pub seq: u64,
    /// The problems it accepted.
    pub accepted: Vec<Problem>,
}

/// What a call left open lacks: the first record of its sequence that is not in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lacks {
    /// Its request is there and no decision: cut off before the decision was on disk
    /// (the request is written without its own sync; see docs/audit.md). The call
    /// never ran.
    Decision,
    /// It was asked about and the owner's answer (or its expiry) is not there.
    Answer,
    /// It was allowed (by the broker or the owner) and no result is there: it may have
    /// run.
    Result,
}

/// A call whose request has no result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OpenCall {
    /// The call's id.
    pub call: String,
    /// Its session.
    pub session: String,
    /// The sequence number of its request record.
    pub seq: u64,
    /// What it lacks.
    pub lacks: Lacks,
}

/// What `verify` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Day files walked, oldest first.
    pub files: Vec<String>,
    /// Records read.
    pub records: u64,
    /// Sequence number and hash of the last record.
    pub head: Option<(u64, String)>,
    /// The checkpoint, when there is one.
    pub checkpoint: Option<(u64, String)>,
    /// Session ids seen in records.
    pub sessions: BTreeSet<String>,
    /// Every call whose request has no result, in the order of the requests, with what
    /// it lacks: what a crash (or a refusal that was never recorded) left open.
    pub calls_without_result: Vec<OpenCall>,
    /// Calls that were refused (by the broker, the owner, or before either was asked):
    /// complete without a result.
    pub calls_denied: u64,
    /// Accepted breaks.
    pub breaks: Vec<Break>,
    /// `recovered` records: where a torn line was found and where it was moved.
    pub recovered: Vec<crate::entry::Recovered>,
    /// Problems not accepted by any break record (at most [`MAX_PROBLEMS`]).
    pub problems: Vec<Problem>,
    /// Problems found beyond those listed.
    pub problems_more: u64,
    /// Whether signed checkpoints kept off the host vouch for the log. A log that only
    /// agrees with itself is `unanchored`: its own files could have been rewritten whole.
    pub anchor: AnchorReport,
}

impl Report {
    /// True when nothing is wrong (accepted breaks and recovered regions are not wrong).
    /// An unanchored log can be clean; say so with [`Report::anchor`].
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.problems_more == 0
    }
}

/// The envelope of a record as verify reads it: borrowed, with `fields` left as text
/// until its kind's struct reads it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordRef<'a> {
    seq: u64,
    #[serde(borrow)]
    time: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    prev: std::borrow::Cow<'a, str>,
    kind: Kind,
    #[serde(borrow)]
    fields: &'a serde_json::value::RawValue,
}

fn problem(kind: &str, file: &str, line: u64, detail: String) -> Problem {
    Problem { kind: kind.to_owned(), file: file.to_owned(), line, detail }
}

/// Kinds of problem that live in immutable history and must still be there when a break
/// record that accepted them is read again.
const HISTORICAL: &[&str] = &["parse", "oversize", "fields", "time", "seq", "chain"];

/// Where each call stands as the walk goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Requested, not yet decided.
    Requested,
    /// Allowed (directly or by the owner's approval): a result must follow.
    Allowed,
    /// Waiting for the owner.
    Asked,
}

/// Ended calls remembered, to find a result that follows a refusal or another result
/// (a few MiB at most; a duplicate further back than this is not seen).
const MAX_ENDED: usize = 100_000;

/// How a call ended, for the order of what follows it.
#[derive(Debug, Clone, Copy)]
enum Ended {
    /// Refused by the broker or the owner.
    Refused,
    /// Its result is on the log.
    Ran,
}

struct Walk {
    report: Report,
    found: Vec<Problem>,
    found_more: u64,
    breaks: Vec<(u64, String, u64, BreakEntry)>,
    /// Calls with a request and no result yet: their session, request seq and stage.
    calls: BTreeMap<String, (String, u64, Stage)>,
    /// The latest calls that ended (refused, or with their result), and how: a result for
    /// one is a problem. At most [`MAX_ENDED`], the oldest let go first.
    ended: HashMap<String, Ended>,
    ended_order: VecDeque<String>,
    checkpoint: Option<Checkpoint>,
    checkpoint_hash: Option<String>,
    expected_seq: u64,
    prev: String,
    anchor: Option<Check>,
}

impl Walk {
    fn push(&mut self, p: Problem) {
        if self.found.len() < MAX_PROBLEMS {
            self.found.push(p);
        } else {
            self.found_more += 1;
        }
    }

    fn anchor_leaf(&mut self, leaf: Hash, name: &str, lineno: u64, seq: Option<u64>) {
        if let Some(check) = &mut self.anchor {
            check.leaf(leaf, || Place { file: name.to_owned(), line: lineno, seq });
        }
    }

    fn line(&mut self, dir: &Path, name: &str, lineno: u64, line: &[u8]) {
        let hash = line_hash(line);
        self.report.records += 1;
        let parsed = serde_json::from_slice::<RecordRef<'_>>(line);
        if self.anchor.is_some() {
            let seq = parsed.as_ref().ok().map(|r| r.seq);
            self.anchor_leaf(leaf_hash(line), name, lineno, seq);
        }
        let record = match parsed {
            Ok(r) => r,
            Err(e) => {
                let seq = self.expected_seq;
                self.push(problem("parse", name, lineno, format!("record {seq}: {e}")));
                self.prev = hash;
                self.expected_seq += 1;
                return;
            }
        };
        if record.seq != self.expected_seq {
            let detail = format!("expected seq {}, found {}", self.expected_seq, record.seq);
            self.push(problem("seq", name, lineno, detail));
        }
        if record.prev != self.prev {
            let detail = format!(
                "seq {}: prev is {}, the previous record hashes to {}",
                record.seq, record.prev, self.prev
            );
            self.push(problem("chain", name, lineno, detail));
        }
        if !is_valid_time(&record.time) {
            let detail = format!(
                "seq {}: time {:?} is not an RFC 3339 UTC instant",
                record.seq, record.time
            );
            self.push(problem("time", name, lineno, detail));
        }
        match Entry::parse(record.kind, record.fields.get()) {
            Ok(entry) => self.entry(dir, name, lineno, record.seq, entry),
            Err(e) => {
                let detail =
                    format!("seq {}: fields of a {:?} record: {e}", record.seq, record.kind);
                self.push(problem("fields", name, lineno, detail));
            }
        }
        if self.checkpoint.as_ref().is_some_and(|c| c.seq == record.seq) {
            self.checkpoint_hash = Some(hash.clone());
        }
        self.report.head = Some((record.seq, hash.clone()));
        self.prev = hash;
        self.expected_seq = record.seq + 1;
    }

    fn entry(&mut self, dir: &Path, name: &str, lineno: u64, seq: u64, entry: Entry) {
        if let Some(session) = entry.session()
            && !self.report.sessions.contains(session)
            && self.report.sessions.len() < MAX_LISTED
        {
            self.report.sessions.insert(session.to_owned());
        }
        match entry {
            Entry::Request(r) => {
                if self.calls.len() < MAX_LISTED {
                    self.calls.insert(r.call, (r.session, seq, Stage::Requested));
                }
            }
            // A value other than these never reaches here: the record's fields do not
            // parse, and it is a `fields` problem of that record, not a denial.
            Entry::Decision(d) => match d.decision {
                Verdict::Allow => self.set(&d.call, Stage::Allowed),
                Verdict::Ask => self.set(&d.call, Stage::Asked),
                Verdict::Deny => self.denied(&d.call),
            },
            Entry::Approval(a) => match a.decision {
                Settled::Allow => self.set(&a.call, Stage::Allowed),
                Settled::Deny => self.denied(&a.call),
            },
            Entry::Result(r) => {
                // A call runs only once a decision (or the owner's answer) allowed it.
                let why = match self.calls.remove(&r.call) {
                    Some((_, _, Stage::Allowed)) => None,
                    Some((_, _, Stage::Requested)) => Some("before any decision on it"),
                    Some((_, _, Stage::Asked)) => Some("while it waited for the owner's answer"),
                    None => match self.ended.get(&r.call) {
                        Some(Ended::Refused) => Some("after it was refused"),
                        Some(Ended::Ran) => Some("after its result"),
                        None => None,
                    },
                };
                self.end(&r.call, Ended::Ran);
                if let Some(why) = why {
                    let detail = format!(
                        "seq {seq}: the result of call {} comes {why}",
                        crate::bounded(&r.call, 200)
                    );
                    self.push(problem("order", name, lineno, detail));
                }
            }
            Entry::Session(_) | Entry::ExportFailed(_) | Entry::Tool(_) => {}
            Entry::Recovered(r) => {
                self.check_recovered(dir, name, lineno, &r);
                if self.report.recovered.len() < MAX_LISTED {
                    self.report.recovered.push(r);
                }
            }
            Entry::Break(b) => {
                if self.breaks.len() < MAX_LISTED {
                    self.breaks.push((seq, name.to_owned(), lineno, b));
                }
            }
        }
    }

    fn set(&mut self, call: &str, stage: Stage) {
        if let Some((_, _, s)) = self.calls.get_mut(call) {
            *s = stage;
        }
    }

    fn end(&mut self, call: &str, how: Ended) {
        if self.ended.contains_key(call) {
            return;
        }
        if self.ended_order.len() >= MAX_ENDED
            && let Some(oldest) = self.ended_order.pop_front()
        {
            self.ended.remove(&oldest);
        }
        self.ended.insert(call.to_owned(), how);
        self.ended_order.push_back(call.to_owned());
    }

    fn denied(&mut self, call: &str) {
        if self.calls.remove(call).is_some() {
            self.report.calls_denied += 1;
            self.end(call, Ended::Refused);
        }
    }

    /// The bytes recovery moved aside must still be there, exactly as recorded.
    fn check_recovered(
        &mut self,
        dir: &Path,
        name: &str,
        lineno: u64,
        r: &crate::entry::Recovered,
    ) {
        let bad =
            |why: String| problem("recovered", name, lineno, format!("{}: {why}", r.moved_to));
        let rel = Path::new(&r.moved_to);
        let inside = rel.components().count() == 2 && rel.starts_with("recovered");
        if !inside {
            self.push(bad("not a file under recovered/".into()));
            return;
        }
        let mut data = Vec::new();
        let read = crate::file::open_read(&dir.join(rel))
            .and_then(|f| f.take(MAX_TAIL_CHECK).read_to_end(&mut data));
        match read {
            Err(e) => self.push(bad(format!("cannot be read ({e})"))),
            Ok(_) if data.len() as u64 != r.bytes || line_hash(&data) != r.sha256 => {
                self.push(bad(format!(
                    "holds {} bytes hashing to {}, the record says {} bytes hashing to {}",
                    data.len(),
                    line_hash(&data),
                    r.bytes,
                    r.sha256
                )))
            }
            Ok(_) => {}
        }
    }
}

/// The most bytes of a moved-aside tail read back (the writer moves at most 64 MiB).
const MAX_TAIL_CHECK: u64 = (64 << 20) + 1;

/// One line of a day file, read in bounded memory.
pub(crate) enum Line {
    /// A whole line (without its newline) in `buf`.
    Whole,
    /// Bytes after the last newline, in `buf`: a torn append.
    Torn,
    /// A line longer than any record: its length, its hash and its leaf hash (without
    /// the newline), read as it streamed past.
    Oversize(u64, String, Hash),
    /// The end of the file.
    End,
}

/// Reads the next line of `reader` into `buf`, never holding more than one record's
/// bound of it.
pub(crate) fn next_line(
    reader: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    path: &Path,
) -> Result<Line, AuditError> {
    use sha2::Digest as _;
    buf.clear();
    let io = |e| AuditError::io(path, e);
    let n = reader.take(MAX_RECORD_BYTES as u64 + 2).read_until(b'\n', buf).map_err(io)?;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Line::Whole);
    }
    if buf.len() <= MAX_RECORD_BYTES {
        return Ok(Line::Torn);
    }
    let mut hasher = sha2::Sha256::new();
    let mut leaf = sha2::Sha256::new();
    leaf.update([0u8]);
    hasher.update(&buf);
    leaf.update(&buf);
    let mut length = buf.len() as u64;
    let mut more = Vec::new();
    loop {
        more.clear();
        let m = reader.take(1 << 20).read_until(b'\n', &mut more).map_err(io)?;
        let body = more.strip_suffix(b"\n").unwrap_or(&more);
        hasher.update(body);
        leaf.update(body);
        length += body.len() as u64;
        if m == 0 || more.last() == Some(&b'\n') {
            let leaf = Hash(leaf.finalize().into());
            return Ok(Line::Oversize(length, hex::encode(hasher.finalize()), leaf));
        }
    }
}

/// Calls `each` with every complete line of `reader` (without its newline), in bounded
/// memory; a line over the record bound comes as its leaf hash only. Stops at a torn
/// last line, which is no record.
pub(crate) fn each_leaf(
    reader: &mut impl std::io::BufRead,
    path: &Path,
    mut each: impl FnMut(Hash),
) -> Result<(), AuditError> {
    let mut buf = Vec::new();
    loop {
        match next_line(reader, &mut buf, path)? {
            Line::End | Line::Torn => return Ok(()),
            Line::Whole => each(leaf_hash(&buf)),
            Line::Oversize(_, _, leaf) => each(leaf),
        }
    }
}

/// Verifies the whole log in `dir`, on its own: the report says `unanchored`.
pub fn verify(dir: &Path) -> Result<Report, AuditError> {
    verify_against(dir, &Against::default())
}

/// Verifies the whole log in `dir`, and against the signed checkpoints `against` names:
/// each signature, then the log's tree at each checkpoint's size.
pub fn verify_against(dir: &Path, against: &Against) -> Result<Report, AuditError> {
    let mut found_early = Vec::new();
    let checkpoint = read_checkpoint(dir, &mut found_early);
    let mut walk = Walk {
        report: Report {
            checkpoint: checkpoint.as_ref().map(|c| (c.seq, c.hash.clone())),
            ..Report::default()
        },
        found: Vec::new(),
        found_more: 0,
        breaks: Vec::new(),
        calls: BTreeMap::new(),
        ended: HashMap::new(),
        ended_order: VecDeque::new(),
        checkpoint,
        checkpoint_hash: None,
        expected_seq: 1,
        prev: GENESIS.to_owned(),
        anchor: Check::new(against),
    };
    for p in found_early {
        walk.push(p);
    }
    for stray in stray_files(dir)? {
        let detail = format!(
            "{stray} looks like a day file but {} is not a real day; the writer never makes it",
            stray.trim_end_matches(".jsonl")
        );
        walk.push(problem("stray-file", &stray, 0, detail));
    }
    for path in day_files(dir)? {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        walk.report.files.push(name.clone());
        let file = crate::file::open_read(&path).map_err(|e| AuditError::io(&path, e))?;
        let mut reader = BufReader::new(file);
        let mut lineno = 0u64;
        let mut buf = Vec::new();
        loop {
            let line = next_line(&mut reader, &mut buf, &path)?;
            lineno += 1;
            match line {
                Line::End => break,
                Line::Whole => walk.line(dir, &name, lineno, &buf),
                Line::Torn => {
                    let detail = format!(
                        "{} bytes after the last newline (a torn append; the next open recovers it)",
                        buf.len()
                    );
                    walk.push(problem("torn-tail", &name, lineno, detail));
                    break;
                }
                Line::Oversize(length, hash, leaf) => {
                    walk.anchor_leaf(leaf, &name, lineno, None);
                    // The chain is followed through it by its hash.
                    let detail =
                        format!("a line of {length} bytes; records are at most {MAX_RECORD_BYTES}");
                    walk.push(problem("oversize", &name, lineno, detail));
                    walk.report.records += 1;
                    walk.expected_seq += 1;
                    walk.prev = hash;
                }
            }
        }
    }
    let mut report = walk.report;
    let mut found = walk.found;
    match walk.anchor {
        Some(check) => {
            let (problems, anchor) = check.finish();
            found.extend(problems);
            report.anchor = anchor;
        }
        None => report.anchor.state = "unanchored".into(),
    }
    let mut found_more = walk.found_more;
    // Every request without a result, whatever stage it reached: a request cut off
    // before its decision is as open as an allowed call without its result.
    let mut open: Vec<OpenCall> = walk
        .calls
        .into_iter()
        .map(|(call, (session, seq, stage))| OpenCall {
            call,
            session,
            seq,
            lacks: match stage {
                Stage::Requested => Lacks::Decision,
                Stage::Asked => Lacks::Answer,
                Stage::Allowed => Lacks::Result,
            },
        })
        .collect();
    open.sort_by_key(|c| c.seq);
    report.calls_without_result = open;

    if let Some(cp) = &walk.checkpoint {
        let head_seq = report.head.as_ref().map_or(0, |h| h.0);
        if head_seq < cp.seq {
            let detail = format!(
                "the log ends at seq {head_seq} but the checkpoint recorded seq {}: records were cut off",
                cp.seq
            );
            found.push(problem("truncated", "checkpoint.json", 0, detail));
        } else if walk.checkpoint_hash.as_ref() != Some(&cp.hash) {
            let detail = format!("record {} does not hash to the checkpoint's {}", cp.seq, cp.hash);
            found.push(problem("checkpoint", "checkpoint.json", 0, detail));
        }
    }

    // Resolve problems against break records; a break record must describe problems
    // that really are in the history, or it is a problem itself.
    let mut accepted: BTreeSet<Problem> = BTreeSet::new();
    for (seq, file, line, b) in walk.breaks {
        for p in &b.problems {
            if HISTORICAL.contains(&p.kind.as_str()) && !found.contains(p) {
                let detail = format!(
                    "break record {seq} accepts a problem the log does not have: {} at {}:{}",
                    p.kind, p.file, p.line
                );
                found.push(problem("break-record", &file, line, detail));
            }
        }
        accepted.extend(b.problems.iter().cloned());
        report.breaks.push(Break { seq, accepted: b.problems });
    }
    // A break accepts problems of the log itself, never one against the anchor: the
    // exported checkpoints are what the log was, whatever a record in it now says.
    found.retain(|p| p.kind.starts_with("anchor-") || !accepted.contains(p));
    if found.len() > MAX_PROBLEMS {
        found_more += (found.len() - MAX_PROBLEMS) as u64;
        found.truncate(MAX_PROBLEMS);
    }
    report.problems = found;
    report.problems_more = found_more;
    Ok(report)
}

/// `*.jsonl` files in `dir` that are not real days (`9999-99-99.jsonl`, `x.jsonl`).
fn stray_files(dir: &Path) -> Result<Vec<String>, AuditError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(AuditError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| AuditError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(day) = name.strip_suffix(".jsonl")
            && !is_valid_day(day)
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

fn read_checkpoint(dir: &Path, found: &mut Vec<Problem>) -> Option<Checkpoint> {
    let path = checkpoint_path(dir);
    let mut text = String::new();
    match crate::file::open_read(&path).and_then(|f| f.take(64 << 10).read_to_string(&mut text)) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            found.push(problem("checkpoint", "checkpoint.json", 0, format!("unreadable: {e}")));
            return None;
        }
    }
    match serde_json::from_str(&text) {
        Ok(cp) => Some(cp),
        Err(e) => {
            found.push(problem("checkpoint", "checkpoint.json", 0, format!("malformed: {e}")));
            None
        }
    }
}

/// Verifies the whole log, then appends a `break` record accepting exactly the problems
/// found (and writes a fresh checkpoint). Later runs check that each accepted problem in
/// the history is still exactly as recorded. Refuses when the log has no problem, or
/// more than can be listed.
pub fn accept_break(dir: &Path, reason: &str) -> Result<(Report, u64), AuditError> {
    let report = verify(dir)?;
    if report.is_clean() {
        return Err(AuditError::NothingToAccept(
            "the log's own chain and records verify clean (problems against the signed checkpoints, anchor-*, are never accepted: see docs/runbook.md#audit-broken)".into(),
        ));
    }
    if report.problems_more > 0 {
        return Err(AuditError::NothingToAccept(format!(
            "more than {MAX_PROBLEMS} problems; a break accepts a listed set, not this"
        )));
    }
    let log = AuditLog::open_for_break(dir)?;
    let entry = Entry::Break(BreakEntry {
        reason: crate::entry::bounded(reason, crate::entry::MAX_FIELD_BYTES),
        problems: report.problems.clone(),
    });
    let receipt = log.append(&entry)?;
    log.close()?;
    Ok((report, receipt.seq))
}

/// Calls `each` with the sequence number and typed entry of every record of the log in
/// `dir` that parses, oldest first, reading in bounded memory. This is for rebuilding
/// state from the log (session taint); it checks nothing: run [`verify`] for that.
pub fn for_each_entry(dir: &Path, each: impl FnMut(u64, Entry)) -> Result<(), AuditError> {
    for_each_entry_after(dir, None, each).map(|_| ())
}

/// A place in the log: just after one whole record (its day file, the byte offset after
/// its newline, where its line starts, its sequence number and the SHA-256 of its line).
/// State rebuilt from the log up to here can be kept with it, and a later scan resumes
/// here ([`for_each_entry_after`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Position {
    /// The day file's name (`YYYY-MM-DD.jsonl`).
    pub file: String,
    /// Where the record's line starts in it.
    pub line_start: u64,
    /// The byte offset just after the record's newline.
    pub offset: u64,
    /// The record's sequence number.
    pub seq: u64,
    /// SHA-256 (hex) of the record's line, without its newline.
    pub hash: String,
}

/// Where a scan began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumed {
    /// From the first record: no place was given.
    Start,
    /// Just after the place given.
    After(u64),
    /// From the first record, because the place given is not a record of this log
    /// (why): the log was cut, rewritten or moved since, or the place was edited.
    Mismatch(String),
}

/// Why a [`Position`] is not a whole record of the log.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PositionError {
    /// The file named is not a day file.
    #[error("{0:?} is not a day file's name")]
    NotADayFile(String),
    /// The byte range cannot hold a record's line.
    #[error("bytes {start}..{end} are not a record's line")]
    NotALine {
        /// Where the line would start.
        start: u64,
        /// Where it would end.
        end: u64,
    },
    /// The day file could not be read there.
    #[error("{}: {error}", path.display())]
    Io {
        /// The day file.
        path: PathBuf,
        /// The failure.
        error: std::io::Error,
    },
    /// The bytes there are not one whole line.
    #[error("{file} holds no whole line at bytes {start}..{end}")]
    NoWholeLine {
        /// The day file's name.
        file: String,
        /// Where the line would start.
        start: u64,
        /// Where it would end.
        end: u64,
    },
    /// The byte before is not the end of a line.
    #[error("byte {start} of {file} does not start a line")]
    NotLineStart {
        /// The day file's name.
        file: String,
        /// Where the line would start.
        start: u64,
    },
    /// The line there has another hash.
    #[error("record {seq} of {file} has another hash")]
    OtherHash {
        /// The sequence number named.
        seq: u64,
        /// The day file's name.
        file: String,
    },
    /// The record there has another sequence number.
    #[error("the record there is {found}, not {seq}")]
    OtherSeq {
        /// The one there.
        found: u64,
        /// The one named.
        seq: u64,
    },
    /// The line there is not a record.
    #[error("the record there does not parse: {0}")]
    Unparsable(serde_json::Error),
}

/// Whether `at` is a whole record of the log in `dir`: the bytes there are one line, of
/// that hash and sequence number. `Err` says why not.
fn check_position(dir: &Path, at: &Position) -> Result<(), PositionError> {
    use std::io::Seek as _;
    if !is_valid_day(at.file.trim_end_matches(".jsonl")) || !at.file.ends_with(".jsonl") {
        return Err(PositionError::NotADayFile(at.file.clone()));
    }
    let len = at
        .offset
        .checked_sub(at.line_start)
        .filter(|n| (2..=MAX_RECORD_BYTES as u64 + 1).contains(n));
    let Some(len) = len else {
        return Err(PositionError::NotALine { start: at.line_start, end: at.offset });
    };
    let path = dir.join(&at.file);
    let io = |error| PositionError::Io { path: path.clone(), error };
    let mut file = crate::file::open_read(&path).map_err(io)?;
    file.seek(std::io::SeekFrom::Start(at.line_start)).map_err(io)?;
    let mut line = Vec::new();
    (&mut file).take(len).read_to_end(&mut line).map_err(io)?;
    if line.len() as u64 != len || line.pop() != Some(b'\n') || line.contains(&b'\n') {
        return Err(PositionError::NoWholeLine {
            file: at.file.clone(),
            start: at.line_start,
            end: at.offset,
        });
    }
    if at.line_start > 0 {
        // The line must start a line: the byte before it ends the previous one.
        file.seek(std::io::SeekFrom::Start(at.line_start - 1)).map_err(io)?;
        let mut before = [0u8; 1];
        file.read_exact(&mut before).map_err(io)?;
        if before[0] != b'\n' {
            return Err(PositionError::NotLineStart {
                file: at.file.clone(),
                start: at.line_start,
            });
        }
    }
    if line_hash(&line) != at.hash {
        return Err(PositionError::OtherHash { seq: at.seq, file: at.file.clone() });
    }
    match serde_json::from_slice::<RecordRef<'_>>(&line) {
        Ok(r) if r.seq == at.seq => Ok(()),
        Ok(r) => Err(PositionError::OtherSeq { found: r.seq, seq: at.seq }),
        Err(e) => Err(PositionError::Unparsable(e)),
    }
}

/// [`for_each_entry`], from just after `from` when that is a record of this log, else
/// from the first record (saying why). Returns where it began and where it ended (the
/// last whole record read, or `from` when none came after it; `None` for an empty log).
pub fn for_each_entry_after(
    dir: &Path,
    from: Option<&Position>,
    mut each: impl FnMut(u64, Entry),
) -> Result<(Resumed, Option<Position>), AuditError> {
    let (resumed, start) = match from {
        None => (Resumed::Start, None),
        Some(at) => match check_position(dir, at) {
            Ok(()) => (Resumed::After(at.seq), Some(at)),
            Err(why) => (Resumed::Mismatch(why.to_string()), None),
        },
    };
    let mut end = start.cloned();
    for path in day_files(dir)? {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut offset = 0;
        if let Some(at) = start {
            match name.as_str().cmp(at.file.as_str()) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => offset = at.offset,
                std::cmp::Ordering::Greater => {}
            }
        }
        let mut file = crate::file::open_read(&path).map_err(|e| AuditError::io(&path, e))?;
        if offset > 0 {
            use std::io::Seek as _;
            file.seek(std::io::SeekFrom::Start(offset)).map_err(|e| AuditError::io(&path, e))?;
        }
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        loop {
            let line_start = offset;
            match next_line(&mut reader, &mut buf, &path)? {
                Line::End | Line::Torn => break,
                Line::Oversize(length, ..) => offset += length + 1,
                Line::Whole => {
                    offset += buf.len() as u64 + 1;
                    if let Ok(r) = serde_json::from_slice::<RecordRef<'_>>(&buf) {
                        end = Some(Position {
                            file: name.clone(),
                            line_start,
                            offset,
                            seq: r.seq,
                            hash: line_hash(&buf),
                        });
                        if let Ok(entry) = Entry::parse(r.kind, r.fields.get()) {
                            each(r.seq, entry);
                        }
                    }
                }
            }
        }
    }
    Ok((resumed, end))
}
