//! One audit writer, every wait bounded, every untrusted string escaped, end to end:
//! concurrent one-shot writers and a daemon beside them; the taint race; an install
//! whose `describe` sleeps; a huge tool error; stalled and never-reading clients; a
//! hostile model server's strings on the terminal; a refused call covered by the
//! checkpoint.

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::Arc;

use bx_eval::model::{Call, Reply, ScriptedModel};
use serde_json::json;

use super::*;

/// A state directory with fs.read and http.fetch installed, a file granted
/// `private/trusted` and a page server granted `public/untrusted`, both allowed at any
/// taint.
struct Setup {
    state: tempfile::TempDir,
    _data: tempfile::TempDir,
    read: String,
    fetch: String,
}

fn setup() -> Setup {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    install(st, "fs_read");
    install(st, "http_fetch");
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("n.txt"), "note\n").unwrap();
    let port = page_server("a page from the web");
    write_policy(
        st,
        &format!(
            "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n\
             [[grant]]\ntool = \"http.fetch\"\nhost = \"127.0.0.1:{port}\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\nwhen_tainted = \"allow\"\n",
            data.path().display()
        ),
    );
    let read = json!({"path": data.path().join("n.txt")}).to_string();
    let fetch = json!({"url": format!("http://127.0.0.1:{port}/")}).to_string();
    Setup { state, _data: data, read, fetch }
}

/// Every record's seq is unique, the calls made `expected_records` records (besides the
/// installs' own), and the log verifies clean.
fn assert_one_chain(st: &Path, expected_records: usize) {
    let records = audit_records(st);
    let mut seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), records.len(), "duplicated seq values");
    let calls = records.iter().filter(|r| r["kind"] != "tool").count();
    assert_eq!(calls, expected_records);
    let r = bx(st, &["audit", "verify", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report["problems"], json!([]), "{report}");
    assert_eq!(report["calls_without_result"], json!([]), "{report}");
}

/// Four threads, each running `bx tool run fs.read` ten times in its own session; every
/// call must succeed and print the note.
fn four_one_shot_writers(st: &std::path::Path, args: &str) {
    std::thread::scope(|scope| {
        for w in 0..4 {
            scope.spawn(move || {
                for _ in 0..10 {
                    let session = format!("w{w}");
                    let r =
                        bx(st, &["tool", "run", "fs.read", "--args", args, "--session", &session]);
                    assert_eq!((r.code, r.stdout.as_str()), (0, "note\n"), "{}", r.stderr);
                }
            });
        }
    });
}

/// Regression: four concurrent `bx tool run` loops of 50 calls left 172 duplicated
/// `seq` values, and 3-17% of the calls failed after running on a shared checkpoint
/// temporary file. With no daemon, the commands take turns on the log's lock.
#[test]
fn concurrent_one_shot_writers_leave_one_chain() {
    let s = setup();
    let st = s.state.path();
    four_one_shot_writers(st, &s.read);
    assert_one_chain(st, 4 * 10 * 3);
}

/// Regression: `bx tool run` while `bx serve` ran forked the chain. With a daemon, every
/// one-shot call goes through it.
#[test]
fn one_shot_writers_beside_the_daemon_go_through_it() {
    let s = setup();
    let st = s.state.path();
    let daemon = Daemon::start(st);
    four_one_shot_writers(st, &s.read);
    // A command that cannot go through the daemon is refused rather than fork the log.
    let r = bx(st, &["audit", "verify", "--accept-break", "no"]);
    assert_ne!(r.code, 0);
    daemon.stop();
    assert_one_chain(st, 4 * 10 * 3);
}

/// Regression: one untrusted read and three trusted reads at once ended
/// `private/trusted` in 2-4 of 60 trials: the taint went down. 200 trials through the
/// daemon, 10 with the commands taking turns on the lock: no rise is lost.
#[test]
fn the_taint_race_loses_no_rise() {
    let s = setup();
    let st = s.state.path();
    let trial = |n: usize| {
        let session = format!("race{n}");
        let mut children: Vec<_> = (0..4)
            .map(|i| {
                let (tool, args) =
                    if i == 0 { ("http.fetch", &s.fetch) } else { ("fs.read", &s.read) };
                Command::new(env!("CARGO_BIN_EXE_bx"))
                    .args([
                        "--state-dir",
                        st.to_str().unwrap(),
                        "tool",
                        "run",
                        tool,
                        "--args",
                        args,
                    ])
                    .args(["--session", &session])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in &mut children {
            assert!(c.wait().unwrap().success());
        }
        session_taint(st, &session)
    };
    for n in 0..10 {
        assert_eq!(trial(n), format!("race{n}: private/untrusted\n"), "trial {n} without a daemon");
    }
    let daemon = Daemon::start(st);
    for n in 10..210 {
        assert_eq!(
            trial(n),
            format!("race{n}: private/untrusted\n"),
            "trial {n} through the daemon"
        );
    }
    daemon.stop();
}

/// Regression: a `describe` that slept made an install take as long. The install ends
/// at the deadline, refused, and nothing is installed.
#[test]
fn an_install_whose_describe_sleeps_ends_at_the_deadline() {
    let state = tempfile::tempdir().unwrap();
    let path = component("test_slow_describe");
    let digest = digest_file(&path);
    let r = bx(state.path(), &["tool", "install", path.to_str().unwrap(), "--digest", &digest]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stderr.contains("deadline exceeded") && r.stderr.contains("#tool-limit"),
        "{}",
        r.stderr
    );
    assert!(bx(state.path(), &["tool", "list", "--json"]).stdout.contains("\"tools\": {}"));
}

/// Regression: a 1.5 MiB tool error went whole into the result record and the next open
/// declared the log damaged, while a 6 MiB one was printed whole. The error is cut, the
/// log stays available, and open and verify agree.
#[test]
fn a_huge_tool_error_is_bounded_and_the_log_stays_available() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    install(st, "test_hostile");
    for bytes in [1_500_000u64, 6 << 20] {
        let args = json!({"mode": "big-error", "bytes": bytes}).to_string();
        let r = bx(st, &["tool", "run", "test.hostile", "--args", &args]);
        assert_eq!(r.code, 1, "{}", &r.stderr[..r.stderr.len().min(200)]);
        assert!(r.stderr.len() < 100 << 10, "{} bytes printed", r.stderr.len());
        assert!(r.stderr.contains("bytes cut"), "{}", &r.stderr[r.stderr.len() - 100..]);
    }
    let r = bx(st, &["tool", "run", "test.hostile", "--args", r#"{"mode":"echo","text":"alive"}"#]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "alive\n"), "{}", r.stderr);
    assert_one_chain(st, 9);
}

/// Regression: a denied `bx tool run` returned before the log was closed, so its records
/// were never covered by a checkpoint and cutting them off went unnoticed.
#[test]
fn a_refused_one_shot_call_is_covered_by_the_checkpoint() {
    let s = setup();
    let st = s.state.path();
    let outside = json!({"path": "/etc/hostname"}).to_string();
    let r = bx(st, &["tool", "run", "fs.read", "--args", &outside]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let head = audit_records(st).last().unwrap()["seq"].as_u64().unwrap();
    let cp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(st.join("audit/checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(cp["seq"].as_u64(), Some(head));
}

/// A call that asks: the session read a private file, so a public-labelled grant that
/// asks when tainted waits for the owner.
fn asking_setup() -> (Setup, String) {
    let s = setup();
    let st = s.state.path();
    let public = tempfile::tempdir().unwrap().keep();
    std::fs::write(public.join("p.txt"), "public\n").unwrap();
    let text = std::fs::read_to_string(st.join("policy.toml")).unwrap();
    write_policy(
        st,
        &format!(
            "{text}[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"public/trusted\"\nwhen_tainted = \"ask\"\n",
            public.display()
        ),
    );
    (s, json!({"path": public.join("p.txt")}).to_string())
}

/// Regression: sixteen idle or stalled connections (the default `max_connections`)
/// hung every other client, `bx approve` included. With them all held, a call's
/// approval is still answered from another terminal.
#[test]
fn stalled_connections_do_not_lock_the_owner_out() {
    let (s, ask) = asking_setup();
    let st = s.state.path();
    let daemon = Daemon::start(st);
    assert_eq!(bx(st, &["tool", "run", "fs.read", "--args", &s.read]).code, 0);
    // The asking call, waiting at its prompt with nobody typing.
    let waiting = Command::new(env!("CARGO_BIN_EXE_bx"))
        .args(["--state-dir", st.to_str().unwrap(), "tool", "run", "fs.read", "--args", &ask])
        .args(["--approval-timeout", "300"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = loop {
        let r = bx(st, &["approvals", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_default();
        if let Some(id) = v["items"][0]["approval"].as_str() {
            break id.to_owned();
        }
    };
    // Sixteen idle connections and sixteen that stall halfway through a frame.
    let mut held = Vec::new();
    for i in 0..32 {
        let mut c = daemon_socket(st);
        if i % 2 == 1 {
            c.write_all(&[0, 0, 1]).unwrap();
        }
        held.push(c);
    }
    let approved = bx(st, &["approve", &id]);
    assert_eq!(approved.code, 0, "{}{}", approved.stdout, approved.stderr);
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "public\n");
    drop(held);
    daemon.stop();
}

/// A frame the daemon cannot read ends its connection with a `bad_request` whose
/// message is the frame codec's own error: a length over the limit is refused from the
/// head, with no body sent, and a stream cut inside a frame is refused when it ends.
#[test]
fn a_bad_frame_gets_the_codecs_error_and_ends_the_connection() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let daemon = Daemon::start(st);
    let over = bx_protocol::MAX_FRAME_BYTES + 1;
    let cut = bx_protocol::encode(&bx_protocol::Envelope {
        v: bx_protocol::VERSION,
        id: 1,
        msg: bx_protocol::Body::ListSessions {},
    })
    .unwrap();
    let cases = [
        ((over as u32).to_be_bytes().to_vec(), false, bx_protocol::FrameError::TooLarge(over)),
        (
            cut[..cut.len() - 2].to_vec(),
            true,
            bx_protocol::FrameError::Truncated { expected: cut.len() - 4, got: cut.len() - 6 },
        ),
    ];
    for (bytes, close_write, want) in cases {
        let mut c = daemon_socket(st);
        c.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        c.write_all(&bytes).unwrap();
        if close_write {
            c.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let reply = bx_protocol::read_frame(&mut c).unwrap().unwrap();
        let expected = bx_protocol::Envelope {
            v: bx_protocol::VERSION,
            id: 0,
            msg: bx_protocol::Body::Error {
                code: bx_protocol::ErrorCode::BadRequest,
                message: want.to_string(),
                runbook: "docs/wire.md".into(),
            },
        };
        assert_eq!(reply, expected);
        assert!(bx_protocol::read_frame(&mut c).unwrap().is_none(), "the connection went on");
    }
    // A whole frame whose message type is 1 MB long: serde's error quotes it, and the
    // reply is bounded all the same (it was 1.8 MB, found by a probe).
    let long = format!(r#"{{"v":1,"id":1,"msg":{{"type":"{}"}}}}"#, "x".repeat(1 << 20));
    let mut c = daemon_socket(st);
    c.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    c.write_all(&(long.len() as u32).to_be_bytes()).unwrap();
    c.write_all(long.as_bytes()).unwrap();
    match bx_protocol::read_frame(&mut c).unwrap().unwrap().msg {
        bx_protocol::Body::Error { code, message, .. } => {
            assert_eq!(code, bx_protocol::ErrorCode::BadRequest);
            assert!(message.contains("unknown variant"), "{}", &message[..200]);
            assert!(message.len() <= 5 << 10, "a reply of {} bytes", message.len());
        }
        other => panic!("{other:?}"),
    }
    daemon.stop();
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Regression: a client that sent a million requests and never read grew the daemon by
/// 420 MiB. The replies waiting for it are bounded; past the bound it is dropped.
#[test]
fn a_client_that_never_reads_is_dropped_at_the_reply_bound() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let daemon = Daemon::start(st);
    let pid = daemon.pid();
    let before = rss_kib(pid);
    let mut c = daemon_socket(st);
    c.set_write_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let frame = bx_protocol::encode(&bx_protocol::Envelope {
        v: bx_protocol::VERSION,
        id: 1,
        msg: bx_protocol::Body::ListSessions {},
    })
    .unwrap();
    let batch: Vec<u8> = frame.iter().copied().cycle().take(frame.len() * 10_000).collect();
    let mut sent = 0usize;
    let dropped = loop {
        match c.write_all(&batch) {
            Ok(()) => sent += 10_000,
            Err(_) => break true,
        }
        if sent >= 1_000_000 {
            break false;
        }
    };
    assert!(dropped, "the daemon took a million requests from a client that reads nothing");
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(grown < 64 << 10, "the daemon grew by {grown} KiB");
    // Others are still served.
    assert_eq!(bx(st, &["approvals"]).code, 0);
    daemon.stop();
}

/// Bytes that would steer a terminal: an OSC window title, OSC 52 clipboard write, a
/// CSI colour in its C1 form, a bidi override, a zero-width space.
const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}]52;c;cHduZWQ=\u{7}\u{9b}31m\u{202e}\u{200b}";

fn assert_clean(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let bad: Vec<char> = text.chars().filter(|c| bx_broker::is_hidden(*c)).collect();
    assert!(bad.is_empty(), "{what}: raw {bad:?} reached the terminal:\n{text}");
}

/// Regression: error text from the inference server (an SSE error chunk, an HTTP error
/// body, a malformed tool call's name, a self-test reply) and tool output reached the
/// terminal raw; `--json` passed C1, bidi and zero-width characters through.
#[test]
fn hostile_server_strings_never_reach_the_terminal_raw() {
    let script = Arc::new(|r: &bx_eval::model::Request| {
        if r.is_self_test() {
            return Reply::Http(500, format!("self-test {HOSTILE}"));
        }
        match r.last_user() {
            "chunk" => Reply::StreamError(format!("boom {HOSTILE}")),
            "http" => Reply::Http(400, format!("bad {HOSTILE}")),
            "text" => Reply::Text(format!("hello {HOSTILE} world")),
            _ if r.results_this_turn().is_empty() => Reply::Calls(vec![Call::new(
                &format!("fs.read{HOSTILE}"),
                json!({"path": HOSTILE}),
            )]),
            _ => Reply::Text("ok".into()),
        }
    });
    let model = ScriptedModel::start(script).unwrap();
    let state = state(&model.url(), "");
    let st = state.path();
    install(st, "fs_read");
    // The daemon's own output (its self-test report) first.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_bx"))
        .args(["--state-dir", st.to_str().unwrap(), "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = serve.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("listening on") {
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0, "bx serve ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(
        String::from_utf8_lossy(&seen).contains("self-test"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    assert_clean("bx serve", &seen);
    for (message, shows) in [
        ("chunk", "boom \\u{1b}]0;pwned"),
        ("http", "bad \\u{1b}]0;pwned"),
        ("text", "hello \\u{1b}]0;pwned"),
        ("call", "fs.read\\u{1b}]0;pwned"),
    ] {
        let r = bx(st, &["chat", "--say", message, "--session", message]);
        assert_clean(&format!("chat --say {message} (stdout)"), r.stdout.as_bytes());
        assert_clean(&format!("chat --say {message} (stderr)"), r.stderr.as_bytes());
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(all.contains(shows), "{message}: the hostile text was not shown escaped: {all}");
        let r = bx(st, &["chat", "--json", "--say", message, "--session", &format!("{message}j")]);
        assert_clean(&format!("chat --json {message}"), r.stdout.as_bytes());
        for line in r.stdout.lines() {
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
    }
    let r = bx(st, &["doctor"]);
    assert!(r.stdout.contains("self-test"), "{}", r.stdout);
    assert_clean("doctor", r.stdout.as_bytes());
    let _ = Command::new("kill").args(["-TERM", &serve.id().to_string()]).status();
    let _ = serve.wait();
}

/// `bx tool run` prints tool output and refusal paths escaped.
#[test]
fn tool_output_and_refusals_are_escaped() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    install(st, "test_hostile");
    let echo = json!({"mode": "echo", "text": HOSTILE}).to_string();
    let r = bx(st, &["tool", "run", "test.hostile", "--args", &echo]);
    assert_eq!(r.code, 0);
    assert_clean("tool output", r.stdout.as_bytes());
    let refused = json!({"mode": "read", "path": format!("/nowhere/{HOSTILE}")}).to_string();
    let r = bx(st, &["tool", "run", "test.hostile", "--args", &refused]);
    assert_clean("refusal", r.stderr.as_bytes());
    let r = bx(st, &["tool", "run", &format!("x{HOSTILE}"), "--args", "{}"]);
    assert_clean("unknown tool", r.stderr.as_bytes());
}
