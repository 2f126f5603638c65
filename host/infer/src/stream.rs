//! The reply stream: SSE events from llama-server turned into deltas, and the deltas
//! assembled into one message with its tool calls.

use serde_json::Value;

use crate::error::InferError;
use crate::request::ToolCall;

/// Token counts the server reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub completion_tokens: u64,
}

/// llama-server's `timings`: how much of the prompt came from the cache, and speeds.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Timings {
    /// Prompt tokens reused from the slot's cache.
    pub cache_n: u64,
    /// Prompt tokens evaluated.
    pub prompt_n: u64,
    /// Milliseconds spent on the prompt.
    pub prompt_ms: f64,
    /// Tokens generated.
    pub predicted_n: u64,
    /// Milliseconds spent generating.
    pub predicted_ms: f64,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum FinishReason {
    /// It finished its message.
    Stop,
    /// It ran out of tokens.
    Length,
    /// It called tools.
    ToolCalls,
    /// Something else the server said.
    Other(String),
}

/// One thing that arrived, passed to the caller as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Message text.
    Content(String),
    /// Thinking text (`reasoning_content` or `reasoning`).
    Reasoning(String),
    /// Part of a tool call.
    ToolCallDelta {
        /// Which call.
        index: usize,
        /// Name, when this delta carries it.
        name: Option<String>,
        /// A fragment of the arguments text.
        arguments: String,
    },
    /// The model stopped.
    Finish(FinishReason),
    /// Token counts.
    Usage(Usage),
    /// Server timings.
    Timings(Timings),
}

/// The assembled reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Message text.
    pub content: String,
    /// Thinking text.
    pub reasoning: String,
    /// Tool calls, in index order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish: FinishReason,
    /// Token counts, when the server sent them.
    pub usage: Option<Usage>,
    /// Timings, when the server sent them.
    pub timings: Option<Timings>,
}

#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// Assembles deltas into a [`Completion`]. Tool calls are keyed by index (falling back
/// to id); the first non-empty id and name win; argument fragments are concatenated
/// exactly and parsed only at the end.
#[derive(Debug, Default)]
pub struct Assembler {
    content: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    timings: Option<Timings>,
    done: bool,
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn f64_of(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

impl Assembler {
    /// A fresh assembler.
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// True once `[DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// True once a finish reason arrived.
    pub fn has_finished(&self) -> bool {
        self.finish.is_some()
    }

    fn call_slot(&mut self, index: Option<u64>, id: &str) -> usize {
        let found = match index {
            Some(i) => self.calls.iter().position(|c| c.index == Some(i)),
            None if !id.is_empty() => self.calls.iter().position(|c| c.id == id),
            None => self.calls.len().checked_sub(1),
        };
        match found {
            Some(pos) => pos,
            None => {
                self.calls.push(PartialCall { index, ..PartialCall::default() });
                self.calls.len() - 1
            }
        }
    }

    /// Feeds one SSE event (its `event:` type, empty for the default, and its data).
    pub fn feed(&mut self, event: &str, data: &str) -> Result<Vec<StreamEvent>, InferError> {
        if event == "error" {
            return Err(InferError::Server(data.to_owned()));
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(vec![]);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| InferError::Protocol(format!("event is not JSON: {e}")))?;
        if let Some(err) = chunk.get("error") {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_owned);
            return Err(InferError::Server(msg));
        }
        let mut out = Vec::new();
        if let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) {
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(text) =
                delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty())
            {
                self.content.push_str(text);
                out.push(StreamEvent::Content(text.to_owned()));
            }
            let reasoning = delta.get("reasoning_content").or_else(|| delta.get("reasoning"));
            if let Some(text) = reasoning.and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.reasoning.push_str(text);
                out.push(StreamEvent::Reasoning(text.to_owned()));
            }
            for tc in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                let index = tc.get("index").and_then(Value::as_u64);
                let id = tc.get("id").and_then(Value::as_str).unwrap_or("");
                let slot = self.call_slot(index, id);
                let call = &mut self.calls[slot];
                if call.id.is_empty() && !id.is_empty() {
                    call.id = id.to_owned();
                }
                let function = tc.get("function").unwrap_or(&Value::Null);
                let name = function.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
                if let Some(n) = name
                    && call.name.is_empty()
                {
                    call.name = n.to_owned();
                }
                let fragment = function.get("arguments").and_then(Value::as_str).unwrap_or("");
                call.arguments.push_str(fragment);
                out.push(StreamEvent::ToolCallDelta {
                    index: slot,
                    name: name.map(str::to_owned),
                    arguments: fragment.to_owned(),
                });
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                let reason = match reason {
                    "stop" => FinishReason::Stop,
                    "length" => FinishReason::Length,
                    "tool_calls" => FinishReason::ToolCalls,
                    other => FinishReason::Other(other.to_owned()),
                };
                self.finish = Some(reason.clone());
                out.push(StreamEvent::Finish(reason));
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            let usage = Usage {
                prompt_tokens: u64_of(u, "prompt_tokens"),
                completion_tokens: u64_of(u, "completion_tokens"),
            };
            self.usage = Some(usage);
            out.push(StreamEvent::Usage(usage));
        }
        if let Some(t) = chunk.get("timings").filter(|t| t.is_object()) {
            let timings = Timings {
                cache_n: u64_of(t, "cache_n"),
                prompt_n: u64_of(t, "prompt_n"),
                prompt_ms: f64_of(t, "prompt_ms"),
                predicted_n: u64_of(t, "predicted_n"),
                predicted_ms: f64_of(t, "predicted_ms"),
            };
            self.timings = Some(timings);
            out.push(StreamEvent::Timings(timings));
        }
        Ok(out)
    }

    /// Ends the stream: a stream that never said why the model stopped is truncated; a
    /// tool call cut by the token limit is truncated; arguments that are not JSON are an
    /// error, never `{}`.
    pub fn finish(self) -> Result<Completion, InferError> {
        let Some(finish) = self.finish else {
            let why =
                if self.done { "[DONE] without a finish reason" } else { "connection closed" };
            return Err(InferError::Truncated(why.to_owned()));
        };
        if finish == FinishReason::Length && !self.calls.is_empty() {
            return Err(InferError::Truncated("a tool call was cut off by the token limit".into()));
        }
        let mut tool_calls = Vec::new();
        for (i, c) in self.calls.into_iter().enumerate() {
            if c.name.is_empty() {
                return Err(InferError::Protocol(format!("tool call {i} has no name")));
            }
            let arguments: Value = serde_json::from_str(&c.arguments).map_err(|e| {
                InferError::Protocol(format!(
                    "tool call {i} ({}) has arguments that are not JSON: {e}",
                    c.name
                ))
            })?;
            let id = if c.id.is_empty() { format!("call_{i}") } else { c.id };
            tool_calls.push(ToolCall { id, name: c.name, arguments });
        }
        Ok(Completion {
            content: self.content,
            reasoning: self.reasoning,
            tool_calls,
            finish,
            usage: self.usage,
            timings: self.timings,
        })
    }
}

/// Parses a whole recorded SSE stream (bytes as the server sent them) into a
/// completion; for fixtures and benchmarks. Uses the same parser as the live path.
pub fn parse_sse_bytes(bytes: &[u8]) -> Result<Completion, InferError> {
    use eventsource_stream::Eventsource as _;
    use futures_util::StreamExt as _;
    let mut lines = LineSplitter::new(usize::MAX);
    let rewritten = lines.push(bytes).map_err(|TooLarge| InferError::EventTooLarge(usize::MAX))?;
    // One chunk per event, as the network delivers them: the SSE parser rescans its
    // buffer per event, so one huge chunk would cost quadratic time.
    let mut chunks = Vec::new();
    let mut start = 0;
    while let Some(end) = rewritten[start..].windows(2).position(|w| w == b"\n\n") {
        chunks.push(Ok::<_, std::io::Error>(rewritten.slice(start..start + end + 2)));
        start += end + 2;
    }
    if start < rewritten.len() {
        chunks.push(Ok(rewritten.slice(start..)));
    }
    let mut events = futures_util::stream::iter(chunks).eventsource();
    let mut asm = Assembler::new();
    // The in-memory stream never waits, so polling it once per item completes.
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        match events.poll_next_unpin(&mut cx) {
            std::task::Poll::Ready(Some(Ok(ev))) => {
                asm.feed(&ev.event, &ev.data)?;
            }
            std::task::Poll::Ready(Some(Err(e))) => {
                return Err(InferError::Protocol(e.to_string()));
            }
            std::task::Poll::Ready(None) | std::task::Poll::Pending => break,
        }
    }
    asm.finish()
}

/// Splits the byte stream into whole lines before the SSE parser sees it, for two
/// reasons: llama-server reports an error inside a stream as a line `error: {json}`,
/// which is not an SSE field and a standard parser drops silently, so it is rewritten as
/// an `error` event; and one event (the lines up to a blank line) may not exceed the cap.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
    event_bytes: usize,
    cap: usize,
}

/// An event exceeded the cap.
#[derive(Debug)]
pub(crate) struct TooLarge;

impl LineSplitter {
    pub(crate) fn new(cap: usize) -> LineSplitter {
        LineSplitter { partial: Vec::new(), event_bytes: 0, cap }
    }

    /// Takes a chunk; returns the complete lines it finished, rewritten as needed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<bytes::Bytes, TooLarge> {
        let mut out = Vec::with_capacity(chunk.len() + self.partial.len());
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let (line, tail) = rest.split_at(nl + 1);
            rest = tail;
            self.partial.extend_from_slice(line);
            let full = std::mem::take(&mut self.partial);
            let body = full.strip_suffix(b"\n").unwrap_or(&full);
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            if body.is_empty() {
                self.event_bytes = 0;
            } else {
                self.event_bytes += body.len();
                if self.event_bytes > self.cap {
                    return Err(TooLarge);
                }
            }
            if let Some(json) = body.strip_prefix(b"error:") {
                out.extend_from_slice(b"event: error\ndata:");
                out.extend_from_slice(json);
                out.extend_from_slice(b"\n");
            } else {
                out.extend_from_slice(body);
                out.push(b'\n');
            }
        }
        self.partial.extend_from_slice(rest);
        if self.event_bytes + self.partial.len() > self.cap {
            return Err(TooLarge);
        }
        Ok(bytes::Bytes::from(out))
    }
}
