//! The client: connect (learn the slots), chat (gate, send with retry, stream, assemble),
//! and the self-test.

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::Value;

use crate::error::InferError;
use crate::gate::SlotGate;
use crate::request::{ChatRequest, Controls, parse_constrained};
use crate::stream::{Assembler, Completion, FinishReason, StreamEvent, ThinkingCap};

/// How one streamed request ended.
enum Streamed {
    /// The server finished it.
    Done(Completion),
    /// The client stopped it at the thinking cap; the thinking so far.
    StoppedAtCap(String),
}

/// How tool calls are obtained from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolMode {
    /// The server's own tool calling (the chat template must support tools).
    Native,
    /// A JSON-schema constrained reply, one of the tools or a plain message.
    Constrained,
    /// Native when the server's chat template takes tools, else constrained.
    Auto,
}

/// How a thinking block that reached its cap is ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndThinking {
    /// Live, through llama-server's `/v1/chat/completions/control` (`reasoning_end`):
    /// the server closes the block in the same generation, so the thinking so far stays
    /// in the model's context and nothing is re-read. Where the server refuses (an older
    /// build, a proxy that does not pass the endpoint), falls back to `Reissue`.
    Control,
    /// Stop the request and send it again with the thinking closed by the template's own
    /// switch (`chat_template_kwargs.enable_thinking: false`). The thinking so far is
    /// kept in the completion but not shown to the model again.
    Reissue,
}

/// Retry for a server that went away before answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Give up once this much time has passed since the first attempt.
    pub window: Duration,
    /// Give up after this many attempts.
    pub attempts: u32,
    /// First backoff; doubles each attempt, jittered to between half and all of it.
    pub base: Duration,
    /// Largest backoff.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            window: Duration::from_secs(60),
            attempts: 30,
            base: Duration::from_millis(100),
            max: Duration::from_secs(2),
        }
    }
}

/// Client settings. Every bound says what it prevents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InferConfig {
    /// The server's base URL, such as `http://127.0.0.1:8080`.
    pub url: String,
    /// New turns' requests that may wait for a slot, in all (default 64); more get `Busy`
    /// rather than pile up without bound. Requests of turns under way always wait
    /// ([`Client::chat_admitted`]).
    pub queue_bound: usize,
    /// Longest silence on a stream (default 60 s, longer than llama-server's SSE ping
    /// interval); a hung server then ends the request instead of holding its slot.
    pub idle_timeout: Duration,
    /// Largest single SSE event (default 4 MiB); a runaway event cannot fill memory.
    pub max_event_bytes: usize,
    /// Retry for a request whose server is not there (gone, restarting).
    pub retry: RetryPolicy,
    /// How long [`Client::connect`] waits for a server that is still starting (default
    /// 60 s; a model may take a while to load).
    pub connect_window: Duration,
    /// How tool calls are obtained.
    pub mode: ToolMode,
    /// How a capped thinking block is ended (see [`ChatRequest::max_thinking_tokens`]).
    pub end_thinking: EndThinking,
}

impl InferConfig {
    /// Defaults for a server at `url`.
    pub fn new(url: &str) -> InferConfig {
        InferConfig {
            url: url.trim_end_matches('/').to_owned(),
            queue_bound: 64,
            idle_timeout: Duration::from_secs(60),
            max_event_bytes: 4 << 20,
            retry: RetryPolicy::default(),
            connect_window: Duration::from_secs(60),
            mode: ToolMode::Auto,
            end_thinking: EndThinking::Control,
        }
    }
}

/// What the self-test found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelfTest {
    /// `/health` answered ok.
    pub healthy: bool,
    /// Slots from `/props`.
    pub slots: usize,
    /// Context size per slot, from `/slots`.
    pub context: Option<u64>,
    /// Whether the chat template takes tools natively.
    pub native_tools: bool,
    /// The tool mode in use.
    pub tool_mode: String,
    /// A short completion streamed, with usage and timings.
    pub completion_ok: bool,
    /// Its timings' cache count, when reported.
    pub cache_n: Option<u64>,
    /// The server can end a thinking block live (`/v1/chat/completions/control`);
    /// without it a capped thinking block is ended by a re-issue.
    pub thinking_control: bool,
    /// What went wrong, if anything.
    pub problems: Vec<String>,
}

impl std::fmt::Display for SelfTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = |ok: bool| if ok { "ok  " } else { "FAIL" };
        writeln!(f, "{} health", mark(self.healthy))?;
        writeln!(f, "{} slots: {}", mark(self.slots > 0), self.slots)?;
        writeln!(
            f,
            "{} context per slot: {}",
            mark(self.context.is_some()),
            self.context.map_or("unknown".into(), |c| c.to_string())
        )?;
        writeln!(
            f,
            "ok   tools: {} (template takes tools: {})",
            self.tool_mode, self.native_tools
        )?;
        writeln!(f, "{} completion with cache_prompt and timings", mark(self.completion_ok))?;
        if self.thinking_control {
            writeln!(f, "ok   thinking cap: ended live by the server (reasoning_end)")?;
        } else {
            writeln!(f, "ok   thinking cap: ended by a re-issue (no control endpoint)")?;
        }
        for p in &self.problems {
            writeln!(f, "     problem: {p}")?;
        }
        Ok(())
    }
}

/// A client for one llama-server.
#[derive(Debug, Clone)]
pub struct Client {
    cfg: InferConfig,
    http: reqwest::Client,
    gate: SlotGate,
    constrained: bool,
    native_tools: bool,
}

/// Largest number of slots accepted from `/props`: a bogus value cannot make the gate
/// allocate without bound.
const MAX_SLOTS: u64 = 256;
/// The longest a probe of the server (`/health`, `/props`, `/slots`) may take, its body
/// included: a server that accepted and never answered held `connect` for ever.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest body a probe reads (llama-server's `/props`, chat template included, is
/// tens of KB): a server sending an endless body grew the client's memory without bound.
const MAX_PROBE_BYTES: usize = 4 << 20;
/// The characters of the start and of the end of a constrained reply cut off by the
/// token limit that its error shows.
const CUT_SHOWN: (usize, usize) = (60, 100);

/// The start of an error answer's body: at most 4 KiB, read within [`PROBE_TIMEOUT`]
/// (the rest is never read; a server's endless error body was read whole before).
async fn error_text(mut r: reqwest::Response) -> String {
    let mut body = Vec::new();
    let _ = tokio::time::timeout(PROBE_TIMEOUT, async {
        while body.len() < 4096
            && let Ok(Some(chunk)) = r.chunk().await
        {
            body.extend_from_slice(&chunk);
        }
    })
    .await;
    body.truncate(4096);
    String::from_utf8_lossy(&body).into_owned()
}

/// A probe's body, read whole up to [`MAX_PROBE_BYTES`].
async fn probe_body(mut r: reqwest::Response) -> Result<Vec<u8>, InferError> {
    let mut body = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|e| InferError::ProbeBody(e.to_string()))? {
        if body.len() + chunk.len() > MAX_PROBE_BYTES {
            return Err(InferError::ProbeTooLarge(MAX_PROBE_BYTES));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Scales `d` by a factor between one half and one: clients that lost the same server
/// at the same moment then do not retry in lockstep. Not for secrets: the seed is the
/// clock's nanoseconds and a per-process counter, mixed by splitmix64.
fn jitter(d: Duration) -> Duration {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos() as u64);
    let mut x = nanos ^ COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let frac = 0.5 + (x % 1000) as f64 / 2000.0;
    d.mul_f64(frac)
}

/// One attempt's end, for [`retrying`].
enum Try<T> {
    /// It worked.
    Done(T),
    /// The server has not answered yet (refused, reset, loading): try again, why.
    Again(String),
    /// It failed for good.
    Fail(InferError),
}

/// The one retry loop: runs `once` until it is done or fails for good; between attempts
/// it waits a jittered, doubling backoff and then until `ready` (the server's
/// `/health`, or nothing), each wait counted as an attempt. Gives up as
/// [`InferError::Unreachable`] after `policy.attempts` attempts or once `window` has
/// passed since the first.
async fn retrying<T, R, O>(
    policy: &RetryPolicy,
    window: Duration,
    url: &str,
    mut ready: impl FnMut() -> R,
    mut once: impl FnMut() -> O,
) -> Result<T, InferError>
where
    R: Future<Output = bool>,
    O: Future<Output = Try<T>>,
{
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let last = match once().await {
            Try::Done(v) => return Ok(v),
            Try::Fail(e) => return Err(e),
            Try::Again(why) => why,
        };
        loop {
            if attempt >= policy.attempts || started.elapsed() >= window {
                return Err(InferError::Unreachable {
                    url: url.to_owned(),
                    attempts: attempt,
                    last,
                });
            }
            tokio::time::sleep(backoff(policy, attempt)).await;
            if ready().await {
                break;
            }
            attempt += 1;
        }
    }
}

fn backoff(p: &RetryPolicy, attempt: u32) -> Duration {
    let exp = p.base.saturating_mul(1u32 << attempt.min(16).saturating_sub(1));
    jitter(exp.min(p.max))
}

impl Client {
    /// Connects: waits for the server (within the retry policy), reads `/props` and
    /// validates the slot count, and settles the tool mode.
    pub async fn connect(cfg: InferConfig) -> Result<Client, InferError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .no_proxy()
            .build()
            .map_err(|e| InferError::Props(e.to_string()))?;
        let props: Value = retrying(
            &cfg.retry,
            cfg.connect_window,
            &cfg.url,
            async || true,
            async || {
                let props = http.get(format!("{}/props", cfg.url)).timeout(PROBE_TIMEOUT);
                let r = match props.send().await {
                    Ok(r) => r,
                    Err(e) => return Try::Again(e.to_string()),
                };
                if r.status() == 503 {
                    return Try::Again("server loading (503)".to_owned());
                }
                if !r.status().is_success() {
                    return Try::Again(format!("/props answered {}", r.status()));
                }
                let body = probe_body(r).await.map_err(|e| e.to_string());
                match body.and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string())) {
                    Ok(v) => Try::Done(v),
                    Err(why) => Try::Again(why),
                }
            },
        )
        .await?;
        let slots = props
            .get("total_slots")
            .and_then(Value::as_u64)
            .ok_or_else(|| InferError::Props("/props has no total_slots".into()))?;
        if slots == 0 || slots > MAX_SLOTS {
            return Err(InferError::Props(format!(
                "total_slots {slots} is not in 1..={MAX_SLOTS}"
            )));
        }
        let caps = props.get("chat_template_caps").unwrap_or(&Value::Null);
        let native_tools =
            caps.get("supports_tool_calls").and_then(Value::as_bool).unwrap_or(false)
                && caps.get("supports_tools").and_then(Value::as_bool).unwrap_or(false);
        let constrained = match cfg.mode {
            ToolMode::Native => false,
            ToolMode::Constrained => true,
            ToolMode::Auto => !native_tools,
        };
        let gate = SlotGate::new(slots as usize, cfg.queue_bound);
        Ok(Client { cfg, http, gate, constrained, native_tools })
    }

    /// The slot gate (for inspection).
    pub fn gate(&self) -> &SlotGate {
        &self.gate
    }

    /// Whether tool calls go through a constrained reply.
    pub fn constrained(&self) -> bool {
        self.constrained
    }

    /// Sends a request body, retrying only while the server has not answered: refused
    /// or reset connections and 503 (loading). Between attempts it waits, with jittered
    /// exponential backoff, for `/health`. Once a response has started, nothing is retried.
    async fn send(&self, body: Vec<u8>) -> Result<reqwest::Response, InferError> {
        // Shared, not copied, by each attempt: a long history's body is large.
        let body = bytes::Bytes::from(body);
        let window = self.cfg.retry.window;
        retrying(
            &self.cfg.retry,
            window,
            &self.cfg.url,
            async || self.healthy().await,
            async || {
                // The answer's head must come within the idle wait too: a server that
                // accepted the request and sent nothing held the turn to its deadline.
                let send = self
                    .http
                    .post(format!("{}/v1/chat/completions", self.cfg.url))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send();
                let Ok(sent) = tokio::time::timeout(self.cfg.idle_timeout, send).await else {
                    return Try::Fail(InferError::IdleTimeout(self.cfg.idle_timeout));
                };
                match sent {
                    Ok(r) if r.status() == 503 => Try::Again("server loading (503)".to_owned()),
                    Ok(r) if !r.status().is_success() => {
                        let status = r.status().as_u16();
                        let text = error_text(r).await;
                        let body = text.chars().take(1024).collect();
                        Try::Fail(InferError::Http { status, body })
                    }
                    Ok(r) => Try::Done(r),
                    Err(e) if e.is_connect() || e.is_request() => Try::Again(format!("{e}")),
                    Err(e) => Try::Fail(InferError::Truncated(e.to_string())),
                }
            },
        )
        .await
    }

    /// Runs one chat request for `session` on its slot, passing each event to `on_event`
    /// as it arrives, and returns the assembled reply.
    ///
    /// With [`ChatRequest::max_thinking_tokens`] set, the reasoning is counted as it
    /// streams; at the cap the thinking block is ended (see [`EndThinking`]) and the
    /// completion is marked `thinking_capped`.
    pub async fn chat(
        &self,
        session: &str,
        req: &ChatRequest,
        on_event: impl FnMut(&StreamEvent),
    ) -> Result<Completion, InferError> {
        self.chat_as(session, req, false, on_event).await
    }

    /// [`Client::chat`] for a request of a turn already under way (its tool calls ran):
    /// it waits for the session's slot in order, never refused for a full queue; the
    /// turn's deadline bounds the wait.
    pub async fn chat_admitted(
        &self,
        session: &str,
        req: &ChatRequest,
        on_event: impl FnMut(&StreamEvent),
    ) -> Result<Completion, InferError> {
        self.chat_as(session, req, true, on_event).await
    }

    async fn chat_as(
        &self,
        session: &str,
        req: &ChatRequest,
        admitted: bool,
        mut on_event: impl FnMut(&StreamEvent),
    ) -> Result<Completion, InferError> {
        let queued = Instant::now();
        let guard = if admitted {
            self.gate.acquire_admitted(session).await?
        } else {
            self.gate.acquire(session).await?
        };
        let slot_wait = queued.elapsed();
        let constrained = self.constrained && !req.tools.is_empty();
        // A cap of 0 asks for no thinking at all: the block is closed from the start.
        let cap = req.max_thinking_tokens.filter(|n| *n > 0).map(ThinkingCap::new);
        let controls = Controls {
            id_slot: guard.slot(),
            constrained,
            reasoning_control: cap.is_some() && self.cfg.end_thinking == EndThinking::Control,
            thinking_closed: req.max_thinking_tokens == Some(0),
        };
        let mut completion = match self.stream(req, controls, cap, &mut on_event).await? {
            Streamed::Done(c) => c,
            Streamed::StoppedAtCap(thought) => {
                // The stopped request's connection is closed, so the server has stopped
                // generating for it; the slot is still ours.
                let closed =
                    Controls { reasoning_control: false, thinking_closed: true, ..controls };
                let Streamed::Done(mut c) = self.stream(req, closed, None, &mut on_event).await?
                else {
                    return Err(InferError::Protocol("re-issue stopped without a cap".into()));
                };
                c.reasoning.insert_str(0, &thought);
                c.thinking_capped = true;
                c
            }
        };
        drop(guard);
        completion.slot_wait = slot_wait;
        if constrained {
            if completion.finish == FinishReason::Length {
                return Err(InferError::Truncated(format!(
                    "the constrained reply was cut off by the token limit: {}",
                    cut_reply(&completion.content)
                )));
            }
            let (text, calls) = parse_constrained(&completion.content, &req.tools, 0)?;
            if !text.is_empty() {
                on_event(&StreamEvent::Content(text.clone()));
            }
            if !calls.is_empty() {
                completion.finish = FinishReason::ToolCalls;
            }
            completion.content = text;
            completion.tool_calls = calls;
        } else if completion.tool_calls.is_empty()
            && let Some(call) = crate::request::call_in_text(&completion.content, &req.tools, 0)
        {
            // The text was streamed as text already; the call is what the model meant.
            completion.content = String::new();
            completion.tool_calls = vec![call];
            completion.finish = FinishReason::ToolCalls;
        }
        Ok(completion)
    }

    /// Sends one request and reads its stream to the end, or until the thinking cap when
    /// the server cannot end the thinking live.
    async fn stream(
        &self,
        req: &ChatRequest,
        controls: Controls,
        mut cap: Option<ThinkingCap>,
        on_event: &mut impl FnMut(&StreamEvent),
    ) -> Result<Streamed, InferError> {
        let response = self.send(req.body(controls)).await?;
        let limit = self.cfg.max_event_bytes;
        let mut decoder = crate::stream::SseDecoder::new(limit);
        let mut body = response.bytes_stream();
        let mut asm = Assembler::new();
        let mut capped = false;
        // The idle timeout runs from the last whole event, not the last byte: a server
        // that trickles bytes without ever ending an event still times out.
        let mut last_event = tokio::time::Instant::now();
        'stream: loop {
            let chunk = match tokio::time::timeout_at(
                last_event + self.cfg.idle_timeout,
                body.next(),
            )
            .await
            {
                Err(_) => return Err(InferError::IdleTimeout(self.cfg.idle_timeout)),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(InferError::Truncated(e.to_string())),
                Ok(Some(Ok(chunk))) => chunk,
            };
            let events = decoder.push(&chunk).map_err(|e| e.into_infer(limit))?;
            if !events.is_empty() {
                last_event = tokio::time::Instant::now();
            }
            for ev in events {
                for e in asm.feed(&ev.event, &ev.data)? {
                    // In constrained mode the content is JSON for the client, not
                    // text for the owner; it is reported once parsed, by `chat`.
                    if !(controls.constrained && matches!(e, StreamEvent::Content(_))) {
                        on_event(&e);
                    }
                    if cap.as_mut().is_some_and(|c| c.observe(&e)) {
                        capped = true;
                        let live = controls.reasoning_control
                            && self.end_reasoning(asm.completion_id()).await;
                        if !live {
                            // Dropping the stream closes the connection, and the
                            // server stops this generation.
                            return Ok(Streamed::StoppedAtCap(asm.reasoning().to_owned()));
                        }
                    }
                }
                if asm.is_done() {
                    break 'stream;
                }
            }
        }
        let mut completion = asm.finish()?;
        completion.thinking_capped = capped;
        Ok(Streamed::Done(completion))
    }

    /// Posts `reasoning_end` for the completion `id` to `/v1/chat/completions/control`;
    /// the server's answer on success, `None` when there is no such endpoint or no
    /// answer.
    async fn control(&self, id: &str) -> Option<Value> {
        let r = self
            .http
            .post(format!("{}/v1/chat/completions/control", self.cfg.url))
            .timeout(Duration::from_secs(5))
            .header("content-type", "application/json")
            .body(serde_json::json!({"id": id, "action": "reasoning_end"}).to_string())
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success())?;
        serde_json::from_slice(&probe_body(r).await.ok()?).ok()
    }

    /// Whether the server has the control endpoint: asked about a completion that does
    /// not exist, it answers with a `success` field (false); a server without the
    /// endpoint answers 404.
    async fn has_control_endpoint(&self) -> bool {
        self.control("bx-self-test-probe").await.is_some_and(|v| v.get("success").is_some())
    }

    /// Asks llama-server to end the thinking of the completion `id` now. False when the
    /// server has no such endpoint or refuses.
    async fn end_reasoning(&self, id: &str) -> bool {
        !id.is_empty()
            && self
                .control(id)
                .await
                .is_some_and(|v| v.get("success").and_then(Value::as_bool) == Some(true))
    }

    /// True when `/health` answers 200.
    async fn healthy(&self) -> bool {
        let url = format!("{}/health", self.cfg.url);
        let probe = self.http.get(url).timeout(PROBE_TIMEOUT);
        probe.send().await.is_ok_and(|r| r.status().is_success())
    }

    /// Health, properties, slots, context, tool support, and one short completion with
    /// `cache_prompt` and `timings`: what `bx doctor` shows.
    pub async fn self_test(&self) -> SelfTest {
        let mut problems = Vec::new();
        let healthy = self.healthy().await;
        if !healthy {
            problems.push("/health did not answer ok".into());
        }
        let slots = self.http.get(format!("{}/slots", self.cfg.url)).timeout(PROBE_TIMEOUT);
        let context = match slots.send().await {
            Ok(r) => probe_body(r)
                .await
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v.get(0)?.get("n_ctx")?.as_u64()),
            Err(e) => {
                problems.push(format!("/slots: {e}"));
                None
            }
        };
        let req = ChatRequest {
            messages: vec![crate::request::Message::User { content: "Say OK.".into() }],
            max_tokens: Some(4),
            temperature: Some(0.0),
            ..ChatRequest::default()
        };
        let (completion_ok, cache_n) = match self.chat("bx-self-test", &req, |_| {}).await {
            Ok(c) => {
                if c.timings.is_none() {
                    problems.push("no timings in the reply".into());
                }
                (c.timings.is_some() && c.usage.is_some(), c.timings.map(|t| t.cache_n))
            }
            Err(e) => {
                problems.push(format!("completion: {e}"));
                (false, None)
            }
        };
        let thinking_control = self.has_control_endpoint().await;
        SelfTest {
            healthy,
            thinking_control,
            slots: self.gate.slots(),
            context,
            native_tools: self.native_tools,
            tool_mode: if self.constrained { "constrained".into() } else { "native".into() },
            completion_ok,
            cache_n,
            problems,
        }
    }
}

/// What a constrained reply cut off by the token limit was: its start (which tool) and
/// its end (what ran on: a string, a map's keys), in Rust's escapes, as it is the
/// model's text on its way to a terminal. Asked what a page says, the 0.5B model wrote
/// `"headers":{"User-Agent":…,"Accept-Language":…` until its tokens ran out.
fn cut_reply(content: &str) -> String {
    let chars = content.chars().count();
    let (head, tail) = CUT_SHOWN;
    if chars <= head + tail {
        return format!("{content:?}");
    }
    let start: String = content.chars().take(head).collect();
    let end: String = content.chars().skip(chars - tail).collect();
    format!("it began {start:?} and ended {end:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_reply_is_shown_by_its_start_and_end_escaped() {
        let headers = r#""Accept-Language":"en-US","#.repeat(40);
        let reply =
            format!("{{\"tool\":\"http.fetch\",\"with\":{{\"headers\":{{{headers}\u{1b}[2J");
        let shown = cut_reply(&reply);
        assert!(shown.starts_with(r#"it began "{\"tool\":\"http.fetch\""#), "{shown}");
        assert!(shown.ends_with(r#"en-US\",\u{1b}[2J""#), "{shown}");
        assert!(!shown.contains('\u{1b}'), "the escape is written out: {shown}");
        assert!(shown.chars().count() < 2 * (CUT_SHOWN.0 + CUT_SHOWN.1), "{shown}");
        // A short reply is shown whole.
        assert_eq!(cut_reply("{\"tool\":"), r#""{\"tool\":""#);
    }

    #[test]
    fn jitter_varies_and_stays_between_half_and_whole() {
        // The seed used to be `Instant::now().elapsed()` (a few nanoseconds, nearly the
        // same every call) and a stack address; this checks spread and bounds.
        let d = Duration::from_millis(1000);
        let seen: std::collections::BTreeSet<Duration> = (0..50).map(|_| jitter(d)).collect();
        assert!(seen.len() > 10, "only {} distinct values", seen.len());
        assert!(seen.iter().all(|j| *j >= d / 2 && *j <= d), "{seen:?}");
    }
}
