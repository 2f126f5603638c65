//! Secrets (issue 27) end to end: `bx secret` keeps a value out of argv and out of every
//! listing; a `bx:tool` (http.fetch) and a standard WASI component (wasi-hostile) call a
//! loopback server bound to a secret, which sees the value while the tools see only
//! the placeholder and redactions; and nothing bx writes, prints or answers over MCP
//! holds the value (the store itself aside).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::mcp::Raw;
use super::*;

const VALUE: &str = "ghp_e2eV4lue_9f8e7d6c5b4a39281706";

/// A loopback server that keeps every request (head and body) and answers with it.
struct Echo {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Echo {
    fn start() -> Echo {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let (mut head, mut length) = (String::new(), 0usize);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let request = format!("{head}\r\n{}", String::from_utf8_lossy(&body));
                kept.lock().unwrap().push(request.clone());
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{request}",
                    request.len()
                );
            }
        });
        Echo { port, seen }
    }

    fn seen(&self) -> String {
        self.seen.lock().unwrap().join("\n")
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// `bx secret set NAME` with `value` on stdin.
fn set_secret(s: &Path, name: &str, value: &str) -> Run {
    let mut child = bx_command(s)
        .args(["secret", "set", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{value}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every spelling of the value the leak guard knows, found in `text`.
fn leaks_in(text: &[u8]) -> Vec<String> {
    let guard = bx_runtime::Secrets::new([("gh".to_owned(), VALUE.to_owned())]).unwrap();
    guard.find(text).into_iter().map(|(n, e)| format!("{n} {e}")).collect()
}

#[test]
fn bx_secret_takes_no_value_from_argv_and_never_shows_one() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    for argv in [
        vec!["secret", "set", "gh", VALUE],
        vec!["secret", "set", "gh", &format!("--value={VALUE}")],
        vec!["secret", "set", "gh", "--", VALUE],
    ] {
        let r = bx(s, &argv);
        assert_eq!(r.code, 1, "{argv:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("no value on the command line"), "{}", r.stderr);
        assert!(leaks_in(format!("{}{}", r.stdout, r.stderr).as_bytes()).is_empty());
    }
    assert!(!s.join("secrets/store.json").exists(), "a refused set wrote the store");
    let r = set_secret(s, "gh", "short");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("at least 8"), "{}", r.stderr);
    let r = set_secret(s, "gh", VALUE);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("secret gh set (33 bytes)"), "{}", r.stdout);
    assert!(r.stdout.contains("no [[secret]] rule"), "{}", r.stdout);
    let mode = |p: &str| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(s.join(p)).unwrap().permissions().mode() & 0o777
    };
    assert_eq!((mode("secrets"), mode("secrets/store.json")), (0o700, 0o600));
    let r = bx(s, &["secret", "list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("gh  set 20"), "{}", r.stdout);
    assert!(r.stdout.contains("never used"), "{}", r.stdout);
    assert!(leaks_in(r.stdout.as_bytes()).is_empty(), "{}", r.stdout);
    assert_eq!(bx(s, &["secret", "rm", "gh"]).code, 0);
    let r = bx(s, &["secret", "rm", "gh"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no secret gh"), "{}", r.stderr);
}

/// A state directory with a bound server and another, the policy granting both to
/// every tool and binding `gh` to the first, http.fetch and wasi-hostile installed.
fn setup() -> (tempfile::TempDir, Echo, Echo) {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (bound, other) = (Echo::start(), Echo::start());
    let grant = |port: u16| {
        format!(
            "[[grant]]\ntool = \"*\"\nhost = \"127.0.0.1:{port}\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\nwhen_tainted = \"allow\"\n"
        )
    };
    let policy = format!(
        "{}{}[[grant]]\ntool = \"*\"\npath = \"{{workspace}}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n\
         [[secret]]\nname = \"gh\"\ntool = \"*\"\nhost = \"127.0.0.1:{}\"\nheader.authorization = \"Bearer {{secret:gh}}\"\nenv = \"GH_TOKEN\"\n",
        grant(bound.port),
        grant(other.port),
        bound.port
    );
    write_policy(s, &policy);
    install(s, "http_fetch");
    install(s, "fs_read");
    let wasm = super::components::standard("wasi-hostile");
    let manifest = s.parent().unwrap().join(format!("hostile-{}.toml", bound.port));
    std::fs::write(
        &manifest,
        "[functions.fetch]\nfetch = [\"url\"]\n\n[functions.fetch-with]\nfetch = [\"url\"]\n\n[functions.fetch-many]\nfetch = [\"url\"]\n",
    )
    .unwrap();
    let r = install_with_manifest(s, &wasm, &manifest, "hostile");
    std::fs::remove_file(&manifest).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(set_secret(s, "gh", VALUE).code, 0);
    (state, bound, other)
}

/// Regression: a call refused by the policy whose arguments carry a secret's value (the
/// model wrote it) printed the value in the refusal on stderr, where its record held a
/// redaction. Refused before it runs (a host no grant names, a denied path) and after the
/// owner refuses, through the real binary, with and without a daemon.
#[test]
fn a_refusal_prints_no_secret() {
    let (state, _bound, _other) = setup();
    let s = state.path();
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().canonicalize().unwrap();
    let w = w.to_str().unwrap();
    let refused = [
        ("http.fetch", json!({"url": format!("http://127.0.0.1:1/?t={VALUE}")})),
        ("fs.read", json!({"path": format!("/etc/{VALUE}")})),
        ("fs.read", json!({"path": format!("{w}/../{VALUE}.txt")})),
    ];
    for (tool, args) in &refused {
        let r = bx(s, &["tool", "run", tool, "--workspace", w, "--args", &args.to_string()]);
        assert_ne!(r.code, 0, "{tool} {args}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("[redacted secret gh]"), "{tool}: {}", r.stderr);
        let printed = format!("{}{}", r.stdout, r.stderr);
        assert_eq!(leaks_in(printed.as_bytes()), Vec::<String>::new(), "{printed}");
    }
    // Through a daemon and an MCP client: the refusal it answers holds no value either.
    let mut raw = Raw::start(s, Path::new(w));
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "http.fetch", "arguments": refused[0].1}});
    raw.send(&call.to_string());
    let reply = raw.reply(json!(3)).to_string();
    assert!(reply.contains("[redacted secret gh]"), "{reply}");
    assert_eq!(leaks_in(reply.as_bytes()), Vec::<String>::new(), "{reply}");
    raw.kill();
    for pid in super::mcp::daemons_of(s) {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    std::fs::File::open(s.join("serve.lock")).unwrap().lock().unwrap();
}

/// Every file under `dir` but the secret store, with its bytes.
fn files_under(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_under(&path, out);
        } else if kind.is_file() && !path.ends_with("secrets/store.json") {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
}

#[test]
fn a_bound_server_gets_the_value_and_nothing_bx_writes_or_prints_holds_it() {
    let (state, bound, other) = setup();
    let s = state.path();
    let mut printed = String::new();
    let mut run = |tool: &str, args: Value| {
        let r = bx(s, &["tool", "run", tool, "--session", "sec", "--args", &args.to_string()]);
        printed.push_str(&r.stdout);
        printed.push_str(&r.stderr);
        r
    };
    // A bx:tool: the bound header and the placeholder it was given both carry the value.
    let args = json!({"url": bound.url("/user"), "headers": {"x-copy": "{secret:gh}"}});
    let r = run("http.fetch", args);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let out: Value = serde_json::from_str(&r.stdout).unwrap();
    let text = out["text"].as_str().unwrap();
    assert!(text.contains("authorization: Bearer [redacted secret gh]"), "{text}");
    assert!(text.contains("x-copy: [redacted secret gh]"), "{text}");
    assert!(r.stderr.contains("bx: secret gh was put into a request to 127.0.0.1"), "{}", r.stderr);
    let seen = bound.seen();
    assert!(seen.contains(&format!("authorization: Bearer {VALUE}")), "{seen}");
    assert!(seen.contains(&format!("x-copy: {VALUE}")), "{seen}");
    // A standard WASI component: the same through wasi:http, and its environment holds
    // the placeholder.
    let r = run("hostile.fetch", json!({"url": bound.url("/wasi")}));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("authorization: Bearer [redacted secret gh]"), "{}", r.stdout);
    assert!(bound.seen().contains("GET /wasi HTTP/1.1"), "{}", bound.seen());
    let r = run("hostile.env-var", json!({"name": "GH_TOKEN"}));
    assert_eq!(r.stdout.trim(), "\"{secret:gh}\"", "{}", r.stderr);
    // A hostile tool's attempts elsewhere: refused, named, on the log.
    let r = run(
        "hostile.fetch-with",
        json!({"url": other.url("/a"), "header": "authorization", "value": "{secret:gh}"}),
    );
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("#secret-unbound"), "{}{}", r.stdout, r.stderr);
    let r = run("http.fetch", json!({"url": other.url(&format!("/?t={VALUE}"))}));
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("#secret-leak"), "{}{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains(VALUE), "{}", r.stderr);
    assert_eq!(other.seen(), "", "the unbound server was reached");
    // That attempt holds the secret back: no call that can send a request runs (each
    // refusal would tell a prober one more thing) until the owner sets it again.
    let r = run("http.fetch", json!({"url": bound.url("/after")}));
    assert_ne!(r.code, 0);
    assert!(
        r.stdout.contains("#secret-quarantined") || r.stderr.contains("#secret-quarantined"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let r = bx(s, &["secret", "list"]);
    assert!(r.stdout.contains("HELD BACK since 20"), "{}", r.stdout);
    assert!(!bound.seen().contains("/after"), "{}", bound.seen());
    assert_eq!(set_secret(s, "gh", VALUE).code, 0);
    // Inside one call, after one refusal no request goes out: a prober gets one answer
    // per call, and then the secret is held back.
    let r =
        run("hostile.fetch-many", json!({"url": other.url(&format!("/?g={VALUE}")), "times": 5}));
    assert_eq!(r.stdout.trim(), "0", "{}{}", r.stdout, r.stderr);
    let last = audit_records(s).into_iter().rev().find(|r| r["kind"] == "result").unwrap();
    let refused = last["fields"]["refused"].to_string();
    assert!(refused.contains("no further request of this call is sent"), "{last}");
    assert_eq!(other.seen(), "", "the unbound server was reached");
    assert_eq!(set_secret(s, "gh", VALUE).code, 0);
    // A file holding the value, read by fs.read: the model and the log get a redaction.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), format!("token {VALUE}\n")).unwrap();
    let w = ws.path().canonicalize().unwrap();
    let r = bx(
        s,
        &[
            "tool",
            "run",
            "fs.read",
            "--workspace",
            w.to_str().unwrap(),
            "--args",
            r#"{"path":"notes.txt"}"#,
        ],
    );
    printed.push_str(&r.stdout);
    printed.push_str(&r.stderr);
    assert_eq!(r.stdout.trim(), "token [redacted secret gh]", "{}", r.stderr);
    // An MCP client calling the bound server hears only the redaction.
    let mut raw = Raw::start(s, &w);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "http.fetch", "arguments": {"url": bound.url("/mcp")}}});
    raw.send(&call.to_string());
    let reply = raw.reply(json!(7)).to_string();
    assert!(reply.contains("[redacted secret gh]"), "{reply}");
    printed.push_str(&reply);
    raw.kill();
    for pid in super::mcp::daemons_of(s) {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    std::fs::File::open(s.join("serve.lock")).unwrap().lock().unwrap();
    // The log says which secret went where, and what the guard found.
    let results: Vec<Value> =
        audit_records(s).into_iter().filter(|r| r["kind"] == "result").collect();
    let used: Vec<&Value> = results.iter().filter_map(|r| r["fields"].get("secrets")).collect();
    assert!(used.iter().all(|u| *u == &json!([{"name": "gh", "host": "127.0.0.1"}])), "{used:?}");
    assert_eq!(used.len(), 3, "{results:?}");
    let leaks: Vec<String> = results
        .iter()
        .filter_map(|r| r["fields"].get("leaks"))
        .flat_map(|l| l.as_array().unwrap().iter().map(|x| x["direction"].to_string()))
        .collect();
    assert!(leaks.contains(&"\"request\"".to_owned()), "{leaks:?}");
    assert!(leaks.contains(&"\"output\"".to_owned()), "{leaks:?}");
    let r = bx(s, &["secret", "list"]);
    assert!(r.stdout.contains("last used 20"), "{}", r.stdout);
    assert!(r.stdout.contains("to 127.0.0.1"), "{}", r.stdout);
    printed.push_str(&r.stdout);
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
    // No file of the state directory but the store, and nothing printed, holds it.
    let mut files = Vec::new();
    files_under(s, &mut files);
    assert!(files.len() > 10, "{files:?}");
    for (path, bytes) in files {
        assert_eq!(leaks_in(&bytes), Vec::<String>::new(), "{}", path.display());
    }
    assert_eq!(leaks_in(printed.as_bytes()), Vec::<String>::new(), "{printed}");
}

#[test]
fn a_store_others_can_read_refuses_calls_that_need_it_and_an_unreadable_one_refuses_all() {
    use std::os::unix::fs::PermissionsExt as _;
    let (state, bound, other) = setup();
    let s = state.path();
    let store = s.join("secrets/store.json");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = json!({"url": bound.url("/x")}).to_string();
    let r = bx(s, &["tool", "run", "http.fetch", "--args", &args]);
    assert_ne!(r.code, 0);
    assert!(
        r.stdout.contains("#secrets-exposed") || r.stderr.contains("#secrets-exposed"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(bound.seen(), "", "a refused call reached the server");
    let r = bx(s, &["secret", "list"]);
    assert!(r.stdout.contains("other users can read it"), "{}", r.stdout);
    let r = bx(s, &["doctor"]);
    assert!(r.stdout.contains("mode 644; other users can read it"), "{}", r.stdout);
    assert!(r.stdout.contains("#secrets-exposed"), "{}", r.stdout);
    // A store bx cannot read: every call, since the guard would not know what to find.
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&store, b"{\"version\": 1, \"secrets\": {\"gh\": 1}}").unwrap();
    let args = json!({"url": other.url("/")}).to_string();
    let r = bx(s, &["tool", "run", "http.fetch", "--args", &args]);
    assert_ne!(r.code, 0);
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(said.contains("#secrets-unreadable"), "{said}");
    assert_eq!(other.seen(), "", "a refused call reached the server");
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// The loop: the owner pastes the value into a message, the model uses the placeholder;
/// the transcript, every later prompt and the log hold neither the value nor its echo.
#[test]
fn the_loop_keeps_no_value_in_the_transcript_the_prompts_or_the_log() {
    use bx_eval::model::{Call, Reply, Request, ScriptedModel};
    let prompts: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&prompts);
    let (state, bound, _other) = setup();
    let url = bound.url("/loop");
    let model = ScriptedModel::start(Arc::new(move |r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        seen.lock().unwrap().push(serde_json::to_string(r.messages()).unwrap());
        if r.results_this_turn().is_empty() {
            let args = json!({"url": url, "headers": {"x-copy": "{secret:gh}"}});
            Reply::Calls(vec![Call::new("http.fetch", args)])
        } else {
            Reply::Text("fetched".into())
        }
    }))
    .unwrap();
    let s = state.path();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    let daemon = Daemon::start(s);
    let (code, events) = say(s, "loop", &format!("my token is {VALUE}; fetch with it"), &[]);
    assert_eq!(code, 0, "{events:?}");
    drop(daemon);
    assert!(bound.seen().contains(&format!("x-copy: {VALUE}")), "{}", bound.seen());
    let messages = serde_json::to_string(&transcript(s, "loop")).unwrap();
    assert!(messages.contains("my token is [redacted secret gh]"), "{messages}");
    assert!(messages.contains("x-copy: [redacted secret gh]"), "{messages}");
    // Every prompt is built from the transcript: the model never read the value either.
    let prompts = prompts.lock().unwrap();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    for prompt in prompts.iter() {
        assert_eq!(leaks_in(prompt.as_bytes()), Vec::<String>::new(), "{prompt}");
    }
    let mut files = Vec::new();
    files_under(s, &mut files);
    for (path, bytes) in files {
        assert_eq!(leaks_in(&bytes), Vec::<String>::new(), "{}", path.display());
    }
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}
