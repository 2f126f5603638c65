//! A scripted model server that speaks the part of llama-server's API bx uses: `/props`,
//! `/health`, `/slots`, the control endpoint, and streamed chat completions with tool
//! calls. What it says is decided by a [`Script`] from the whole request, so a test or
//! the benchmark can play a model that is entirely the attacker's: it proposes exactly
//! the calls (or the hostile bytes) the script wants. It is the attacker, not a stand-in
//! for one, and it counts every call it proposed, so the audit log can be checked against
//! it.

use std::io::Read as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

/// One tool call the model proposes.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The tool's name, exactly as sent (it may be hostile).
    pub name: String,
    /// The arguments, sent as the JSON text of this value.
    pub arguments: Value,
}

impl Call {
    /// A call of `name` with `arguments`.
    pub fn new(name: &str, arguments: Value) -> Call {
        Call { name: name.to_owned(), arguments }
    }
}

/// What the model answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Text, streamed a few characters per chunk.
    Text(String),
    /// Tool calls (and no text).
    Calls(Vec<Call>),
    /// An error chunk in the stream (`data: {"error": …}`), with this message.
    StreamError(String),
    /// A plain HTTP reply, status and body, instead of a stream.
    Http(u16, String),
    /// Exactly these bytes as the SSE body (a hostile or malformed stream).
    RawSse(Vec<u8>),
}

/// What the script sees of one request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The whole request body.
    pub body: Value,
    /// How many chat requests came before this one (over the server's life).
    pub index: u64,
}

impl Request {
    /// The messages of the request.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default()
    }

    /// The text of the last user message.
    pub fn last_user(&self) -> &str {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
    }

    /// The tool results since the last user message, oldest first.
    pub fn results_this_turn(&self) -> Vec<&str> {
        let msgs = self.messages();
        let start = msgs.iter().rposition(|m| m["role"] == "user").map_or(0, |i| i + 1);
        msgs[start..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
            .collect()
    }

    /// The tool calls the assistant made since the last user message, oldest first.
    pub fn calls_this_turn(&self) -> Vec<(String, Value)> {
        let msgs = self.messages();
        let start = msgs.iter().rposition(|m| m["role"] == "user").map_or(0, |i| i + 1);
        let mut out = Vec::new();
        for m in &msgs[start..] {
            for c in m["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let name = c["function"]["name"].as_str().unwrap_or("").to_owned();
                let args = c["function"]["arguments"]
                    .as_str()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or(Value::Null);
                out.push((name, args));
            }
        }
        out
    }

    /// How many replies the assistant gave since the last user message: where a script
    /// of replies stands.
    pub fn replies_this_turn(&self) -> usize {
        let msgs = self.messages();
        let start = msgs.iter().rposition(|m| m["role"] == "user").map_or(0, |i| i + 1);
        msgs[start..].iter().filter(|m| m["role"] == "assistant").count()
    }

    /// The tool names in the request's tools array.
    pub fn tools(&self) -> Vec<&str> {
        self.body["tools"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect()
    }

    /// Whether this is the daemon's self-test ("Say OK.").
    pub fn is_self_test(&self) -> bool {
        self.messages().len() == 1 && self.last_user() == "Say OK."
    }
}

/// Decides the reply to each chat request.
pub type Script = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// A script that decides from the request's index and raw bytes, without parsing them:
/// for measuring bx under a long history, where parsing every body would make the
/// model's own time grow with it.
pub type RawScript = Arc<dyn Fn(u64, &[u8]) -> Reply + Send + Sync>;

/// How the server decides.
#[derive(Clone)]
enum Decides {
    Parsed(Script),
    Raw(RawScript),
}

/// The running server.
pub struct ScriptedModel {
    server: Arc<tiny_http::Server>,
    port: u16,
    proposed: Arc<Mutex<Vec<Call>>>,
    requests: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel").field("port", &self.port).finish_non_exhaustive()
    }
}

/// The model's name in every chunk, as llama-server names its model.
pub const MODEL_NAME: &str = "scripted-model";

/// Slots the server says it has, unless started with another number.
const SLOTS: u64 = 4;

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "model": MODEL_NAME,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {c}\n\n")
}

fn tail(prompt: u64, completion: u64) -> String {
    let c = json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        "timings": {"cache_n": 0, "prompt_n": prompt, "prompt_ms": 1.0, "predicted_n": completion, "predicted_ms": 1.0},
    });
    format!("data: {c}\n\ndata: [DONE]\n\n")
}

/// The SSE body for a reply that streams.
fn sse(reply: &Reply) -> Vec<u8> {
    let mut out = String::new();
    match reply {
        Reply::Text(text) => {
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(8) {
                out.push_str(&chunk(json!({"content": piece.iter().collect::<String>()}), None));
            }
            out.push_str(&chunk(json!({}), Some("stop")));
            out.push_str(&tail(10, chars.len() as u64 / 4 + 1));
        }
        Reply::Calls(calls) => {
            for (i, c) in calls.iter().enumerate() {
                let delta = json!({"tool_calls": [{
                    "index": i,
                    "id": format!("call{i}"),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()},
                }]});
                out.push_str(&chunk(delta, None));
            }
            out.push_str(&chunk(json!({}), Some("tool_calls")));
            out.push_str(&tail(10, 5 * calls.len() as u64 + 1));
        }
        Reply::StreamError(message) => {
            let e = json!({"error": {"code": 500, "message": message, "type": "server_error"}});
            out.push_str(&format!("data: {e}\n\n"));
        }
        Reply::Http(..) | Reply::RawSse(_) => {}
    }
    out.into_bytes()
}

impl ScriptedModel {
    /// Starts the server on a free loopback port, answering chat requests by `script`.
    pub fn start(script: Script) -> anyhow::Result<ScriptedModel> {
        ScriptedModel::start_with_slots(script, SLOTS)
    }

    /// [`ScriptedModel::start`], saying it has `slots` slots (the load run's starvation
    /// case has few slots for many sessions).
    pub fn start_with_slots(script: Script, slots: u64) -> anyhow::Result<ScriptedModel> {
        ScriptedModel::serve(Decides::Parsed(script), slots)
    }

    /// A server answering by a [`RawScript`], saying it has `slots` slots.
    pub fn start_raw(script: RawScript, slots: u64) -> anyhow::Result<ScriptedModel> {
        ScriptedModel::serve(Decides::Raw(script), slots)
    }

    fn serve(script: Decides, slots: u64) -> anyhow::Result<ScriptedModel> {
        let server = Arc::new(
            tiny_http::Server::http("127.0.0.1:0").map_err(|e| anyhow::anyhow!("binding: {e}"))?,
        );
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(0);
        let proposed = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicU64::new(0));
        let thread = {
            let (server, proposed, requests) =
                (Arc::clone(&server), Arc::clone(&proposed), Arc::clone(&requests));
            std::thread::spawn(move || {
                for request in server.incoming_requests() {
                    let script = script.clone();
                    let (proposed, requests) = (Arc::clone(&proposed), Arc::clone(&requests));
                    std::thread::spawn(move || {
                        answer(request, &script, &proposed, &requests, slots);
                    });
                }
            })
        };
        Ok(ScriptedModel { server, port, proposed, requests, thread: Some(thread) })
    }

    /// The base URL, for `[inference] url`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every tool call proposed so far, in order.
    pub fn proposed(&self) -> Vec<Call> {
        self.proposed.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many tool calls were proposed so far.
    pub fn proposed_count(&self) -> usize {
        self.proposed.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Every tool call proposed since the last take, in order, and forgets them (a long
    /// run keeps no oversized arguments it has already counted).
    pub fn take_proposed(&self) -> Vec<Call> {
        std::mem::take(&mut *self.proposed.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Chat requests answered so far (the self-test included).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn respond(request: tiny_http::Request, status: u16, content_type: &str, body: Vec<u8>) {
    let header = tiny_http::Header::from_bytes(&b"content-type"[..], content_type.as_bytes());
    let mut response = tiny_http::Response::from_data(body).with_status_code(status);
    if let Ok(h) = header {
        response = response.with_header(h);
    }
    let _ = request.respond(response);
}

fn answer(
    mut request: tiny_http::Request,
    script: &Decides,
    proposed: &Mutex<Vec<Call>>,
    requests: &AtomicU64,
    slots: u64,
) {
    let path = request.url().split('?').next().unwrap_or("").to_owned();
    let json_reply = |v: Value| v.to_string().into_bytes();
    match path.as_str() {
        "/health" => respond(request, 200, "application/json", json_reply(json!({"status": "ok"}))),
        "/props" => {
            let props = json!({
                "total_slots": slots,
                "chat_template_caps": {"supports_tools": true, "supports_tool_calls": true},
                "model_path": "scripted",
            });
            respond(request, 200, "application/json", json_reply(props));
        }
        "/slots" => {
            let slots: Vec<Value> = (0..slots).map(|i| json!({"id": i, "n_ctx": 8192})).collect();
            respond(request, 200, "application/json", json_reply(Value::Array(slots)));
        }
        "/v1/chat/completions/control" => {
            respond(request, 200, "application/json", json_reply(json!({"success": false})));
        }
        "/v1/chat/completions" => {
            let mut body = Vec::new();
            let _ = request.as_reader().take(64 << 20).read_to_end(&mut body);
            let index = requests.fetch_add(1, Ordering::SeqCst);
            let reply = match script {
                Decides::Parsed(script) => {
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    script(&Request { body, index })
                }
                Decides::Raw(script) => script(index, &body),
            };
            if let Reply::Calls(calls) = &reply {
                proposed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(calls.iter().cloned());
            }
            match reply {
                Reply::Http(status, text) => {
                    respond(request, status, "text/plain", text.into_bytes())
                }
                Reply::RawSse(bytes) => respond(request, 200, "text/event-stream", bytes),
                other => respond(request, 200, "text/event-stream", sse(&other)),
            }
        }
        _ => respond(request, 404, "text/plain", b"not found".to_vec()),
    }
}
