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
    /// The thinking reached the request's cap and was ended early (see
    /// [`ThinkingCap`]).
    pub thinking_capped: bool,
    /// How long the request waited for its slot in the client's gate.
    pub slot_wait: std::time::Duration,
}

/// Counts thinking as it streams and says, once, when a cap is reached. llama-server
/// sends each sampled token in its own chunk, so a reasoning delta is one token (a token
/// that only completes a marker sends nothing, so the count never runs ahead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingCap {
    limit: u32,
    seen: u32,
}

impl ThinkingCap {
    /// A cap of `limit` reasoning tokens.
    pub fn new(limit: u32) -> ThinkingCap {
        ThinkingCap { limit, seen: 0 }
    }

    /// Counts `event`; true exactly once, on the reasoning delta that reaches the cap.
    pub fn observe(&mut self, event: &StreamEvent) -> bool {
        if !matches!(event, StreamEvent::Reasoning(_)) {
            return false;
        }
        self.seen = self.seen.saturating_add(1);
        self.seen == self.limit
    }
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
    id: String,
    content: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    timings: Option<Timings>,
    done: bool,
}

// The chunk as the server sends it, read with borrowed strings (no DOM per event).
// Unknown fields are ignored on purpose: this is a third-party, evolving format, and a
// new field from the server must not break the stream.
type Text<'a> = Option<std::borrow::Cow<'a, str>>;

#[derive(serde::Deserialize)]
struct WireChunk<'a> {
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    choices: Vec<WireChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    timings: Option<WireTimings>,
    #[serde(borrow, default)]
    error: Option<&'a serde_json::value::RawValue>,
}

#[derive(serde::Deserialize)]
struct WireChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Text<'a>,
}

#[derive(serde::Deserialize, Default)]
struct WireDelta<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
    #[serde(borrow, default)]
    reasoning_content: Text<'a>,
    #[serde(borrow, default)]
    reasoning: Text<'a>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

#[derive(serde::Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    function: Option<WireFunction<'a>>,
}

#[derive(serde::Deserialize, Default)]
struct WireFunction<'a> {
    #[serde(borrow, default)]
    name: Text<'a>,
    #[serde(borrow, default)]
    arguments: Text<'a>,
}

#[derive(serde::Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[derive(serde::Deserialize)]
struct WireTimings {
    #[serde(default)]
    cache_n: u64,
    #[serde(default)]
    prompt_n: u64,
    #[serde(default)]
    prompt_ms: f64,
    #[serde(default)]
    predicted_n: u64,
    #[serde(default)]
    predicted_ms: f64,
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

    /// The completion's id as the server streamed it (empty until a chunk carried one):
    /// what `/v1/chat/completions/control` acts on.
    pub fn completion_id(&self) -> &str {
        &self.id
    }

    /// The thinking text so far.
    pub fn reasoning(&self) -> &str {
        &self.reasoning
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
        let chunk: WireChunk<'_> = serde_json::from_str(data)
            .map_err(|e| InferError::Protocol(format!("event is not a chunk: {e}")))?;
        if let Some(err) = chunk.error {
            let err: Value = serde_json::from_str(err.get()).unwrap_or(Value::Null);
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_owned);
            return Err(InferError::Server(msg));
        }
        if self.id.is_empty()
            && let Some(id) = chunk.id
        {
            self.id = id.into_owned();
        }
        let mut out = Vec::new();
        if let Some(choice) = chunk.choices.into_iter().next() {
            let delta = choice.delta.unwrap_or_default();
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                self.content.push_str(&text);
                out.push(StreamEvent::Content(text.into_owned()));
            }
            if let Some(text) =
                delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty())
            {
                self.reasoning.push_str(&text);
                out.push(StreamEvent::Reasoning(text.into_owned()));
            }
            for tc in delta.tool_calls.unwrap_or_default() {
                let id = tc.id.unwrap_or_default();
                let slot = self.call_slot(tc.index, &id);
                let call = &mut self.calls[slot];
                if call.id.is_empty() && !id.is_empty() {
                    call.id = id.into_owned();
                }
                let function = tc.function.unwrap_or_default();
                let name = function.name.filter(|n| !n.is_empty());
                if let Some(n) = &name
                    && call.name.is_empty()
                {
                    call.name = n.to_string();
                }
                let fragment = function.arguments.unwrap_or_default();
                call.arguments.push_str(&fragment);
                out.push(StreamEvent::ToolCallDelta {
                    index: slot,
                    name: name.map(std::borrow::Cow::into_owned),
                    arguments: fragment.into_owned(),
                });
            }
            if let Some(reason) = choice.finish_reason {
                let reason = match reason.as_ref() {
                    "stop" => FinishReason::Stop,
                    "length" => FinishReason::Length,
                    "tool_calls" => FinishReason::ToolCalls,
                    other => FinishReason::Other(other.to_owned()),
                };
                self.finish = Some(reason.clone());
                out.push(StreamEvent::Finish(reason));
            }
        }
        if let Some(u) = chunk.usage {
            let usage =
                Usage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens };
            self.usage = Some(usage);
            out.push(StreamEvent::Usage(usage));
        }
        if let Some(t) = chunk.timings {
            let timings = Timings {
                cache_n: t.cache_n,
                prompt_n: t.prompt_n,
                prompt_ms: t.prompt_ms,
                predicted_n: t.predicted_n,
                predicted_ms: t.predicted_ms,
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
            thinking_capped: false,
            slot_wait: std::time::Duration::ZERO,
        })
    }
}

/// Parses a whole recorded SSE stream (bytes as the server sent them) into a
/// completion; for fixtures and benchmarks. Uses the same parser as the live path.
pub fn parse_sse_bytes(bytes: &[u8]) -> Result<Completion, InferError> {
    replay_sse(bytes, |_| {})
}

/// [`parse_sse_bytes`], passing each event to `on_event` in order, as the live client
/// does.
pub fn replay_sse(
    bytes: &[u8],
    mut on_event: impl FnMut(&StreamEvent),
) -> Result<Completion, InferError> {
    use eventsource_stream::Eventsource as _;
    use futures_util::StreamExt as _;
    let mut lines = LineSplitter::new(usize::MAX);
    let rewritten = lines.push(bytes).map_err(|TooLarge| InferError::EventTooLarge(usize::MAX))?;
    // One chunk per event, as the network delivers them: the SSE parser rescans its
    // buffer per event, so one huge chunk would cost quadratic time.
    let mut chunks = Vec::new();
    let mut start = 0;
    for end in memchr::memmem::find_iter(&rewritten, b"\n\n") {
        if end >= start {
            chunks.push(Ok::<_, std::io::Error>(rewritten.slice(start..end + 2)));
            start = end + 2;
        }
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
                for e in asm.feed(&ev.event, &ev.data)? {
                    on_event(&e);
                }
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
    /// No line has been emitted yet: the first may start with a byte-order mark.
    first: bool,
}

/// An event exceeded the cap.
#[derive(Debug)]
pub(crate) struct TooLarge;

impl LineSplitter {
    pub(crate) fn new(cap: usize) -> LineSplitter {
        LineSplitter { partial: Vec::new(), event_bytes: 0, cap, first: true }
    }

    /// Takes a chunk; returns the complete lines it finished, rewritten as needed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<bytes::Bytes, TooLarge> {
        let mut out = Vec::with_capacity(chunk.len() + self.partial.len());
        let mut rest = chunk;
        let mut joined = Vec::new();
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            let (line, tail) = rest.split_at(nl + 1);
            rest = tail;
            // A line that started in an earlier chunk is joined; one that lies wholly in
            // this chunk is used where it is, without a copy.
            let full: &[u8] = if self.partial.is_empty() {
                line
            } else {
                self.partial.extend_from_slice(line);
                joined.clear();
                std::mem::swap(&mut joined, &mut self.partial);
                &joined
            };
            let body = full.strip_suffix(b"\n").unwrap_or(full);
            let mut body = body.strip_suffix(b"\r").unwrap_or(body);
            // The SSE standard strips one leading byte-order mark. Done here, because
            // `eventsource-stream` 0.2.3 slices it off at one byte and panics (found by
            // fuzzing: 13 bytes, `EF BB BF` then `data: {}` and a blank line).
            if std::mem::take(&mut self.first) {
                body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
            }
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
