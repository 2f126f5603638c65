//! `[approvals]` in `config.toml`: a reviewer program answers before the owner, a notice
//! tells the owner a call waits. Real programs (shell scripts), the real `bx tool run`
//! and daemon, the real log.

use serde_json::Value;

use super::*;

/// A state directory with fs.read installed, a policy that asks before every read under
/// `data` (with `extra` lines in the grant), and `[approvals]` set to `approvals`.
fn state_with(data: &Path, extra: &str, approvals: &str) -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    install(state.path(), "fs_read");
    let policy = format!(
        "[[grant]]\ntool = \"fs.read\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\nwhen_tainted = \"ask\"\n{extra}",
        data.display()
    );
    std::fs::write(state.path().join("policy.toml"), policy).unwrap();
    std::fs::write(state.path().join("config.toml"), format!("[approvals]\n{approvals}")).unwrap();
    state
}

/// An executable shell script `name` in `dir` with `body`, and its path.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A reviewer that keeps what it read in `input.json` beside it, counts its runs in
/// `runs`, and answers `answer`.
fn reviewer(dir: &Path, answer: &str) -> PathBuf {
    let input = dir.join("input.json");
    let runs = dir.join("runs");
    script(
        dir,
        "review",
        &format!(
            "cat > '{}'\necho run >> '{}'\nprintf '%s\\n' '{answer}'",
            input.display(),
            runs.display()
        ),
    )
}

/// `bx tool run fs.read` of `file` in session `s`, with nothing typed at its prompt.
fn read(state: &Path, file: &Path) -> Run {
    let args = serde_json::json!({"path": file}).to_string();
    bx(state, &["tool", "run", "fs.read", "--session", "s", "--args", &args])
}

/// The session's `approval` records.
fn approvals(state: &Path) -> Vec<Value> {
    let r = bx(state, &["audit", "show", "--session", "s"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["kind"] == "approval")
        .map(|v| v["fields"].clone())
        .collect()
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs")).map_or(0, |t| t.lines().count())
}

/// A data directory holding `n.txt`, canonical.
fn data() -> (tempfile::TempDir, PathBuf) {
    let data = tempfile::tempdir().unwrap();
    let file = std::fs::canonicalize(data.path()).unwrap().join("n.txt");
    std::fs::write(&file, "the note").unwrap();
    (data, file)
}

#[test]
fn the_reviewer_approves_and_the_log_names_it_by_path_and_digest() {
    let (data, file) = data();
    let bin = tempfile::tempdir().unwrap();
    let program = reviewer(bin.path(), r#"{"answer": "approve"}"#);
    let state = state_with(data.path(), "", &format!("reviewer = [\"{}\"]\n", program.display()));
    let r = read(state.path(), &file);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("the note"), "{}", r.stdout);
    let records = approvals(state.path());
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["answer"], "approve");
    assert_eq!(records[0]["decision"], "allow");
    let by = &records[0]["by"]["reviewer"];
    assert_eq!(by["command"], program.to_str().unwrap());
    assert_eq!(by["digest"], digest_file(&program).as_str());
    // It read the block the owner would have seen, and the scopes it may name.
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(bin.path().join("input.json")).unwrap())
            .unwrap();
    assert!(input["block"].as_str().unwrap().starts_with("approval needed: "), "{input}");
    assert_eq!(input["tool"], "fs.read");
    assert_eq!(input["session"], "s");
    assert!(input["arguments"].as_str().unwrap().contains("n.txt"), "{input}");
    let scopes: Vec<&str> =
        input["scopes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(scopes.contains(&"path"), "{scopes:?}");
}

#[test]
fn a_scope_the_reviewer_gives_answers_the_sessions_later_calls() {
    let (data, file) = data();
    let bin = tempfile::tempdir().unwrap();
    let program = reviewer(bin.path(), r#"{"answer": "approve", "scope": "path"}"#);
    let state = state_with(data.path(), "", &format!("reviewer = [\"{}\"]\n", program.display()));
    assert_eq!(read(state.path(), &file).code, 0);
    let other = file.with_file_name("m.txt");
    std::fs::write(&other, "more").unwrap();
    let r = read(state.path(), &other);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The second read ran under the scope: the reviewer was asked once.
    assert_eq!(runs(bin.path()), 1);
    let records = approvals(state.path());
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["scope"]["kind"], "path");
    assert!(records[0]["by"]["reviewer"].is_object(), "{records:?}");
}

#[test]
fn the_reviewer_refuses_with_its_reason() {
    let (data, file) = data();
    let bin = tempfile::tempdir().unwrap();
    let program = reviewer(bin.path(), r#"{"answer": "refuse", "reason": "not on a Sunday"}"#);
    let state = state_with(data.path(), "", &format!("reviewer = [\"{}\"]\n", program.display()));
    let r = read(state.path(), &file);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(!r.stdout.contains("the note"), "{}", r.stdout);
    assert!(r.stderr.contains("refused by the owner's reviewer"), "{}", r.stderr);
    assert!(r.stderr.contains("not on a Sunday"), "{}", r.stderr);
    let records = approvals(state.path());
    assert_eq!(records[0]["answer"], "refuse");
    assert_eq!(records[0]["reason"], "not on a Sunday");
    assert_eq!(records[0]["decision"], "deny");
    assert!(records[0]["by"]["reviewer"].is_object(), "{records:?}");
}

/// Each way a reviewer can fail refuses the call, on the log under the reviewer's
/// name, with the runbook entry in the reason.
#[test]
fn a_reviewer_that_crashes_hangs_or_answers_garbage_refuses() {
    let (data, file) = data();
    let cases = [
        ("crash", "cat > /dev/null\necho boom >&2\nexit 3", "failed"),
        ("hang", "exec sleep 60", "no answer within 1 s"),
        ("garbage", "cat > /dev/null\necho 'yes please'", "not an answer"),
        ("unknown answer", "cat > /dev/null\necho '{\"answer\": \"maybe\"}'", "not an answer"),
        (
            "extra field",
            "cat > /dev/null\necho '{\"answer\": \"approve\", \"also\": 1}'",
            "not an answer",
        ),
        (
            "scope not offered",
            "cat > /dev/null\necho '{\"answer\": \"approve\", \"scope\": \"host\"}'",
            "not one the block offers",
        ),
        ("an array", "cat > /dev/null\necho '[\"approve\", \"path\"]'", "not a JSON object"),
        (
            "two answers",
            "cat > /dev/null\necho '{\"answer\": \"approve\"}{\"answer\": \"approve\"}'",
            "not an answer",
        ),
        (
            "huge",
            "cat > /dev/null\nhead -c 100000 /dev/zero | tr '\\0' ' '\necho '{\"answer\": \"approve\"}'",
            "more than",
        ),
        ("ignores its input", "echo '{\"answer\": \"approve\"}' >&2\nexit 0", "not an answer"),
    ];
    for (name, body, why) in cases {
        let bin = tempfile::tempdir().unwrap();
        let program = script(bin.path(), "review", body);
        let state = state_with(
            data.path(),
            "",
            &format!("reviewer = [\"{}\"]\nreviewer_secs = 1\n", program.display()),
        );
        let r = read(state.path(), &file);
        assert_ne!(r.code, 0, "{name}: {}", r.stdout);
        assert!(!r.stdout.contains("the note"), "{name}: {}", r.stdout);
        assert!(r.stderr.contains(why), "{name}: {}", r.stderr);
        assert!(r.stderr.contains("docs/runbook.md#reviewer-failed"), "{name}: {}", r.stderr);
        let records = approvals(state.path());
        assert_eq!(records.len(), 1, "{name}: {records:?}");
        assert_eq!(records[0]["answer"], "refuse", "{name}");
        assert_eq!(records[0]["decision"], "deny", "{name}");
        assert!(records[0]["by"]["reviewer"].is_object(), "{name}: {records:?}");
    }
}

/// A reviewer that abstains, or a grant that wants a person, leaves the call to the
/// owner at the prompt; the owner's answer is recorded as the owner's.
#[test]
fn on_abstain_or_approver_owner_the_owner_answers() {
    let (data, file) = data();
    for (answer, extra, reviewed) in [
        (r#"{"answer": "abstain"}"#, "", 1),
        (r#"{"answer": "approve"}"#, "approver = \"owner\"\n", 0),
    ] {
        let bin = tempfile::tempdir().unwrap();
        let program = reviewer(bin.path(), answer);
        let state =
            state_with(data.path(), extra, &format!("reviewer = [\"{}\"]\n", program.display()));
        let args = serde_json::json!({"path": file}).to_string();
        let r = super::trust::run_answering(
            state.path(),
            &["tool", "run", "fs.read", "--session", "s", "--args", &args],
            |id| id.to_owned(),
        );
        assert_eq!(r.code, 0, "{extra}: {}", r.stderr);
        assert!(r.stdout.contains("the note"), "{}", r.stdout);
        assert_eq!(runs(bin.path()), reviewed, "{extra}");
        let records = approvals(state.path());
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0]["answer"], "approve");
        assert!(records[0].get("by").is_none(), "the owner's answer: {records:?}");
    }
}

/// When a call starts to wait in the daemon, the notice runs with the call's id,
/// session, tool and an escaped one-line summary, in its environment and on stdin; a
/// notice that fails does not hold the call up.
#[test]
fn a_waiting_call_sends_the_notice_escaped_and_a_failing_one_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    // A name that would move a terminal's cursor and colour its text.
    let file = std::fs::canonicalize(data.path()).unwrap().join("n\u{1b}[31m\u{202e}.txt");
    std::fs::write(&file, "the note").unwrap();
    for failing in [false, true] {
        let bin = tempfile::tempdir().unwrap();
        let out = bin.path().join("notice");
        let body = format!(
            "{{ echo \"$BX_APPROVAL_ID\"; echo \"$BX_SESSION\"; echo \"$BX_TOOL\"; echo \"$BX_SUMMARY\"; cat; }} > '{}.tmp'\nmv '{0}.tmp' '{0}'\n{}",
            out.display(),
            if failing { "exit 1" } else { "exit 0" }
        );
        let notify = script(bin.path(), "notify", &body);
        let state = state_with(data.path(), "", &format!("notify = [\"{}\"]\n", notify.display()));
        let daemon = Daemon::start(state.path());
        let args = serde_json::json!({"path": file}).to_string();
        let run = ["tool", "run", "fs.read", "--session", "s", "--approval-timeout", "60"];
        let r = super::trust::run_answering(
            state.path(),
            &[&run[..], &["--args", &args]].concat(),
            |id| {
                // The notice runs on its own while the call waits: wait for its file.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while !out.exists() {
                    assert!(std::time::Instant::now() < deadline, "no notice within 30 s");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let notice = std::fs::read_to_string(&out).unwrap();
                let lines: Vec<&str> = notice.lines().collect();
                assert_eq!(lines[0], id);
                assert_eq!(lines[1], "s");
                assert_eq!(lines[2], "fs.read");
                assert!(lines[3].starts_with("fs.read waits for approval"), "{notice}");
                assert!(!notice.contains('\u{1b}') && !notice.contains('\u{202e}'), "{notice:?}");
                let json: Value = serde_json::from_str(lines[4]).unwrap();
                assert_eq!(json["id"], id);
                assert_eq!(json["summary"], lines[3]);
                id.to_owned()
            },
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(r.stdout.contains("the note"), "{}", r.stdout);
        drop(daemon);
    }
}

#[test]
fn a_reviewer_or_notice_named_without_an_absolute_path_is_a_config_error() {
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("config.toml"), "[approvals]\nreviewer = [\"review\"]\n")
        .unwrap();
    let r = bx(state.path(), &["tool", "list"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("approvals.reviewer"), "{}", r.stderr);
    assert!(r.stderr.contains("absolute path"), "{}", r.stderr);
}

/// A reviewer that leaves a child holding its output gives no answer: at the deadline
/// the call is refused, and the child is stopped with it (its process group), not left
/// running.
#[test]
fn a_reviewer_past_its_deadline_is_stopped_with_what_it_started() {
    let (data, file) = data();
    let bin = tempfile::tempdir().unwrap();
    let pid_file = bin.path().join("child.pid");
    let program = script(
        bin.path(),
        "review",
        &format!("cat > /dev/null\nsleep 120 &\necho $! > '{}'\nexit 0", pid_file.display()),
    );
    let state = state_with(
        data.path(),
        "",
        &format!("reviewer = [\"{}\"]\nreviewer_secs = 1\n", program.display()),
    );
    let r = read(state.path(), &file);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("no answer within 1 s"), "{}", r.stderr);
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    // Killed, then reaped by whoever inherited it: gone, or a zombie until then.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while alive() {
        assert!(std::time::Instant::now() < deadline, "the reviewer's child {pid} still runs");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Found probing: the reviewer's scope for a directory answered a later call under a
/// grant nested in it that wants the owner in person. It answers none of those; the
/// owner does, in the same process or a later one (the scope read back from the log).
#[test]
fn a_reviewers_scope_never_answers_a_call_kept_for_the_owner() {
    let (data, file) = data();
    let inner = file.with_file_name("owner-only");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(inner.join("g.txt"), "for the owner").unwrap();
    let bin = tempfile::tempdir().unwrap();
    let program = reviewer(bin.path(), r#"{"answer": "approve", "scope": "path"}"#);
    let nested = format!(
        "\n[[grant]]\ntool = \"fs.read\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\napprover = \"owner\"\n",
        inner.display()
    );
    let state =
        state_with(data.path(), &nested, &format!("reviewer = [\"{}\"]\n", program.display()));
    assert_eq!(read(state.path(), &file).code, 0);
    let args = serde_json::json!({"path": inner.join("g.txt")}).to_string();
    let r = super::trust::run_answering(
        state.path(),
        &["tool", "run", "fs.read", "--session", "s", "--args", &args],
        |_| "not this one".to_owned(),
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(!r.stdout.contains("for the owner"), "{}", r.stdout);
    assert_eq!(runs(bin.path()), 1);
    let records = approvals(state.path());
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[1]["answer"], "refuse");
    assert!(records[1].get("by").is_none(), "the owner's answer: {records:?}");
}

/// The programs that answer for the owner are bx's own: a tool granted writes to their
/// directory reaches neither, by the name `config.toml` gives, by the file a symlink
/// there resolves to, or by another link to it; the rest of the directory stays writable.
#[test]
fn no_tool_rewrites_the_reviewer_or_the_notice() {
    let (data, _) = data();
    let bin = tempfile::tempdir().unwrap();
    let bin_dir = std::fs::canonicalize(bin.path()).unwrap();
    let real = reviewer(&bin_dir, r#"{"answer": "approve"}"#);
    std::os::unix::fs::symlink(&real, bin_dir.join("review-current")).unwrap();
    let notice = script(&bin_dir, "notice", "exit 0");
    let grant = format!(
        "\n[[grant]]\ntool = \"fs.write\"\npath = \"{}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n",
        bin_dir.display()
    );
    let approvals = format!(
        "reviewer = [\"{}\"]\nnotify = [\"{}\"]\n",
        bin_dir.join("review-current").display(),
        notice.display()
    );
    let state = state_with(data.path(), &grant, &approvals);
    install(state.path(), "fs_write");
    let write = |path: &Path| {
        let args = serde_json::json!({"path": path, "content": "#!/bin/sh\necho '{\"answer\": \"approve\"}'\n"});
        bx(
            state.path(),
            &["tool", "run", "fs.write", "--session", "w", "--args", &args.to_string()],
        )
    };
    for target in [bin_dir.join("review-current"), real.clone(), notice.clone()] {
        let before = std::fs::read(&target).unwrap();
        let r = write(&target);
        assert_ne!(r.code, 0, "{}: {}", target.display(), r.stdout);
        assert!(r.stderr.contains("own-state"), "{}: {}", target.display(), r.stderr);
        assert_eq!(std::fs::read(&target).unwrap(), before, "{}", target.display());
    }
    // The grant itself still works beside them.
    let r = write(&bin_dir.join("other.sh"));
    assert_eq!(r.code, 0, "{}", r.stderr);
}
