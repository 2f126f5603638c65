//! Shared helpers: the built components, a runtime, grants, a tiny HTTP server.

mod cache;
mod deadline;
mod escape;
mod http;
mod limits;
mod reach;
mod secrets;
mod standard;
mod tools;

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bx_broker::{AllowList, CallRequest, Decision, Grant, Label};
use bx_runtime::{CallError, CallReport, Limits, LoadedTool, Output, RunError, Runtime, Touched};
use sha2::Digest as _;

/// The directory `make tools` writes components to.
pub fn components_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/target/wasm32-wasip2/release")
}

/// The bytes of a built component; fails (never skips) when `make tools` has not run.
pub fn component_bytes(crate_name: &str) -> Vec<u8> {
    let path = components_dir().join(format!("bx_tool_{crate_name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make tools` before the tests", path.display()))
}

pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// Limits for tests: a short deadline so the deadline test is quick, and a host-call cap
/// low enough that a slow, shared machine reaches it well inside that deadline (a
/// million calls against the default cap of 100,000 could hit the deadline first).
pub fn test_limits() -> Limits {
    Limits { deadline: Duration::from_secs(1), host_calls: 10_000, ..Limits::default() }
}

/// One runtime per test binary, shared by every test (as the daemon shares one).
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| Runtime::new(test_limits()).unwrap())
}

/// A loaded tool, compiled once per test binary.
pub fn tool(crate_name: &'static str) -> &'static LoadedTool {
    static TOOLS: OnceLock<
        std::sync::Mutex<std::collections::HashMap<&'static str, &'static LoadedTool>>,
    > = OnceLock::new();
    let map = TOOLS.get_or_init(Default::default);
    let mut map = map.lock().unwrap();
    map.entry(crate_name).or_insert_with(|| {
        let bytes = component_bytes(crate_name);
        let rt = runtime();
        let component = rt.compile(&bytes).unwrap();
        Box::leak(Box::new(rt.load_blocking(&component, &digest_of(&bytes)).unwrap()))
    })
}

/// A grant for `tool` from the broker's decision on a call that declares exactly the
/// allow-list's resources; the hostile tool then reaches for other things, so that only
/// the runtime's per-operation checks stand between it and the world.
pub fn grant(tool: &LoadedTool, allow: AllowList) -> Grant {
    let call = CallRequest {
        tool: tool.description().name.clone(),
        digest: tool.digest().into(),
        resources: allow.resources(),
    };
    match bx_broker::decide(allow.policy(), Label::CLEAN, &call) {
        Decision::Allow(g) => g,
        other => panic!("the allow-list refused its own resources: {other:?}"),
    }
}

pub fn call(
    tool: &LoadedTool,
    allow: AllowList,
    args: serde_json::Value,
) -> Result<CallReport, RunError> {
    runtime().call_blocking(tool, grant(tool, allow), &args.to_string())
}

/// The tool's text or JSON output; panics on an error result.
pub fn ok_text(report: Result<CallReport, RunError>) -> String {
    match report.unwrap().result {
        Ok(Output::Text(t) | Output::Json(t)) => t,
        Err(e) => panic!("tool error: {e:?}"),
    }
}

/// The host's reason when the call was denied; panics otherwise.
pub fn denied(report: Result<CallReport, RunError>) -> String {
    match report.unwrap().result {
        Err(CallError::Denied(reason)) => reason,
        other => panic!("expected a denial, got {other:?}"),
    }
}

pub fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// A one-route HTTP/1.1 server on 127.0.0.1 that answers every request with `reply`
/// (status line plus headers plus body, written as given) and counts the requests.
pub struct TinyServer {
    pub port: u16,
    pub hits: Arc<AtomicUsize>,
}

impl TinyServer {
    pub fn start(reply: impl Fn(u16) -> String + Send + 'static) -> TinyServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                // Read the request head; the body (if any) is ignored.
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(reply(port).as_bytes());
            }
        });
        TinyServer { port, hits }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

pub fn http_ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}
