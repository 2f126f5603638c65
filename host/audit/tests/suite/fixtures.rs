//! `fixtures/audit/`: logs that are good, torn, tampered, forked, cut,
//! checkpoint-mismatched, undecided (cut off between a request and its decision) and
//! misspelled (a decision no writer makes, `alow`, with the chain made valid over it),
//! out-of-order (a result after its call was refused, the chain made valid over it),
//! each with the report verify must give. The logs are made here
//! with a fixed clock, so a change to the writer's format shows as drift; the reports
//! are golden. `BX_BLESS=1 cargo test -p bx-audit --test all fixtures` rewrites both.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bx_audit::{AuditLog, verify};

use super::*;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/audit")
}

/// The fixed time of every fixture's records.
const FIXED: u64 = BEFORE_MIDNIGHT - 60_000;

/// The good log: two calls, one refused, at a fixed time.
fn good(dir: &Path) {
    let clock = ManualClock(Arc::new(AtomicU64::new(FIXED)));
    let log = AuditLog::open_with_clock(dir, Box::new(clock)).unwrap();
    log.append(&request("s1", "c1", r#"{"path":"/home/o/notes/todo.md"}"#)).unwrap();
    log.append(&decision("s1", "c1", Verdict::Allow)).unwrap();
    log.append(&result("s1", "c1")).unwrap();
    log.append(&request("s1", "c2", r#"{"path":"/home/o/.ssh/id"}"#)).unwrap();
    log.append(&decision("s1", "c2", Verdict::Deny)).unwrap();
    log.append(&note("s1", "end")).unwrap();
    log.close().unwrap();
    let _ = std::fs::remove_file(dir.join(".lock"));
}

fn day_file(dir: &Path) -> PathBuf {
    bx_audit::day_files(dir).unwrap().pop().unwrap()
}

fn lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(day_file(dir)).unwrap().lines().map(str::to_owned).collect()
}

fn write_lines(dir: &Path, lines: &[String]) {
    std::fs::write(day_file(dir), lines.join("\n") + "\n").unwrap();
}

/// How a fixture is made from the good log.
type Make = fn(&Path);

/// Each fixture: its name and how it is made from the good log.
fn cases() -> Vec<(&'static str, Make)> {
    vec![
        ("good", |_| {}),
        ("torn", |d| {
            let mut bytes = std::fs::read(day_file(d)).unwrap();
            bytes.extend_from_slice(br#"{"seq":7,"time":"2026-11-29T23:59"#);
            std::fs::write(day_file(d), bytes).unwrap();
        }),
        ("tampered", |d| {
            let mut l = lines(d);
            l[3] = l[3].replace("/home/o/.ssh/id", "/home/o/notes/id");
            write_lines(d, &l);
        }),
        ("forked", |d| {
            // A second writer appended its own seq 6 after the first's seq 6.
            let mut l = lines(d);
            let other = l[5].replace("\"detail\":\"end\"", "\"detail\":\"other writer\"");
            l.push(other);
            write_lines(d, &l);
        }),
        ("cut", |d| {
            let mut l = lines(d);
            l.truncate(4);
            write_lines(d, &l);
        }),
        ("checkpoint-mismatched", |d| {
            let cp = std::fs::read_to_string(d.join("checkpoint.json")).unwrap();
            let v: serde_json::Value = serde_json::from_str(&cp).unwrap();
            let hash = v["hash"].as_str().unwrap();
            std::fs::write(d.join("checkpoint.json"), cp.replace(hash, &"0".repeat(64))).unwrap();
        }),
        ("undecided", |d| {
            // A kill -9 between a call's request (written without its own sync) and its
            // decision: the request is on disk, nothing after it, no close.
            let clock = ManualClock(Arc::new(AtomicU64::new(FIXED)));
            let log = AuditLog::open_with_clock(d, Box::new(clock)).unwrap();
            log.append_deferred(&request("s1", "c3", r#"{"path":"/home/o/notes/b.md"}"#)).unwrap();
            drop(log);
            let _ = std::fs::remove_file(d.join(".lock"));
        }),
        ("out-of-order", |d| {
            // c1's decision turned from allow to deny, the chain recomputed over it, and
            // its result left standing: a call that ran though it was refused.
            super::anchor::rechain(d, |files| {
                let line = &mut files[0].1[1];
                assert!(line.contains(r#""decision":"allow""#), "{line}");
                *line = line.replace(r#""decision":"allow""#, r#""decision":"deny""#);
            });
        }),
        ("misspelled", |d| {
            // c2's decision spelled `alow`, and every later `prev` and the checkpoint
            // recomputed over it, as someone editing the log by hand would: only the value
            // itself is wrong.
            super::anchor::rechain(d, |files| {
                let line = &mut files[0].1[4];
                assert!(line.contains(r#""decision":"deny""#), "{line}");
                *line = line.replace(r#""decision":"deny""#, r#""decision":"alow""#);
            });
        }),
    ]
}

/// Every file in `dir`, by name, with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .filter(|(n, _)| n != "report.json" && n != ".lock")
        .collect();
    out.sort();
    out
}

#[test]
fn fixtures_are_what_the_writer_makes_and_verify_reports_them_as_recorded() {
    let bless = std::env::var_os("BX_BLESS").is_some();
    let root = fixtures_dir();
    for (name, make) in cases() {
        let made = tempfile::tempdir().unwrap();
        good(made.path());
        make(made.path());
        let fixture = root.join(name);
        if bless {
            let _ = std::fs::remove_dir_all(&fixture);
            std::fs::create_dir_all(&fixture).unwrap();
            for (file, bytes) in contents(made.path()) {
                std::fs::write(fixture.join(file), bytes).unwrap();
            }
        }
        assert!(
            fixture.is_dir(),
            "{} is missing; run BX_BLESS=1 cargo test -p bx-audit --test all fixtures",
            fixture.display()
        );
        assert_eq!(
            contents(&fixture),
            contents(made.path()),
            "fixtures/audit/{name} drifted from what the writer makes; if that is intended, run BX_BLESS=1 cargo test -p bx-audit --test all fixtures and commit"
        );
        let report = serde_json::to_string_pretty(&verify(&fixture).unwrap()).unwrap() + "\n";
        let golden = fixture.join("report.json");
        if bless {
            std::fs::write(&golden, &report).unwrap();
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        assert_eq!(
            report, expected,
            "verify's report of fixtures/audit/{name} changed (BX_BLESS=1 to accept)"
        );
        let clean = ["good", "undecided"].contains(&name);
        assert_eq!(clean, verify(&fixture).unwrap().is_clean(), "{name}");
    }
}

/// Regression (issue 31): a call cut off between its request and its decision (the
/// request is written without its own sync) was listed nowhere in verify's report. Every
/// request without a result is listed, with what it lacks.
#[test]
fn a_request_cut_off_before_its_decision_is_listed_as_lacking_one() {
    let report = verify(&fixtures_dir().join("undecided")).unwrap();
    let open = bx_audit::OpenCall {
        call: "c3".into(),
        session: "s1".into(),
        seq: 7,
        lacks: bx_audit::Lacks::Decision,
    };
    assert_eq!(report.calls_without_result, vec![open]);
    assert!(report.is_clean(), "{:?}", report.problems);
    // The cut fixture ends in a request too (c2's, its decision cut off).
    let cut = verify(&fixtures_dir().join("cut")).unwrap();
    let lacks: Vec<_> =
        cut.calls_without_result.iter().map(|c| (c.call.as_str(), c.lacks)).collect();
    assert_eq!(lacks, [("c2", bx_audit::Lacks::Decision)]);
}

/// Regression (issue 24): verify counted any decision other than `allow` or `ask` as a
/// denial, so a decision spelled `alow` was silently a refused call. It is a `fields`
/// problem of that record (its file, line and seq), and its call is not counted as
/// denied: it lacks a decision verify can read.
#[test]
fn a_decision_no_writer_makes_is_a_problem_of_its_record_not_a_denial() {
    let report = verify(&fixtures_dir().join("misspelled")).unwrap();
    let at: Vec<_> =
        report.problems.iter().map(|p| (p.kind.as_str(), p.file.as_str(), p.line)).collect();
    assert_eq!(at, [("fields", "2026-11-29.jsonl", 5)]);
    assert!(report.problems[0].detail.starts_with("seq 5: "), "{:?}", report.problems);
    assert_eq!(report.calls_denied, 0);
    let open: Vec<_> =
        report.calls_without_result.iter().map(|c| (c.call.as_str(), c.seq, c.lacks)).collect();
    assert_eq!(open, [("c2", 4, bx_audit::Lacks::Decision)]);
    // The chain over it is valid: the only problem is the value.
    assert_eq!(report.head.map(|h| h.0), Some(6));
}

/// A result whose call no decision allowed (refused, still asking, or not decided) is an
/// `order` problem at the result, whatever the chain says (found by a probe: a log
/// rewritten with its chain recomputed passed with a refused call's result in it).
#[test]
fn a_result_no_decision_allowed_is_a_problem_at_the_result() {
    let report = verify(&fixtures_dir().join("out-of-order")).unwrap();
    let at: Vec<_> =
        report.problems.iter().map(|p| (p.kind.as_str(), p.file.as_str(), p.line)).collect();
    assert_eq!(at, [("order", "2026-11-29.jsonl", 3)]);
    assert!(report.problems[0].detail.contains("after it was refused"), "{:?}", report.problems);
}

/// The neighbour: a call's result recorded twice (the chain and the numbering made valid
/// over the copy) is an `order` problem at the second.
#[test]
fn a_second_result_of_one_call_is_a_problem_at_it() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["2026-11-29.jsonl", "checkpoint.json"] {
        std::fs::copy(fixtures_dir().join("good").join(name), dir.path().join(name)).unwrap();
    }
    super::anchor::rechain(dir.path(), |files| {
        let lines = &mut files[0].1;
        assert!(lines[2].contains(r#""kind":"result""#), "{}", lines[2]);
        let again = lines[2].clone();
        lines.insert(3, again);
        for (i, line) in lines.iter_mut().enumerate() {
            let mut r = bx_audit::Record::parse(line).unwrap();
            r.seq = i as u64 + 1;
            *line = r.to_line();
        }
    });
    let report = verify(dir.path()).unwrap();
    let at: Vec<_> =
        report.problems.iter().map(|p| (p.kind.as_str(), p.file.as_str(), p.line)).collect();
    assert_eq!(at, [("order", "2026-11-29.jsonl", 4)], "{:?}", report.problems);
    assert!(report.problems[0].detail.contains("after its result"), "{:?}", report.problems);
}
