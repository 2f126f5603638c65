//! Helpers shared by the audit tests.

mod anchor;
mod bounds;
mod chain;
mod crash;
mod faults;
mod fixtures;
mod interop;
mod resign;
mod tamper;
mod writers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bx_audit::{AuditLog, CallStatus, Clock, Decision, Entry, Outcome, Request, Session, Verdict};

/// A request record of `call` in `session`, with `args` as its arguments.
pub fn request(session: &str, call: &str, args: &str) -> Entry {
    Entry::Request(Request::new(session, call, "fs.read", "sha256:00", args, vec![]))
}

/// A decision record.
pub fn decision(session: &str, call: &str, decision: Verdict) -> Entry {
    Entry::Decision(Decision {
        session: session.into(),
        call: call.into(),
        decision,
        taint: "public/trusted".into(),
        why: String::new(),
        approval: None,
        covered_by: None,
        voided: None,
    })
}

/// A result record.
pub fn result(session: &str, call: &str) -> Entry {
    Entry::Result(Outcome {
        session: session.into(),
        call: call.into(),
        status: CallStatus::Ok,
        label: "public/trusted".into(),
        touched: vec![],
        touched_more: 0,
        output_sha256: Some(String::new()),
        output_bytes: Some(0),
        error: None,
        refused: vec![],
        secrets: vec![],
        leaks: vec![],
    })
}

/// A session record with `detail`.
pub fn note(session: &str, detail: &str) -> Entry {
    Entry::Session(Session {
        session: session.into(),
        call: None,
        event: "note".into(),
        detail: detail.into(),
        taint: None,
    })
}

/// A clock the test moves by hand (milliseconds since the epoch).
pub struct ManualClock(pub std::sync::Arc<AtomicU64>);

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0.load(Ordering::SeqCst))
    }
}

/// 2026-11-29T23:59:59Z in milliseconds.
pub const BEFORE_MIDNIGHT: u64 = 1_795_996_799_000;

/// Writes a small session: two calls, each with request, decision and result.
pub fn small_log(dir: &std::path::Path) {
    let log = AuditLog::open(dir).unwrap();
    for call in ["c1", "c2"] {
        log.append(&request("s1", call, "{}")).unwrap();
        log.append(&decision("s1", call, Verdict::Allow)).unwrap();
        log.append(&result("s1", call)).unwrap();
    }
    log.close().unwrap();
}
