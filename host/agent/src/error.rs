//! Why a turn did not finish; each kind maps to a wire error code and a runbook entry
//! ([`AgentError::runbook`]), which whoever prints the error prints with it.

use bx_protocol::ErrorCode;

/// Why a turn stopped before its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// No model server is configured: tools work, turns do not.
    #[error(
        "no model is configured: set [inference] url or launch in config.toml to chat (tools and bx tool run work without one)"
    )]
    NoModel,
    /// The session already has a turn running.
    #[error("session {0} already has a turn running")]
    SessionBusy(String),
    /// The session id cannot name a file.
    #[error(
        "session id {0:?} must be 1 to 64 characters of a-z, A-Z, 0-9, '.', '_' or '-', not starting with '.'"
    )]
    BadSession(String),
    /// The transcript cannot be read back as written.
    #[error("session transcript {path}: {why}")]
    SessionDamaged {
        /// The transcript file.
        path: String,
        /// What is wrong, with the line.
        why: String,
    },
    /// `core.md` exists but cannot be read.
    #[error("cannot read the owner's {path}: {why}")]
    CoreUnreadable {
        /// The file.
        path: String,
        /// The I/O error.
        why: String,
    },
    /// The audit log cannot record, so nothing runs.
    #[error(transparent)]
    Audit(#[from] bx_audit::AuditError),
    /// A turn limit was reached.
    #[error("turn limit reached: {0}")]
    Limit(String),
    /// The model proposed a call that was already refused in this turn.
    #[error("the model proposed {0} again after it was refused in this turn; the turn ends here")]
    RepeatedRefusal(String),
    /// The workspace a client named cannot be one.
    #[error("workspace {path:?}: {why}")]
    // (`path` is empty when the workspace asked for is not the problem.)
    BadWorkspace {
        /// The path as given (bounded).
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The owner (or the daemon's shutdown) cancelled the turn.
    #[error("turn cancelled: {0}")]
    Cancelled(String),
    /// The inference request failed.
    #[error(transparent)]
    Inference(#[from] bx_infer::InferError),
    /// State on disk could not be read or written.
    #[error(transparent)]
    Store(#[from] bx_store::StoreError),
    /// A file of the state directory could not be read or written.
    #[error(transparent)]
    State(#[from] bx_state::StateError),
    /// Something that should not happen (a worker thread panicked).
    #[error("internal error: {0}")]
    Internal(String),
}

impl AgentError {
    /// A client named the workspace `asked` for a session that has another, or none.
    pub fn workspace_moved(
        session: &str,
        asked: Option<&std::path::Path>,
        held: Option<&std::path::Path>,
    ) -> AgentError {
        let why = match held {
            Some(w) => format!(
                "session {session} works in {}, fixed when it was created; talk in another session to work elsewhere",
                w.display()
            ),
            None => format!(
                "session {session} was created without a workspace and keeps none; talk in another session to have one"
            ),
        };
        let path = asked.map_or_else(String::new, |p| {
            bx_audit::bounded(&p.display().to_string(), bx_audit::MAX_FIELD_BYTES)
        });
        AgentError::BadWorkspace { path, why }
    }

    /// The wire code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            AgentError::NoModel => ErrorCode::NoModel,
            AgentError::SessionBusy(_) => ErrorCode::SessionBusy,
            AgentError::BadSession(_) => ErrorCode::BadRequest,
            AgentError::SessionDamaged { .. } => ErrorCode::SessionDamaged,
            AgentError::CoreUnreadable { .. } => ErrorCode::CoreUnreadable,
            AgentError::Audit(_) => ErrorCode::AuditUnavailable,
            AgentError::Limit(_) => ErrorCode::TurnLimit,
            AgentError::RepeatedRefusal(_) => ErrorCode::RepeatedRefusal,
            AgentError::BadWorkspace { .. } => ErrorCode::BadWorkspace,
            AgentError::Cancelled(_) => ErrorCode::Cancelled,
            AgentError::Inference(bx_infer::InferError::Unreachable { .. }) => {
                ErrorCode::InferenceUnreachable
            }
            AgentError::Inference(bx_infer::InferError::Busy { .. }) => ErrorCode::InferenceBusy,
            AgentError::Inference(_) => ErrorCode::InferenceFailed,
            AgentError::Store(_) | AgentError::State(_) | AgentError::Internal(_) => {
                ErrorCode::Internal
            }
        }
    }

    /// The runbook entry to read: a path into docs/runbook.md with the entry as its anchor.
    pub fn runbook(&self) -> &'static str {
        let inner = match self {
            AgentError::Audit(e) => e.runbook(),
            AgentError::Inference(e) => e.runbook(),
            AgentError::Store(e) => e.runbook(),
            AgentError::State(e) => e.runbook(),
            _ => None,
        };
        if let Some(entry) = inner {
            return entry;
        }
        match self.code() {
            ErrorCode::AuditUnavailable => "docs/runbook.md#audit-unavailable",
            ErrorCode::PolicyInvalid => "docs/runbook.md#policy-invalid",
            ErrorCode::InferenceUnreachable => "docs/runbook.md#inference-unreachable",
            ErrorCode::InferenceBusy => "docs/runbook.md#inference-busy",
            ErrorCode::SessionBusy => "docs/runbook.md#session-busy",
            ErrorCode::SessionDamaged => "docs/runbook.md#session-state-damaged",
            ErrorCode::CoreUnreadable => "docs/runbook.md#core-unreadable",
            ErrorCode::TurnLimit => "docs/runbook.md#turn-limit",
            ErrorCode::Cancelled => "docs/runbook.md#turn-cancelled",
            ErrorCode::InferenceFailed => "docs/runbook.md#inference-failed",
            ErrorCode::DaemonBusy => "docs/runbook.md#daemon-busy",
            ErrorCode::NoModel => "docs/runbook.md#no-model",
            ErrorCode::RepeatedRefusal => "docs/runbook.md#repeated-refusal",
            ErrorCode::BadWorkspace => "docs/runbook.md#workspace",
            ErrorCode::ApprovalUnseen => "docs/runbook.md#approval-unseen",
            ErrorCode::NotOwner => "docs/runbook.md#not-owner",
            ErrorCode::BadRequest | ErrorCode::Internal => "docs/runbook.md#internal-error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_workspace_names_the_one_asked_for_and_the_one_held() {
        let path = std::path::Path::new;
        let e = AgentError::workspace_moved("s", Some(path("/asked")), Some(path("/held")));
        let text = e.to_string();
        assert!(text.starts_with("workspace \"/asked\": session s works in /held"), "{text}");
    }
}

/// A scope the owner typed that does not fit the waiting call (or is not a scope): the
/// answer is not taken, and the call still waits.
#[derive(Debug, thiserror::Error)]
#[error("{0}; the call still waits (see docs/runbook.md#scope-does-not-fit)")]
pub struct ScopeMisfit(pub bx_broker::ScopeError);

/// Why the owner's reviewer program gave no answer: the call is then refused
/// (docs/runbook.md#reviewer-failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReviewerFault {
    /// It could not be read or started, or its pipes failed.
    #[error("the reviewer could not run: {0}")]
    Start(std::io::Error),
    /// It ran past `[approvals] reviewer_secs` and was stopped.
    #[error("the reviewer gave no answer within {0} s and was stopped")]
    Timeout(u64),
    /// It exited with a failure.
    #[error("the reviewer failed ({status}): {stderr}")]
    Failed {
        /// How it exited.
        status: String,
        /// The start of what it wrote on stderr, escaped.
        stderr: String,
    },
    /// What it wrote is not an answer.
    #[error("the reviewer's output is not an answer: {0}")]
    BadAnswer(String),
}

impl ReviewerFault {
    /// The runbook entry to read.
    pub fn runbook(&self) -> &'static str {
        "docs/runbook.md#reviewer-failed"
    }
}

/// Why an upstream's guard could not be loaded: its upstream's calls are then labelled
/// the most restrictive way (docs/gateway.md#guards).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardLoadError {
    /// Its file cannot be read.
    #[error("{path}: {source}")]
    Unreadable {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Its bytes are not the ones recorded.
    #[error("its bytes hash to {actual}, not the recorded {recorded}")]
    Digest {
        /// What they hash to.
        actual: String,
        /// What the upstream's record names.
        recorded: String,
    },
    /// It is not a guard: not a component, or without both functions of their types.
    #[error("not a guard: {0}")]
    NotAGuard(#[from] bx_runtime::RunError),
}

/// A call past a `[[limit]]` of the policy: refused before the broker decides it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{tool}: {made} calls in the last minute in this session reach {rule} (see docs/runbook.md#rate-limited)"
)]
pub struct RateLimited {
    /// The tool called.
    pub tool: String,
    /// Calls counted in the last minute.
    pub made: usize,
    /// The rule, in the policy file's words.
    pub rule: String,
}
