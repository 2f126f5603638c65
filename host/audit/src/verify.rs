//! `verify`: walk every day file, check every record and the chain between them, compare
//! the head with the checkpoint, and report what was found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::error::AuditError;
use crate::log::{AuditLog, Checkpoint, checkpoint_path, day_files};
use crate::record::{GENESIS, Kind, line_hash};

/// Something wrong in the log. Problems listed in an accepted break record are reported
/// as accepted, not as problems.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    /// `parse`, `seq`, `chain`, `torn-tail`, `truncated`, `checkpoint`, `break-record`.
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
    /// Call ids with a request and no result.
    pub calls_without_result: Vec<String>,
    /// Accepted breaks.
    pub breaks: Vec<Break>,
    /// `recovered` records: where a torn line was found and where it was moved.
    pub recovered: Vec<serde_json::Value>,
    /// Problems not accepted by any break record.
    pub problems: Vec<Problem>,
}

impl Report {
    /// True when nothing is wrong (accepted breaks and recovered regions are not wrong).
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// A record as verify reads it: borrowed, with `fields` left unparsed until needed, so a
/// walk over a large log does not build a map per record.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordRef<'a> {
    seq: u64,
    #[serde(borrow)]
    #[allow(dead_code, reason = "parsed to check it is there and a string")]
    time: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    prev: std::borrow::Cow<'a, str>,
    kind: Kind,
    #[serde(borrow)]
    fields: &'a serde_json::value::RawValue,
}

/// The two fields verify reports on, read without building the rest.
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    session: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    call: Option<std::borrow::Cow<'a, str>>,
}

fn parse_ref(line: &[u8]) -> Result<RecordRef<'_>, String> {
    let record: RecordRef<'_> = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if !record.fields.get().starts_with('{') {
        return Err("fields is not an object".into());
    }
    Ok(record)
}

fn fields_map(raw: &serde_json::value::RawValue) -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_str(raw.get()).unwrap_or_default()
}

fn problem(kind: &str, file: &str, line: u64, detail: String) -> Problem {
    Problem { kind: kind.to_owned(), file: file.to_owned(), line, detail }
}

/// Kinds of problem that live in immutable history and must still be there when a break
/// record that accepted them is read again.
const HISTORICAL: &[&str] = &["parse", "seq", "chain"];

/// Verifies the whole log in `dir`.
pub fn verify(dir: &Path) -> Result<Report, AuditError> {
    let mut report = Report::default();
    let mut found = Vec::new();
    let mut break_records: Vec<(u64, String, u64, serde_json::Map<String, serde_json::Value>)> =
        Vec::new();
    let mut open_calls: BTreeMap<String, u64> = BTreeMap::new();
    let mut hashes_at: BTreeMap<u64, String> = BTreeMap::new();
    let checkpoint = read_checkpoint(dir, &mut found);
    report.checkpoint = checkpoint.as_ref().map(|c| (c.seq, c.hash.clone()));

    let mut expected_seq = 1u64;
    let mut prev = GENESIS.to_owned();
    for path in day_files(dir)? {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        report.files.push(name.clone());
        let bytes = std::fs::read(&path).map_err(|e| AuditError::io(&path, e))?;
        let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        let tail = lines.pop().unwrap_or_default();
        if !tail.is_empty() {
            let detail = format!(
                "{} bytes after the last newline (a torn append; the next open recovers it)",
                tail.len()
            );
            found.push(problem("torn-tail", &name, lines.len() as u64 + 1, detail));
        }
        for (i, line) in lines.iter().enumerate() {
            let lineno = i as u64 + 1;
            let hash = line_hash(line);
            report.records += 1;
            let record = match parse_ref(line) {
                Ok(r) => r,
                Err(e) => {
                    found.push(problem(
                        "parse",
                        &name,
                        lineno,
                        format!("record {expected_seq}: {e}"),
                    ));
                    prev = hash;
                    expected_seq += 1;
                    continue;
                }
            };
            if record.seq != expected_seq {
                found.push(problem(
                    "seq",
                    &name,
                    lineno,
                    format!("expected seq {expected_seq}, found {}", record.seq),
                ));
            }
            if record.prev != prev {
                let detail = format!(
                    "seq {}: prev is {}, the previous record hashes to {prev}",
                    record.seq, record.prev
                );
                found.push(problem("chain", &name, lineno, detail));
            }
            let peek: Peek<'_> = serde_json::from_str(record.fields.get())
                .unwrap_or(Peek { session: None, call: None });
            if let Some(session) = &peek.session
                && !report.sessions.contains(session.as_ref())
            {
                report.sessions.insert(session.clone().into_owned());
            }
            match (record.kind, peek.call) {
                (Kind::Request, Some(call)) => {
                    open_calls.insert(call.into_owned(), record.seq);
                }
                (Kind::Result, Some(call)) => {
                    open_calls.remove(call.as_ref());
                }
                (Kind::Recovered, _) => {
                    report.recovered.push(serde_json::Value::Object(fields_map(record.fields)))
                }
                (Kind::Break, _) => break_records.push((
                    record.seq,
                    name.clone(),
                    lineno,
                    fields_map(record.fields),
                )),
                _ => {}
            }
            if checkpoint.as_ref().is_some_and(|c| c.seq == record.seq) {
                hashes_at.insert(record.seq, hash.clone());
            }
            report.head = Some((record.seq, hash.clone()));
            prev = hash;
            expected_seq = record.seq + 1;
        }
    }
    report.calls_without_result = open_calls.into_keys().collect();

    if let Some(cp) = &checkpoint {
        let head_seq = report.head.as_ref().map_or(0, |h| h.0);
        if head_seq < cp.seq {
            let detail = format!(
                "the log ends at seq {head_seq} but the checkpoint recorded seq {}: records were cut off",
                cp.seq
            );
            found.push(problem("truncated", "checkpoint.json", 0, detail));
        } else if hashes_at.get(&cp.seq) != Some(&cp.hash) {
            let detail = format!("record {} does not hash to the checkpoint's {}", cp.seq, cp.hash);
            found.push(problem("checkpoint", "checkpoint.json", 0, detail));
        }
    }

    // Resolve problems against break records; a break record must describe problems
    // that really are in the history, or it is a problem itself.
    let mut accepted: BTreeSet<Problem> = BTreeSet::new();
    for (seq, file, line, fields) in &break_records {
        let listed: Result<Vec<Problem>, String> = fields
            .get("problems")
            .cloned()
            .ok_or_else(|| "no problems field".to_owned())
            .and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string()));
        match listed {
            Ok(listed) => {
                for p in &listed {
                    if HISTORICAL.contains(&p.kind.as_str()) && !found.contains(p) {
                        let detail = format!(
                            "break record {seq} accepts a problem the log does not have: {} at {}:{}",
                            p.kind, p.file, p.line
                        );
                        found.push(problem("break-record", file, *line, detail));
                    }
                }
                accepted.extend(listed.iter().cloned());
                report.breaks.push(Break { seq: *seq, accepted: listed });
            }
            Err(e) => found.push(problem(
                "break-record",
                file,
                *line,
                format!("break record {seq} is malformed: {e}"),
            )),
        }
    }
    report.problems = found.into_iter().filter(|p| !accepted.contains(p)).collect();
    Ok(report)
}

fn read_checkpoint(dir: &Path, found: &mut Vec<Problem>) -> Option<Checkpoint> {
    let path = checkpoint_path(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            found.push(problem("checkpoint", "checkpoint.json", 0, format!("unreadable: {e}")));
            return None;
        }
    };
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
/// the history is still exactly as recorded. Refuses when the log has no problem.
pub fn accept_break(dir: &Path, reason: &str) -> Result<(Report, u64), AuditError> {
    let report = verify(dir)?;
    if report.is_clean() {
        return Err(AuditError::NothingToAccept("the log verifies clean".into()));
    }
    let log = AuditLog::open(dir)?;
    let mut fields = serde_json::Map::new();
    fields.insert("reason".into(), reason.into());
    fields.insert("problems".into(), serde_json::to_value(&report.problems).unwrap_or_default());
    let receipt = log.append(Kind::Break, fields)?;
    log.close()?;
    Ok((report, receipt.seq))
}
