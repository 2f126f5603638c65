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
    /// How much of the prompt the server has read (llama-server's `prompt_progress`,
    /// sent after each batch when the request asks for it).
    PromptProgress {
        /// Prompt tokens read so far, those from the cache included.
        processed: u64,
        /// Prompt tokens in all.
        total: u64,
    },
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
    /// The model's name as the server reported it (at most [`MAX_MODEL_NAME`] bytes;
    /// empty when it sent none).
    pub model: String,
}

/// The most bytes of the model's name kept from the server's reply.
pub(crate) const MAX_MODEL_NAME: usize = 128;

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

/// The most tool calls one reply may hold; the loop runs far fewer per turn
/// (`[loop] max_tool_calls`), so more is a hostile or broken server.
pub const MAX_CALLS_PER_REPLY: usize = 128;

/// Assembles deltas into a [`Completion`]. Tool calls are keyed by index (falling back
/// to id); the first non-empty id and name win; argument fragments are concatenated
/// exactly and parsed only at the end.
#[derive(Debug, Default)]
pub struct Assembler {
    id: String,
    model: String,
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
    model: Text<'a>,
    #[serde(borrow, default)]
    choices: Vec<WireChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    timings: Option<WireTimings>,
    #[serde(default)]
    prompt_progress: Option<WireProgress>,
    #[serde(borrow, default)]
    error: Option<&'a serde_json::value::RawValue>,
}

#[derive(serde::Deserialize)]
struct WireProgress {
    #[serde(default)]
    processed: u64,
    #[serde(default)]
    total: u64,
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

    /// The call a fragment belongs to, made when it is new. A reply may hold at most
    /// [`MAX_CALLS_PER_REPLY`] calls: each fragment is matched by a search over them, and
    /// a hostile server sending 128,000 empty calls in one 1.7 MB event made that cost
    /// 27 s of CPU (found by a probe; the turn's deadline cannot stop a synchronous
    /// loop).
    fn call_slot(&mut self, index: Option<u64>, id: &str) -> Result<usize, InferError> {
        let found = match index {
            Some(i) => self.calls.iter().position(|c| c.index == Some(i)),
            None if !id.is_empty() => self.calls.iter().position(|c| c.id == id),
            None => self.calls.len().checked_sub(1),
        };
        match found {
            Some(pos) => Ok(pos),
            None if self.calls.len() >= MAX_CALLS_PER_REPLY => Err(InferError::Protocol(format!(
                "the reply has more than {MAX_CALLS_PER_REPLY} tool calls"
            ))),
            None => {
                self.calls.push(PartialCall { index, ..PartialCall::default() });
                Ok(self.calls.len() - 1)
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
        if self.model.is_empty()
            && let Some(model) = chunk.model
        {
            self.model = model.chars().take(MAX_MODEL_NAME).collect();
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
                let slot = self.call_slot(tc.index, &id)?;
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
        if let Some(p) = chunk.prompt_progress {
            out.push(StreamEvent::PromptProgress { processed: p.processed, total: p.total });
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
            model: self.model,
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
    let mut decoder = SseDecoder::new(usize::MAX);
    let mut asm = Assembler::new();
    for ev in decoder.push(bytes).map_err(|e| e.into_infer(usize::MAX))? {
        for e in asm.feed(&ev.event, &ev.data)? {
            on_event(&e);
        }
    }
    asm.finish()
}

/// One server-sent event: its type (`message` unless an `event:` line named one) and
/// its `data:` lines, joined by newlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) event: String,
    pub(crate) data: String,
}

/// Why a stream could not be decoded.
#[derive(Debug)]
pub(crate) enum SseError {
    /// One event (the lines up to a blank line) went over the cap.
    TooLarge,
    /// A line that is not a comment is not UTF-8.
    NotUtf8,
}

impl SseError {
    pub(crate) fn into_infer(self, cap: usize) -> InferError {
        match self {
            SseError::TooLarge => InferError::EventTooLarge(cap),
            SseError::NotUtf8 => InferError::Protocol("the event stream is not UTF-8".into()),
        }
    }
}

/// Decodes server-sent events as the WHATWG standard reads them, one line at a time and
/// in time linear in the input: a line ends at LF (a CR before it is dropped), a blank
/// line dispatches the event, a line starting with `:` is a comment, `field: value`
/// sets a field (one space after the colon is dropped), a byte-order mark at the very
/// start is skipped, and an event not ended by a blank line when the stream ends is
/// dropped. Two additions: llama-server reports an error inside a stream as a line
/// `error: {json}`, which is no SSE field, and is read as an `error` event; and one
/// event may not exceed the cap, counted before anything is kept.
///
/// Written here rather than taken from `eventsource-stream` 0.2.3, which panicked on a
/// leading byte-order mark (it sliced the mark at one byte) and rescanned its buffer per
/// line, so one event of many lines cost quadratic time (found by `make fuzz`: 80,000
/// comment lines, 320 KB, took 0.35 s, and the 4 MiB cap allowed about a minute).
#[derive(Debug)]
pub(crate) struct SseDecoder {
    /// A line not ended yet.
    partial: Vec<u8>,
    /// Bytes of the event so far (its lines since the last blank one).
    event_bytes: usize,
    cap: usize,
    /// No line has been read yet: the first may start with a byte-order mark.
    first: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder refusing any event of more than `cap` bytes.
    pub(crate) fn new(cap: usize) -> SseDecoder {
        SseDecoder {
            partial: Vec::new(),
            event_bytes: 0,
            cap,
            first: true,
            event: String::new(),
            data: String::new(),
            has_data: false,
        }
    }

    /// Takes a chunk of the stream; returns the events it completed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            let line = &rest[..nl];
            rest = &rest[nl + 1..];
            if self.partial.is_empty() {
                self.line(line, &mut out)?;
            } else {
                // A line that began in an earlier chunk is joined; one wholly in this
                // chunk is read where it is.
                self.partial.extend_from_slice(line);
                let joined = std::mem::take(&mut self.partial);
                self.line(&joined, &mut out)?;
            }
        }
        self.partial.extend_from_slice(rest);
        if self.event_bytes.saturating_add(self.partial.len()) > self.cap {
            return Err(SseError::TooLarge);
        }
        Ok(out)
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut line = line.strip_suffix(b"\r").unwrap_or(line);
        if std::mem::take(&mut self.first) {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.event_bytes = 0;
            let event = std::mem::take(&mut self.event);
            if std::mem::take(&mut self.has_data) {
                let mut data = std::mem::take(&mut self.data);
                data.pop(); // the newline after the last data line
                let event = if event.is_empty() { "message".to_owned() } else { event };
                out.push(SseEvent { event, data });
            }
            self.data.clear();
            return Ok(());
        }
        self.event_bytes = self.event_bytes.saturating_add(line.len());
        if self.event_bytes > self.cap {
            return Err(SseError::TooLarge);
        }
        if line.starts_with(b":") {
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => value.clone_into(&mut self.event),
            "error" => {
                "error".clone_into(&mut self.event);
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            // `id`, `retry` and unknown fields carry nothing bx uses.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut d = SseDecoder::new(64);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.push(c)?);
        }
        Ok(out)
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.into(), data: data.into() }
    }

    #[test]
    fn prompt_progress_is_reported_and_changes_nothing_of_the_reply() {
        // As llama-server 2026.10 sends it with `return_progress` (captured).
        let chunk = r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"object":"chat.completion.chunk","prompt_progress":{"total":3034,"cache":0,"processed":2048,"time_ms":21621}}"#;
        let mut asm = Assembler::new();
        let events = asm.feed("", chunk).unwrap();
        assert_eq!(events, vec![StreamEvent::PromptProgress { processed: 2048, total: 3034 }]);
        asm.feed("", r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#).unwrap();
        asm.feed("", r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#).unwrap();
        let done = asm.finish().unwrap();
        assert_eq!(done.content, "hi");
        assert!(done.tool_calls.is_empty());
    }

    #[test]
    fn decodes_fields_comments_and_line_ends_as_the_standard_says() {
        let got = decode(&[
            b"\xEF\xBB\xBFdata: a\r\n",
            b"data:b\n\n: comment\nevent: ping\ndata\nid: 7\nretry: 5\nx\n\n",
            b"error: {\"m\":1}\n\n\n\ndata: c\n",
        ])
        .unwrap();
        assert_eq!(got, vec![ev("message", "a\nb"), ev("ping", ""), ev("error", "{\"m\":1}")]);
        // A line split across chunks is joined; an event never ended is dropped.
        let got = decode(&[b"da", b"ta: x", b"y\n", b"\n", b"data: z\n"]).unwrap();
        assert_eq!(got, vec![ev("message", "xy")]);
    }

    #[test]
    fn a_reply_with_too_many_calls_is_refused_not_searched() {
        let calls: Vec<String> =
            (0..=MAX_CALLS_PER_REPLY).map(|i| format!("{{\"index\":{i}}}")).collect();
        let data = format!(
            "{{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{}]}}}}]}}",
            calls.join(",")
        );
        let mut asm = Assembler::new();
        let err = asm.feed("message", &data).unwrap_err();
        assert!(err.to_string().contains("more than 128 tool calls"), "{err}");
        let mut asm = Assembler::new();
        let data = data.replacen(&format!(",{{\"index\":{MAX_CALLS_PER_REPLY}}}"), "", 1);
        assert!(asm.feed("message", &data).is_ok());
    }

    #[test]
    fn bounds_an_event_and_refuses_what_is_not_utf8() {
        assert!(matches!(decode(&[&[b'x'; 65]]), Err(SseError::TooLarge)));
        let comments = b": 1234567890\n".repeat(6);
        assert!(matches!(decode(&[&comments]), Err(SseError::TooLarge)));
        assert_eq!(decode(&[&b": 1234567890\n\n".repeat(20)]).unwrap(), vec![]);
        assert!(matches!(decode(&[b"data: \xff\n\n"]), Err(SseError::NotUtf8)));
        assert!(decode(&[b": \xff\n\n"]).unwrap().is_empty());
    }
}
