//! Helpers shared by the audit tests.

mod chain;
mod crash;
mod faults;
mod tamper;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bx_audit::{AuditLog, Clock, Kind};

pub fn fields(pairs: &[(&str, &str)]) -> serde_json::Map<String, serde_json::Value> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v))).collect()
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
        log.append(
            Kind::Request,
            fields(&[("session", "s1"), ("call", call), ("tool", "fs.read")]),
        )
        .unwrap();
        log.append(
            Kind::Decision,
            fields(&[("session", "s1"), ("call", call), ("decision", "allow")]),
        )
        .unwrap();
        log.append(Kind::Result, fields(&[("session", "s1"), ("call", call), ("output", "ok")]))
            .unwrap();
    }
    log.close().unwrap();
}
