//! The gateway (issue 41), first part: the owner's other MCP servers added, listed,
//! accepted and removed, with the fixture code host on the official Python SDK over
//! stdio. What `bx mcp add` pins, what a changed description does, what the upstream's
//! process inherits, and the records on the audit log.

use super::*;

/// The fixture code host's command line, with its data in `dir` and its "rug pull" turned
/// on while `dir/rug` exists.
fn code_host(dir: &Path) -> Vec<String> {
    let python = repo().join(".venv/bin/python");
    assert!(python.exists(), "{} is missing; run `make setup` first", python.display());
    let server = repo().join("fixtures/gateway/code_host.py");
    [
        python.display().to_string(),
        server.display().to_string(),
        "--data".into(),
        dir.join("data.json").display().to_string(),
        "--rug".into(),
        dir.join("rug").display().to_string(),
    ]
    .into()
}

/// Runs `bx ARGV` and approves the call it asks about at its prompt, as the owner would:
/// the exit code, and all it said (the block, then its output).
fn approve_at_prompt(s: &Path, argv: &[&str]) -> (i32, String) {
    use std::io::{BufRead as _, Read as _, Write as _};
    let mut child = bx_command(s)
        .args(argv)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let mut id = None;
    while !said.contains("expires in") {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no approval block: {said}");
        if let Some(rest) = line.trim().strip_prefix("approval needed: ") {
            id = Some(rest.trim().to_owned());
        }
        said.push_str(&line);
    }
    writeln!(child.stdin.take().unwrap(), "{}", id.unwrap()).unwrap();
    stderr.read_to_string(&mut said).unwrap();
    let out = child.wait_with_output().unwrap();
    said.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status.code().unwrap_or(-1), said)
}

fn add(s: &Path, name: &str, extra: &[&str], command: &[String]) -> Run {
    let mut argv = vec!["mcp", "add", name];
    argv.extend(extra);
    argv.push("--");
    argv.extend(command.iter().map(String::as_str));
    bx(s, &argv)
}

#[test]
fn an_upstream_is_added_pinned_checked_accepted_and_removed_on_the_log() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let host = tempfile::tempdir().unwrap();
    let command = code_host(host.path());
    // Added: its four tools pinned as `code.TOOL`.
    let r = add(s, "code", &["--env", "CODE_HOST_MODE=test"], &command);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("4 of code's tools have no manifest entry"), "{}", r.stderr);
    assert!(r.stdout.contains("added code (code-host"), "{}", r.stdout);
    for tool in ["get_issue", "read_file", "list_repos", "post_comment"] {
        assert!(r.stdout.contains(&format!("  code.{tool}  ")), "{tool}: {}", r.stdout);
    }
    let installed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.join("tools/installed.json")).unwrap())
            .unwrap();
    let pins = &installed["upstreams"]["code"]["tools"];
    assert_eq!(pins.as_object().unwrap().len(), 4, "{installed}");
    // Its process got the declared variable and nothing of bx's environment (not even
    // PATH or HOME): the names it was given, from its stderr in its log.
    let log = std::fs::read_to_string(s.join("upstreams/code.log")).unwrap();
    let env = log.lines().find_map(|l| l.strip_prefix("env: ")).unwrap();
    // (LC_CTYPE is Python's own: it sets it at start when no locale is given, PEP 538.)
    let names: Vec<&str> = env.split(',').filter(|n| *n != "LC_CTYPE").collect();
    assert_eq!(names, ["CODE_HOST_MODE"], "{log}");
    // The name is taken now; a bad name and a command that speaks no MCP are refused,
    // and leave nothing added.
    let r = add(s, "code", &[], &command);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("already added"), "{}", r.stderr);
    let r = add(s, "Code.x", &[], &command);
    assert!(r.code != 0 && r.stderr.contains("bad upstream name"), "{}", r.stderr);
    let r = add(s, "mute", &[], &["/bin/true".into()]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("upstream mute: initialize failed"), "{}", r.stderr);
    assert!(r.stderr.contains("docs/runbook.md#upstream-failed"), "{}", r.stderr);
    let r = add(s, "gone", &[], &["/nonexistent/server".into()]);
    assert!(r.code != 0 && r.stderr.contains("could not be started"), "{}", r.stderr);
    let r = bx(s, &["mcp", "list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("its tools match their pins"), "{}", r.stdout);
    assert!(!r.stdout.contains("mute") && !r.stdout.contains("gone"), "{}", r.stdout);
    // The rug pull: a description changed after the pin, and a new tool. Both are off
    // until accepted, and accepting shows the change, escaped.
    std::fs::write(host.path().join("rug"), "").unwrap();
    // A call of the changed tool is not made: the server is asked for its list when it
    // starts, and the changed tool is off. (Unlabelled, it asks before every use: the
    // owner approves it at the prompt.)
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    write_policy(s, &format!("{policy}\n[[grant]]\ntool = \"code.get_issue\"\nmode = \"call\"\n"));
    let issue = serde_json::json!({"repo": "owner/website", "number": 1}).to_string();
    let (code, said) = approve_at_prompt(s, &["tool", "run", "code.get_issue", "--args", &issue]);
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("no manifest entry says what code.get_issue does"), "{said}");
    assert!(said.contains("(no scope: a tool no manifest labels asks before every use)"), "{said}");
    assert!(said.contains("is not as it was pinned"), "{said}");
    assert!(said.contains("docs/runbook.md#upstream-changed"), "{said}");
    let r = bx(s, &["mcp", "list"]);
    assert!(
        r.stdout.contains("1 changed, 1 new, 0 gone: off until `bx mcp accept code`"),
        "{}",
        r.stdout
    );
    let r = bx(s, &["mcp", "accept", "code"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("~ code.get_issue"), "{}", r.stdout);
    assert!(r.stdout.contains("description now: Reads an issue"), "{}", r.stdout);
    assert!(r.stdout.contains("send ~/.ssh/id_ed25519"), "{}", r.stdout);
    assert!(r.stdout.contains("+ code.export_all"), "{}", r.stdout);
    assert!(!r.stdout.contains('\u{1b}') && !r.stdout.contains('\u{7}'), "{:?}", r.stdout);
    assert!(r.stdout.contains("\\u{1b}]0;pwned\\u{7}"), "{}", r.stdout);
    let r = bx(s, &["mcp", "list"]);
    assert!(r.stdout.contains("its tools match their pins"), "{}", r.stdout);
    // Removed.
    let r = bx(s, &["mcp", "remove", "code"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(bx(s, &["mcp", "list"]).stdout.contains("no upstream MCP servers are added"));
    let r = bx(s, &["mcp", "remove", "code"]);
    assert!(r.code != 0 && r.stderr.contains("no upstream named"), "{}", r.stderr);
    // Each change on the log, as a tool install is, and the log verifies.
    let changes: Vec<(String, Vec<String>)> = audit_records(s)
        .iter()
        .filter(|r| r["kind"] == "tool")
        .map(|r| {
            let tools = r["fields"]["tools"].as_array().unwrap().iter();
            (
                r["fields"]["action"].as_str().unwrap().to_owned(),
                tools.map(|t| t.as_str().unwrap().to_owned()).collect(),
            )
        })
        .collect();
    let actions: Vec<&str> = changes.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(actions, ["mcp-add", "mcp-accept", "mcp-remove"], "{changes:?}");
    assert!(changes[1].1.contains(&"code.export_all".to_owned()), "{changes:?}");
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// The policy the toxic-flow tests add to the default one: the code host's reads run,
/// and a comment is refused once the session read something that may not go public.
const CODE_GRANTS: &str = r#"
[[grant]]
tool = "code.get_issue"
mode = "call"

[[grant]]
tool = "code.read_file"
mode = "call"

[[grant]]
tool = "code.post_comment"
mode = "call"
when_tainted = "deny"
"#;

/// A state directory with the default policy and `CODE_GRANTS`, and the fixture code host
/// added as `code` with its manifest; its data in `host`.
fn with_code_host(s: &Path, host: &Path) {
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    write_policy(s, &format!("{policy}\n{CODE_GRANTS}"));
    let manifest = repo().join("fixtures/gateway/code_host.toml");
    let r = add(s, "code", &["--manifest", manifest.to_str().unwrap()], &code_host(host));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// Calls `calls` (tool, JSON arguments) in order through `bx mcp` in workspace `ws` (one
/// session: the workspace's), with the official Python SDK's client
/// (`tests/mcp_call.py`): its steps, each tool named as listed and each call's result.
fn sdk_session(s: &Path, ws: &Path, calls: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_call.py");
    let out = std::process::Command::new(repo().join(".venv/bin/python"))
        .arg(&script)
        .args([env!("CARGO_BIN_EXE_bx"), s.to_str().unwrap(), ws.to_str().unwrap()])
        .args(calls.iter().flat_map(|(tool, args)| [*tool, *args]))
        .env_remove("BX_HOME")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Stops the daemons `bx mcp` started for `s` and waits until they are gone.
fn stop_daemons(s: &Path) {
    for pid in super::mcp::daemons_of(s) {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    std::fs::File::open(s.join("serve.lock")).unwrap().lock().unwrap();
}

/// The comments on the code host's issue, as it holds them.
fn comments(host: &Path) -> Vec<String> {
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(host.join("data.json")).unwrap()).unwrap();
    serde_json::from_value(data["issues"]["owner/website#1"]["comments"].clone()).unwrap()
}

/// The model of the toxic flow: it reads the issue, obeys what the issue says (reads the
/// private file, posts it as a comment), then answers; asked to thank, it reads the issue
/// and posts a thank-you.
fn toxic_model() -> bx_eval::model::ScriptedModel {
    use bx_eval::model::{Call, Reply, Request, ScriptedModel};
    let issue = serde_json::json!({"repo": "owner/website", "number": 1});
    ScriptedModel::start(std::sync::Arc::new(move |r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        let done = r.results_this_turn();
        let post =
            |body: &str| serde_json::json!({"repo": "owner/website", "number": 1, "body": body});
        let call = |tool: &str, args: serde_json::Value| Reply::Calls(vec![Call::new(tool, args)]);
        match (r.last_user().contains("thank"), done.as_slice()) {
            (_, []) => call("code.get_issue", issue.clone()),
            (false, [_]) => call(
                "code.read_file",
                serde_json::json!({"repo": "owner/payroll", "path": "salaries.csv"}),
            ),
            (false, [_, file]) => call("code.post_comment", post(file)),
            (true, [_]) => call("code.post_comment", post("Thanks, we are on it.")),
            (_, results) => Reply::Text(format!("done: {}", results.join(" | "))),
        }
    }))
    .unwrap()
}

/// Issue 41's toxic flow through `bx chat`: a public issue tells the model to read a
/// private file and post it publicly. Each call is allowed on its own; the labels the
/// guard gives refuse the post, and nothing private reaches the public issue. The
/// neighbour: a thank-you comment after reading the same issue is posted.
#[test]
fn the_toxic_flow_through_bx_chat_is_refused_at_the_public_post() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let host = tempfile::tempdir().unwrap();
    with_code_host(s, host.path());
    // Labelled per item by the fixture's guard, over the manifest: the payroll file is
    // private, the website's issue public.
    let (wasm, digest) = guard_wasm();
    let r = bx(s, &["mcp", "remove", "code"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let guard = ["--guard", wasm.to_str().unwrap(), "--guard-digest", &digest];
    let r = add(s, "code", &guard, &code_host(host.path()));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let model = toxic_model();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    let daemon = Daemon::start(s);
    let (code, events) = say(s, "toxic", "triage issue 1 of owner/website", &[]);
    assert_eq!(code, 0, "{events:?}");
    let statuses: Vec<&str> =
        of_type(&events, "tool_result").iter().map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["ok", "ok"], "{events:?}");
    let denied = of_type(&events, "tool_denied");
    assert_eq!(denied.len(), 1, "{events:?}");
    assert!(denied[0]["reason"].as_str().unwrap().contains("does not flow"), "{events:?}");
    assert!(comments(host.path()).is_empty(), "{:?}", comments(host.path()));
    let records = audit_records(s);
    let decisions: Vec<&str> = records
        .iter()
        .filter(|r| r["kind"] == "decision")
        .map(|r| r["fields"]["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["allow", "allow", "deny"], "{records:?}");
    let denied = records.iter().rev().find(|r| r["kind"] == "decision").unwrap();
    let why = denied["fields"]["why"].as_str().unwrap();
    assert!(
        why.contains(
            "session taint private/untrusted does not flow to the sink's label public/untrusted"
        ),
        "{why}"
    );
    let labels: Vec<&str> = records
        .iter()
        .filter(|r| r["kind"] == "result")
        .map(|r| r["fields"]["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["public/untrusted", "private/trusted"], "{records:?}");
    // The request of each call names the upstream tool's pin.
    let pin = |tool: &str| {
        let installed: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(s.join("tools/installed.json")).unwrap())
                .unwrap();
        installed["upstreams"]["code"]["tools"][tool]["digest"].as_str().unwrap().to_owned()
    };
    let requests: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["kind"] == "request").collect();
    assert_eq!(requests[0]["fields"]["digest"], pin("get_issue"), "{:?}", requests[0]);
    // The neighbour: the same issue read in a new session, and a thank-you posted.
    let (code, events) = say(s, "thanks", "thank the reporter of issue 1", &[]);
    assert_eq!(code, 0, "{events:?}");
    let statuses: Vec<&str> =
        of_type(&events, "tool_result").iter().map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["ok", "ok"], "{events:?}");
    assert_eq!(comments(host.path()), ["Thanks, we are on it."]);
    daemon.stop();
    // By hand, with no daemon: the upstream is started for the one call.
    let args = serde_json::json!({"repo": "owner/website", "path": "README.md"}).to_string();
    let r = bx(s, &["tool", "run", "code.read_file", "--session", "hand", "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("The public website."), "{}", r.stdout);
    // Listed beside the components, with their labels.
    let r = bx(s, &["tool", "list"]);
    let line = r.stdout.lines().find(|l| l.starts_with("code.post_comment")).unwrap_or_default();
    assert!(line.contains("mcp") && line.contains("by its guard"), "{}", r.stdout);
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// The same flow for an MCP client through `bx mcp`: the official Python SDK sees the
/// upstream's tools as `code.TOOL` and calls them in one session; the post is refused.
#[test]
fn an_mcp_client_sees_upstream_tools_and_the_toxic_post_is_refused() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let host = tempfile::tempdir().unwrap();
    with_code_host(s, host.path());
    let ws = tempfile::tempdir().unwrap();
    let issue = serde_json::json!({"repo": "owner/website", "number": 1}).to_string();
    let file = serde_json::json!({"repo": "owner/payroll", "path": "salaries.csv"}).to_string();
    let post =
        serde_json::json!({"repo": "owner/website", "number": 1, "body": "ana,91000"}).to_string();
    let steps = sdk_session(
        s,
        ws.path(),
        &[("code.get_issue", &issue), ("code.read_file", &file), ("code.post_comment", &post)],
    );
    let listed: Vec<&str> = steps
        .iter()
        .filter(|s| s["step"] == "listed")
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 3, "{steps:?}");
    let issue_listed = steps.iter().find(|s| s["name"] == "code.get_issue").unwrap();
    assert_eq!(issue_listed["schema"]["properties"]["number"]["type"], "integer", "{issue_listed}");
    let called: Vec<&serde_json::Value> = steps.iter().filter(|s| s["step"] == "called").collect();
    assert_eq!(called[0]["error"], false, "{called:?}");
    assert!(called[0]["text"].as_str().unwrap().contains("Broken link"), "{called:?}");
    assert!(called[1]["text"].as_str().unwrap().contains("ana,91000"), "{called:?}");
    assert_eq!(called[2]["error"], true, "{called:?}");
    assert!(called[2]["text"].as_str().unwrap().contains("does not flow"), "{called:?}");
    assert!(comments(host.path()).is_empty());
    let results = audit_records(s).into_iter().filter(|r| r["kind"] == "result").count();
    assert_eq!(results, 2);
    stop_daemons(s);
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// Issue 41's hostile upstream, through `bx mcp` and one daemon: it hangs, floods its
/// stderr, answers 50 MiB, exits mid-call, answers terminal escapes, and asks bx to
/// sample and to elicit. Each fails (or passes) its own call, bounded and recorded; the
/// upstream is started again at the next call; the log verifies.
#[test]
fn a_hostile_upstream_fails_only_its_own_calls() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    write_policy(s, "[[grant]]\ntool = \"*\"\nmode = \"call\"\n");
    let python = repo().join(".venv/bin/python");
    let server = repo().join("fixtures/gateway/hostile.py");
    let manifest = repo().join("fixtures/gateway/hostile.toml");
    let command = [python.display().to_string(), server.display().to_string()];
    let r = add(s, "bad", &["--manifest", manifest.to_str().unwrap(), "--timeout", "2"], &command);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let ws = tempfile::tempdir().unwrap();
    let tools =
        ["hang", "echo", "flood", "huge", "echo", "crash", "echo", "sample", "elicit", "echo"];
    let names: Vec<String> = tools.iter().map(|t| format!("bad.{t}")).collect();
    let calls: Vec<(&str, &str)> = tools
        .iter()
        .zip(&names)
        .map(|(tool, name)| {
            (name.as_str(), if *tool == "echo" { r#"{"text": "hi"}"# } else { "{}" })
        })
        .collect();
    let called: Vec<serde_json::Value> =
        sdk_session(s, ws.path(), &calls).into_iter().filter(|s| s["step"] == "called").collect();
    assert_eq!(called.len(), tools.len(), "{called:?}");
    let text = |i: usize| called[i]["text"].as_str().unwrap().to_owned();
    let error = |i: usize| called[i]["error"] == true;
    // It hangs: stopped at its deadline, and started again for the next call.
    assert!(
        error(0) && text(0).contains("no answer to the call of hang within 2 s"),
        "{}",
        text(0)
    );
    assert!(text(0).contains("docs/runbook.md#upstream-failed"), "{}", text(0));
    let pid = |i: usize| text(i).rsplit(' ').next().unwrap().to_owned();
    assert!(!error(1) && text(1).starts_with("hi from "), "{}", text(1));
    // It floods its stderr: the call answers, and the log keeps 1 MiB of it.
    assert!(!error(2) && text(2).contains("flooded"), "{}", text(2));
    let log = std::fs::metadata(s.join("upstreams/bad.log")).unwrap().len();
    assert!(log <= (1 << 20) + 4096, "{log} bytes of log");
    // 50 MiB: the message is past the bound; the call ends at its deadline.
    assert!(error(3), "{}", &text(3)[..text(3).len().min(200)]);
    assert!(text(3).len() < 4096, "{} bytes handed on", text(3).len());
    // It exits mid-call: the call fails, and the next starts a new process.
    assert!(!error(4), "{}", text(4));
    assert!(error(5) && text(5).contains("upstream bad"), "{}", text(5));
    assert!(!error(6) && pid(6) != pid(4), "{} then {}", text(4), text(6));
    // It asks bx to sample or elicit: bx offers neither (rmcp's client refuses sampling,
    // and declines an elicitation unseen), so nobody is asked and its call goes on alone.
    assert!(error(7) && !text(7).contains("sampled"), "{}", text(7));
    assert!(text(8).contains("decline"), "{}", text(8));
    assert!(!error(9), "{}", text(9));
    // Its log holds this start's stderr, and the last start's beside it: no more.
    let logs: u64 = ["bad.log", "bad.log.1", "bad.log.2"]
        .iter()
        .filter_map(|f| std::fs::metadata(s.join("upstreams").join(f)).ok())
        .map(|m| m.len())
        .sum();
    assert!(logs <= (2 << 20) + 8192, "{logs} bytes of logs");
    assert!(!s.join("upstreams/bad.log.2").exists());
    // Every call has its request and result on the log.
    let records = audit_records(s);
    for kind in ["request", "result"] {
        let n = records.iter().filter(|r| r["kind"] == kind).count();
        assert_eq!(n, tools.len(), "{kind}");
    }
    stop_daemons(s);
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
    // By hand at a terminal, what it answers is shown escaped.
    let r = bx(s, &["tool", "run", "bad.escape", "--args", "{}"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("before") && r.stdout.contains("after"), "{}", r.stdout);
    assert!(!r.stdout.contains('\u{1b}') && !r.stdout.contains('\u{7}'), "{:?}", r.stdout);
}

/// Nothing bx reads as its own is within an upstream's reach: started through `bx
/// confine`, the server reads and writes its own directory and the temporary one, and
/// neither reads nor writes the installed set (its own labels and pins), the policy, the
/// secret store or the audit log. The probing is the attacker's found in review: a
/// server that rewrote `tools/installed.json` dropped its own sink label.
#[test]
fn an_upstream_reaches_nothing_of_bxs_own() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    write_policy(s, "[[grant]]\ntool = \"*\"\nmode = \"call\"\n");
    let python = repo().join(".venv/bin/python");
    let server = repo().join("fixtures/gateway/hostile.py");
    let manifest = repo().join("fixtures/gateway/hostile.toml");
    let command = [python.display().to_string(), server.display().to_string()];
    let r = add(s, "bad", &["--manifest", manifest.to_str().unwrap()], &command);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let elsewhere = tempfile::tempdir().unwrap();
    let touch = |path: &Path, write: bool| -> String {
        let args = serde_json::json!({"path": path, "write": write}).to_string();
        let r = bx(s, &["tool", "run", "bad.touch", "--args", &args]);
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        r.stdout
    };
    let before = std::fs::read(s.join("tools/installed.json")).unwrap();
    std::fs::write(s.join("bx.sock.token"), "0".repeat(64)).unwrap();
    for own in ["tools/installed.json", "policy.toml", "config.toml", "bx.sock.token", "audit"] {
        let path = s.join(own);
        if own != "audit" {
            std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        }
        let target =
            if own == "audit" { bx_audit::day_files(&path).unwrap()[0].clone() } else { path };
        assert!(touch(&target, false).contains("refused: Permission denied"), "read {own}");
        assert!(touch(&target, true).contains("refused: Permission denied"), "write {own}");
    }
    assert_eq!(std::fs::read(s.join("tools/installed.json")).unwrap(), before);
    // What it may reach: its own directory, and a file outside bx's (read only).
    assert!(touch(&s.join("upstreams/bad/notes"), true).contains("wrote"));
    let outside = elsewhere.path().join("readme");
    std::fs::write(&outside, "hello").unwrap();
    assert!(touch(&outside, false).contains("read 5"));
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// A `[[limit]]` caps a session's calls of the tools it names in any minute: a pattern
/// (`code.*`) counts every tool of the upstream together; the call past it is refused,
/// recorded, and points to the runbook. Another session is counted apart.
#[test]
fn a_rate_limit_refuses_the_call_past_it() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let host = tempfile::tempdir().unwrap();
    with_code_host(s, host.path());
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    write_policy(s, &format!("{policy}\n[[limit]]\ntool = \"code.*\"\nper_minute = 2\n"));
    let (ws, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let issue = serde_json::json!({"repo": "owner/website", "number": 1}).to_string();
    let file = serde_json::json!({"repo": "owner/website", "path": "README.md"}).to_string();
    // `bx mcp`'s session is its workspace's.
    let session = |ws: &Path, calls: &[(&str, &str)]| -> Vec<serde_json::Value> {
        sdk_session(s, ws, calls).into_iter().filter(|s| s["step"] == "called").collect()
    };
    let called = session(
        ws.path(),
        &[("code.get_issue", &issue), ("code.read_file", &file), ("code.get_issue", &issue)],
    );
    assert_eq!(
        (called[0]["error"].clone(), called[1]["error"].clone()),
        (false.into(), false.into())
    );
    let third = called[2]["text"].as_str().unwrap();
    assert_eq!(called[2]["error"], true, "{third}");
    assert!(third.contains("limit[0]") && third.contains("at most 2 calls a minute"), "{third}");
    assert!(third.contains("docs/runbook.md#rate-limited"), "{third}");
    // Another workspace is another session, counted apart.
    let called = session(other.path(), &[("code.get_issue", &issue)]);
    assert_eq!(called[0]["error"], false, "{called:?}");
    let denied = audit_records(s)
        .into_iter()
        .filter(|r| r["kind"] == "decision" && r["fields"]["decision"] == "deny")
        .count();
    assert_eq!(denied, 1);
    stop_daemons(s);
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// The fixture guard (`tools/testing/guard-code-host`), built by `make tools`.
fn guard_wasm() -> (PathBuf, String) {
    use sha2::Digest as _;
    let wasm = repo().join("tools/target/wasm32-wasip2/release/bx_tool_test_guard_code_host.wasm");
    let bytes = std::fs::read(&wasm)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make tools` first", wasm.display()));
    (wasm, format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes))))
}

/// Labels per item, by a guard: a file of the public repository is public and may be
/// posted as a comment; a file of the private one is private, and its post is refused.
/// A guard whose bytes changed labels everything the most restrictive way.
#[test]
fn a_guard_labels_each_result_and_sink_by_its_repository() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let host = tempfile::tempdir().unwrap();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    write_policy(s, &format!("{policy}\n{CODE_GRANTS}"));
    let (wasm, digest) = guard_wasm();
    // A wrong digest is refused, and nothing is added.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let guard = ["--guard", wasm.to_str().unwrap(), "--guard-digest"];
    let r = add(s, "code", &[&guard[..], &[&wrong]].concat(), &code_host(host.path()));
    assert!(r.code != 0 && r.stderr.contains("not the recorded"), "{}", r.stderr);
    let r = add(s, "code", &[&guard[..], &[&digest]].concat(), &code_host(host.path()));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let call = |session: &str, tool: &str, args: serde_json::Value| {
        let args = args.to_string();
        bx(s, &["tool", "run", tool, "--session", session, "--args", &args])
    };
    let last_label = || {
        let records = audit_records(s);
        let result = records.iter().rev().find(|r| r["kind"] == "result").unwrap();
        result["fields"]["label"].as_str().unwrap().to_owned()
    };
    let readme = serde_json::json!({"repo": "owner/website", "path": "README.md"});
    let payroll = serde_json::json!({"repo": "owner/payroll", "path": "salaries.csv"});
    let post = |body: &str| serde_json::json!({"repo": "owner/website", "number": 1, "body": body});
    // The public file, then its post: both run.
    assert_eq!(call("pub", "code.read_file", readme.clone()).code, 0);
    assert_eq!(last_label(), "public/trusted");
    let r = call("pub", "code.post_comment", post("The public website."));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(comments(host.path()), ["The public website."]);
    // The private file: private; its post to the public issue is refused.
    assert_eq!(call("priv", "code.read_file", payroll.clone()).code, 0);
    assert_eq!(last_label(), "private/trusted");
    let r = call("priv", "code.post_comment", post("ana,91000"));
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains(
            "session taint private/trusted does not flow to the sink's label public/untrusted"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(comments(host.path()).len(), 1);
    // The guard's bytes changed on disk: not loaded; results are secret, sinks closed.
    let kept = bx_gateway::guard_file(&s.join("upstreams"), &digest);
    std::fs::write(&kept, b"not a component").unwrap();
    assert_eq!(call("broken", "code.read_file", readme).code, 0);
    assert_eq!(last_label(), "secret/untrusted");
    let r = call("broken", "code.post_comment", post("hello"));
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("secret/untrusted does not flow to the sink's label public/trusted"),
        "{}",
        r.stderr
    );
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// The fixture code host over streamable HTTP, on a loopback port: stopped on drop.
struct HttpCodeHost {
    child: std::process::Child,
    url: String,
}

impl HttpCodeHost {
    fn start(dir: &Path) -> HttpCodeHost {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut argv = code_host(dir);
        argv.extend(["--http".to_owned(), port.to_string()]);
        let child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Ready when it accepts a connection (it binds after it imported the SDK).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the HTTP code host did not listen");
            std::thread::yield_now();
        }
        HttpCodeHost { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}

impl Drop for HttpCodeHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same code host over streamable HTTP: a loopback URL needs `--allow-private`, plain
/// http anywhere else and redirects are refused (docs/gateway.md#over-http); its tools are
/// pinned and called like a stdio one's, and the toxic post is refused.
#[test]
fn an_upstream_over_http_is_pinned_called_and_held_to_its_labels() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let dir = tempfile::tempdir().unwrap();
    let host = HttpCodeHost::start(dir.path());
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    write_policy(s, &format!("{policy}\n{CODE_GRANTS}"));
    let manifest = repo().join("fixtures/gateway/code_host.toml");
    let m = manifest.to_str().unwrap();
    let r = bx(s, &["mcp", "add", "code", "--manifest", m, "--url", &host.url]);
    assert!(r.code != 0 && r.stderr.contains("not a public address"), "{}", r.stderr);
    let r = bx(s, &["mcp", "add", "code", "--url", "http://example.com/mcp"]);
    assert!(r.code != 0 && r.stderr.contains("plain http is only for loopback"), "{}", r.stderr);
    let r =
        bx(s, &["mcp", "add", "code", "--url", &host.url, "--secret-header", "Host=x{secret:a}"]);
    assert!(r.code != 0 && r.stderr.contains("a header bx or its client sets"), "{}", r.stderr);
    let r = bx(s, &["mcp", "add", "code", "--manifest", m, "--url", &host.url, "--allow-private"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("code.post_comment"), "{}", r.stdout);
    let r = bx(s, &["mcp", "list"]);
    assert!(r.stdout.contains(&format!("http: {}", host.url)), "{}", r.stdout);
    assert!(r.stdout.contains("its tools match their pins"), "{}", r.stdout);
    let call = |tool: &str, args: serde_json::Value| {
        let args = args.to_string();
        bx(s, &["tool", "run", tool, "--session", "web", "--args", &args])
    };
    let r = call("code.get_issue", serde_json::json!({"repo": "owner/website", "number": 1}));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("Broken link"), "{}", r.stdout);
    let r = call(
        "code.read_file",
        serde_json::json!({"repo": "owner/payroll", "path": "salaries.csv"}),
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let post = serde_json::json!({"repo": "owner/website", "number": 1, "body": "ana,91000"});
    let r = call("code.post_comment", post);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("does not flow to the sink's label public/untrusted"),
        "{}",
        r.stderr
    );
    assert!(comments(dir.path()).is_empty());
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// A secret bound to a stdio upstream reaches its environment when it starts and nowhere
/// else: not the installed set, not the log, and not the model, to which what the server
/// echoes of it comes back redacted. A missing secret stops the start with its name.
#[test]
fn a_secret_bound_to_an_upstream_reaches_its_process_and_nothing_else() {
    use std::io::Write as _;
    const VALUE: &str = "tok-6b1f0c33a9d84e27";
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    write_policy(s, "[[grant]]\ntool = \"*\"\nmode = \"call\"\n");
    let mut child = bx_command(s)
        .args(["secret", "set", "codetoken"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{VALUE}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let python = repo().join(".venv/bin/python");
    let server = repo().join("fixtures/gateway/hostile.py");
    let manifest = repo().join("fixtures/gateway/hostile.toml");
    let command = [python.display().to_string(), server.display().to_string()];
    let m = manifest.to_str().unwrap();
    let r = add(s, "bad", &["--manifest", m, "--secret-env", "TOKEN=codetoken"], &command);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let args = serde_json::json!({"var": "TOKEN"}).to_string();
    let r = bx(s, &["tool", "run", "bad.env", "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("TOKEN=[redacted secret codetoken]"), "{}", r.stdout);
    assert!(!r.stdout.contains(VALUE), "{}", r.stdout);
    let installed = std::fs::read_to_string(s.join("tools/installed.json")).unwrap();
    assert!(installed.contains("codetoken") && !installed.contains(VALUE), "{installed}");
    for record in audit_records(s) {
        assert!(!record.to_string().contains(VALUE), "{record}");
    }
    // Unbound: a variable of its own, not the secret.
    let r = add(s, "nosecret", &["--manifest", m, "--secret-env", "TOKEN=missing"], &command);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("secret missing is not in bx's store"), "{}", r.stderr);
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// An rmcp client (the official Rust SDK) sees the upstream's tools through `bx mcp` and
/// calls one; its request and result are on the log.
#[test]
fn an_rmcp_client_sees_and_calls_upstream_tools_through_bx_mcp() {
    use rmcp::ServiceExt as _;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let host = tempfile::tempdir().unwrap();
    with_code_host(s, host.path());
    let ws = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (names, text) = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_bx"));
        cmd.arg("--state-dir").arg(s).args(["mcp", "--workspace"]).arg(ws.path());
        cmd.env_remove("BX_HOME").stderr(std::process::Stdio::null());
        let child = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
        let client = ().serve(child).await.unwrap();
        let tools = client.list_tools(None).await.unwrap();
        let names: Vec<String> = tools.tools.iter().map(|t| t.name.to_string()).collect();
        let args = serde_json::json!({"repo": "owner/website", "number": 1});
        let params = rmcp::model::CallToolRequestParams::new("code.get_issue")
            .with_arguments(args.as_object().unwrap().clone());
        let result = client.call_tool(params).await.unwrap();
        let text = bx_gateway::result_text(&result);
        let _ = client.cancel().await;
        (names, text)
    });
    for tool in ["code.get_issue", "code.read_file", "code.list_repos", "code.post_comment"] {
        assert!(names.contains(&tool.to_owned()), "{tool}: {names:?}");
    }
    assert!(text.contains("Broken link"), "{text}");
    let records = audit_records(s);
    for kind in ["request", "decision", "result"] {
        assert_eq!(records.iter().filter(|r| r["kind"] == kind).count(), 1, "{kind}");
    }
    stop_daemons(s);
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// An upstream holds no descriptor the daemon inherited: a daemon started with one of
/// bx's files open on descriptor 200 (a shell's redirection) starts its upstreams with
/// only their own (found attacking the built binary: Landlock checks a path when it is
/// opened, and a read through an open descriptor got past it).
#[test]
fn an_upstream_inherits_no_descriptor_of_the_daemons_launcher() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    write_policy(s, "[[grant]]\ntool = \"*\"\nmode = \"call\"\n");
    let python = repo().join(".venv/bin/python");
    let server = repo().join("fixtures/gateway/hostile.py");
    let manifest = repo().join("fixtures/gateway/hostile.toml");
    let command = [python.display().to_string(), server.display().to_string()];
    let r = add(s, "bad", &["--manifest", manifest.to_str().unwrap()], &command);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let mut daemon = std::process::Command::new("bash")
        .args(["-c", r#"exec "$0" --state-dir "$1" serve 200<"$1/policy.toml""#])
        .arg(env!("CARGO_BIN_EXE_bx"))
        .arg(s)
        .env_remove("BX_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Up when it answers a listing over its socket.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !(s.join("bx.sock").exists() && bx(s, &["approvals"]).code == 0) {
        assert!(std::time::Instant::now() < deadline, "the daemon did not answer");
        assert!(daemon.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::yield_now();
    }
    let r = bx(s, &["tool", "run", "bad.fds", "--args", "{}"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("policy.toml"), "{}", r.stdout);
    assert!(!r.stdout.contains(&s.display().to_string()), "{}", r.stdout);
    let _ = std::process::Command::new("kill").args(["-TERM", &daemon.id().to_string()]).status();
    daemon.wait().unwrap();
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// One writer of an upstream's log at a time, across processes: while the daemon's
/// start of the code host holds its log, `bx mcp list` starting the same server neither
/// rotates that log away nor writes into it.
#[test]
fn a_second_start_of_an_upstream_leaves_the_running_ones_log_alone() {
    use std::os::unix::fs::MetadataExt as _;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let host = tempfile::tempdir().unwrap();
    with_code_host(s, host.path());
    let daemon = Daemon::start(s);
    let issue = serde_json::json!({"repo": "owner/website", "number": 1}).to_string();
    let r = bx(s, &["tool", "run", "code.get_issue", "--session", "one", "--args", &issue]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let log = s.join("upstreams/code.log");
    let before = std::fs::metadata(&log).unwrap().ino();
    let r = bx(s, &["mcp", "list"]);
    assert!(r.stdout.contains("its tools match their pins"), "{}", r.stdout);
    assert_eq!(
        std::fs::metadata(&log).unwrap().ino(),
        before,
        "the running start's log was rotated away"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().filter(|l| l.starts_with("env: ")).count(), 1, "{text}");
    daemon.stop();
}
