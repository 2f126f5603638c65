//! Tamper evidence: every single-byte change, a deleted line, two swapped lines and whole
//! records cut off the end are each detected, every one of them.

use bx_audit::{accept_break, verify};

use super::*;

fn day_file(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(&verify(dir).unwrap().files[0])
}

#[test]
fn every_single_byte_flip_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let path = day_file(dir.path());
    let original = std::fs::read(&path).unwrap();
    let mut missed = Vec::new();
    for i in 0..original.len() {
        for flip in [0x01u8, 0x20, 0x80] {
            let mut bytes = original.clone();
            bytes[i] ^= flip;
            std::fs::write(&path, &bytes).unwrap();
            if verify(dir.path()).unwrap().is_clean() {
                missed.push((i, flip));
            }
        }
    }
    std::fs::write(&path, &original).unwrap();
    assert!(verify(dir.path()).unwrap().is_clean());
    assert!(missed.is_empty(), "undetected flips (offset, xor): {missed:?}");
}

fn rewrite_lines(path: &std::path::Path, f: impl FnOnce(&mut Vec<String>)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    f(&mut lines);
    std::fs::write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

#[test]
fn deleting_any_line_is_detected() {
    for victim in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        small_log(dir.path());
        rewrite_lines(&day_file(dir.path()), |l| {
            l.remove(victim);
        });
        assert!(!verify(dir.path()).unwrap().is_clean(), "deleting line {victim} went unnoticed");
    }
}

#[test]
fn swapping_any_two_lines_is_detected() {
    for a in 0..6 {
        for b in a + 1..6 {
            let dir = tempfile::tempdir().unwrap();
            small_log(dir.path());
            rewrite_lines(&day_file(dir.path()), |l| l.swap(a, b));
            assert!(
                !verify(dir.path()).unwrap().is_clean(),
                "swapping lines {a} and {b} went unnoticed"
            );
        }
    }
}

#[test]
fn cutting_whole_records_off_the_end_is_detected() {
    for cut in 1..=6 {
        let dir = tempfile::tempdir().unwrap();
        small_log(dir.path());
        rewrite_lines(&day_file(dir.path()), |l| l.truncate(6 - cut));
        let report = verify(dir.path()).unwrap();
        assert!(
            report.problems.iter().any(|p| p.kind == "truncated"),
            "cutting {cut} records went unnoticed: {:?}",
            report.problems
        );
    }
}

#[test]
fn accepted_break_is_checked_on_later_runs() {
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let path = day_file(dir.path());
    rewrite_lines(&path, |l| {
        l.remove(2);
    });
    let before = verify(dir.path()).unwrap();
    assert!(!before.is_clean());
    let (_, seq) = accept_break(dir.path(), "line 3 lost in a disk repair").unwrap();
    let after = verify(dir.path()).unwrap();
    assert!(after.is_clean(), "{:?}", after.problems);
    assert_eq!(after.breaks.len(), 1);
    assert_eq!(after.breaks[0].seq, seq);
    assert_eq!(after.breaks[0].accepted, before.problems);
    // Nothing left to accept.
    assert!(accept_break(dir.path(), "again").is_err());

    // Editing the break record breaks the chain at the end; the checkpoint catches it.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("disk repair", "disk_repair")).unwrap();
    assert!(!verify(dir.path()).unwrap().is_clean());
}

#[test]
fn break_record_must_describe_a_real_break() {
    // A forged break record (chained correctly, listing a problem that is not there) is
    // itself reported.
    let dir = tempfile::tempdir().unwrap();
    small_log(dir.path());
    let log = bx_audit::AuditLog::open(dir.path()).unwrap();
    let forged = bx_audit::Problem {
        kind: "chain".into(),
        file: "2026-01-01.jsonl".into(),
        line: 2,
        detail: "made up".into(),
    };
    let entry = bx_audit::Entry::Break(bx_audit::BreakEntry {
        reason: "forged".into(),
        problems: vec![forged],
    });
    log.append(&entry).unwrap();
    log.close().unwrap();
    let report = verify(dir.path()).unwrap();
    assert_eq!(
        report.problems.iter().map(|p| p.kind.as_str()).collect::<Vec<_>>(),
        vec!["break-record"]
    );
}
