//! The agent: what every session of one daemon shares (the trust path, the tools, the
//! approvals waiting, the sessions running), and the calls made by hand through it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bx_audit::AuditLog;
use bx_broker::{Answer, Policy};
use bx_infer::Client;
use bx_protocol::Body;
use bx_runtime::Runtime;
use bx_state::{LoopConfig, StateDir, valid_session_id};
use bx_store::Store;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::approvals::{Approvals, now_ms};
use crate::call::{self, Asking, Finished, Overlay, Refused, Trust};
use crate::error::AgentError;
use crate::kept::Kept;
use crate::ledger::Ledger;
use crate::settle::{Owner, Proposal};
use crate::toolset::Toolset;

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
    pub(crate) parts: AgentParts,
    /// The owner's other MCP servers, started as their tools are called.
    gateway: Arc<bx_gateway::Gateway>,
    pub(crate) trust: Trust,
    pub(crate) approvals: Approvals,
    pub(crate) toolset: Mutex<Arc<Toolset>>,
    /// Sessions with a turn running, each with the signal that cancels it.
    pub(crate) running: Mutex<HashMap<String, Arc<Notify>>>,
    /// The transcripts of recent sessions, kept between turns.
    pub(crate) transcripts: Mutex<Kept>,
    pub(crate) calls: AtomicU64,
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
        // The writer's open checkpoints what it read: the next replays only what is new.
        let ledger = Ledger::open_writing(files, &parts.audit)?;
        eprintln!("bx serve: ledger: {}", ledger.replayed());
        if let Some(read) = parts.audit.records_read_at_open() {
            // What the anchored open read to check the log against its exports (the days
            // `audit/checked.json` vouched for are not read again).
            eprintln!("bx serve: audit: read {read} records to check the log against its exports");
        }
        if let Some(why) = ledger.unsaved() {
            eprintln!(
                "bx serve: ledger: its checkpoint could not be written ({why}); the next start replays more (see docs/runbook.md#ledger-checkpoint)"
            );
        }
        let policy = parts.state.watch_policy(&parts.config);
        let trust = Trust::new(Arc::clone(&parts.audit), ledger, policy, parts.state.secrets())
            .with_approvers(&parts.config.approvals);
        record_pending(&parts.store, &parts.audit)?;
        let confine = bx_gateway::Confine::for_state(&parts.state, &parts.config)
            .map_err(|e| AgentError::Internal(e.to_string()))?;
        let gateway = Arc::new(bx_gateway::Gateway::new(
            parts.state.upstreams_dir(),
            bx_gateway::Limits::default(),
            confine,
            bx_gateway::store_secrets(parts.state.secrets()),
        ));
        let toolset = Toolset::load(&parts.store, &parts.runtime, &gateway)?;
        Ok(Agent {
            gateway,
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
        self.running.lock().contains_key(session)
    }

    /// Cancels the running turn of `session`; false when none runs.
    pub fn cancel(&self, session: &str) -> bool {
        match self.running.lock().get(session) {
            Some(signal) => {
                signal.notify_one();
                true
            }
            None => false,
        }
    }

    /// Cancels every running turn (the daemon is shutting down).
    pub fn cancel_all(&self) {
        for signal in self.running.lock().values() {
            signal.notify_one();
        }
    }

    /// The tools of the current epoch: rebuilt only when the installed set changed.
    pub fn toolset(&self) -> Result<Arc<Toolset>, AgentError> {
        let epoch = self.parts.store.installed()?.epoch;
        let mut current = self.toolset.lock();
        if current.epoch() != epoch {
            // What changed the tools goes on the log before any call sees them.
            self.record_pending()?;
            *current =
                Arc::new(Toolset::load(&self.parts.store, &self.parts.runtime, &self.gateway)?);
        }
        Ok(Arc::clone(&current))
    }

    /// Writes the tool changes that `bx tool install` and `bx tool remove` left for this
    /// process, the log's writer, onto the log.
    fn record_pending(&self) -> Result<usize, AgentError> {
        record_pending(&self.parts.store, &self.parts.audit)
    }

    /// The policy in force (re-read when the file changed; an invalid edit keeps the
    /// last valid one), or why every call is refused.
    pub fn policy(&self) -> Result<Arc<Policy>, call::NoPolicy> {
        self.trust.policy()
    }

    /// The session's workspace ([`Trust::workspace`]).
    pub fn workspace(
        &self,
        session: &str,
        requested: Option<&str>,
    ) -> Result<Option<PathBuf>, AgentError> {
        self.trust.workspace(session, requested)
    }

    /// One call by hand (`bx tool run` or `bx mcp` while the daemon runs), through the
    /// trust path ([`Trust::settle`]) with the policy in force and `overlay` on top.
    /// Ends with the call's [`Body::ToolOutput`].
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
        let (value, refusal) = call::parse_args(args);
        let proposal = Proposal {
            session,
            call: &id,
            name,
            tool: toolset.get(name),
            args: &value,
            workspace: workspace.as_deref(),
        };
        let mut owner = self.connected(events);
        let settled =
            self.trust.settle(proposal, overlay, refusal, &mut owner, &self.parts.runtime).await?;
        Ok(call::output_of(&id, settled))
    }

    /// The owner as this daemon reaches them, through `events`' client.
    pub(crate) fn connected<'a>(&'a self, events: &'a Events) -> Connected<'a> {
        Connected {
            approvals: &self.approvals,
            events,
            ttl: Duration::from_secs(self.parts.limits.approval_secs.get()),
        }
    }

    /// Ends the owner's scoped answers in `session`: the one given for approval
    /// `answer`, or all of them; or all of them as the session ends (`ended`). Recorded.
    pub fn end_scopes(
        &self,
        session: &str,
        answer: Option<&str>,
        ended: bool,
    ) -> Result<Body, AgentError> {
        if !valid_session_id(session) {
            return Err(AgentError::BadSession(session.to_owned()));
        }
        let count = call::in_place(|| {
            self.trust.ledger().end_scopes(self.trust.audit(), session, answer, ended)
        })?;
        Ok(Body::ScopesEnded { session: session.to_owned(), count: count as u64 })
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
}

/// The owner as the daemon reaches them: the client that sent the call is shown each
/// step as an event, and a call that asks waits in the daemon's approval table for an
/// answer from that client's terminal or from `bx approve`, up to `[loop]
/// approval_secs`.
pub(crate) struct Connected<'a> {
    pub(crate) approvals: &'a Approvals,
    pub(crate) events: &'a Events,
    pub(crate) ttl: Duration,
}

impl Owner for Connected<'_> {
    fn proposed(&mut self, p: &Proposal<'_>, args: &str) {
        let _ = self.events.send(Body::ToolCallProposed {
            session: p.session.to_owned(),
            call: p.call.to_owned(),
            tool: p.name.to_owned(),
            args: args.to_owned(),
        });
    }

    fn waits(&self) -> bool {
        true
    }

    async fn answer(&mut self, asking: &Asking<'_>) -> Answer {
        let Some((pending, block, wait)) = self.approvals.open(
            asking.approval(),
            asking.session(),
            asking.request().clone(),
            asking.args().to_owned(),
            self.ttl,
        ) else {
            return Answer::Refuse(format!(
                "approval id {} is taken by another waiting call; ask again",
                asking.approval()
            ));
        };
        let _ = self.events.send(Body::ApprovalNeeded {
            session: asking.session().to_owned(),
            call: asking.call().to_owned(),
            approval: pending.id,
            block,
            in_part: pending.seal.is_some(),
        });
        wait.await
    }

    fn refused(&mut self, p: &Proposal<'_>, refused: &Refused) {
        let _ = self.events.send(Body::ToolDenied {
            session: p.session.to_owned(),
            call: p.call.to_owned(),
            reason: refused.reason.clone(),
        });
    }

    fn started(&mut self, p: &Proposal<'_>, covered_by: Option<&call::Covered>) {
        let _ = self.events.send(Body::ToolStarted {
            session: p.session.to_owned(),
            call: p.call.to_owned(),
            covered_by: covered_by.map(|c| format!("{}: {}", c.id, c.what)),
        });
    }

    fn finished(&mut self, p: &Proposal<'_>, finished: &Finished) {
        let _ = self.events.send(Body::ToolResult {
            session: p.session.to_owned(),
            call: p.call.to_owned(),
            status: finished.status.into(),
            label: finished.label.to_string(),
            bytes: finished.bytes,
        });
    }
}

/// Writes the tool changes waiting in `store`'s journal onto `audit`, its writer: the
/// daemon before its tools change, and a one-shot command that holds the log.
pub fn record_pending(store: &bx_store::Store, audit: &AuditLog) -> Result<usize, AgentError> {
    Ok(store.drain_pending(&mut |line| {
        let change: bx_audit::ToolChange = serde_json::from_str(line).map_err(|e| {
            bx_store::StoreError::Pending(format!("a waiting tool change record is malformed: {e}"))
        })?;
        let appended = audit.append(&bx_audit::Entry::Tool(change));
        appended.map(drop).map_err(|e| bx_store::StoreError::Pending(e.to_string()))
    })?)
}
