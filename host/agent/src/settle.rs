//! The one driver of the trust path. Every call, whoever proposes it (the model in a
//! turn, the owner by hand with `bx tool run`, another agent over `bx mcp`), goes
//! through [`Trust::settle`], which alone knows the order of the steps: the request on
//! the log, the decision on the log, the call shown to the owner, the owner's answer
//! when the policy asks (on the log), the run, the result on the log. What differs
//! between drivers is who the owner is, an [`Owner`]: the daemon's client and approval
//! table, the terminal of `bx tool run`, or nobody ([`NoOwner`]).

use std::path::Path;

use bx_audit::AnsweredBy;
use bx_broker::Answer;
use bx_runtime::Runtime;
use serde_json::Value;

use crate::call::{Asking, Covered, Decided, Finished, Overlay, Refused, Trust, in_place};
use crate::error::AgentError;
use crate::reviewer::Review;
use crate::traced::CallSpan;
use bx_telemetry::FutureExt as _;

/// A call as proposed, before anything is recorded.
#[derive(Debug, Clone, Copy)]
pub struct Proposal<'a> {
    /// The session whose taint the call sees and raises.
    pub session: &'a str,
    /// The call's id.
    pub call: &'a str,
    /// The tool's name as proposed.
    pub name: &'a str,
    /// The installed tool of that name, if any.
    pub tool: Option<crate::Tool<'a>>,
    /// The arguments as proposed.
    pub args: &'a Value,
    /// The session's workspace: relative paths resolve against it.
    pub workspace: Option<&'a Path>,
}

/// Whoever answers for the owner, and is shown what happens to a call as it happens.
/// Only [`Owner::answer`] is required: the rest are told, and may ignore it.
pub trait Owner {
    /// The call is on the log and decided; `args` are as it runs (paths resolved).
    fn proposed(&mut self, _proposal: &Proposal<'_>, _args: &str) {}

    /// The owner's answer to a call the policy asks about. It must end: a wait for the
    /// owner ends in [`Answer::Expired`] by a deadline of the owner's choosing.
    fn answer(&mut self, asking: &Asking<'_>) -> impl Future<Output = Answer> + Send;

    /// Whether a call that asks waits for an answer from somewhere else (the daemon's
    /// approval table), so that the owner is sent `[approvals] notify`'s notice. A
    /// terminal that prompts, or no owner at all, does not.
    fn waits(&self) -> bool {
        false
    }

    /// The call was refused (by the policy, by the owner, or before it was decided).
    fn refused(&mut self, _proposal: &Proposal<'_>, _refused: &Refused) {}

    /// The call starts to run; `covered_by` is the owner's scoped answer that allowed
    /// it without a prompt, if one did.
    fn started(&mut self, _proposal: &Proposal<'_>, _covered_by: Option<&Covered>) {}

    /// The call ran, and its result is on the log.
    fn finished(&mut self, _proposal: &Proposal<'_>, _finished: &Finished) {}
}

/// No owner is present: a call the policy asks about is refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOwner;

/// The reason a call that asks is refused when nobody can answer.
pub const NO_OWNER: &str = "no owner is present to answer the approval";

impl Owner for NoOwner {
    async fn answer(&mut self, _asking: &Asking<'_>) -> Answer {
        Answer::Refuse(NO_OWNER.into())
    }
}

impl Trust {
    /// Takes one proposed call through the whole trust path, in this order:
    ///
    /// 1. the request goes on the log, whatever is wrong with it;
    /// 2. it is decided (refused at once with `refusal`, such as a turn limit; else by
    ///    the broker under the policy in force with `overlay` on top and the session's
    ///    taint) and the decision goes on the log, synced with the request;
    /// 3. the owner is shown the call;
    /// 4. when the policy asks, the owner's reviewer program answers, or the owner
    ///    (told by the notice) when there is none, it abstains or the grant wants a
    ///    person; the answer is decided again and goes on the log with who gave it;
    /// 5. an allowed call runs under its grant, and its result goes on the log before
    ///    the owner hears of it.
    ///
    /// `Ok(Err(_))` is a refusal; `Err` means the log could not record (nothing may run
    /// unrecorded).
    ///
    /// Each call is one `execute_tool` span (docs/telemetry.md), a child of the current
    /// trace context, with the decision and the wait for an answer as its children.
    pub async fn settle(
        &self,
        proposal: Proposal<'_>,
        overlay: &Overlay,
        refusal: Option<String>,
        owner: &mut impl Owner,
        runtime: &Runtime,
    ) -> Result<Result<Finished, Refused>, AgentError> {
        let span = CallSpan::start(&proposal);
        let mut seen = (String::new(), bx_broker::Label::CLEAN);
        let settled = self
            .settle_in(proposal, overlay, refusal, owner, runtime, &span, &mut seen)
            .with_context(span.context())
            .await;
        span.end(&seen.0, seen.1, settled.as_ref().ok());
        settled
    }

    /// [`Trust::settle`]'s steps, told to `span` as they happen; `seen` is set to the
    /// arguments as the call runs with them and the taint they were decided at.
    #[allow(clippy::too_many_arguments, reason = "settle's arguments, and what it traces")]
    async fn settle_in(
        &self,
        proposal: Proposal<'_>,
        overlay: &Overlay,
        refusal: Option<String>,
        owner: &mut impl Owner,
        runtime: &Runtime,
        span: &CallSpan,
        seen: &mut (String, bx_broker::Label),
    ) -> Result<Result<Finished, Refused>, AgentError> {
        let p = &proposal;
        // An upstream tool's sink is placed before its request is written: its guard, a
        // component, runs asynchronously.
        let call_resource = match p.tool {
            Some(crate::Tool::Upstream(t)) => Some(t.resource(runtime, &p.args.to_string()).await),
            _ => None,
        };
        // Steps 1 and 2, off the async threads: one fsync for both records.
        let since = std::time::SystemTime::now();
        let (shown, seq, (decided, taint)) = in_place(|| -> Result<_, AgentError> {
            let requested = self.propose(p, call_resource)?;
            let shown = requested.args().to_owned();
            let seq = requested.seq();
            Ok((shown, seq, requested.decide(overlay, refusal)?))
        })?;
        let verdict = match &decided {
            Decided::Allowed(_) => "allow",
            Decided::Asking(_) => "ask",
            Decided::Refused(_) => "deny",
        };
        span.decided(seq, verdict, taint, since);
        // What the call's span may export, redacted; nothing to do while telemetry is off.
        if bx_telemetry::on() {
            *seen = (self.secrets().redact_text(&shown), taint);
        }
        // What the owner and the proposer are told echoes the call's arguments, which
        // can carry a secret's value the model wrote: redacted as its records are.
        owner.proposed(p, &self.secrets().redact_text(&shown));
        let allowed = match decided {
            Decided::Allowed(allowed) => Ok(allowed),
            Decided::Refused(refused) => Err(refused),
            Decided::Asking(asking) => {
                // The owner's reviewer program first, unless the grant wants the owner
                // in person; the owner when there is none or it abstains.
                let redact = |text: &str| self.secrets().redact_text(text);
                let mut waiting = span.approval(asking.approval());
                let (answer, by) = match self.approvers().review(&asking, redact).await {
                    Review::Answered(answer, by) => (answer, by),
                    Review::Owner => {
                        if owner.waits() {
                            self.approvers().notify(&asking, redact);
                        }
                        waiting.goes_to_owner();
                        (owner.answer(&asking).await, AnsweredBy::Owner)
                    }
                };
                let given = match &answer {
                    Answer::Approve => "approve",
                    Answer::Scoped(s) if s.approve => "approve",
                    Answer::Refuse(_) | Answer::Scoped(_) => "refuse",
                    Answer::Expired => "expired",
                };
                let who = if matches!(by, AnsweredBy::Owner) { "owner" } else { "reviewer" };
                waiting.answered(given, who);
                in_place(|| asking.answer(&answer, by))?
            }
        };
        let allowed = match allowed {
            Ok(allowed) => allowed,
            Err(refused) => {
                let reason = self.secrets().redact_text(&refused.reason);
                let refused = Refused { reason, ..refused };
                owner.refused(p, &refused);
                return Ok(Err(refused));
            }
        };
        owner.started(p, allowed.covered_by());
        let finished = allowed.run(runtime).await?;
        owner.finished(p, &finished);
        Ok(Ok(finished))
    }
}
