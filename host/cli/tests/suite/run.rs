//! `bx tool run`: the owner tries a tool by hand through the same grant and runtime.

use super::*;

#[test]
fn runs_under_the_allow_flags_and_refuses_outside_them() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    install(st, "fs_read");
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("notes.txt");
    std::fs::write(&file, "remember the milk\n").unwrap();
    let args = serde_json::json!({"path": file}).to_string();
    let dir = data.path().to_str().unwrap();

    let r = bx(st, &["tool", "run", "fs.read", "--args", &args, "--allow-read", dir]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "remember the milk\n"), "{}", r.stderr);

    // No grant: the broker refuses before anything runs.
    let r = bx(st, &["tool", "run", "fs.read", "--args", &args]);
    assert_eq!(r.code, 3);
    assert!(r.stderr.contains("refused: no grant covers read"), "{}", r.stderr);
    assert!(r.stderr.contains("docs/runbook.md#tool-denied"), "{}", r.stderr);

    // A denied sub-path wins over the root.
    let r = bx(
        st,
        &[
            "tool",
            "run",
            "fs.read",
            "--args",
            &args,
            "--allow-read",
            dir,
            "--deny",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 3);
    assert!(r.stderr.contains("is refused by a --deny flag"), "{}", r.stderr);

    // A grant of / is invalid.
    let r = bx(st, &["tool", "run", "fs.read", "--args", &args, "--allow-read", "/"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("a grant of / is invalid"), "{}", r.stderr);

    // Arguments that are not an object are recorded, then refused, as in the loop.
    let r = bx(st, &["tool", "run", "fs.read", "--args", "[1]", "--allow-read", dir]);
    assert!(
        r.code == 3 && r.stderr.contains("must be a JSON object, not an array"),
        "{}",
        r.stderr
    );
    let r = bx(st, &["tool", "run", "fs.read", "--args", "{nope", "--allow-read", dir]);
    assert!(r.code == 3 && r.stderr.contains("not JSON"), "{}", r.stderr);
    let requests = audit_records(st).iter().filter(|r| r["kind"] == "request").count();
    assert_eq!(requests, 5, "every call, refused or not, has its request record");
}

#[test]
fn limit_hit_exits_with_its_own_status() {
    let state = tempfile::tempdir().unwrap();
    install(state.path(), "test_hostile");
    let r = bx(
        state.path(),
        &["tool", "run", "test.hostile", "--args", r#"{"mode":"host-calls","count":1000000}"#],
    );
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.stderr.contains("host-call cap exceeded"), "{}", r.stderr);
    assert!(r.stderr.contains("docs/runbook.md#tool-limit"), "{}", r.stderr);
}

#[test]
fn every_command_uses_the_audit_dir_of_the_config() {
    // `[audit] dir` used to be honoured by the daemon only: `bx tool run` wrote to
    // `audit/` in the state directory and `bx audit verify` checked there.
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let elsewhere = tempfile::tempdir().unwrap();
    let audit = elsewhere.path().join("log");
    std::fs::write(st.join("config.toml"), format!("[audit]\ndir = \"{}\"\n", audit.display()))
        .unwrap();
    install(st, "fs_read");
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("n.txt");
    std::fs::write(&file, "x\n").unwrap();
    let args = serde_json::json!({"path": file}).to_string();
    let r = bx(
        st,
        &["tool", "run", "fs.read", "--args", &args, "--allow-read", data.path().to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!st.join("audit").exists(), "wrote to the default audit dir");
    let r = bx(st, &["audit", "verify", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    // The install's record and the call's three.
    assert_eq!(report["records"], 4, "{report}");
    let r = bx(st, &["session", "rebuild", "cli"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}
