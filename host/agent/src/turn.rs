//! A turn: the owner's message, then model → tool calls → broker → approval when asked →
//! runtime → labelled result → audit → back to the model, until the model answers
//! without a call or a limit ends it. One turn per session at a time.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bx_audit::AuditLog;
use bx_broker::Policy;
use bx_infer::{ChatRequest, Client, Message, StreamEvent, ToolCall, ToolChoice};
use bx_protocol::{Body, TurnUsage};
use bx_runtime::{RunError, Runtime};
use bx_state::{LoopConfig, StateDir, valid_session_id};
use bx_store::Store;
use tokio::sync::Notify;

use crate::approvals::{Approvals, now_ms};
use crate::baseline::Baseline;
use crate::call::{self, Decided, Overlay, Trust};
use crate::error::AgentError;
use crate::ledger::Ledger;
use crate::toolset::Toolset;
use crate::transcript::Transcript;

/// Where a turn's events go (the connection that sent the message). Sending never
/// blocks the turn; a client that went away just stops receiving.
pub type Events = tokio::sync::mpsc::UnboundedSender<Body>;

/// What an [`Agent`] is made of.
#[derive(Debug)]
pub struct AgentParts {
    /// The state directory (policy, sessions, `core.md`).
    pub state: StateDir,
    /// The configuration it was started with.
    pub config: bx_state::Config,
    /// The audit log, of which this process is the one writer.
    pub audit: Arc<AuditLog>,
    /// The tool store.
    pub store: Store,
    /// The component runtime.
    pub runtime: Runtime,
    /// The inference client, connected; `None` when no model is configured (tools and
    /// one-shot calls work, turns are refused).
    pub client: Option<Client>,
    /// Limits of a turn.
    pub limits: LoopConfig,
    /// Sampling temperature for every request, when set.
    pub temperature: Option<f32>,
    /// Sampling seed for every request, when set.
    pub seed: Option<u64>,
}

/// The agent: everything a turn needs, shared by all sessions of one daemon.
#[derive(Debug)]
pub struct Agent {
    parts: AgentParts,
    trust: Trust,
    approvals: Approvals,
    toolset: Mutex<Arc<Toolset>>,
    /// Sessions with a turn running, each with the signal that cancels it.
    running: Mutex<HashMap<String, Arc<Notify>>>,
    /// The transcripts of recent sessions, kept between turns.
    transcripts: Mutex<Kept>,
    calls: AtomicU64,
}

/// Most transcripts kept in memory between turns.
const KEPT_TRANSCRIPTS: usize = 64;
/// Most bytes of transcript files kept in memory between turns, in all; a transcript
/// is held about three times over (the messages and their wire form).
const KEPT_TRANSCRIPT_BYTES: u64 = 16 << 20;

/// The transcripts kept between turns, least recently used first, so a turn reads only
/// the new bytes of a long session rather than parsing and checking its whole file
/// again. One is used again only while its file is the one it wrote
/// ([`Transcript::is_current`]); otherwise the file is read afresh.
#[derive(Debug, Default)]
struct Kept {
    order: std::collections::VecDeque<(String, Transcript)>,
}

impl Kept {
    fn take(&mut self, session: &str) -> Option<Transcript> {
        let at = self.order.iter().position(|(s, _)| s == session)?;
        self.order.remove(at).map(|(_, t)| t)
    }

    fn put(&mut self, session: String, transcript: Transcript) {
        // One transcript over the whole bound is not kept (keeping it would push out
        // every other).
        if !transcript.is_current() || transcript.bytes() > KEPT_TRANSCRIPT_BYTES {
            return;
        }
        self.order.push_back((session, transcript));
        let mut bytes = self.order.iter().fold(0u64, |n, (_, t)| n.saturating_add(t.bytes()));
        while self.order.len() > KEPT_TRANSCRIPTS
            || (bytes > KEPT_TRANSCRIPT_BYTES && !self.order.is_empty())
        {
            if let Some((_, t)) = self.order.pop_front() {
                bytes = bytes.saturating_sub(t.bytes());
            }
        }
    }
}

/// A session's transcript for the length of a turn; handed back to be kept when the
/// turn ends in any way (its appends are on disk as they happen, so it matches its file
/// even when the turn was cancelled part way).
struct TurnTranscript<'a> {
    agent: &'a Agent,
    session: String,
    transcript: Option<Transcript>,
}

impl std::ops::Deref for TurnTranscript<'_> {
    type Target = Transcript;
    fn deref(&self) -> &Transcript {
        self.transcript.as_ref().unwrap_or_else(|| unreachable!("held until dropped"))
    }
}

impl std::ops::DerefMut for TurnTranscript<'_> {
    fn deref_mut(&mut self) -> &mut Transcript {
        self.transcript.as_mut().unwrap_or_else(|| unreachable!("held until dropped"))
    }
}

impl Drop for TurnTranscript<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.transcript.take() {
            lock(&self.agent.transcripts).put(std::mem::take(&mut self.session), t);
        }
    }
}

/// Takes a lock whose data stays consistent across a panic (each update is one
/// statement), so a poisoned lock is taken over rather than refusing every later turn.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks a session busy for as long as it lives: dropped on every path out of a turn
/// (success, error, cancellation, panic).
struct Busy<'a> {
    agent: &'a Agent,
    session: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        lock(&self.agent.running).remove(&self.session);
    }
}

impl Agent {
    /// Builds the agent: opens the session state, loads the policy and the tools, and
    /// puts every known session back on the inference slot it used before.
    pub fn new(parts: AgentParts) -> Result<Agent, AgentError> {
        let files = bx_state::Sessions::open(&parts.state.sessions_dir())?;
        for id in files.list()? {
            if let Ok((state, None)) = files.state(&id)
                && let Some(slot) = state.slot
                && let Some(client) = &parts.client
            {
                client.gate().pin(&id, slot);
            }
        }
        let ledger = Ledger::open(files, &parts.state.audit_dir(&parts.config))?;
        let policy = parts.state.watch_policy(&parts.config);
        let trust = Trust::new(Arc::clone(&parts.audit), ledger, policy);
        let toolset = Toolset::load(&parts.store, &parts.runtime)?;
        Ok(Agent {
            trust,
            approvals: Approvals::new(),
            toolset: Mutex::new(Arc::new(toolset)),
            running: Mutex::new(HashMap::new()),
            transcripts: Mutex::new(Kept::default()),
            calls: AtomicU64::new(0),
            parts,
        })
    }

    /// The pending approvals.
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    /// The inference client, when a model is configured.
    pub fn client(&self) -> Option<&Client> {
        self.parts.client.as_ref()
    }

    /// Client connections the daemon serves at once (`[loop] max_connections`).
    pub fn max_connections(&self) -> usize {
        self.parts.limits.max_connections.get()
    }

    /// The trust path every call goes through.
    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// The component runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.parts.runtime
    }

    /// Whether `session` has a turn running.
    pub fn is_busy(&self, session: &str) -> bool {
        lock(&self.running).contains_key(session)
    }

    /// Cancels the running turn of `session`; false when none runs.
    pub fn cancel(&self, session: &str) -> bool {
        match lock(&self.running).get(session) {
            Some(signal) => {
                signal.notify_one();
                true
            }
            None => false,
        }
    }

    /// Cancels every running turn (the daemon is shutting down).
    pub fn cancel_all(&self) {
        for signal in lock(&self.running).values() {
            signal.notify_one();
        }
    }

    /// The tools of the current epoch: rebuilt only when the installed set changed.
    pub fn toolset(&self) -> Result<Arc<Toolset>, AgentError> {
        let epoch = self.parts.store.installed()?.epoch;
        let mut current = lock(&self.toolset);
        if current.epoch() != epoch {
            *current = Arc::new(Toolset::load(&self.parts.store, &self.parts.runtime)?);
        }
        Ok(Arc::clone(&current))
    }

    /// The policy in force (re-read when the file changed; an invalid edit keeps the
    /// last valid one), or why every call is refused.
    pub fn policy(&self) -> Result<Arc<Policy>, String> {
        self.trust.policy()
    }

    /// Runs one turn of `session` with the owner's `text`, sending events to `events`,
    /// and returns the turn's token counts. Ends with `TurnDone` on success; on error
    /// the caller reports the error. `require_tool` makes the model's first reply a call.
    /// `workspace` is the client's directory, which a session takes when it is created.
    pub async fn turn(
        self: &Arc<Self>,
        session: &str,
        text: &str,
        require_tool: bool,
        workspace: Option<&str>,
        events: &Events,
    ) -> Result<TurnUsage, AgentError> {
        if !valid_session_id(session) {
            return Err(AgentError::BadSession(session.to_owned()));
        }
        let signal = Arc::new(Notify::new());
        {
            let mut running = lock(&self.running);
            if running.contains_key(session) {
                return Err(AgentError::SessionBusy(session.to_owned()));
            }
            running.insert(session.to_owned(), Arc::clone(&signal));
        }
        let busy = Busy { agent: self, session: session.to_owned() };
        let limit = Duration::from_secs(self.parts.limits.max_turn_secs.get());
        let result = tokio::select! {
            r = tokio::time::timeout(
                limit,
                self.run_turn(session, text, require_tool, workspace, events),
            ) => {
                r.unwrap_or_else(|_| Err(AgentError::Limit(format!(
                    "the turn ran for its {} s", limit.as_secs()
                ))))
            }
            () = signal.notified() => Err(AgentError::Cancelled("the owner cancelled it".into())),
        };
        // The session is free before its client hears the turn is done: a client that
        // sends its next message at once must not find it still busy.
        drop(busy);
        if let Ok(usage) = &result {
            let _ = events.send(Body::TurnDone { session: session.to_owned(), usage: *usage });
        }
        result
    }

    /// The session's workspace: the one it was created with, else `requested` (checked
    /// by [`check_workspace`]), recorded now and fixed from here on.
    pub fn workspace(
        &self,
        session: &str,
        requested: Option<&str>,
    ) -> Result<Option<PathBuf>, AgentError> {
        let requested = requested.map(check_workspace).transpose()?;
        let trust = &self.trust;
        let (workspace, moved) = call::in_place(|| {
            trust.ledger().workspace(trust.audit(), session, requested.as_deref())
        })?;
        if moved {
            return Err(AgentError::workspace_moved(
                session,
                requested.as_deref(),
                workspace.as_deref(),
            ));
        }
        Ok(workspace)
    }

    async fn run_turn(
        self: &Arc<Self>,
        session: &str,
        text: &str,
        require_tool: bool,
        workspace: Option<&str>,
        events: &Events,
    ) -> Result<TurnUsage, AgentError> {
        self.trust.available()?;
        let Some(client) = &self.parts.client else {
            return Err(AgentError::NoModel);
        };
        let workspace = self.workspace(session, workspace)?;
        let baseline = Baseline::load(&self.parts.state.core_file(), workspace.as_deref())?;
        let toolset = self.toolset()?;
        let mut transcript = self.transcript(session)?;
        transcript.close_dangling_calls()?;
        transcript.append(&[Message::User { content: text.to_owned() }])?;
        let limits = &self.parts.limits;
        // In constrained mode the server sees no tools array: the system prompt lists them.
        let (defs, system) = if client.constrained() && !toolset.defs().is_empty() {
            let defs = toolset.constrained_defs();
            let system = format!("{}\n\n{}", baseline.system, crate::prompt_text(&defs));
            (defs, system)
        } else {
            (toolset.constrained_defs(), baseline.system.clone())
        };
        let mut usage = TurnUsage { prompt: 0, cached: 0, completion: 0 };
        let mut calls_run = 0;
        let mut first = true;
        // The calls refused in this turn, by tool and arguments: one proposed again ends it.
        let mut refused: HashSet<(String, String)> = HashSet::new();
        // Once per turn, not per request: the slot does not change within a daemon's life.
        self.remember_slot(session);
        loop {
            let budget = u64::from(limits.max_tokens.get()).saturating_sub(usage.completion);
            if budget == 0 {
                return Err(AgentError::Limit(format!(
                    "the model generated its {} tokens for this turn",
                    limits.max_tokens
                )));
            }
            let required = first && require_tool && !defs.is_empty();
            let req = ChatRequest {
                messages: vec![Message::System { content: system.clone() }],
                history: Some(Arc::clone(transcript.history())),
                tools: defs.clone(),
                tool_choice: required.then_some(ToolChoice::Required),
                max_tokens: Some(u32::try_from(budget).unwrap_or(u32::MAX)),
                temperature: self.parts.temperature,
                seed: self.parts.seed,
                max_thinking_tokens: limits.max_thinking_tokens.map(NonZeroU32::get),
            };
            let (s, ev) = (session.to_owned(), events.clone());
            let on_event = move |e: &StreamEvent| {
                let body = match e {
                    StreamEvent::Content(t) => {
                        Body::ContentDelta { session: s.clone(), text: t.clone() }
                    }
                    StreamEvent::Reasoning(t) => {
                        Body::ReasoningDelta { session: s.clone(), text: t.clone() }
                    }
                    _ => return,
                };
                let _ = ev.send(body);
            };
            // A new turn may be refused when the queue is full; once its calls ran, the
            // turn waits for its slot (the turn's deadline bounds it) rather than fail
            // after acting.
            let completion = if first {
                client.chat(session, &req, on_event).await?
            } else {
                client.chat_admitted(session, &req, on_event).await?
            };
            let this = self.model_usage(session, &completion);
            usage.prompt += this.0;
            usage.cached += this.1;
            usage.completion += this.2;
            let _ = events.send(Body::ModelUsage {
                session: session.to_owned(),
                prompt: this.0,
                cached: this.1,
                completion: this.2,
                prompt_ms: completion.timings.map_or(0.0, |t| t.prompt_ms),
                predicted_ms: completion.timings.map_or(0.0, |t| t.predicted_ms),
                thinking_capped: completion.thinking_capped,
                slot_wait_ms: completion.slot_wait.as_secs_f64() * 1000.0,
            });
            transcript.append(&[Message::Assistant {
                content: completion.content.clone(),
                tool_calls: completion.tool_calls.clone(),
            }])?;
            if completion.tool_calls.is_empty() {
                return Ok(usage);
            }
            first = false;
            let mut over = false;
            let mut repeated: Option<String> = None;
            for call in &completion.tool_calls {
                let over_limit = calls_run >= limits.max_tool_calls.get();
                over |= over_limit;
                if !over_limit {
                    calls_run += 1;
                }
                let key = (call.name.clone(), call.arguments.to_string());
                let again = repeated.is_none() && refused.contains(&key);
                let ending = repeated.is_some();
                let ctx =
                    CallContext { workspace: workspace.as_deref(), over_limit, again, ending };
                let (content, denied) =
                    self.call_tool(session, &toolset, call, ctx, events).await?;
                transcript.append(&[Message::Tool { tool_call_id: call.id.clone(), content }])?;
                if again {
                    // The calls after it in this reply are still recorded, and refused.
                    repeated = Some(format!(
                        "{} with the same arguments",
                        bx_audit::bounded(&call.name, 200)
                    ));
                }
                if denied {
                    refused.insert(key);
                }
            }
            if let Some(what) = repeated {
                return Err(AgentError::RepeatedRefusal(what));
            }
            if over {
                return Err(AgentError::Limit(format!(
                    "the model asked for more than {} tool calls in one turn",
                    limits.max_tool_calls
                )));
            }
        }
    }

    /// The session's transcript for a turn: the one kept from its last turn while its
    /// file is unchanged, else read from the file.
    fn transcript(&self, session: &str) -> Result<TurnTranscript<'_>, AgentError> {
        let kept = lock(&self.transcripts).take(session).filter(Transcript::is_current);
        let transcript = match kept {
            Some(t) => t,
            None => Transcript::open(&self.trust.ledger().files().transcript(session))?,
        };
        Ok(TurnTranscript {
            agent: self,
            session: session.to_owned(),
            transcript: Some(transcript),
        })
    }

    /// Keeps the session's slot on disk, so a restarted daemon sends it back there. Asking
    /// the gate places a new session, as its first request would.
    fn remember_slot(&self, session: &str) {
        let Some(client) = &self.parts.client else { return };
        let slot = client.gate().slot_of(session);
        // Losing this only costs a cold cache after a restart; the turn goes on.
        let _ = self.trust.ledger().set_slot(session, slot);
    }

    /// Prompt, cached and generated tokens of one request, appended to `usage.jsonl`
    /// in the state directory (a record for the owner's accounting, not for the audit).
    fn model_usage(&self, session: &str, c: &bx_infer::Completion) -> (u64, u64, u64) {
        let cached = c.timings.map_or(0, |t| t.cache_n);
        let prompt = c
            .timings
            .map(|t| t.cache_n + t.prompt_n)
            .or(c.usage.map(|u| u.prompt_tokens))
            .unwrap_or(0);
        let completion = c.usage.map(|u| u.completion_tokens).unwrap_or(0);
        let line = serde_json::json!({
            "time_ms": now_ms(),
            "session": session,
            "prompt": prompt,
            "cached": cached,
            "completion": completion,
            "timings": c.timings,
            "thinking_capped": c.thinking_capped,
            "slot_wait_ms": c.slot_wait.as_secs_f64() * 1000.0,
        });
        let path = self.parts.state.usage_file();
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
        (prompt, cached, completion)
    }

    /// A decided call to its end: an approval waited for (through this daemon's table,
    /// answered from the client's terminal or `bx approve`), then the run. `Err(reason)`
    /// when it was refused; the events say what happened as it happens.
    async fn settle(
        &self,
        session: &str,
        id: &str,
        decided: Decided<'_>,
        events: &Events,
    ) -> Result<Result<call::Finished, call::Refused>, AgentError> {
        let decided = match decided {
            Decided::Asking(asking) => {
                let ttl = Duration::from_secs(self.parts.limits.approval_secs.get());
                let Some((pending, block, wait)) = self.approvals.open(
                    asking.approval(),
                    session,
                    asking.request().clone(),
                    asking.args().to_owned(),
                    ttl,
                ) else {
                    let answer = bx_broker::Answer::Refuse(format!(
                        "approval id {} is taken by another waiting call; ask again",
                        asking.approval()
                    ));
                    let id = asking.approval().to_owned();
                    return match call::in_place(|| asking.answer(&id, &answer))? {
                        Decided::Refused(r) => Ok(Err(r)),
                        Decided::Allowed(_) | Decided::Asking(_) => {
                            Err(AgentError::Internal("a refused approval ran".into()))
                        }
                    };
                };
                let _ = events.send(Body::ApprovalNeeded {
                    session: session.to_owned(),
                    call: id.to_owned(),
                    approval: pending.id.clone(),
                    block,
                });
                let answer = wait.await;
                call::in_place(|| asking.answer(&pending.id, &answer))?
            }
            other => other,
        };
        let allowed = match decided {
            Decided::Allowed(allowed) => allowed,
            Decided::Refused(r) => return Ok(Err(r)),
            Decided::Asking(_) => {
                return Ok(Err(call::Refused {
                    reason: "the call still asks after the owner's answer".into(),
                    unavailable: false,
                }));
            }
        };
        let _ = events.send(Body::ToolStarted { session: session.to_owned(), call: id.to_owned() });
        let finished = allowed.run(&self.parts.runtime).await?;
        let _ = events.send(Body::ToolResult {
            session: session.to_owned(),
            call: id.to_owned(),
            status: finished.status.into(),
            label: finished.label.to_string(),
            bytes: finished.bytes,
        });
        Ok(Ok(finished))
    }

    /// One call by hand (`bx tool run` while the daemon runs), through the same trust
    /// path as the loop's calls: the request recorded first, whatever is wrong with it;
    /// the policy in force with `overlay` on top; an approval from the owner when it
    /// asks. Ends with the call's [`Body::ToolOutput`].
    pub async fn run_tool(
        &self,
        session: &str,
        name: &str,
        args: &str,
        overlay: &Overlay,
        workspace: Option<&str>,
        events: &Events,
    ) -> Result<Body, AgentError> {
        if !valid_session_id(session) {
            return Err(AgentError::BadSession(session.to_owned()));
        }
        self.trust.available()?;
        let workspace = self.workspace(session, workspace)?;
        let id = format!("c{:x}-{}", now_ms(), self.calls.fetch_add(1, Ordering::Relaxed));
        let toolset = self.toolset()?;
        let tool = toolset.get(name);
        let (value, refusal) = call::parse_args(args);
        let trust = &self.trust;
        // The request and its decision are on disk before the client hears of the call
        // (one trip off the async threads, one fsync for both).
        let (shown, decided) = call::in_place(|| -> Result<_, AgentError> {
            let requested =
                trust.propose(session, &id, name, tool, &value, workspace.as_deref())?;
            let shown = requested.args().to_owned();
            Ok((shown, requested.decide(overlay, refusal)?))
        })?;
        let _ = events.send(Body::ToolCallProposed {
            session: session.to_owned(),
            call: id.clone(),
            tool: name.to_owned(),
            args: shown,
        });
        Ok(match self.settle(session, &id, decided, events).await? {
            Ok(finished) => call::output_of(&id, &finished),
            Err(refused) => {
                let _ = events.send(Body::ToolDenied {
                    session: session.to_owned(),
                    call: id.clone(),
                    reason: refused.reason.clone(),
                });
                Body::ToolOutput {
                    call: id,
                    outcome: if refused.unavailable {
                        bx_protocol::RunOutcome::Unavailable
                    } else {
                        bx_protocol::RunOutcome::Refused
                    },
                    label: String::new(),
                    text: refused.reason,
                    stderr: String::new(),
                }
            }
        })
    }

    /// Recomputes `session`'s taint from the audit log alone and records the rebuild.
    pub fn rebuild_session(&self, session: &str) -> Result<Body, AgentError> {
        if !valid_session_id(session) {
            return Err(AgentError::BadSession(session.to_owned()));
        }
        let dir = self.parts.state.audit_dir(&self.parts.config);
        let (taint, results) =
            call::in_place(|| self.trust.ledger().rebuild(self.trust.audit(), &dir, session))?;
        Ok(Body::Rebuilt { session: session.to_owned(), taint: taint.to_string(), results })
    }

    /// One proposed call through the whole trust path; returns what the model is told,
    /// and whether the call was refused. Only a log that cannot record ends the turn
    /// (nothing may run unrecorded).
    async fn call_tool(
        self: &Arc<Self>,
        session: &str,
        toolset: &Arc<Toolset>,
        call: &ToolCall,
        ctx: CallContext<'_>,
        events: &Events,
    ) -> Result<(String, bool), AgentError> {
        let id = format!("t{:x}-{}", now_ms(), self.calls.fetch_add(1, Ordering::Relaxed));
        let tool = toolset.get(&call.name);
        let trust = &self.trust;
        let refusal = if ctx.again {
            Some(
                "the same call was refused earlier in this turn (see docs/runbook.md#repeated-refusal)"
                    .to_owned(),
            )
        } else if ctx.ending {
            Some(
                "not run: the turn ends, as an earlier call of this reply repeated a refused one (see docs/runbook.md#repeated-refusal)"
                    .to_owned(),
            )
        } else {
            ctx.over_limit.then(|| {
                format!(
                    "the limit of {} tool calls per turn is reached (see docs/runbook.md#turn-limit)",
                    self.parts.limits.max_tool_calls
                )
            })
        };
        // The request and its decision are on disk before the client hears of the call
        // (one trip off the async threads, one fsync for both).
        let (shown, decided) = call::in_place(|| -> Result<_, AgentError> {
            let requested =
                trust.propose(session, &id, &call.name, tool, &call.arguments, ctx.workspace)?;
            let shown = requested.args().to_owned();
            Ok((shown, requested.decide(&Overlay::default(), refusal)?))
        })?;
        let _ = events.send(Body::ToolCallProposed {
            session: session.to_owned(),
            call: id.clone(),
            tool: call.name.clone(),
            args: shown,
        });
        let denied = |reason: String| {
            let _ = events.send(Body::ToolDenied {
                session: session.to_owned(),
                call: id.clone(),
                reason: reason.clone(),
            });
            format!("refused: {reason}. The call did not run; do not repeat it unchanged.")
        };
        let finished = match self.settle(session, &id, decided, events).await? {
            Ok(finished) => finished,
            Err(refused) => return Ok((denied(refused.reason), true)),
        };
        if let Err(RunError::Limit { .. }) = &finished.outcome {
            // A limit hit is the owner's business too: the runbook says what to change.
            let text = format!("{} (see docs/runbook.md#tool-limit)", finished.for_model);
            return Ok((text, false));
        }
        Ok((finished.for_model, false))
    }
}

/// How one proposed call of a turn is to be taken.
#[derive(Debug, Clone, Copy)]
struct CallContext<'a> {
    /// The session's workspace.
    workspace: Option<&'a Path>,
    /// The turn's tool-call limit is reached: refused.
    over_limit: bool,
    /// The same call was refused earlier in the turn: refused, and the turn ends.
    again: bool,
    /// An earlier call of this reply was such a repeat: refused, recorded.
    ending: bool,
}

/// The longest workspace path accepted (Linux's `PATH_MAX`).
const MAX_WORKSPACE_BYTES: usize = 4096;

/// Checks a workspace a client names: an absolute path, as it resolves on disk (no
/// symlink in it, no `.` or `..`), to a directory other than `/`, of at most 4 KiB.
/// The client resolves its directory before it sends it; the daemon checks that it
/// did, so the policy's `{workspace}` rules match the paths the runtime opens.
pub fn check_workspace(text: &str) -> Result<PathBuf, AgentError> {
    let bad = |why: &str| AgentError::BadWorkspace {
        path: bx_audit::bounded(text, 200),
        why: why.to_owned(),
    };
    if text.len() > MAX_WORKSPACE_BYTES {
        return Err(bad("longer than 4096 bytes"));
    }
    let path = Path::new(text);
    if !path.is_absolute() {
        return Err(bad("not an absolute path"));
    }
    if path == Path::new("/") {
        return Err(bad("the root directory cannot be a workspace; name a project directory"));
    }
    match std::fs::canonicalize(path) {
        Ok(real) if real != path => Err(bad(&format!(
            "not as it resolves on disk ({}); name the resolved path",
            bx_audit::bounded(&real.display().to_string(), 200)
        ))),
        Ok(real) if !real.is_dir() => Err(bad("not a directory")),
        Ok(real) => Ok(real),
        Err(e) => Err(bad(&format!("cannot be resolved: {e}"))),
    }
}
