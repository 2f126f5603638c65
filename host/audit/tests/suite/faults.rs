//! Faults: a log that cannot be written becomes unavailable, stays unavailable, and says
//! which runbook entry to read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bx_audit::{AuditError, AuditLog};

use super::*;

fn assert_unavailable(err: AuditError) {
    match &err {
        AuditError::Unavailable(_) => {
            assert_eq!(err.runbook(), Some("docs/runbook.md#audit-unavailable"), "{err}")
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}

#[test]
fn write_failure_is_sticky() {
    // The next day's file is a symlink to /dev/full: the writer refuses anything but a
    // regular file (it would have failed with ENOSPC), so the rollover fails.
    let dir = tempfile::tempdir().unwrap();
    let now = Arc::new(AtomicU64::new(BEFORE_MIDNIGHT));
    let log =
        AuditLog::open_with_clock(dir.path(), Box::new(ManualClock(Arc::clone(&now)))).unwrap();
    log.append(&note("s", "1")).unwrap();
    std::os::unix::fs::symlink("/dev/full", dir.path().join("2026-11-30.jsonl")).unwrap();
    now.fetch_add(2_000, Ordering::SeqCst);
    assert_unavailable(log.append(&note("s", "2")).unwrap_err());
    // Sticky: even back on a writable day, nothing is accepted.
    now.fetch_sub(2_000, Ordering::SeqCst);
    assert_unavailable(log.append(&note("s", "3")).unwrap_err());
    assert!(log.failure().unwrap().contains("not a regular file"), "{:?}", log.failure());
}

#[test]
fn unwritable_directory_makes_the_log_unavailable() {
    if can_write_read_only_dirs() {
        // Running as root, directory permissions are not enforced; a file where the
        // directory should be is unwritable for anyone.
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("audit");
        std::fs::write(&not_a_dir, "").unwrap();
        assert_unavailable(AuditLog::open(&not_a_dir).unwrap_err());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    std::fs::create_dir(&audit).unwrap();
    let log = AuditLog::open(&audit).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&audit, std::fs::Permissions::from_mode(0o500)).unwrap();
    assert_unavailable(log.append(&note("s", "1")).unwrap_err());
    std::fs::set_permissions(&audit, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// True when this process can write to a directory without write permission (root).
fn can_write_read_only_dirs() -> bool {
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
    let writable = std::fs::write(dir.path().join("probe"), "").is_ok();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    writable
}

#[test]
fn day_file_that_is_not_a_regular_file_refuses_open() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/dev/full", dir.path().join("2026-11-30.jsonl")).unwrap();
    assert_unavailable(AuditLog::open(dir.path()).unwrap_err());
}
