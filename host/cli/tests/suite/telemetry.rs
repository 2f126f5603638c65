//! Telemetry through the real binaries, to a real OTLP/HTTP receiver in the test: it
//! reads each request as a collector does and decodes its protobuf body with the
//! protocol's own messages (`opentelemetry-proto`), so what is checked is what bx put on
//! the wire, not what an exporter was handed. The model is the scripted one (a test
//! double for llama-server, which cannot be made to propose these calls).

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message as _;
use serde_json::{Value, json};

use super::mcp::Raw;
use super::*;

/// One span as received.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    trace: String,
    id: String,
    parent: String,
    kind: i32,
    /// 0 unset, 1 ok, 2 error.
    status: i32,
    attrs: BTreeMap<String, String>,
}

#[derive(Default)]
struct Heard {
    spans: Vec<Got>,
    metrics: Vec<String>,
    /// Every body received, as sent: searched for what must never be exported.
    bytes: Vec<u8>,
}

/// An OTLP/HTTP receiver on a free loopback port.
struct Receiver {
    port: u16,
    heard: Arc<(Mutex<Heard>, Condvar)>,
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::ArrayValue(a)) => {
            a.values.iter().map(|v| text(&Some(v.clone()))).collect::<Vec<_>>().join(",")
        }
        _ => String::new(),
    }
}

impl Receiver {
    fn start() -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heard: Arc<(Mutex<Heard>, Condvar)> = Arc::default();
        let shared = Arc::clone(&heard);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        Receiver { port, heard }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits (two minutes at most) until `done` holds of what was heard.
    fn until(&self, what: &str, done: impl Fn(&Heard) -> bool) -> std::sync::MutexGuard<'_, Heard> {
        let deadline = Instant::now() + Duration::from_secs(120);
        let (lock, cv) = &*self.heard;
        let mut heard = lock.lock().unwrap();
        while !done(&heard) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the receiver never heard {what}; spans: {:#?}",
                heard.spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            heard = cv.wait_timeout(heard, left).unwrap().0;
        }
        heard
    }
}

/// Reads requests off one connection (kept alive) and answers each 200.
fn serve(stream: std::net::TcpStream, shared: &(Mutex<Heard>, Condvar)) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        {
            let (lock, cv) = shared;
            let mut heard = lock.lock().unwrap();
            heard.bytes.extend_from_slice(&body);
            if path == "/v1/traces" {
                let req = ExportTraceServiceRequest::decode(&body[..]).unwrap();
                for rs in req.resource_spans {
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            heard.spans.push(Got {
                                name: s.name.clone(),
                                trace: hex::encode(&s.trace_id),
                                id: hex::encode(&s.span_id),
                                parent: hex::encode(&s.parent_span_id),
                                kind: s.kind,
                                status: s.status.as_ref().map_or(0, |st| st.code),
                                attrs: s
                                    .attributes
                                    .iter()
                                    .map(|kv| (kv.key.clone(), text(&kv.value)))
                                    .collect(),
                            });
                        }
                    }
                }
            } else if path == "/v1/metrics" {
                let req = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
                for rm in req.resource_metrics {
                    for sm in rm.scope_metrics {
                        heard.metrics.extend(sm.metrics.into_iter().map(|m| m.name));
                    }
                }
            }
            cv.notify_all();
        }
        let _ = out.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        );
    }
}

const SECRET_MARKER: &str = "words-the-owner-wrote-7731";

/// Reads and writes in the workspace: reads run, writes ask; nothing else is granted.
fn setup(
    receiver: &Receiver,
    extra_config: &str,
) -> (tempfile::TempDir, PathBuf, tempfile::TempDir, PathBuf) {
    setup_at(&receiver.endpoint(), extra_config)
}

/// [`setup`] for a collector at `endpoint`, whatever answers there.
fn setup_at(
    endpoint: &str,
    extra_config: &str,
) -> (tempfile::TempDir, PathBuf, tempfile::TempDir, PathBuf) {
    let state = tempfile::tempdir().unwrap();
    let s = state.path().to_path_buf();
    install(&s, "fs_read");
    install(&s, "fs_write");
    let ws_dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws_dir.path()).unwrap();
    std::fs::write(ws.join("notes.txt"), format!("the notes: {SECRET_MARKER}")).unwrap();
    write_policy(
        &s,
        &format!(
            "[[grant]]\ntool = \"*\"\npath = \"{ws}\"\nmode = \"read\"\nlabel = \"private/trusted\"\n\
             [[grant]]\ntool = \"*\"\npath = \"{ws}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\nwhen_tainted = \"ask\"\n",
            ws = ws.display()
        ),
    );
    std::fs::write(
        s.join("config.toml"),
        format!("[telemetry]\nendpoint = \"{endpoint}\"\n{extra_config}"),
    )
    .unwrap();
    (state, s, ws_dir, ws)
}

fn one<'a>(spans: &'a [Got], name: &str) -> &'a Got {
    let found: Vec<&Got> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "{name}: {:#?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    found[0]
}

#[test]
fn a_chat_turn_with_an_approval_and_a_refusal_is_one_trace_pointing_at_its_records() {
    use bx_eval::model::{Call, Reply, Request, ScriptedModel};
    let receiver = Receiver::start();
    let (_state, s, _ws, ws) = setup(&receiver, "");
    let model = ScriptedModel::start(Arc::new(|r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        match r.results_this_turn().len() {
            0 => Reply::Calls(vec![Call::new(
                "fs.write",
                json!({"path": "out.txt", "content": SECRET_MARKER}),
            )]),
            1 => Reply::Calls(vec![Call::new("fs.read", json!({"path": "/etc/hostname"}))]),
            _ => Reply::Text("done".into()),
        }
    }))
    .unwrap();
    let config = std::fs::read_to_string(s.join("config.toml")).unwrap();
    std::fs::write(
        s.join("config.toml"),
        format!("{config}[inference]\nurl = \"{}\"\n", model.url()),
    )
    .unwrap();
    let daemon = Daemon::start(&s);
    let ws_arg = ws.to_str().unwrap();
    let (mut chat, events) = say_in_background(&s, "t1", "write it", &["--workspace", ws_arg]);
    let mut seen = Vec::new();
    let asked = next_of(&events, "approval_needed", &mut seen);
    let approval = asked["approval"].as_str().unwrap().to_owned();
    assert_eq!(bx(&s, &["approve", &approval]).code, 0);
    next_of(&events, "turn_done", &mut seen);
    let _ = chat.wait();
    let heard = receiver.until("the turn's spans", |h| {
        h.spans.iter().any(|s| s.name == "invoke_agent bx")
            && h.spans.iter().filter(|s| s.name.starts_with("execute_tool")).count() == 2
    });
    let spans = heard.spans.clone();
    drop(heard);
    daemon.stop();

    let turn = one(&spans, "invoke_agent bx");
    assert_eq!(turn.parent, "", "the turn is the root");
    assert_eq!(turn.attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(turn.attrs["gen_ai.conversation.id"], "t1");
    // Three model requests, each a client span under the turn, with its tokens.
    let chats: Vec<&Got> = spans.iter().filter(|s| s.name == "chat scripted-model").collect();
    assert_eq!(chats.len(), 3, "{spans:#?}");
    for c in &chats {
        assert_eq!((c.parent.as_str(), c.kind), (turn.id.as_str(), 3), "{c:?}");
        assert_eq!(c.attrs["gen_ai.request.model"], "scripted-model");
        assert!(c.attrs["gen_ai.usage.input_tokens"].parse::<u64>().unwrap() > 0, "{c:?}");
        assert!(c.attrs.contains_key("gen_ai.usage.output_tokens"), "{c:?}");
    }
    // The write: asked, approved by the owner, ran; it names its request record.
    let records = audit_records(&s);
    let seq_of = |call: &str| {
        records
            .iter()
            .find(|r| r["kind"] == "request" && r["fields"]["call"] == call)
            .map(|r| r["seq"].to_string())
            .unwrap()
    };
    let write = one(&spans, "execute_tool fs.write");
    assert_eq!(write.parent, turn.id);
    assert_eq!(write.trace, turn.trace);
    assert_eq!(write.attrs["bx.decision"], "ask");
    assert_eq!(write.attrs["bx.outcome"], "ok");
    assert_eq!(write.attrs["bx.audit.seq"], seq_of(&write.attrs["gen_ai.tool.call.id"]));
    let children =
        |of: &Got| -> Vec<Got> { spans.iter().filter(|s| s.parent == of.id).cloned().collect() };
    let kids = children(write);
    let decide = kids.iter().find(|s| s.name == "bx.decide").unwrap();
    assert_eq!(decide.attrs["bx.decision"], "ask");
    assert_eq!(decide.attrs["bx.taint"], "public/trusted");
    let waited = kids.iter().find(|s| s.name == "bx.approval").unwrap();
    assert_eq!(waited.attrs["bx.approval.id"], approval);
    assert_eq!(waited.attrs["bx.approval.answer"], "approve");
    assert_eq!(waited.attrs["bx.approval.by"], "owner");
    // The read outside the workspace: refused by the policy, an error span.
    let read = one(&spans, "execute_tool fs.read");
    assert_eq!(read.parent, turn.id);
    assert_eq!(read.attrs["bx.decision"], "deny");
    assert_eq!(read.attrs["bx.outcome"], "refused");
    assert_eq!(read.status, 2);
    assert_eq!(read.attrs["bx.audit.seq"], seq_of(&read.attrs["gen_ai.tool.call.id"]));
    assert!(children(read).iter().all(|s| s.name != "bx.approval"));

    // The metrics an operator charts came out at the daemon's end.
    let heard = receiver.until("the metrics", |h| h.metrics.iter().any(|m| m == "bx.tool.calls"));
    for m in [
        "bx.tool.calls",
        "bx.approval.duration",
        "bx.tool.call.duration",
        "bx.audit.append.duration",
        "bx.approvals.waiting",
    ] {
        assert!(heard.metrics.iter().any(|n| n == m), "{m} not in {:?}", heard.metrics);
    }
    // No argument's value, and nothing the call read, in any byte exported.
    let bytes = String::from_utf8_lossy(&heard.bytes);
    assert!(!bytes.contains(SECRET_MARKER), "an argument's value was exported");
}

#[test]
fn bx_mcp_continues_its_clients_trace_through_the_daemon_and_exports_no_result() {
    let receiver = Receiver::start();
    let (_state, s, _ws, ws) = setup(&receiver, "");
    let daemon = Daemon::start(&s);
    let mut mcp = Raw::start(&s, &ws);
    let (trace, parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "fs.read", "arguments": {"path": "notes.txt"},
            "_meta": {"traceparent": format!("00-{trace}-{parent}-01"), "tracestate": "congo=t61rcWkgMzE"}}})
        .to_string(),
    );
    let reply = mcp.reply(json!(7));
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert!(reply.to_string().contains(SECRET_MARKER));
    // A second call whose tracestate is not W3C's: it is passed on to no one.
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
            "name": "fs.read", "arguments": {"path": "notes.txt"},
            "_meta": {"traceparent": format!("00-{trace}-{parent}-01"),
                      "tracestate": format!("evil=STATEMARK\u{202e}\n,{}", "k=v,".repeat(40))}}})
        .to_string(),
    );
    // (One at a time: Raw::reply passes over other replies.)
    assert_eq!(mcp.reply(json!(8))["result"]["isError"], false);
    let heard = receiver.until("the calls' spans", |h| {
        h.spans.iter().filter(|s| s.name == "tools/call fs.read").count() == 2
            && h.spans.iter().filter(|s| s.name == "execute_tool fs.read").count() == 2
    });
    let spans = heard.spans.clone();
    let bytes = String::from_utf8_lossy(&heard.bytes).into_owned();
    drop(heard);
    mcp.kill();
    daemon.stop();
    assert!(bytes.contains("congo=t61rcWkgMzE"), "a valid tracestate goes on");
    assert!(!bytes.contains("STATEMARK"), "a tracestate outside W3C's bounds was exported");
    let server = spans
        .iter()
        .find(|s| s.name == "tools/call fs.read" && s.attrs["jsonrpc.request.id"] == "7")
        .unwrap();
    assert_eq!((server.trace.as_str(), server.parent.as_str()), (trace, parent), "{server:?}");
    assert_eq!(server.kind, 2, "a server span");
    assert_eq!(server.attrs["mcp.method.name"], "tools/call");
    assert_eq!(server.attrs["jsonrpc.request.id"], "7");
    assert_eq!(server.attrs["network.transport"], "pipe");
    assert!(server.attrs["mcp.session.id"].starts_with("mcp-"), "{server:?}");
    // The daemon's span of the call continues it.
    let call =
        spans.iter().find(|s| s.name == "execute_tool fs.read" && s.parent == server.id).unwrap();
    assert_eq!((call.trace.as_str(), call.parent.as_str()), (trace, server.id.as_str()));
    assert_eq!(call.attrs["bx.decision"], "allow");
    assert_eq!(call.attrs["bx.label"], "private/trusted");
    assert!(!bytes.contains(SECRET_MARKER), "a result was exported");
    assert!(!bytes.contains("notes.txt"), "an argument was exported");
}

#[test]
fn content_turned_on_is_bounded_labelled_and_never_carries_a_secret() {
    let receiver = Receiver::start();
    // Arguments and results up to public/trusted exported as they are, 64 bytes each.
    let (_state, s, _ws, ws) = setup(
        &receiver,
        "content = true\ncontent_bytes = 64\ncontent_label = \"public/trusted\"\n",
    );
    let daemon = Daemon::start(&s);
    let mut mcp = Raw::start(&s, &ws);
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "fs.read", "arguments": {"path": "notes.txt"}}})
        .to_string(),
    );
    assert_eq!(mcp.reply(json!(2))["result"]["isError"], false);
    let heard =
        receiver.until("the call", |h| h.spans.iter().any(|s| s.name == "execute_tool fs.read"));
    let call = one(&heard.spans, "execute_tool fs.read").clone();
    let bytes = String::from_utf8_lossy(&heard.bytes).into_owned();
    drop(heard);
    mcp.kill();
    daemon.stop();
    // The arguments, written at a clean taint, go as they are (within the bound); the
    // result, labelled private, above the owner's public/trusted, goes as its label.
    assert!(call.attrs["gen_ai.tool.call.arguments"].contains("notes.txt"), "{call:?}");
    assert!(call.attrs["gen_ai.tool.call.arguments"].len() <= 64, "{call:?}");
    assert_eq!(call.attrs["gen_ai.tool.call.result"], "[private/trusted]");
    assert!(!bytes.contains(SECRET_MARKER));
}

#[test]
fn an_upstream_call_carries_the_trace_on_to_the_server() {
    let receiver = Receiver::start();
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    write_policy(s, "[[grant]]\ntool = \"*\"\nmode = \"call\"\n");
    std::fs::write(
        s.join("config.toml"),
        format!("[telemetry]\nendpoint = \"{}\"\n", receiver.endpoint()),
    )
    .unwrap();
    let python = repo().join(".venv/bin/python");
    let server = repo().join("fixtures/gateway/hostile.py");
    let manifest = repo().join("fixtures/gateway/hostile.toml");
    let r = bx(
        s,
        &[
            "mcp",
            "add",
            "up",
            "--manifest",
            manifest.to_str().unwrap(),
            "--",
            python.to_str().unwrap(),
            server.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let daemon = Daemon::start(s);
    let ws = tempfile::tempdir().unwrap();
    let mut mcp = Raw::start(s, ws.path());
    mcp.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "up.trace", "arguments": {}}}).to_string());
    let reply: Value = mcp.reply(json!(3));
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    let carried = reply["result"]["content"][0]["text"].as_str().unwrap().to_owned();
    let heard = receiver.until("the upstream call", |h| {
        h.spans.iter().any(|s| s.name == "tools/call up.trace" && s.kind == 3)
    });
    let client = heard
        .spans
        .iter()
        .find(|s| s.name == "tools/call up.trace" && s.kind == 3)
        .unwrap()
        .clone();
    drop(heard);
    mcp.kill();
    daemon.stop();
    // The upstream was sent the client span's own context.
    assert_eq!(carried, format!("00-{}-{}-01", client.trace, client.id));
    assert_eq!(client.attrs["mcp.method.name"], "tools/call");
}

#[test]
fn spans_a_stopped_collector_never_got_are_counted_and_bx_doctor_shows_them() {
    // A port nothing listens on: every export is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (_state, s, _ws, ws_path) = setup_at(&format!("http://127.0.0.1:{closed}"), "");
    let s = s.as_path();
    let daemon = Daemon::start(s);
    let mut mcp = Raw::start(s, &ws_path);
    // The call itself is untouched by the collector's absence.
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "fs.read", "arguments": {"path": "notes.txt"}}})
        .to_string(),
    );
    assert_eq!(mcp.reply(json!(2))["result"]["isError"], false);
    // The daemon counts the lost spans (within a few export rounds); bx doctor says so.
    let deadline = Instant::now() + Duration::from_secs(120);
    let line = loop {
        let r = bx(s, &["doctor"]);
        if let Some(l) = r.stdout.lines().find(|l| l.starts_with("warn telemetry:")) {
            break l.to_owned();
        }
        assert!(Instant::now() < deadline, "bx doctor never showed the lost spans:\n{}", r.stdout);
        std::thread::yield_now();
    };
    assert!(
        line.contains("lost in failed exports")
            && line.contains("docs/runbook.md#telemetry-dropped"),
        "{line}"
    );
    assert!(line.contains(&format!("http://127.0.0.1:{closed}")), "{line}");
    let status: Value =
        serde_json::from_slice(&std::fs::read(s.join("telemetry.json")).unwrap()).unwrap();
    assert!(status["failed"].as_u64().unwrap() > 0, "{status}");
    assert_eq!(status["exported"], 0, "{status}");
    mcp.kill();
    daemon.stop();
}

#[test]
fn every_span_a_never_answering_collector_held_is_counted_when_the_daemon_ends() {
    // A collector that reads each request and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            keep.lock().unwrap().push(stream);
        }
    });
    let (_state, s, _ws, ws_path) =
        setup_at(&format!("http://127.0.0.1:{port}"), "timeout_secs = 1\n");
    let s = s.as_path();
    let daemon = Daemon::start(s);
    let mut mcp = Raw::start(s, &ws_path);
    let calls = 40;
    // One at a time (Raw::reply passes over other replies).
    for id in 0..calls {
        mcp.send(
            &json!({"jsonrpc": "2.0", "id": 100 + id, "method": "tools/call", "params": {
            "name": "fs.read", "arguments": {"path": "notes.txt"}}})
            .to_string(),
        );
        assert_eq!(mcp.reply(json!(100 + id))["result"]["isError"], false);
    }
    mcp.kill();
    daemon.stop();
    // Each call made two spans in the daemon (execute_tool, bx.decide): none exported,
    // every one counted as lost, however far the export had got.
    let status: Value =
        serde_json::from_slice(&std::fs::read(s.join("telemetry.json")).unwrap()).unwrap();
    let lost = status["dropped"].as_u64().unwrap() + status["failed"].as_u64().unwrap();
    assert_eq!(status["exported"], 0, "{status}");
    assert_eq!(lost, 2 * calls, "{status}");
    // bx doctor shows what the ended daemon left.
    let r = bx(s, &["doctor"]);
    assert!(r.stdout.contains("telemetry (the daemon that ended"), "{}", r.stdout);
}

#[test]
fn the_standard_otel_variables_turn_it_on_and_otel_sdk_disabled_off() {
    let receiver = Receiver::start();
    // No [telemetry] table: the daemon's environment names the collector.
    let (_state, s, _ws, ws) = setup_at("http://unused.invalid", "");
    std::fs::remove_file(s.join("config.toml")).unwrap();
    let endpoint = format!("OTEL_EXPORTER_OTLP_ENDPOINT={}", receiver.endpoint());
    let daemon = Daemon::start_with(&s, &["env", &endpoint], &[]);
    let mut mcp = Raw::start(&s, &ws);
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "fs.read", "arguments": {"path": "notes.txt"}}})
        .to_string(),
    );
    assert_eq!(mcp.reply(json!(2))["result"]["isError"], false);
    drop(
        receiver
            .until("the call's span", |h| h.spans.iter().any(|s| s.name == "execute_tool fs.read")),
    );
    mcp.kill();
    daemon.stop();
    // The same with OTEL_SDK_DISABLED=true: nothing is sent, and no status is written.
    let quiet = Receiver::start();
    let (_state, s, _ws, ws) = setup_at(&quiet.endpoint(), "");
    let daemon = Daemon::start_with(&s, &["env", "OTEL_SDK_DISABLED=true"], &[]);
    let mut mcp = Raw::start(&s, &ws);
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "fs.read", "arguments": {"path": "notes.txt"}}})
        .to_string(),
    );
    assert_eq!(mcp.reply(json!(2))["result"]["isError"], false);
    mcp.kill();
    daemon.stop();
    assert!(!s.join("telemetry.json").exists());
    assert!(
        quiet.heard.0.lock().unwrap().spans.iter().all(|s| s.name.starts_with("tools/")),
        "the daemon exported with OTEL_SDK_DISABLED=true"
    );
}
