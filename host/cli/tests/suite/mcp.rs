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

/// A state directory with `config` as its `config.toml`, the default policy and `tools`
/// installed; a workspace with `notes.txt`, by its real path.
pub(super) struct Setup {
    _state: tempfile::TempDir,
    pub(super) s: PathBuf,
    _ws: tempfile::TempDir,
    pub(super) ws: PathBuf,
}

pub(super) fn setup(config: &str, tools: &[&str]) -> Setup {
    let state = tempfile::tempdir().unwrap();
    let s = state.path().to_path_buf();
    std::fs::write(s.join("config.toml"), config).unwrap();
    assert_eq!(bx(&s, &["policy", "init"]).code, 0);
    for tool in tools {
        install(&s, tool);
    }
    let ws_dir = tempfile::tempdir().unwrap();
    std::fs::write(ws_dir.path().join("notes.txt"), "milk, eggs\n").unwrap();
    let ws = std::fs::canonicalize(ws_dir.path()).unwrap();
    Setup { _state: state, s, _ws: ws_dir, ws }
}

/// The session `bx mcp` works in for workspace `ws` when the owner names none: named
/// after the workspace, whatever the client calls itself.
fn workspace_session(ws: &Path) -> String {
    use sha2::Digest as _;
    let path = ws.to_str().unwrap();
    let name = ws.file_name().unwrap().to_str().unwrap().trim_matches(|c| c == '-' || c == '.');
    format!("mcp-{name}-{}", hex::encode(&sha2::Sha256::digest(path.as_bytes())[..4]))
}

/// The request records on `s`'s log, after checking that the log verifies.
pub(super) fn requests_verified(s: &Path) -> Vec<Value> {
    let r = bx(s, &["audit", "verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    audit_records(s).into_iter().filter(|r| r["kind"] == "request").collect()
}

/// Approves every call that waits, from another process (`bx approve`), until `done`.
pub(super) fn approver(
    state: PathBuf,
    done: std::sync::mpsc::Receiver<()>,
) -> std::thread::JoinHandle<usize> {
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

/// `bx mcp` on stdio, driven by hand: lines in, parsed replies out.
pub(super) struct Raw {
    server: std::process::Child,
    stdin: std::process::ChildStdin,
    pub(super) replies: std::sync::mpsc::Receiver<Value>,
}

/// Starts `bx mcp` in `ws` with its stdin and stdout piped.
fn spawn_mcp(s: &Path, ws: &Path) -> std::process::Child {
    bx_command(s)
        .args(["mcp", "--workspace"])
        .arg(ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

impl Raw {
    /// Starts `bx mcp` and completes the handshake.
    pub(super) fn start(s: &Path, ws: &Path) -> Raw {
        let mut server = spawn_mcp(s, ws);
        let stdin = server.stdin.take().unwrap();
        let replies = forward_lines(server.stdout.take().unwrap(), |l| {
            serde_json::from_str::<Value>(&l).unwrap()
        });
        let mut raw = Raw { server, stdin, replies };
        raw.send(INITIALIZE);
        assert_eq!(raw.reply(json!(1))["result"]["serverInfo"]["name"], "bx");
        raw.send(INITIALIZED);
        raw
    }

    pub(super) fn send(&mut self, line: &str) {
        use std::io::Write as _;
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next reply with `id` (a minute at most); earlier others are passed over.
    pub(super) fn reply(&self, id: Value) -> Value {
        loop {
            let r = self.replies.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
            if r["id"] == id {
                return r;
            }
        }
    }

    pub(super) fn kill(mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// `bx mcp --http` on a free loopback port, working in `ws`, and its URL once it serves
/// (read from its stderr, which is drained after).
pub(super) fn spawn_http(s: &Path, ws: &Path) -> (std::process::Child, String) {
    let mut server = bx_command(s)
        .args(["mcp", "--http", "127.0.0.1:0", "--workspace"])
        .arg(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("bx mcp --http ended before serving").unwrap();
        if let Some(at) = line.find("http://") {
            break line[at..].trim().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (server, url)
}

/// The approvals waiting in the daemon of `s`.
pub(super) fn approvals(s: &Path) -> Vec<Value> {
    let r = bx(s, &["approvals", "--json"]);
    let listed: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
    listed["items"].as_array().cloned().unwrap_or_default()
}

/// Runs `mcp_client.py` with `args`, installing fs.search when it says `install-now`;
/// returns its exit status, the steps it printed and its stderr.
fn python_client(
    s: &Path,
    args: &[&std::ffi::OsStr],
) -> (std::process::ExitStatus, Vec<Value>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let mut client = Command::new(python())
        .arg(&script)
        .args(args)
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
            install(s, "fs_search");
        }
        steps.push(step);
    }
    (client.wait().unwrap(), steps, errors.join().unwrap())
}

#[test]
fn the_python_sdk_lists_calls_is_refused_waits_for_the_owner_and_hears_of_an_install() {
    let Setup { s, ws: ws_real, .. } = &setup("", &["fs_read", "fs_list", "fs_write"]);
    let (s, ws_real) = (s.clone(), ws_real.clone());
    let daemon = Daemon::start(&s);

    let (stop, done) = std::sync::mpsc::channel();
    let approving = approver(s.clone(), done);
    let bx_exe = std::ffi::OsString::from(env!("CARGO_BIN_EXE_bx"));
    let (status, steps, errors) =
        python_client(&s, &["stdio".as_ref(), &bx_exe, s.as_ref(), ws_real.as_ref()]);
    let _ = stop.send(());
    let approved = approving.join().unwrap();
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
    let session = workspace_session(&ws_real);
    assert!(requests.iter().all(|r| r["fields"]["session"] == session), "{requests:?}");
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
    let Setup { s, ws, .. } = &setup("", &["fs_read"]);
    let (s, ws) = (s.clone(), ws.clone());
    let daemon = Daemon::start(&s);
    let inspect = |method: &[&str]| -> Value {
        let out = Command::new(&inspector)
            .arg("--cli")
            .arg(env!("CARGO_BIN_EXE_bx"))
            .arg("--state-dir")
            .arg(&s)
            .arg("mcp")
            .args(method)
            .current_dir(&ws)
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
    let requests = requests_verified(&s);
    assert_eq!(requests.len(), 2, "{requests:?}");
    // Named after the workspace, not the client: a client cannot shed its session's
    // taint by reconnecting under another name.
    let session = workspace_session(&ws);
    assert!(requests.iter().all(|r| r["fields"]["session"] == session), "{requests:?}");
}

/// `bx mcp --http`: the Python SDK over Streamable HTTP with the bearer token (list, a
/// granted call, a refused one, one the owner approves, an unknown tool), and the
/// server's own checks, seen from raw requests: no token, a wrong token, a Host that is
/// not loopback (DNS rebinding), any Origin, and a non-loopback address without
/// `--allow-remote`.
#[test]
fn streamable_http_needs_the_token_checks_host_and_origin_and_serves_the_sdk() {
    let Setup { s, ws: ws_real, .. } = &setup("", &["fs_read", "fs_list", "fs_write"]);
    let (s, ws_real) = (s.clone(), ws_real.clone());
    let daemon = Daemon::start(&s);

    let refused = bx(&s, &["mcp", "--http", "0.0.0.0:0"]);
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("--allow-remote"), "{}", refused.stderr);

    let (mut server, url) = spawn_http(&s, &ws_real);
    let token_file = s.join("mcp.token");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let http = reqwest::blocking::Client::new();
    let post = |headers: &[(&str, String)]| -> u16 {
        let mut req = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init.to_string());
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send().unwrap().status().as_u16()
    };
    let bearer = format!("Bearer {token}");
    assert_eq!(post(&[]), 401, "no token");
    assert_eq!(post(&[("authorization", format!("Bearer {}", "0".repeat(64)))]), 401);
    assert_eq!(post(&[("authorization", bearer.clone()), ("host", "evil.example".into())]), 403);
    assert_eq!(
        post(&[("authorization", bearer.clone()), ("origin", "http://evil.example".into())]),
        403
    );
    assert_eq!(post(&[("authorization", bearer)]), 200);

    let (stop, done) = std::sync::mpsc::channel();
    let approving = approver(s.clone(), done);
    let (status, steps, errors) =
        python_client(&s, &["http".as_ref(), url.as_ref(), token.as_ref()]);
    let _ = stop.send(());
    let approved = approving.join().unwrap();
    assert!(status.success(), "the client failed: {steps:?}\n{errors}");
    let step = |name: &str| steps.iter().find(|s| s["step"] == name).cloned().unwrap();
    assert_eq!(step("listed")["tools"], json!(["fs.list", "fs.read", "fs.write"]));
    assert_eq!(step("granted")["text"], "milk, eggs\n");
    assert_eq!(step("refused")["is_error"], true);
    assert_eq!((approved, step("asked")["is_error"].clone()), (1, json!(false)));
    assert_eq!(step("unknown")["code"], -32602);
    assert_eq!(std::fs::read_to_string(ws_real.join("new.txt")).unwrap(), "written over MCP\n");
    // The install reached the HTTP client as a notification on its session's stream.
    assert_eq!(step("changed")["tools"], json!(["fs.list", "fs.read", "fs.search", "fs.write"]));

    assert!(
        Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap().success()
    );
    assert!(server.wait().unwrap().success(), "bx mcp --http ends cleanly on SIGTERM");
    daemon.stop();
    assert_eq!(requests_verified(&s).len(), 3);
}

/// Bad input over stdio gets a JSON-RPC error, and the server goes on serving: malformed
/// JSON and a 100 MB line (`id` null: none can be read), an unknown method, a call to a
/// tool that does not exist, params that are not MCP's, arguments that do not fit the
/// schema.
/// A client that goes away mid-call leaves the call's records complete: the approval it
/// waited for times out as a refusal on the log.
#[test]
fn bad_input_is_answered_with_an_error_and_a_client_gone_mid_call_leaves_whole_records() {
    let Setup { s, ws, .. } = &setup("[loop]\napproval_secs = 2\n", &["fs_read", "fs_write"]);
    let daemon = Daemon::start(s);
    let mut raw = Raw::start(s, ws);
    raw.send("{this is not json");
    let unparsed = raw.reply(Value::Null);
    assert_eq!(unparsed["error"]["code"], -32700, "{unparsed}");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100 << 20)
    ));
    let oversized = raw.reply(Value::Null);
    assert_eq!(oversized["error"]["code"], -32600, "{oversized}");
    assert!(oversized["error"]["message"].as_str().unwrap().contains("8388608 bytes"));
    raw.send(
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"fs.read","arguments":[1,2]}}"#,
    );
    assert_eq!(raw.reply(json!(8))["error"]["code"], -32602);
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"no/such/method"}"#);
    assert_eq!(raw.reply(json!(2))["error"]["code"], -32601);
    raw.send(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm.rf","arguments":{}}}"#,
    );
    assert_eq!(raw.reply(json!(3))["error"]["code"], -32602);
    raw.send(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fs.read","arguments":{"path":5}}}"#,
    );
    let misfit = raw.reply(json!(4));
    assert_eq!(misfit["error"]["code"], -32602, "{misfit}");
    assert!(misfit["error"]["message"].as_str().unwrap().contains("/path"), "{misfit}");
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#);
    assert!(raw.reply(json!(5))["result"].is_object(), "still serving after the bad lines");
    // Nothing of the above reached the log as a call.
    assert!(audit_records(s).iter().all(|r| r["kind"] != "request"));
    // A write asks the owner; the client goes away while it waits.
    raw.send(
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"fs.write","arguments":{"path":"a.txt","content":"x"}}}"#,
    );
    let mut waited = 0;
    while approvals(s).is_empty() {
        waited += 1;
        assert!(waited < 600, "the call never asked");
        std::thread::yield_now();
    }
    raw.kill();
    // The approval times out (2 s) as a refusal, and the call's records are complete.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        // The answer's record first, then the report (read the other way round, a
        // report from just before the answer landed named the call as lacking it).
        let approvals = audit_records(s).iter().filter(|r| r["kind"] == "approval").count();
        if approvals == 1 {
            let r = bx(s, &["audit", "verify", "--json"]);
            let report: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
            assert_eq!(r.code, 0, "{}", r.stdout);
            assert_eq!(report["calls_without_result"], json!([]), "{report}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the approval never timed out");
        std::thread::yield_now();
    }
    assert!(!ws.join("a.txt").exists(), "the unanswered write did not run");
    daemon.stop();
}

/// One client has at most four calls running in the daemon at a time: eight pipelined
/// writes that each wait for the owner show up as at most four approvals, and all eight
/// run as the owner answers (a probe, when each call had its own connection, held all
/// 16 with 20 such calls, locking the owner's chat out).
#[test]
fn one_client_runs_at_most_four_calls_at_once() {
    let Setup { s, ws, .. } = &setup("", &["fs_write"]);
    let daemon = Daemon::start(s);
    let mut raw = Raw::start(s, ws);
    for i in 0..8 {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"fs.write","arguments":{{"path":"f{i}.txt","content":"x"}}}}}}"#,
            10 + i
        ));
    }
    let (mut most, mut approved, mut polls) = (0, 0, 0);
    while approved < 8 {
        polls += 1;
        assert!(polls < 20_000, "approved {approved} of 8");
        let items = approvals(s);
        most = most.max(items.len());
        // Answer only once four wait (or all that are left), so the bound is seen.
        if items.len() >= 4.min(8 - approved) {
            for a in &items {
                if bx(s, &["approve", a["approval"].as_str().unwrap()]).code == 0 {
                    approved += 1;
                }
            }
        }
    }
    assert_eq!(most, 4, "at most four calls of one client wait at once");
    for _ in 0..8 {
        let r = raw.replies.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    raw.kill();
    daemon.stop();
    assert_eq!(requests_verified(s).len(), 8);
}

/// The bridge's `run_tool` is `quiet`: only the outcome comes back (and an approval the
/// owner must answer), not the call's other events. Two calls on one connection, as
/// the bridge sends them: the loud one hears every event, the quiet one its outcome.
#[test]
fn a_quiet_run_tool_hears_only_its_outcome() {
    use bx_protocol::{Body, Envelope, Overlay, VERSION};
    use std::io::Write as _;
    let Setup { s, ws, .. } = &setup("", &["fs_read"]);
    let daemon = Daemon::start(s);
    let mut stream = daemon_socket(s);
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut heard = |id: u64, quiet: bool| -> Vec<&'static str> {
        let msg = Body::RunTool {
            session: "quiet".into(),
            tool: "fs.read".into(),
            args: r#"{"path":"notes.txt"}"#.into(),
            overlay: Overlay::default(),
            workspace: Some(ws.to_str().unwrap().into()),
            quiet,
            traceparent: None,
        };
        stream.write_all(&bx_protocol::encode(&Envelope { v: VERSION, id, msg }).unwrap()).unwrap();
        let mut types = Vec::new();
        loop {
            let e = bx_protocol::read_frame(&mut stream).unwrap().unwrap();
            assert_eq!(e.id, id, "{e:?}");
            types.push(e.msg.type_name());
            if let Body::ToolOutput { text, .. } = &e.msg {
                assert_eq!(text, "milk, eggs\n");
                return types;
            }
        }
    };
    assert_eq!(
        heard(1, false),
        ["tool_call_proposed", "tool_started", "tool_result", "tool_output"]
    );
    assert_eq!(heard(2, true), ["tool_output"]);
    daemon.stop();
    assert_eq!(requests_verified(s).len(), 2);
}

/// A call the client cancels gives up its place: one still waiting for a place never
/// starts (no request on the log), and one waiting for the owner has its approval
/// refused on its behalf, so the next call gets the place.
#[test]
fn a_cancelled_call_is_withdrawn_and_frees_its_place() {
    let Setup { s, ws, .. } = &setup("", &["fs_write"]);
    let daemon = Daemon::start(s);
    let mut raw = Raw::start(s, ws);
    let wait_for = |n: usize| {
        let mut polls = 0;
        while approvals(s).len() != n {
            polls += 1;
            assert!(polls < 20_000, "never {n} approvals waiting");
        }
    };
    for i in 0..6 {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"fs.write","arguments":{{"path":"f{i}.txt","content":"x"}}}}}}"#,
            10 + i
        ));
    }
    wait_for(4);
    let cancel = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
        )
    };
    // The sixth waits for a place: cancelled, it never starts. The first four wait for
    // the owner: cancelled, they are refused. (A cancelled request gets no response:
    // MCP says none is sent.)
    raw.send(&cancel(15));
    for id in 10..14 {
        raw.send(&cancel(id));
    }
    // The fifth gets a place and waits; the owner approves it.
    let mut polls = 0;
    let last = loop {
        let items = approvals(s);
        if let [only] = &items[..]
            && only.to_string().contains("f4.txt")
        {
            break only["approval"].as_str().unwrap().to_owned();
        }
        polls += 1;
        assert!(polls < 20_000, "the fifth call never asked: {items:?}");
    };
    assert_eq!(bx(s, &["approve", &last]).code, 0);
    assert_eq!(raw.reply(json!(14))["result"]["isError"], false);
    raw.kill();
    daemon.stop();
    assert_eq!(requests_verified(s).len(), 5, "the sixth never reached the daemon");
    let written: Vec<_> = (0..6).filter(|i| ws.join(format!("f{i}.txt")).exists()).collect();
    assert_eq!(written, [4]);
    let withdrawn = audit_records(s)
        .iter()
        .filter(|r| r["kind"] == "approval" && r.to_string().contains("cancelled"))
        .count();
    assert_eq!(withdrawn, 4, "each waiting call refused on the client's behalf");
}

/// A client that closes its end of stdout while stdin stays open ends the server at its
/// next answer, instead of leaving it serving into nothing.
#[test]
fn a_closed_stdout_ends_the_server() {
    use std::io::{BufRead as _, Write as _};
    let Setup { s, ws, .. } = &setup("", &["fs_read"]);
    let daemon = Daemon::start(s);
    let mut server = spawn_mcp(s, ws);
    let mut stdin = server.stdin.take().unwrap();
    let mut send = |line: &[u8]| {
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    send(INITIALIZE.as_bytes());
    let mut stdout = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("serverInfo"), "{first}");
    send(INITIALIZED.as_bytes());
    drop(stdout);
    send(br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
    let began = std::time::Instant::now();
    while server.try_wait().unwrap().is_none() {
        assert!(began.elapsed() < std::time::Duration::from_secs(60), "still serving");
        std::thread::yield_now();
    }
    daemon.stop();
}

/// A daemon that stops while `bx mcp` serves comes back at the client's next call, as
/// at the start of `bx mcp`, also when the call is to a tool `bx mcp` has not listed
/// yet; a listing (or the watch for new tools) does not start one, so the daemon the
/// owner stopped stays stopped until a call needs it.
#[test]
fn a_call_after_the_daemon_stopped_starts_it_again() {
    let Setup { s, ws, .. } = &setup("", &["fs_read"]);
    let daemon = Daemon::start(s);
    let mut raw = Raw::start(s, ws);
    raw.send(&call(2, "fs.read", "notes.txt"));
    let first = raw.reply(json!(2));
    assert_eq!(first["result"]["isError"], false, "{first}");
    daemon.stop();

    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
    let listed = raw.reply(json!(3));
    assert!(listed["error"]["message"].as_str().unwrap().contains("not running"), "{listed}");

    // Installed while no daemon runs: `bx mcp` has not seen it, so the call looks it up
    // first, and that look-up starts the daemon.
    install(s, "fs_list");
    raw.send(&call(4, "fs.list", "."));
    let listed_dir = raw.reply(json!(4));
    assert_eq!(listed_dir["result"]["isError"], false, "{listed_dir}");
    assert!(listed_dir.to_string().contains("notes.txt"), "{listed_dir}");
    raw.send(&call(5, "fs.read", "notes.txt"));
    let again = raw.reply(json!(5));
    assert_eq!(again["result"]["isError"], false, "{again}");
    assert!(again.to_string().contains("milk, eggs"), "{again}");
    raw.kill();
    // The three calls are on the one log, across the two daemons, and it verifies.
    let requests = requests_verified(s);
    assert_eq!(requests.len(), 3, "{requests:#?}");
    stop_the_daemon_bx_mcp_started(s);
}

/// A call made as the daemon stops (SIGTERM: it drains, still holding `serve.lock`, so
/// the `bx serve` that `bx mcp` starts finds it held and exits) is answered once the
/// old daemon has gone: `bx mcp` starts another then, instead of waiting minutes for
/// one that will never answer.
#[test]
fn a_call_as_the_daemon_stops_starts_the_next_one_once_it_has_gone() {
    let Setup { s, ws, .. } = &setup("", &["fs_read"]);
    let daemon = Daemon::start(s);
    let mut raw = Raw::start(s, ws);
    raw.send(&call(2, "fs.read", "notes.txt"));
    assert_eq!(raw.reply(json!(2))["result"]["isError"], false);
    // Hold the lock as a stopping daemon does, with no socket to answer: the old daemon
    // is gone, and this process stands in for its drain.
    daemon.stop();
    let held = std::fs::File::open(s.join("serve.lock")).unwrap();
    held.lock().unwrap();
    raw.send(&call(3, "fs.read", "notes.txt"));
    // bx mcp's first start finds the lock held and exits; the next waits for it.
    let log = s.join("serve.log");
    let began = std::time::Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("daemon-running") {
        assert!(began.elapsed() < std::time::Duration::from_secs(60), "no bx serve was started");
        std::thread::yield_now();
    }
    drop(held);
    let answered = raw.reply(json!(3));
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    raw.kill();
    assert_eq!(requests_verified(s).len(), 2);
    stop_the_daemon_bx_mcp_started(s);
}

/// A `tools/call` of `tool` with `{"path": path}`, as one line.
fn call(id: u64, tool: &str, path: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"path":"{path}"}}}}}}"#
    )
}

/// Stops the one daemon `bx mcp` started for `s` (SIGTERM), and waits for it to let go
/// of `serve.lock`.
fn stop_the_daemon_bx_mcp_started(s: &Path) {
    let started = daemons_of(s);
    assert_eq!(started.len(), 1, "one daemon came back: {started:?}");
    assert!(
        Command::new("kill").args(["-TERM", &started[0].to_string()]).status().unwrap().success()
    );
    std::fs::File::open(s.join("serve.lock")).unwrap().lock().unwrap();
}

/// The `bx serve` processes of state directory `s`, from `/proc`.
pub(super) fn daemons_of(s: &Path) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let state = s.as_os_str().as_encoded_bytes();
        if args.windows(2).any(|w| w[0] == b"--state-dir" && w[1] == state)
            && args.contains(&&b"serve"[..])
        {
            found.push(pid);
        }
    }
    found
}

/// The names of the threads of process `pid`.
fn threads_of(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

/// `bx mcp` serves whatever the client gives it as stdin and stdout: pipes and sockets
/// (a Node client's are a socket pair) on its one runtime thread, with no thread to
/// relay a message (each would cost a hand-off per message, docs/mcp.md); a file or a
/// terminal through a relay. Every kind answers every line, bad ones included, and
/// ends at the input's end.
#[test]
fn stdio_of_every_kind_is_served_and_pipes_without_a_relay() {
    use std::io::{BufRead as _, Write as _};
    let Setup { s, ws, .. } = &setup("", &["fs_read"]);
    let daemon = Daemon::start(s);
    let input = [INITIALIZE, INITIALIZED, &call(2, "fs.read", "notes.txt"), "{not json"];
    // The answers in any order (a bad line's comes as soon as it is read).
    let check = |replies: &[Value], how: &str| {
        assert_eq!(replies.len(), 3, "{how}: {replies:?}");
        let by_id = |id: Value| replies.iter().find(|r| r.get("id") == Some(&id)).unwrap();
        assert_eq!(by_id(json!(1))["result"]["serverInfo"]["name"], "bx", "{how}");
        let read = by_id(json!(2));
        let text = read["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("milk, eggs"), "{how}: {read}");
        let bad = replies.iter().find(|r| r.get("id").is_none()).unwrap();
        assert_eq!(bad["error"]["code"], -32700, "{how}: {bad}");
    };

    // Pipes: the relay threads are never started.
    let mut raw = Raw::start(s, ws);
    raw.send(&call(2, "fs.read", "notes.txt"));
    assert_eq!(raw.reply(json!(2))["result"]["isError"], false);
    let names = threads_of(raw.server.id());
    assert!(!names.iter().any(|n| n.starts_with("mcp-std")), "{names:?}");
    raw.kill();

    // A socket pair, as Node gives its children.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_out = theirs.try_clone().unwrap();
    let mut server = bx_command(s)
        .args(["mcp", "--workspace"])
        .arg(ws)
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut writer = ours.try_clone().unwrap();
    let mut reader = std::io::BufReader::new(ours);
    let mut replies = Vec::new();
    for line in input {
        writeln!(writer, "{line}").unwrap();
        if line != INITIALIZED {
            let mut reply = String::new();
            reader.read_line(&mut reply).unwrap();
            replies.push(serde_json::from_str::<Value>(&reply).unwrap());
        }
    }
    let names = threads_of(server.id());
    assert!(!names.iter().any(|n| n.starts_with("mcp-std")), "{names:?}");
    writer.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(server.wait().unwrap().success());
    check(&replies, "a socket pair");

    // Files: read to the end, every answer written out before the exit.
    let dir = tempfile::tempdir().unwrap();
    let (requests, answers) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    std::fs::write(&requests, input.join("\n")).unwrap();
    let status = bx_command(s)
        .args(["mcp", "--workspace"])
        .arg(ws)
        .stdin(std::fs::File::open(&requests).unwrap())
        .stdout(std::fs::File::create(&answers).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let replies: Vec<Value> = std::fs::read_to_string(&answers)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    check(&replies, "files");
    daemon.stop();
}
