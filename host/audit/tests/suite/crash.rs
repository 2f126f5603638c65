//! Crash safety: a child process appending records is killed with SIGKILL at random
//! points. After reopening, every record whose append returned is present, verify is
//! clean or names exactly the recovered region, and appending continues on the chain.
//!
//! The child is this test binary itself, re-run with `BX_AUDIT_CHILD` set: it appends
//! until killed and prints each sequence number after `append` returns.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bx_audit::{AuditLog, verify};

use super::*;

/// Iterations in the test suite; `BX_AUDIT_CRASH_ITERATIONS` raises it for a stress run.
const ITERATIONS: u64 = 200;

/// Iterations on one log before the next starts afresh. Each iteration verifies the whole
/// log twice, so on one log that only grows the run was quadratic: `make stress`'s 5,000
/// kills ran for over 20 minutes. A fresh log every 100 keeps each verify small and the
/// run linear.
const ITERATIONS_PER_LOG: u64 = 100;

#[test]
fn child_appender() {
    let Ok(dir) = std::env::var("BX_AUDIT_CHILD") else { return };
    let log = AuditLog::open(std::path::Path::new(&dir)).unwrap();
    let filler = "x".repeat(300); // long enough that a kill can land mid-write
    for i in 0u64.. {
        let receipt = log.append(&request("s", &format!("c{i}"), &filler)).unwrap();
        println!("{}", receipt.seq);
    }
}

/// A small deterministic generator, so a failing iteration can be replayed.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    *state >> 33
}

#[test]
fn sigkill_at_random_points_loses_no_returned_record() {
    let iterations = std::env::var("BX_AUDIT_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ITERATIONS);
    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x5eed_u64;
    let mut dir = tempfile::tempdir().unwrap();
    let mut recovered_total = 0;
    let (mut torn_total, mut records_total) = (0, 0);
    let started = Instant::now();
    for iteration in 0..iterations {
        if iteration > 0 && iteration % ITERATIONS_PER_LOG == 0 {
            records_total += verify(dir.path()).unwrap().records;
            dir = tempfile::tempdir().unwrap();
            recovered_total = 0;
        }
        let mut child = Command::new(&exe)
            .args(["--exact", "suite::crash::child_appender", "--nocapture", "--test-threads=1"])
            .env("BX_AUDIT_CHILD", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        // Let it append a random number of records (at least one), then kill it while
        // it is in the middle of more.
        let wanted = 1 + next(&mut rng) % 20;
        let mut last_returned: Option<u64> = None;
        let mut seen = 0;
        let mut line = String::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen < wanted && Instant::now() < deadline {
            line.clear();
            if stdout.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if let Ok(seq) = line.trim().parse::<u64>() {
                last_returned = Some(seq);
                seen += 1;
            }
        }
        assert!(seen > 0, "iteration {iteration}: the child appended nothing");
        // Spin a random short while so the kill lands at varying points of an append.
        let spin = Instant::now() + Duration::from_micros(next(&mut rng) % 3000);
        while Instant::now() < spin {
            std::hint::spin_loop();
        }
        child.kill().unwrap(); // SIGKILL
        // Everything the child printed before dying was returned by append.
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        for l in rest.lines() {
            if let Ok(seq) = l.trim().parse::<u64>() {
                last_returned = Some(seq);
            }
        }
        child.wait().unwrap();

        let before = verify(dir.path()).unwrap();
        let torn = before.problems.iter().filter(|p| p.kind == "torn-tail").count();
        assert!(
            before
                .problems
                .iter()
                .all(|p| p.kind == "torn-tail" || p.kind == "truncated" || p.kind == "checkpoint"),
            "iteration {iteration}: {:?}",
            before.problems
        );
        let log = AuditLog::open(dir.path()).unwrap();
        let head = log.head().seq;
        if let Some(returned) = last_returned {
            assert!(
                head >= returned,
                "iteration {iteration}: record {returned} returned but the head is {head}"
            );
        }
        log.append(&note("s", &iteration.to_string())).unwrap();
        log.close().unwrap();
        let after = verify(dir.path()).unwrap();
        assert!(after.is_clean(), "iteration {iteration}: {:?}", after.problems);
        recovered_total += torn;
        torn_total += torn;
        assert_eq!(after.recovered.len(), recovered_total, "iteration {iteration}");
    }
    records_total += verify(dir.path()).unwrap().records;
    // A kill rarely tears a single small write(2); torn tails are also made by hand in
    // chain.rs. Report how many this run saw.
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{iterations} kills in {secs:.0} s ({:.1} kills/s), {records_total} records on the logs, {torn_total} torn tails recovered",
        iterations as f64 / secs
    );
}

/// A deferred record (a call's request) is written at once but synced by the next
/// append (its decision), which returns only once both are on disk.
#[test]
fn a_deferred_record_is_synced_by_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    log.append(&note("s", "before")).unwrap();
    let request = log.append_deferred(&request("s", "c1", "{}")).unwrap();
    assert_eq!(log.head().seq, request.seq);
    assert_eq!(log.synced(), request.seq - 1, "not synced by itself");
    let on_disk = std::fs::read_to_string(bx_audit::day_files(dir.path()).unwrap()[0].clone());
    assert!(on_disk.unwrap().contains("\"c1\""), "written at once");
    let decision = log.append(&note("s", "decision")).unwrap();
    assert_eq!(log.synced(), decision.seq, "the next append syncs both");
    log.close().unwrap();
    assert!(verify(dir.path()).unwrap().is_clean());
}
