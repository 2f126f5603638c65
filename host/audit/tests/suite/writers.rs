//! One writer at a time, across processes: the log's lock refuses a second opener, a
//! waiting opener gets its turn, and writer processes that take turns leave one chain.

use std::process::{Command, Stdio};
use std::time::Duration;

use bx_audit::{AuditError, AuditLog, verify};

use super::*;

#[test]
fn a_second_writer_is_refused_with_its_runbook_entry() {
    let dir = tempfile::tempdir().unwrap();
    let first = AuditLog::open(dir.path()).unwrap();
    let err = AuditLog::open(dir.path()).unwrap_err();
    assert!(matches!(err, AuditError::Locked(_)), "{err:?}");
    assert_eq!(err.runbook(), Some("docs/runbook.md#audit-locked"), "{err}");
    // A waiting opener gets the log once the first lets go.
    let waiter = std::thread::scope(|s| {
        let waiting = s.spawn(|| AuditLog::open_waiting(dir.path(), Duration::from_secs(60)));
        first.append(&note("s", "first")).unwrap();
        first.close().unwrap();
        waiting.join().unwrap()
    });
    let log = waiter.unwrap();
    assert_eq!(log.append(&note("s", "second")).unwrap().seq, 2);
    log.close().unwrap();
    assert!(verify(dir.path()).unwrap().is_clean());
}

/// One child: opens the log (waiting its turn), appends one record, closes; `n` times.
#[test]
fn child_taking_turns() {
    let Ok(dir) = std::env::var("BX_AUDIT_TURNS") else { return };
    let who = std::process::id().to_string();
    for i in 0..25 {
        let log =
            AuditLog::open_waiting(std::path::Path::new(&dir), Duration::from_secs(120)).unwrap();
        log.append(&note(&who, &i.to_string())).unwrap();
        log.close().unwrap();
    }
}

/// Regression: four `bx tool run` loops of 50 calls at once left 172 duplicated `seq`
/// values. Four processes that each open, append and close 25 times leave one chain.
#[test]
fn writer_processes_taking_turns_leave_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "suite::writers::child_taking_turns", "--test-threads=1"])
                .env("BX_AUDIT_TURNS", dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.records, 100);
    assert_eq!(report.head.map(|h| h.0), Some(100));
    assert_eq!(report.sessions.len(), 4);
}
