//! Appending, the chain, day rollover, recovery of a torn line, group commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bx_audit::{AuditLog, Lacks, OpenCall, Record, line_hash, verify};

use super::*;

#[test]
fn appends_chain_and_verify_clean() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.records, 6);
    assert_eq!(report.sessions.iter().collect::<Vec<_>>(), vec!["s1"]);
    assert!(report.calls_without_result.is_empty());
    assert_eq!(report.head.as_ref().map(|h| h.0), Some(6));
    assert_eq!(report.checkpoint, report.head);
    // Each record's prev is the hash of the line before it.
    let file = &report.files[0];
    let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.windows(2) {
        assert_eq!(Record::parse(pair[1]).unwrap().prev, line_hash(pair[0].as_bytes()));
    }
}

#[test]
fn reports_calls_without_result() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    log.append(&request("s2", "dangling", "{}")).unwrap();
    log.append(&decision("s2", "dangling", Verdict::Allow)).unwrap();
    log.close().unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean());
    let open =
        OpenCall { call: "dangling".into(), session: "s2".into(), seq: 1, lacks: Lacks::Result };
    assert_eq!(report.calls_without_result, vec![open]);
}

#[test]
fn reopening_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let log = AuditLog::open(dir.path()).unwrap();
    assert_eq!(log.head().seq, 6);
    assert_eq!(log.append(&note("s1", "")).unwrap().seq, 7);
    log.close().unwrap();
    assert!(verify(dir.path()).unwrap().is_clean());
}

#[test]
fn rolls_over_at_utc_midnight_and_never_writes_an_earlier_day() {
    let dir = tempfile::tempdir().unwrap();
    let now = Arc::new(AtomicU64::new(BEFORE_MIDNIGHT));
    let log =
        AuditLog::open_with_clock(dir.path(), Box::new(ManualClock(Arc::clone(&now)))).unwrap();
    log.append(&note("s", "1")).unwrap();
    now.fetch_add(2_000, Ordering::SeqCst); // 00:00:01 the next day
    log.append(&note("s", "2")).unwrap();
    now.fetch_sub(10_000, Ordering::SeqCst); // the clock steps back over midnight
    log.append(&note("s", "3")).unwrap();
    log.close().unwrap();
    let day1 = std::fs::read_to_string(dir.path().join("2026-11-29.jsonl")).unwrap();
    let day2 = std::fs::read_to_string(dir.path().join("2026-11-30.jsonl")).unwrap();
    assert_eq!((day1.lines().count(), day2.lines().count()), (1, 2));
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.files, vec!["2026-11-29.jsonl".to_owned(), "2026-11-30.jsonl".to_owned()]);
}

#[test]
fn torn_last_line_is_moved_aside_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let file = verify(dir.path()).unwrap().files[0].clone();
    let path = dir.path().join(&file);
    let mut bytes = std::fs::read(&path).unwrap();
    let good_len = bytes.len();
    let torn_bytes: &[u8] = br#"{"seq":7,"time":"2026-11-"#;
    bytes.extend_from_slice(torn_bytes);
    std::fs::write(&path, &bytes).unwrap();
    // Before reopening, verify names the torn tail.
    let torn = verify(dir.path()).unwrap();
    assert_eq!(
        torn.problems.iter().map(|p| p.kind.as_str()).collect::<Vec<_>>(),
        vec!["torn-tail"]
    );

    let log = AuditLog::open(dir.path()).unwrap();
    assert_eq!(log.head().seq, 7, "the recovered record is seq 7");
    log.append(&note("s", "after recovery")).unwrap();
    log.close().unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.recovered.len(), 1);
    let rec = &report.recovered[0];
    assert_eq!(rec.offset, good_len as u64);
    assert_eq!(rec.bytes, torn_bytes.len() as u64);
    let aside = dir.path().join(&rec.moved_to);
    assert_eq!(std::fs::read(aside).unwrap(), torn_bytes);
}

#[test]
fn concurrent_appends_all_land_in_one_unbroken_chain() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(AuditLog::open(dir.path()).unwrap());
    let mut receipts: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let log = Arc::clone(&log);
                s.spawn(move || {
                    (0..50)
                        .map(|i| log.append(&note(&t.to_string(), &i.to_string())).unwrap().seq)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    receipts.sort_unstable();
    assert_eq!(receipts, (1..=400).collect::<Vec<u64>>());
    Arc::try_unwrap(log).unwrap().close().unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.records, 400);
}

#[test]
fn closing_an_empty_log_leaves_it_verifiable() {
    // A daemon that stopped before recording anything used to write a checkpoint of
    // "record 0", which verify then reported as a problem.
    let dir = tempfile::tempdir().unwrap();
    AuditLog::open(dir.path()).unwrap().close().unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!((report.records, report.checkpoint), (0, None));
}
