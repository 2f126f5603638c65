//! Limits: each misbehaviour stops at its cap with an error naming the limit, and the
//! next call on the same runtime works.

use bx_broker::AllowList;
use bx_runtime::Limit;
use serde_json::json;

use super::*;

fn hostile(args: serde_json::Value) -> Result<bx_runtime::CallReport, RunError> {
    call(tool("test_hostile"), AllowList::new(), args)
}

fn assert_limit(result: Result<bx_runtime::CallReport, RunError>, expected: Limit) {
    match result {
        Err(e @ RunError::Limit { limit, .. }) => {
            assert_eq!(limit, expected, "{e}");
            assert!(e.to_string().contains(&expected.to_string()), "{e}");
            assert_eq!(e.runbook(), Some("docs/runbook.md#tool-limit"), "{e}");
        }
        other => panic!("expected {expected} limit, got {other:?}"),
    }
    // The runtime is unharmed: a fresh call works.
    assert_eq!(ok_text(hostile(json!({"mode": "echo", "text": "still alive"}))), "still alive");
}

#[test]
fn infinite_loop_stops_at_deadline() {
    assert_limit(hostile(json!({"mode": "spin"})), Limit::Deadline);
}

#[test]
fn unbounded_allocation_stops_at_memory_cap() {
    assert_limit(hostile(json!({"mode": "alloc"})), Limit::Memory);
}

#[test]
fn flood_of_stdout_is_cut_at_stdio_cap() {
    assert_limit(hostile(json!({"mode": "stdout", "bytes": 100_000_000u64})), Limit::Stdio);
}

#[test]
fn oversized_output_is_refused_at_output_cap() {
    let cap = test_limits().output_bytes;
    assert_limit(hostile(json!({"mode": "big-output", "bytes": cap + 1})), Limit::Output);
    // Exactly at the cap is fine.
    assert_eq!(ok_text(hostile(json!({"mode": "big-output", "bytes": cap}))).len(), cap);
}

#[test]
fn million_host_calls_stop_at_host_call_cap() {
    assert_limit(hostile(json!({"mode": "host-calls", "count": 1_000_000u64})), Limit::HostCalls);
    // Below the cap the same calls complete.
    let out = ok_text(hostile(json!({"mode": "host-calls", "count": 1000u64})));
    assert_eq!(out, "made 1000 host calls");
}

#[test]
fn tool_sees_no_environment_arguments_or_preopens() {
    let l = tempfile::tempdir().unwrap();
    let file = l.path().join("f.txt");
    std::fs::write(&file, "x").unwrap();
    // Even with the file granted, plain std::fs inside the guest reaches nothing: the
    // grant is enforced by bx:host only, and WASI has no preopened directories.
    let allow = AllowList::new().read(&s(l.path())).unwrap();
    let out =
        ok_text(call(tool("test_hostile"), allow, json!({"mode": "ambient", "path": s(&file)})));
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["env"], json!([]));
    assert_eq!(out["args"], json!([]));
    assert!(out["fs"].as_str().unwrap().starts_with("error"), "{out}");
    assert!(out["root"].as_str().unwrap().starts_with("error"), "{out}");
}
