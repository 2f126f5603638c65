//! `bx mcp` with a real MCP client that no one here wrote: the official Python SDK
//! (`mcp` 2.3.0 from PyPI, installed into `.venv` by `make setup`), driven by
//! `host/cli/tests/mcp_client.py`. The daemon runs without a model: the tools work.

use std::io::BufRead as _;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::*;

fn python() -> std::path::PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(venv.exists(), "{} is missing: run `make setup`", venv.display());
    venv
}

/// Approves every call that waits, from another process (`bx approve`), until `done`.
fn approver(state: PathBuf, done: std::sync::mpsc::Receiver<()>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut approved = 0;
        while done.try_recv().is_err() {
            let r = bx(&state, &["approvals", "--json"]);
            let listed: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
            for a in listed["items"].as_array().into_iter().flatten() {
                let id = a["approval"].as_str().unwrap();
                if bx(&state, &["approve", id]).code == 0 {
                    approved += 1;
                }
            }
            // Polls the daemon's table; each poll is a request that waits for its reply.
            std::thread::yield_now();
        }
        approved
    })
}

#[test]
fn the_python_sdk_lists_calls_is_refused_waits_for_the_owner_and_hears_of_an_install() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path().to_path_buf();
    assert_eq!(bx(&s, &["policy", "init"]).code, 0);
    for tool in ["fs_read", "fs_list", "fs_write"] {
        install(&s, tool);
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "milk, eggs\n").unwrap();
    let ws_real = std::fs::canonicalize(ws.path()).unwrap();
    let daemon = Daemon::start(&s);

    let (stop, done) = std::sync::mpsc::channel();
    let approving = approver(s.clone(), done);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let mut client = Command::new(python())
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_bx"))
        .arg(&s)
        .arg(&ws_real)
        .env_remove("BX_HOME")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = client.stderr.take().unwrap();
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut steps: Vec<Value> = Vec::new();
    for line in std::io::BufReader::new(client.stdout.take().unwrap()).lines() {
        let step: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if step["step"] == "install-now" {
            install(&s, "fs_search");
        }
        steps.push(step);
    }
    let status = client.wait().unwrap();
    let _ = stop.send(());
    let approved = approving.join().unwrap();
    let errors = errors.join().unwrap();
    assert!(status.success(), "the client failed: {steps:?}\n{errors}");
    let step = |name: &str| steps.iter().find(|s| s["step"] == name).cloned().unwrap();

    assert_eq!(step("initialized")["server"], "bx");
    let listed = step("listed");
    assert_eq!(listed["tools"], json!(["fs.list", "fs.read", "fs.write"]));
    assert_eq!(listed["schema"]["type"], "object", "{listed}");
    assert!(listed["schema"]["properties"]["path"].is_object(), "{listed}");
    let granted = step("granted");
    assert_eq!(
        (granted["is_error"].clone(), granted["text"].clone()),
        (json!(false), json!("milk, eggs\n"))
    );
    let refused = step("refused");
    assert_eq!(refused["is_error"], true, "{refused}");
    let why = refused["text"].as_str().unwrap();
    assert!(why.starts_with("refused:") && why.contains("docs/runbook.md#"), "{why}");
    // The write asked; the owner approved it from another process.
    assert_eq!(approved, 1);
    let asked = step("asked");
    assert_eq!(asked["is_error"], false, "{asked}");
    assert_eq!(std::fs::read_to_string(ws_real.join("new.txt")).unwrap(), "written over MCP\n");
    let progress = asked["progress"].as_array().unwrap();
    assert!(
        progress.iter().any(|m| m.as_str().unwrap_or("").contains("bx approve")),
        "the client asked for progress and heard what it waits for: {asked}"
    );
    // A tool that does not exist is a JSON-RPC error, and the server went on serving.
    let unknown = step("unknown");
    assert_eq!(unknown["code"], -32602, "{unknown}");
    assert!(unknown["error"].as_str().unwrap().contains("no tool named no.such.tool"), "{unknown}");
    assert_eq!(step("changed")["tools"], json!(["fs.list", "fs.read", "fs.search", "fs.write"]));

    // Every call is on the audit log, in the session named after the client, and the
    // log verifies.
    daemon.stop();
    let records = audit_records(&s);
    let requests: Vec<&Value> = records.iter().filter(|r| r["kind"] == "request").collect();
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(requests.iter().all(|r| r["fields"]["session"] == "mcp-mcp"), "{requests:?}");
    for kind in ["decision", "approval", "result"] {
        assert!(records.iter().any(|r| r["kind"] == kind), "no {kind} record");
    }
    let results = records.iter().filter(|r| r["kind"] == "result").count();
    assert_eq!(results, 2, "the granted read and the approved write ran");
    let r = bx(&s, &["audit", "verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// The MCP Inspector's CLI mode (`@modelcontextprotocol/inspector` 0.15.0 from npm,
/// installed into `.tools/` by `make setup`) lists and calls bx's tools; its calls are
/// on the audit log in the session named after it.
#[test]
fn the_mcp_inspector_lists_and_calls_the_tools() {
    let inspector = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.tools/inspector/node_modules/.bin/mcp-inspector");
    assert!(inspector.exists(), "{} is missing: run `make setup`", inspector.display());
    let state = tempfile::tempdir().unwrap();
    let s = state.path().to_path_buf();
    assert_eq!(bx(&s, &["policy", "init"]).code, 0);
    install(&s, "fs_read");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "milk, eggs\n").unwrap();
    let daemon = Daemon::start(&s);
    let inspect = |method: &[&str]| -> Value {
        let out = Command::new(&inspector)
            .arg("--cli")
            .arg(env!("CARGO_BIN_EXE_bx"))
            .arg("--state-dir")
            .arg(&s)
            .arg("mcp")
            .args(method)
            .current_dir(ws.path())
            .env_remove("BX_HOME")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    let listed = inspect(&["--method", "tools/list"]);
    assert_eq!(listed["tools"][0]["name"], "fs.read", "{listed}");
    assert_eq!(listed["tools"][0]["inputSchema"]["required"], json!(["path"]), "{listed}");
    let read = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "fs.read",
        "--tool-arg",
        "path=notes.txt",
    ]);
    assert_eq!(read["isError"], false, "{read}");
    assert_eq!(read["content"][0]["text"], "milk, eggs\n", "{read}");
    let refused =
        inspect(&["--method", "tools/call", "--tool-name", "fs.read", "--tool-arg", "path=../x"]);
    assert_eq!(refused["isError"], true, "{refused}");
    daemon.stop();
    let requests: Vec<Value> =
        audit_records(&s).into_iter().filter(|r| r["kind"] == "request").collect();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests.iter().all(|r| r["fields"]["session"] == "mcp-inspector-cli"), "{requests:?}");
    let r = bx(&s, &["audit", "verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}
