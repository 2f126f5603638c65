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

/// How many times `bx tool run TOOL --args ARGS` (one process, no daemon) synced a file
/// to disk, counted by strace.
fn syncs_of(s: &Path, tool: &str, args: &str) -> usize {
    let out = tempfile::NamedTempFile::new().unwrap();
    let status = std::process::Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fdatasync,fsync", "-o"])
        .arg(out.path())
        .arg(env!("CARGO_BIN_EXE_bx"))
        .arg("--state-dir")
        .arg(s)
        .args(["tool", "run", tool, "--session", "d", "--args", args])
        .env_remove("BX_HOME")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("strace (make setup installs it)");
    assert!(status.success(), "bx tool run {tool} failed");
    std::fs::read_to_string(out.path())
        .unwrap()
        .lines()
        .filter(|l| l.contains("fdatasync(") || l.contains("fsync("))
        .count()
}

#[test]
fn a_read_is_made_durable_by_its_results_sync_and_a_write_before_it_acts() {
    // docs/audit.md#durability: a call whose only effect is what it returns has its
    // request and decision synced with its result, before anyone sees the result; a call
    // that acts has them synced before it acts. So a read costs one sync fewer.
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    install(s, "fs_read");
    install(s, "fs_write");
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    std::fs::write(ws.join("a.txt"), "a").unwrap();
    write_policy(
        s,
        &format!(
            "[[grant]]\ntool = \"*\"\npath = \"{ws}\"\nmode = \"read\"\nlabel = \"private/trusted\"\n\
             [[grant]]\ntool = \"*\"\npath = \"{ws}\"\nmode = \"write\"\nlabel = \"private/trusted\"\n",
            ws = ws.display()
        ),
    );
    let read = serde_json::json!({"path": ws.join("a.txt")}).to_string();
    // fs.write makes a new file each time.
    let write = |name: &str| serde_json::json!({"path": ws.join(name), "content": "b"}).to_string();
    // The first calls make the session's files; the counts after are the calls' own.
    syncs_of(s, "fs.read", &read);
    syncs_of(s, "fs.write", &write("b.txt"));
    let (reads, writes) = (syncs_of(s, "fs.read", &read), syncs_of(s, "fs.write", &write("c.txt")));
    assert_eq!(writes, reads + 1, "a read synced {reads} times, a write {writes}");
    // And each call's three records are on the log, in order.
    let kinds: Vec<String> = audit_records(s)
        .iter()
        .filter(|r| r["fields"]["session"] == "d")
        .map(|r| r["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "result").count(), 4, "{kinds:?}");
    let r = bx(s, &["audit", "verify"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
}
