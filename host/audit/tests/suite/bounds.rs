//! Bounds on what a record may hold and on what verify builds, and the things verify
//! must catch beyond the chain: stray day files, impossible times, moved-aside bytes
//! that were edited or deleted.

use bx_audit::{AuditError, AuditLog, Entry, MAX_RECORD_BYTES, Request, Session, verify};

use super::*;

fn kinds(report: &bx_audit::Report) -> Vec<&str> {
    report.problems.iter().map(|p| p.kind.as_str()).collect()
}

/// Regression: a 1.5 MiB error went whole into a record; the next open read only the
/// last 1 MiB and declared the log damaged while verify said it was intact. A record
/// over the bound is refused, the log stays available, and open and verify agree.
#[test]
fn an_oversize_record_is_refused_and_the_log_stays_available() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    let big = Entry::Session(Session {
        session: "s".into(),
        call: None,
        event: "note".into(),
        detail: "e".repeat(MAX_RECORD_BYTES),
        taint: None,
    });
    assert!(matches!(log.append(&big), Err(AuditError::TooLarge { .. })));
    assert!(log.failure().is_none());
    // Fields from outside are bounded before they reach a record.
    let r = Request::new("s", "c", "t", "", &"a".repeat(3 << 20), vec![]);
    assert_eq!(log.append(&Entry::Request(r)).unwrap().seq, 1);
    log.close().unwrap();
    assert!(verify(dir.path()).unwrap().is_clean());
    let reopened = AuditLog::open(dir.path()).unwrap();
    assert_eq!(reopened.head().seq, 1);
}

/// A line longer than any record (written by something other than bx) is reported by
/// verify, which reads it in bounded memory and follows the chain through it.
#[test]
fn verify_reports_an_oversize_line_and_follows_the_chain_past_it() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let file = last_day_file(dir.path());
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[2] = lines[2]
        .replace("\"fields\":{", &format!("\"fields\":{{\"pad\":\"{}\",", "p".repeat(2 << 20)));
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let report = verify(dir.path()).unwrap();
    assert_eq!(kinds(&report), vec!["oversize", "chain"]);
    assert_eq!(report.records, 6);
}

/// Regression: 3 MB of blank lines made verify --json list 3 million problems. The list
/// is capped and the rest counted.
#[test]
fn problems_are_capped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    append_to_log(dir.path(), &vec![b'\n'; 100_000]);
    let report = verify(dir.path()).unwrap();
    assert_eq!(report.problems.len(), bx_audit::MAX_PROBLEMS);
    assert!(report.problems_more > 98_000, "{}", report.problems_more);
    assert!(!report.is_clean());
}

/// Regression: day files named `9999-99-99.jsonl` or `x.jsonl` were accepted, and a
/// record time of `08:256:31` was not flagged.
#[test]
fn stray_day_files_and_impossible_times_are_problems() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    std::fs::write(dir.path().join("9999-99-99.jsonl"), "").unwrap();
    std::fs::write(dir.path().join("x.jsonl"), "").unwrap();
    let report = verify(dir.path()).unwrap();
    assert_eq!(kinds(&report), vec!["stray-file", "stray-file"]);

    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let file = last_day_file(dir.path());
    let text = std::fs::read_to_string(&file).unwrap();
    let last = text.lines().last().unwrap();
    let time = serde_json::from_str::<serde_json::Value>(last).unwrap()["time"]
        .as_str()
        .unwrap()
        .to_owned();
    let bad = format!("{}08:256:31Z", &time[..11]);
    std::fs::write(&file, text.replace(&time, &bad)).unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(kinds(&report).contains(&"time"), "{:?}", report.problems);
}

/// Regression: an edited or deleted `recovered/*.torn` went unnoticed.
#[test]
fn moved_aside_bytes_must_be_as_recorded() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    append_to_log(dir.path(), br#"{"seq":7,"ti"#);
    AuditLog::open(dir.path()).unwrap().close().unwrap();
    assert!(verify(dir.path()).unwrap().is_clean());
    let torn =
        std::fs::read_dir(dir.path().join("recovered")).unwrap().next().unwrap().unwrap().path();
    std::fs::write(&torn, b"{\"seq\":7,\"tX").unwrap();
    assert_eq!(kinds(&verify(dir.path()).unwrap()), vec!["recovered"]);
    std::fs::remove_file(&torn).unwrap();
    assert_eq!(kinds(&verify(dir.path()).unwrap()), vec!["recovered"]);
}

/// Fields that do not fit their kind's struct are a problem, even with the chain
/// intact (a record read back must be one that could have been written).
#[test]
fn fields_are_checked_against_their_kind() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    log.append(&request("s", "c1", "{}")).unwrap();
    log.close().unwrap();
    let file = last_day_file(dir.path());
    let text = std::fs::read_to_string(&file).unwrap();
    // Relabel the request as a result: the chain breaks too, but the fields problem
    // is what says what is wrong with the record itself.
    std::fs::write(&file, text.replace("\"kind\":\"request\"", "\"kind\":\"result\"")).unwrap();
    assert!(kinds(&verify(dir.path()).unwrap()).contains(&"fields"));
}

/// Regression: calls_without_result listed every denied call as well as the calls a
/// crash left open. A denied call is complete; every other request without a result is
/// listed with what it lacks (issue 31: a request cut off before its decision, and an
/// ask never answered, were listed nowhere).
#[test]
fn denied_calls_are_complete_and_every_other_request_without_a_result_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    for (call, d) in [("denied", Verdict::Deny), ("open", Verdict::Allow), ("asked", Verdict::Ask)]
    {
        log.append(&request("s", call, "{}")).unwrap();
        log.append(&decision("s", call, d)).unwrap();
    }
    log.append(&request("s", "done", "{}")).unwrap();
    log.append(&decision("s", "done", Verdict::Allow)).unwrap();
    log.append(&result("s", "done")).unwrap();
    log.append_deferred(&request("s", "undecided", "{}")).unwrap();
    log.close().unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    let open = |call: &str, seq, lacks| bx_audit::OpenCall {
        call: call.into(),
        session: "s".into(),
        seq,
        lacks,
    };
    assert_eq!(
        report.calls_without_result,
        vec![
            open("open", 3, bx_audit::Lacks::Result),
            open("asked", 5, bx_audit::Lacks::Answer),
            open("undecided", 10, bx_audit::Lacks::Decision),
        ]
    );
    assert_eq!(report.calls_denied, 1);
}

/// Regression (found probing): a torn tail longer than the 1 MiB window the writer reads
/// back made it restart the sequence at 1 in the same file. It is recovered like any
/// torn tail, and the chain goes on.
#[test]
fn a_torn_tail_longer_than_the_window_is_recovered_and_the_chain_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    append_to_log(dir.path(), &vec![b'x'; 2_000_000]);
    let log = AuditLog::open(dir.path()).unwrap();
    assert_eq!(log.head().seq, 7, "the recovered record follows seq 6");
    log.append(&note("s", "after")).unwrap();
    log.close().unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.recovered.len(), 1);
    assert_eq!(report.recovered[0].bytes, 2_000_000);
}

/// Regression (found probing): with records cut off the end, the next open reused their
/// sequence numbers and wrote a fresh checkpoint over the evidence, after which verify
/// said the chain was intact. The writer now refuses a log shorter than its checkpoint.
#[test]
fn a_log_cut_short_of_its_checkpoint_is_not_continued() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let file = last_day_file(dir.path());
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: Vec<&str> = text.lines().take(4).collect();
    std::fs::write(&file, kept.join("\n") + "\n").unwrap();
    let err = AuditLog::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("cut off") && err.to_string().contains("#audit-broken"),
        "{err}"
    );
    assert!(!verify(dir.path()).unwrap().is_clean());
}

/// The owner can still accept the cut as a break, and the log goes on from there.
#[test]
fn a_cut_accepted_as_a_break_lets_the_log_go_on() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let file = last_day_file(dir.path());
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: Vec<&str> = text.lines().take(4).collect();
    std::fs::write(&file, kept.join("\n") + "\n").unwrap();
    bx_audit::accept_break(dir.path(), "restored from backup").unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    log.append(&note("s", "after the break")).unwrap();
    log.close().unwrap();
    assert!(verify(dir.path()).unwrap().is_clean(), "{:?}", verify(dir.path()).unwrap().problems);
}

/// The newest day file of the log in `dir`.
fn last_day_file(dir: &std::path::Path) -> std::path::PathBuf {
    bx_audit::day_files(dir).unwrap().pop().unwrap()
}

/// Appends raw bytes to the newest day file, as a crash or an attacker would.
fn append_to_log(dir: &std::path::Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().append(true).open(last_day_file(dir)).unwrap();
    f.write_all(bytes).unwrap();
}
