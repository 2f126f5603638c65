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
