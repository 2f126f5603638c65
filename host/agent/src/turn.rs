//! A turn: the owner's message, then model → tool calls → broker → approval when asked →
//! runtime → labelled result → audit → back to the model, until the model answers
//! without a call or a limit ends it. One turn per session at a time.

use bx_telemetry::FutureExt as _;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bx_infer::{ChatRequest, Message, StreamEvent, ToolCall, ToolChoice};
use bx_protocol::{Body, TurnUsage};
use bx_runtime::RunError;
use bx_state::valid_session_id;
use tokio::sync::Notify;

use crate::agent::{Agent, Events};
use crate::approvals::now_ms;
use crate::baseline::Baseline;
use crate::call::{Overlay, RefusedBy};
use crate::error::AgentError;
use crate::kept::TurnTranscript;
use crate::settle::Proposal;
use crate::toolset::Toolset;
use crate::transcript::Transcript;

/// Marks a session busy for as long as it lives: dropped on every path out of a turn
/// (success, error, cancellation, panic).
struct Busy<'a> {
    agent: &'a Agent,
    session: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.agent.running.lock().remove(&self.session);
    }
}

impl Agent {
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
            let mut running = self.running.lock();
            if running.contains_key(session) {
                return Err(AgentError::SessionBusy(session.to_owned()));
            }
            running.insert(session.to_owned(), Arc::clone(&signal));
        }
        let busy = Busy { agent: self, session: session.to_owned() };
        let limit = Duration::from_secs(self.parts.limits.max_turn_secs.get());
        // The turn's span, which its model requests and calls are children of.
        let cx = crate::traced::turn_context(session);
        let run = self.run_turn(session, text, require_tool, workspace, events);
        let result = tokio::select! {
            r = tokio::time::timeout(limit, run.with_context(cx.clone())) => {
                r.unwrap_or_else(|_| Err(AgentError::Limit(format!(
                    "the turn ran for its {} s", limit.as_secs()
                ))))
            }
            () = signal.notified() => Err(AgentError::Cancelled("the owner cancelled it".into())),
        };
        crate::traced::end_turn(&cx, &result);
        // The session is free before its client hears the turn is done: a client that
        // sends its next message at once must not find it still busy.
        drop(busy);
        if let Ok(usage) = &result {
            let _ = events.send(Body::TurnDone { session: session.to_owned(), usage: *usage });
        }
        result
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
        let toolset = self.toolset()?;
        // A model in constrained mode (a small one) gets the short prompt and one worked
        // example (docs/agent.md#small-models).
        let small = client.constrained() && !toolset.defs().is_empty();
        let baseline = Baseline::load(&self.parts.state.core_file(), workspace.as_deref(), small)?;
        let mut transcript = self.transcript(session)?;
        transcript.close_dangling_calls()?;
        transcript.append(&self.redacted(Message::User { content: text.to_owned() }))?;
        let limits = &self.parts.limits;
        // In constrained mode the server sees no tools array: the system prompt lists them.
        let defs =
            if client.constrained() { toolset.small_defs() } else { toolset.constrained_defs() };
        let (system, example) = if small {
            (format!("{}\n\n{}", baseline.system, crate::prompt_text(&defs)), toolset.example())
        } else {
            (baseline.system.clone(), Vec::new())
        };
        // What a small model is told after a path tool's call fails.
        // What the turn's listings showed, for a small model's failed calls: path to
        // whether it is a folder.
        let mut seen: HashMap<String, bool> = HashMap::new();
        let mut lead = vec![Message::System { content: system }];
        lead.extend(example);
        // The tools the first reply may call (docs/agent.md#small-models).
        let routed: Option<Vec<bx_infer::ToolDef>> = (small
            && self.parts.config.inference.route_tools)
            .then(|| crate::route::route(text, &toolset.cues()))
            .flatten()
            .map(|names| defs.iter().filter(|d| names.contains(&d.name)).cloned().collect());
        let mut usage = TurnUsage { prompt: 0, cached: 0, completion: 0 };
        let mut calls_run = 0;
        let mut first = true;
        // The calls refused in this turn, by tool and arguments: one proposed again ends it.
        let mut refused: HashSet<(String, String)> = HashSet::new();
        // Every call proposed in this turn, by tool and arguments. A call proposed again
        // unchanged gets the same result it got before, so the model is asked for its
        // answer next: a small model read the same file eight times over, the result in
        // front of it each time (docs/agent.md#small-models).
        let mut proposed: HashSet<(String, String)> = HashSet::new();
        let mut answer_next = false;
        // The calls a pointer (`{"next": CALL}`) showed in this turn. A small model's
        // question is answered once the call a pointer named has run and shows no next
        // one (docs/agent.md#small-models): asked "List my inbox.", the 0.5B model listed
        // `messages/inbox` as pointed, then listed a file in it and answered from the
        // file; asked how to run the tests, it read the README as pointed, then ran
        // `import subprocess` in py.run.
        let mut pointed: HashSet<(String, String)> = HashSet::new();
        let question = small && crate::route::only_asks(text);
        // The web addresses the owner gave, which a small model is pointed at until a
        // call of the turn fetched each.
        let urls = if small { crate::route::urls(text) } else { Vec::new() };
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
            // A small model's first reply to a request that names a file or folder, or
            // asks after something, is a call (docs/agent.md#small-models); other turns
            // may answer at once.
            let must_look = small
                && (crate::route::names_a_path(text) || crate::route::asks_after_something(text));
            let required = first && (require_tool || must_look) && !defs.is_empty();
            let choice = if answer_next {
                Some(ToolChoice::None)
            } else {
                required.then_some(ToolChoice::Required)
            };
            let req = ChatRequest {
                messages: lead.clone(),
                history: Some(Arc::clone(transcript.history())),
                tools: match &routed {
                    Some(few) if first => few.clone(),
                    _ => defs.clone(),
                },
                tool_choice: choice,
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
            let chat = crate::traced::ChatSpan::start();
            let asked = if first {
                client.chat(session, &req, on_event).await
            } else {
                client.chat_admitted(session, &req, on_event).await
            };
            let completion = match asked {
                Ok(c) => {
                    chat.answered(&c);
                    c
                }
                Err(e) => {
                    chat.failed();
                    return Err(e.into());
                }
            };
            let this = crate::usage::record(&self.parts.state.usage_file(), session, &completion);
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
            transcript.append(&self.redacted(Message::Assistant {
                content: completion.content.clone(),
                tool_calls: completion.tool_calls.clone(),
            }))?;
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
                answer_next |= !proposed.insert(key.clone());
                let ending = repeated.is_some();
                let ctx = CallContext {
                    workspace: workspace.as_deref(),
                    over_limit,
                    again,
                    ending,
                    recovery: if small && toolset.takes_paths(&call.name) {
                        // A web address of the owner's given as a path: its fetch, unless
                        // refused before in the turn (copied, it would end the turn).
                        toolset
                            .url_as_path(call, &urls)
                            .filter(|next| !refused.contains(&next.key))
                            .map(|next| next.line)
                            .or_else(|| toolset.recovery_after(call, &seen))
                    } else {
                        None
                    },
                    // The same line whatever the path; never the call just refused, nor
                    // one refused before in the turn: copied, it would end the turn.
                    refusal_hint: if small && toolset.takes_paths(&call.name) {
                        toolset
                            .recovery_key()
                            .filter(|hint| *hint != key && !refused.contains(hint))
                            .and_then(|_| toolset.recovery())
                    } else {
                        None
                    },
                };
                let (content, ended) = self.call_tool(session, &toolset, call, ctx, events).await?;
                let content = match workspace.as_deref().filter(|_| small) {
                    Some(ws) => relative_paths(&content, ws),
                    None => content,
                };
                // After a listing, a small model is shown the entry the owner's words
                // point at, and the call that opens it.
                // The listing is read once: for the pointer, and for what later failures
                // of this turn are told.
                let listed = if small { toolset.listed(&call.name, &content) } else { None };
                // One that points at none is shown the search for a name the owner gave.
                // Never a call refused before in the turn: copied, it would end the turn.
                let pointer = listed
                    .as_deref()
                    .and_then(|e| {
                        toolset.pointer(text, e).or_else(|| toolset.search_pointer(text, call))
                    })
                    // A search that found nothing is shown the listing of its folder,
                    // unless the turn listed it already.
                    .or_else(|| {
                        small
                            .then(|| toolset.empty_search_pointer(call, &content))
                            .flatten()
                            .filter(|next| !proposed.contains(&next.key))
                    })
                    // A result that is no listing, nor an error, is shown the fetch of a
                    // web address the owner gave that no call of the turn fetched.
                    .or_else(|| {
                        (small && listed.is_none() && ended == Ended::Ran)
                            .then(|| toolset.fetch_pointer(&urls, &proposed))
                            .flatten()
                    })
                    .filter(|next| !refused.contains(&next.key));
                answer_next |=
                    question && ended == Ended::Ran && pointer.is_none() && pointed.contains(&key);
                let pointer = pointer.map(|next| {
                    pointed.insert(next.key);
                    next.line
                });
                // A listing is shown without its sizes: the 0.5B model read a size in
                // bytes as a count of lines ("Cargo.toml has 60 lines.").
                let content = if listed.is_some() {
                    crate::toolset::without_sizes(&content)
                } else {
                    content
                };
                seen.extend(listed.unwrap_or_default());
                let content = match pointer {
                    Some(pointer) => format!("{content}\n{pointer}"),
                    None => content,
                };
                // After a long result, a small model is reminded of the question: with
                // a README in front of it, the 0.5B model answered the worked exchange's.
                let content = if small && content.len() > LONG_RESULT {
                    let asked = bx_audit::bounded(text, 500);
                    format!("{content}\nThe owner asked: {asked}")
                } else {
                    content
                };
                transcript.append(&[Message::Tool { tool_call_id: call.id.clone(), content }])?;
                if again {
                    // The calls after it in this reply are still recorded, and refused.
                    repeated = Some(format!(
                        "{} with the same arguments",
                        bx_audit::bounded(&call.name, 200)
                    ));
                }
                if ended == Ended::Refused {
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

    /// `message` as the transcript keeps it: no secret's value (docs/runtime.md#secrets).
    fn redacted(&self, message: Message) -> [Message; 1] {
        [self.trust.secrets().redact_message(message)]
    }

    /// The session's transcript for a turn: the one kept from its last turn while its
    /// file is unchanged, else read from the file.
    fn transcript(&self, session: &str) -> Result<TurnTranscript<'_>, AgentError> {
        let kept = self.transcripts.lock().take(session).filter(Transcript::is_current);
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

    /// One proposed call through the trust path ([`Trust::settle`]); returns what the
    /// model is told, and how the call ended. Only a log that cannot record
    /// ends the turn (nothing may run unrecorded).
    async fn call_tool(
        self: &Arc<Self>,
        session: &str,
        toolset: &Arc<Toolset>,
        call: &ToolCall,
        ctx: CallContext<'_>,
        events: &Events,
    ) -> Result<(String, Ended), AgentError> {
        let id = format!("t{:x}-{}", now_ms(), self.calls.fetch_add(1, Ordering::Relaxed));
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
        let proposal = Proposal {
            session,
            call: &id,
            name: &call.name,
            tool: toolset.get(&call.name),
            args: &call.arguments,
            workspace: ctx.workspace,
        };
        let mut owner = self.connected(events);
        let settled = self
            .trust
            .settle(proposal, &Overlay::default(), refusal, &mut owner, &self.parts.runtime)
            .await?;
        let finished = match settled {
            Ok(finished) => finished,
            Err(refused) => {
                let mut text = format!(
                    "refused: {}. The call did not run; do not repeat it unchanged.",
                    refused.reason
                );
                // A small model's path call the policy refused gets the line that lists
                // the whole folder: asked to change a line "in my ideas", the 0.5B model
                // wrote to `ideas`, which no grant covers, and answered with the
                // refusal's words where `notes/ideas.md` was granted. The line is the
                // same whatever the path, so it tells nothing of what is there, and the
                // policy decides the next call as any. Not after the owner's no, nor
                // for the loop's own refusals or a bad argument: none is about where a
                // file is.
                if refused.by == RefusedBy::Policy
                    && let Some(hint) = &ctx.refusal_hint
                {
                    text = format!("{text}\n{hint}");
                }
                return Ok((text, Ended::Refused));
            }
        };
        if let Err(RunError::Limit { .. }) = &finished.outcome {
            // A limit hit is the owner's business too: the runbook says what to change.
            let text = format!("{} (see docs/runbook.md#tool-limit)", finished.for_model());
            return Ok((text, Ended::Failed));
        }
        let ended = match finished.status {
            bx_audit::CallStatus::Ok => Ended::Ran,
            bx_audit::CallStatus::Error | bx_audit::CallStatus::Stopped => Ended::Failed,
        };
        if finished.status == bx_audit::CallStatus::Error
            && let Some(hint) = &ctx.recovery
        {
            return Ok((format!("{}\n{hint}", finished.for_model()), ended));
        }
        Ok((finished.into_for_model(), ended))
    }
}

/// Bytes of a result past which a small model is reminded of the owner's question.
const LONG_RESULT: usize = 4096;

/// `text` with the paths under `workspace` written relative to it, as a small model
/// is told to write them (`docs/agent.md#small-models`): `WS/notes/a.md` becomes
/// `notes/a.md`, and `WS` itself `.`, where it is followed by something that cannot
/// continue a path name (`WS2` stays). With absolute paths in its results, the 0.5B
/// model wrote them back whole into its answers, a listing of twenty of them in place
/// of the three files asked for.
fn relative_paths(text: &str, workspace: &Path) -> String {
    let Some(ws) = workspace.to_str().map(|w| w.trim_end_matches('/')) else {
        return text.to_owned();
    };
    if ws.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(ws) {
        let after = &rest[at + ws.len()..];
        out.push_str(&rest[..at]);
        if let Some(tail) = after.strip_prefix('/') {
            rest = tail;
        } else if after.chars().next().is_none_or(|c| !(c.is_alphanumeric() || "._-".contains(c))) {
            out.push('.');
            rest = after;
        } else {
            out.push_str(ws);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// How one call of a turn ended, as the loop goes on from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It ran and returned.
    Ran,
    /// It ran and failed (the tool's error, or a limit it hit).
    Failed,
    /// It did not run: refused by the policy, the owner or the loop.
    Refused,
}

/// How one proposed call of a turn is to be taken.
#[derive(Debug, Clone)]
struct CallContext<'a> {
    /// The session's workspace.
    workspace: Option<&'a Path>,
    /// The turn's tool-call limit is reached: refused.
    over_limit: bool,
    /// The same call was refused earlier in the turn: refused, and the turn ends.
    again: bool,
    /// An earlier call of this reply was such a repeat: refused, recorded.
    ending: bool,
    /// What the model is told after the tool's error, when it is a path tool and the
    /// model a small one ([`crate::Toolset::recovery_after`]).
    recovery: Option<String>,
    /// What the model is told after the policy refused the call, when it is a path tool
    /// and the model a small one ([`crate::Toolset::recovery`]).
    refusal_hint: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_workspace_are_shown_relative_to_it() {
        let ws = Path::new("/h/o");
        let listing = r#"{"entries":[{"path":"/h/o/notes/a.md"},{"path":"/h/o2/x"}]}"#;
        assert_eq!(
            relative_paths(listing, ws),
            r#"{"entries":[{"path":"notes/a.md"},{"path":"/h/o2/x"}]}"#
        );
        assert_eq!(
            relative_paths("error: /h/o/inbox: not found: /h/o/inbox", ws),
            "error: inbox: not found: inbox"
        );
        assert_eq!(
            relative_paths("no grant covers write /h/o for fs.edit", ws),
            "no grant covers write . for fs.edit"
        );
        assert_eq!(relative_paths("/h/o", ws), ".");
        assert_eq!(relative_paths("/h/o.bak and /h/o-x", ws), "/h/o.bak and /h/o-x");
        assert_eq!(relative_paths("nothing here", Path::new("/")), "nothing here");
    }
}
