//! Requests: the transcript, the tools array and the sampling controls, serialised
//! deterministically (the same transcript always gives the same bytes, so the server's
//! prompt cache sees the same prefix).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::InferError;

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ToolDef {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ToolCall {
    /// The call's id (from the server, or made up in constrained mode).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The parsed arguments.
    pub arguments: Value,
}

/// One message of the transcript.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(tag = "role", rename_all = "lowercase", deny_unknown_fields)]
pub enum Message {
    /// Instructions.
    System {
        /// Text.
        content: String,
    },
    /// The owner.
    User {
        /// Text.
        content: String,
    },
    /// The model.
    Assistant {
        /// Text.
        content: String,
        /// Tool calls it made.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result.
    Tool {
        /// The call it answers.
        tool_call_id: String,
        /// The result text.
        content: String,
    },
}

/// Whether the model must, may or must not call tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call a tool.
    Required,
    /// No tools.
    None,
}

/// A conversation that only grows, kept with each message's wire form, so a request
/// over a long history costs a copy of its bytes rather than serialising every message
/// again (a session's per-call cost would otherwise grow with its history). Shared
/// between a transcript and the requests made from it.
#[derive(Debug, Default)]
pub struct History {
    inner: Mutex<HistoryInner>,
}

#[derive(Debug, Default)]
struct HistoryInner {
    messages: Vec<Message>,
    /// The wire form of the first `.0` messages, comma-separated, per mode (native,
    /// constrained); each is built the first time a request in that mode is made, then
    /// extended by the messages added since.
    wire: [(usize, String); 2],
}

impl History {
    /// A history holding `messages`.
    pub fn new(messages: Vec<Message>) -> History {
        History { inner: Mutex::new(HistoryInner { messages, wire: Default::default() }) }
    }

    /// Each update is one push, so a panic elsewhere leaves the data whole.
    fn lock(&self) -> MutexGuard<'_, HistoryInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `messages` at the end.
    pub fn extend(&self, messages: &[Message]) {
        self.lock().messages.extend_from_slice(messages);
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.lock().messages.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with the messages, oldest first.
    pub fn with_messages<R>(&self, f: impl FnOnce(&[Message]) -> R) -> R {
        f(&self.lock().messages)
    }

    /// A copy of the messages.
    pub fn messages(&self) -> Vec<Message> {
        self.lock().messages.clone()
    }

    /// About how many bytes the wire form takes (what is rendered so far).
    fn wire_len(&self, constrained: bool) -> usize {
        self.lock().wire[usize::from(constrained)].1.len()
    }

    /// Appends the wire form of every message, comma-separated, to `out`. A message is
    /// rendered once, with the `order` of its first request: the same bytes after, for
    /// the prompt cache.
    fn write_wire(&self, constrained: bool, order: &ArgOrder<'_>, out: &mut String) {
        let mut inner = self.lock();
        let HistoryInner { messages, wire } = &mut *inner;
        let (done, text) = &mut wire[usize::from(constrained)];
        for m in &messages[*done..] {
            if !text.is_empty() {
                text.push(',');
            }
            text.push_str(&wire_message(m, constrained, order).to_string());
        }
        *done = messages.len();
        out.push_str(text);
    }
}

impl PartialEq for History {
    fn eq(&self, other: &History) -> bool {
        std::ptr::eq(self, other) || self.messages() == other.messages()
    }
}

/// A chat request, before the client adds slot and stream controls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The first messages (the system prompt), or the whole conversation when there is
    /// no `history`.
    pub messages: Vec<Message>,
    /// The conversation after `messages`, when it is kept as a [`History`].
    pub history: Option<Arc<History>>,
    /// The tools array (fixed for a tool epoch).
    pub tools: Vec<ToolDef>,
    /// Tool choice; `None` leaves it to the server.
    pub tool_choice: Option<ToolChoice>,
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    /// Sampling temperature (0 for tests that want the same answer each time).
    pub temperature: Option<f32>,
    /// Fixed seed.
    pub seed: Option<u64>,
    /// Most thinking (reasoning) tokens before the client ends the thinking block; `None`
    /// lets the model think until its token limit, and `Some(0)` closes the block from
    /// the start (the template's `enable_thinking: false`).
    pub max_thinking_tokens: Option<u32>,
}

/// One message as the server reads it. In constrained mode the server's template may not
/// know tool calls, so a call is written back as the JSON reply the model produced
/// (`{"tool": …, "with": …}`), and so is an answer (`{"tool": "answer", "with": TEXT}`):
/// the model sees its own words, and the bytes are the same on every request. (With its
/// answers shown as plain text, a 0.5B model saw only calls in the reply's shape, and
/// called the same tool again after each result instead of answering.)
fn wire_message(m: &Message, constrained: bool, order: &ArgOrder<'_>) -> Value {
    match m {
        Message::Assistant { content, tool_calls } if constrained && tool_calls.is_empty() => {
            json!({"role": "assistant", "content": json!({"tool": ANSWER, "with": content}).to_string()})
        }
        Message::Assistant { tool_calls, .. } if constrained && !tool_calls.is_empty() => {
            let calls: Vec<String> =
                tool_calls.iter().map(|c| order.call(&c.name, &c.arguments)).collect();
            json!({"role": "assistant", "content": calls.join("\n")})
        }
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant { content, tool_calls } if tool_calls.is_empty() => {
            json!({"role": "assistant", "content": content})
        }
        Message::Assistant { content, tool_calls } => json!({
            "role": "assistant",
            "content": content,
            "tool_calls": tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                // OpenAI's wire format carries arguments as a JSON string; serde_json
                // sorts object keys, so the same value gives the same string.
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })).collect::<Vec<_>>(),
        }),
        Message::Tool { tool_call_id, content } => {
            json!({"role": "tool", "tool_call_id": tool_call_id, "content": content})
        }
    }
}

/// The extra fields the client sets on every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Controls {
    pub(crate) id_slot: usize,
    pub(crate) constrained: bool,
    /// Arms llama-server's `reasoning_control`, so `/v1/chat/completions/control` can end
    /// this completion's thinking while it streams.
    pub(crate) reasoning_control: bool,
    /// Asks the template for a closed thinking block (`chat_template_kwargs.
    /// enable_thinking: false`): the re-issue after a cap the server could not end live.
    pub(crate) thinking_closed: bool,
}

impl ChatRequest {
    /// The request body as bytes. Deterministic: object keys are sorted and nothing
    /// depends on time or randomness.
    pub fn to_body(&self, id_slot: usize) -> Vec<u8> {
        self.body(Controls {
            id_slot,
            constrained: false,
            reasoning_control: false,
            thinking_closed: false,
        })
    }

    pub(crate) fn body(&self, c: Controls) -> Vec<u8> {
        let mut body = json!({
            "stream": true,
            "stream_options": {"include_usage": true},
            "id_slot": c.id_slot,
            "cache_prompt": true,
            "timings_per_token": false,
            // llama-server sends nothing while it reads a prompt unless asked for its
            // progress (an event per batch): without it a long prompt on a slow CPU ran
            // past the idle wait before the first token (docs/inference.md#waits).
            "return_progress": true,
        });
        if let Some(map) = body.as_object_mut() {
            if let Some(t) = self.max_tokens {
                map.insert("max_tokens".into(), t.into());
            }
            if let Some(t) = self.temperature {
                map.insert("temperature".into(), json!(t));
            }
            if let Some(s) = self.seed {
                map.insert("seed".into(), s.into());
            }
            if c.reasoning_control {
                map.insert("reasoning_control".into(), true.into());
            }
            if c.thinking_closed {
                map.insert("chat_template_kwargs".into(), json!({"enable_thinking": false}));
            }
            if c.constrained {
                let required = self.tool_choice == Some(ToolChoice::Required);
                // `None`: the reply's only shape is the answer.
                let offered = if self.tool_choice == Some(ToolChoice::None) {
                    &[][..]
                } else {
                    &self.tools[..]
                };
                let schema = constrained_schema(offered, required);
                map.insert("response_format".into(), json!({"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}));
            } else if !self.tools.is_empty() {
                let tools: Vec<Value> = self
                    .tools
                    .iter()
                    .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                    .collect();
                map.insert("tools".into(), tools.into());
                if let Some(choice) = self.tool_choice {
                    let c = match choice {
                        ToolChoice::Auto => "auto",
                        ToolChoice::Required => "required",
                        ToolChoice::None => "none",
                    };
                    map.insert("tool_choice".into(), c.into());
                }
            }
        }
        // The messages come first, spliced in as text: a long history is copied, not
        // serialised again. serde_json's map is ordered by key, so the rest is the same
        // bytes every time.
        let rest = body.to_string();
        let history_len = self.history.as_ref().map_or(0, |h| h.wire_len(c.constrained));
        let order = ArgOrder::of(&self.tools);
        let mut out = String::with_capacity(rest.len() + history_len + 4096);
        out.push_str("{\"messages\":[");
        for (i, m) in self.messages.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&wire_message(m, c.constrained, &order).to_string());
        }
        if let Some(history) = &self.history {
            if !self.messages.is_empty() && !history.is_empty() {
                out.push(',');
            }
            history.write_wire(c.constrained, &order, &mut out);
        }
        out.push(']');
        // `rest` is a non-empty object (it always holds "stream"): its fields follow.
        out.push(',');
        out.push_str(rest.strip_prefix('{').unwrap_or(&rest));
        out.into_bytes()
    }
}

/// The name a constrained reply gives to answering the owner instead of calling a tool.
pub(crate) const ANSWER: &str = "answer";

/// The JSON schema of a constrained reply: `{"tool": NAME, "with": <that tool's
/// arguments>}` for each tool, plus `{"tool": "answer", "with": TEXT}` unless a call is
/// required. The tool is chosen first: llama.cpp writes an object's properties in the
/// order the schema lists them, and serde_json lists them by name, so the keys are named
/// to sort `tool` before `with` (with `arguments` first, a small model had to write the
/// arguments before it had said which tool they were for).
pub fn constrained_schema(tools: &[ToolDef], required: bool) -> Value {
    let mut options: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "object",
                "properties": {"tool": {"const": t.name}, "with": t.parameters},
                "required": ["tool", "with"],
                "additionalProperties": false,
            })
        })
        .collect();
    if (!required || tools.is_empty()) && !tools.iter().any(|t| t.name == ANSWER) {
        options.push(json!({
            "type": "object",
            "properties": {"tool": {"const": ANSWER}, "with": {"type": "string"}},
            "required": ["tool", "with"],
            "additionalProperties": false,
        }));
    }
    json!({"oneOf": options})
}

/// The order in which a constrained reply's grammar writes each tool's arguments, so a
/// call is shown back to the model as it could have written it. llama.cpp's grammar
/// writes an object's required properties first, then its optional ones, each in the
/// order the schema lists them (by name: serde_json sorts keys). Shown by name alone,
/// a call to `fs.list` read `{"depth":2,"path":"."}`, which the grammar cannot write,
/// and the 0.5B model, copying it, left the depth out.
#[derive(Debug, Default)]
pub struct ArgOrder<'a> {
    required: std::collections::HashMap<&'a str, Vec<&'a str>>,
}

impl<'a> ArgOrder<'a> {
    /// The order of `tools`' arguments; a tool not among them is shown by name alone.
    pub fn of(tools: &'a [ToolDef]) -> ArgOrder<'a> {
        let required = tools
            .iter()
            .map(|t| {
                let names = t.parameters["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                (t.name.as_str(), names)
            })
            .collect();
        ArgOrder { required }
    }

    /// A call as a constrained reply writes it (and as the model reads its own calls
    /// back): `{"tool":NAME,"with":{...}}`, the tool's required arguments first.
    pub fn call(&self, name: &str, arguments: &Value) -> String {
        let (Some(map), Some(required)) = (arguments.as_object(), self.required.get(name)) else {
            return json!({"tool": name, "with": arguments}).to_string();
        };
        let is_required = |k: &&String| required.contains(&k.as_str());
        let keys = map.keys().filter(is_required).chain(map.keys().filter(|k| !is_required(k)));
        let mut out = format!("{{\"tool\":{},\"with\":{{", Value::from(name));
        for (i, k) in keys.enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!("{}:{}", Value::from(k.as_str()), map[k]));
        }
        out.push_str("}}");
        out
    }
}

/// Turns a constrained reply's content into the same values the native path produces:
/// a message text, or one tool call (whose id is `call_<n>`). The older shapes
/// (`{"message": TEXT}`, `{"tool": NAME, "arguments": …}`) are read too.
pub fn parse_constrained(
    content: &str,
    tools: &[ToolDef],
    n: usize,
) -> Result<(String, Vec<ToolCall>), InferError> {
    let value: Value = serde_json::from_str(content.trim())
        .map_err(|e| InferError::Protocol(format!("constrained reply is not JSON: {e}")))?;
    if let Some(text) = value.get("message").and_then(Value::as_str) {
        return Ok((text.to_owned(), vec![]));
    }
    let name = value.get("tool").and_then(Value::as_str).ok_or_else(|| {
        InferError::Protocol("constrained reply has neither message nor tool".into())
    })?;
    let arguments = value.get("with").or_else(|| value.get("arguments")).cloned();
    if name == ANSWER && !tools.iter().any(|t| t.name == ANSWER) {
        return match arguments {
            Some(Value::String(text)) => Ok((text, vec![])),
            _ => Err(InferError::Protocol("constrained answer has no text".into())),
        };
    }
    if !tools.iter().any(|t| t.name == name) {
        let shown: String = name.chars().take(200).collect();
        return Err(InferError::Protocol(format!(
            "constrained reply names unknown tool {shown:?}"
        )));
    }
    let arguments = arguments.unwrap_or(Value::Null);
    if !arguments.is_object() {
        return Err(InferError::Protocol(format!("arguments of {name} are not an object")));
    }
    Ok((
        String::new(),
        vec![ToolCall { id: format!("call_{n}"), name: name.to_owned(), arguments }],
    ))
}

/// A tool call a model wrote as text instead of as a call (small models in native mode
/// put `{"name": …, "arguments": …}` in a fenced block, or in `<tool_call>` tags the
/// server's template does not know): one call, when the reply is that and nothing else
/// and it names one of `tools`. What it proposes goes through the broker like any call.
pub fn call_in_text(content: &str, tools: &[ToolDef], n: usize) -> Option<ToolCall> {
    let mut text = content.trim();
    if let Some(inner) =
        text.strip_prefix("<tool_call>").and_then(|t| t.strip_suffix("</tool_call>"))
    {
        text = inner.trim();
    }
    if let Some(fenced) = text.strip_prefix("```") {
        let body = fenced.strip_suffix("```")?;
        // The fence's first line may name the language.
        let body = body.split_once('\n').map_or(body, |(first, rest)| {
            if first.trim().chars().all(|c| c.is_ascii_alphanumeric()) { rest } else { body }
        });
        text = body.trim();
    }
    let value: Value = serde_json::from_str(text).ok()?;
    let name = value.get("name").or_else(|| value.get("tool"))?.as_str()?;
    if !tools.iter().any(|t| t.name == name) {
        return None;
    }
    let arguments = match value.get("arguments").or_else(|| value.get("with"))? {
        Value::String(s) => serde_json::from_str(s).ok()?,
        other => other.clone(),
    };
    arguments.is_object().then(|| ToolCall {
        id: format!("call_{n}"),
        name: name.to_owned(),
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ChatRequest {
        ChatRequest {
            messages: vec![
                Message::System { content: "be brief".into() },
                Message::User { content: "read notes".into() },
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "fs.read".into(),
                        arguments: json!({"z": 1, "path": "/n"}),
                    }],
                },
                Message::Tool { tool_call_id: "c1".into(), content: "milk".into() },
            ],
            tools: vec![ToolDef {
                name: "fs.read".into(),
                description: "read".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: Some(ToolChoice::Auto),
            max_tokens: Some(16),
            temperature: Some(0.0),
            seed: Some(7),
            max_thinking_tokens: None,
            history: None,
        }
    }

    #[test]
    fn same_transcript_same_bytes() {
        let a = sample().to_body(1);
        let b = sample().clone().to_body(1);
        assert_eq!(a, b);
        let text = String::from_utf8(a).unwrap();
        assert!(text.contains(r#""arguments":"{\"path\":\"/n\",\"z\":1}""#), "{text}");
        assert!(text.contains(r#""id_slot":1"#) && text.contains(r#""cache_prompt":true"#));
    }

    #[test]
    fn a_history_gives_the_bytes_of_the_same_messages_sent_whole() {
        for constrained in [false, true] {
            let c = Controls {
                id_slot: 0,
                constrained,
                reasoning_control: false,
                thinking_closed: false,
            };
            let whole = sample();
            let (system, rest) = whole.messages.split_at(1);
            let history = Arc::new(History::new(rest[..1].to_vec()));
            let split = ChatRequest {
                messages: system.to_vec(),
                history: Some(Arc::clone(&history)),
                ..whole.clone()
            };
            // Rendered once with two messages, then extended: the same bytes as whole.
            let _ = split.body(c);
            history.extend(&rest[1..]);
            let body = split.body(c);
            assert_eq!(String::from_utf8(body.clone()), String::from_utf8(whole.body(c)));
            let parsed: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(parsed["messages"].as_array().unwrap().len(), 4);
            assert_eq!(parsed["stream"], json!(true));
        }
        let empty = ChatRequest::default().to_body(0);
        let parsed: Value = serde_json::from_slice(&empty).unwrap();
        assert_eq!(parsed["messages"], json!([]));
    }

    #[test]
    fn constrained_mode_shows_answers_in_the_reply_shape_and_none_offers_only_the_answer() {
        let c = Controls {
            id_slot: 0,
            constrained: true,
            reasoning_control: false,
            thinking_closed: false,
        };
        let mut req = sample();
        req.messages.push(Message::Assistant { content: "Milk.".into(), tool_calls: vec![] });
        let body: Value = serde_json::from_slice(&req.body(c)).unwrap();
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages[2]["content"], r#"{"tool":"fs.read","with":{"path":"/n","z":1}}"#);
        assert_eq!(messages[4]["content"], r#"{"tool":"answer","with":"Milk."}"#);
        // Natively, an answer is the text alone.
        let native = Controls { constrained: false, ..c };
        let body: Value = serde_json::from_slice(&req.body(native)).unwrap();
        assert_eq!(body["messages"][4]["content"], "Milk.");
        let names = |req: &ChatRequest| {
            let body: Value = serde_json::from_slice(&req.body(c)).unwrap();
            let options = &body["response_format"]["json_schema"]["schema"]["oneOf"];
            options
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["properties"]["tool"]["const"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&req), ["fs.read", "answer"]);
        req.tool_choice = Some(ToolChoice::None);
        assert_eq!(names(&req), ["answer"]);
    }

    #[test]
    fn thinking_controls_appear_only_when_asked_for() {
        let plain = String::from_utf8(sample().to_body(0)).unwrap();
        assert!(!plain.contains("reasoning_control") && !plain.contains("enable_thinking"));
        let c = Controls {
            id_slot: 0,
            constrained: false,
            reasoning_control: true,
            thinking_closed: false,
        };
        let armed = String::from_utf8(sample().body(c)).unwrap();
        assert!(armed.contains(r#""reasoning_control":true"#), "{armed}");
        let closed = Controls { reasoning_control: false, thinking_closed: true, ..c };
        let closed = String::from_utf8(sample().body(closed)).unwrap();
        assert!(closed.contains(r#""chat_template_kwargs":{"enable_thinking":false}"#), "{closed}");
        assert!(!closed.contains("reasoning_control"));
    }

    #[test]
    fn constrained_reply_becomes_a_tool_call() {
        let tools = sample().tools;
        let (text, calls) =
            parse_constrained(r#"{"tool":"fs.read","arguments":{"path":"notes.txt"}}"#, &tools, 0)
                .unwrap();
        assert_eq!(
            (text.as_str(), calls),
            (
                "",
                vec![ToolCall {
                    id: "call_0".into(),
                    name: "fs.read".into(),
                    arguments: json!({"path": "notes.txt"})
                }]
            )
        );
        let with =
            parse_constrained(r#"{"tool":"fs.read","with":{"path":"notes.txt"}}"#, &tools, 0);
        assert_eq!(with.unwrap().1[0].arguments, json!({"path": "notes.txt"}));
        assert_eq!(
            parse_constrained(r#"{"message":"hi"}"#, &tools, 0).unwrap(),
            ("hi".into(), vec![])
        );
        assert_eq!(
            parse_constrained(r#"{"tool":"answer","with":"hi"}"#, &tools, 0).unwrap(),
            ("hi".into(), vec![])
        );
        // The tool is the first key the grammar makes the model write.
        let schema = constrained_schema(&tools, false).to_string();
        assert!(schema.contains(r#""properties":{"tool":{"const":"fs.read"},"with":"#), "{schema}");
        assert!(parse_constrained(r#"{"tool":"rm","arguments":{}}"#, &tools, 0).is_err());
        // A call written as text, alone in the reply, is read as the call.
        let fenced = "```json\n{\"name\": \"fs.read\", \"arguments\": {\"path\": \"a\"}}\n```";
        assert_eq!(call_in_text(fenced, &tools, 0).unwrap().arguments, json!({"path": "a"}));
        let tagged = "<tool_call>\n{\"name\": \"fs.read\", \"arguments\": \"{\\\"path\\\": \\\"a\\\"}\"}\n</tool_call>";
        assert_eq!(call_in_text(tagged, &tools, 0).unwrap().name, "fs.read");
        for not in [
            "Use ```json\n{\"name\": \"fs.read\", \"arguments\": {}}\n``` to read.",
            "{\"name\": \"rm\", \"arguments\": {}}",
            "{\"name\": \"fs.read\", \"arguments\": [1]}",
            "plain text",
        ] {
            assert!(call_in_text(not, &tools, 0).is_none(), "{not}");
        }
        assert!(parse_constrained("not json", &tools, 0).is_err());
        let schema = constrained_schema(&tools, true);
        assert_eq!(schema["oneOf"].as_array().unwrap().len(), 1);
    }
}
