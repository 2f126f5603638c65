//! Errors of the runtime: a failed load, a refused component, a call that hit a limit.

/// Which limit stopped a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The call ran past its wall-time deadline.
    Deadline,
    /// The instance tried to grow its memory past the cap.
    Memory,
    /// The returned output was larger than the cap.
    Output,
    /// stdout or stderr filled its buffer.
    Stdio,
    /// The call made more host calls than allowed.
    HostCalls,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limit::Deadline => "deadline",
            Limit::Memory => "memory cap",
            Limit::Output => "output cap",
            Limit::Stdio => "stdio cap",
            Limit::HostCalls => "host-call cap",
        })
    }
}

/// Why the runtime could not load a component or finish a call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The bytes are not a component wasmtime accepts (a core module, garbage, truncated).
    #[error("not a valid component: {0}")]
    Invalid(String),
    /// The component is valid but bx cannot run it: a `bx:tool` component that does
    /// not implement the world, or a standard one that imports what the host does not
    /// give tools, or exports nothing bx can call.
    #[error("not a component bx can run: {0}")]
    WrongWorld(String),
    /// The grant given is for another tool or another digest.
    #[error("grant is for {granted}, not for this tool ({actual})")]
    GrantMismatch {
        /// What the grant names.
        granted: String,
        /// What the loaded tool is.
        actual: String,
    },
    /// A limit stopped the call; `detail` says by how much.
    #[error("tool stopped: {limit} exceeded ({detail})")]
    Limit {
        /// Which limit.
        limit: Limit,
        /// Numbers for the owner.
        detail: String,
    },
    /// The guest trapped for a reason other than a limit (a panic, an abort).
    #[error("tool trapped: {0}")]
    Trap(String),
    /// The precompiled cache could not be read or written.
    #[error("precompiled cache at {path}: {message}")]
    Cache {
        /// The cache file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The call needs the secret store and it cannot be used: unreadable (every call
    /// is refused, since the leak guard cannot know what to look for), or readable by
    /// other users (calls that need a secret are refused). Nothing ran.
    #[error("the call was not started: {why} (see {})", secrets_runbook(entry))]
    Secrets {
        /// Why.
        why: String,
        /// The runbook entry: `secrets-unreadable` or `secrets-exposed`.
        entry: &'static str,
    },
    /// The engine itself could not be built or failed.
    #[error("engine: {0}")]
    Engine(String),
}

impl RunError {
    /// The runbook entry for this error, which whoever prints it prints with it.
    pub fn runbook(&self) -> Option<&'static str> {
        match self {
            RunError::Limit { .. } => Some("docs/runbook.md#tool-limit"),
            RunError::Cache { .. } => Some("docs/runbook.md#precompiled-cache"),
            RunError::Secrets { entry, .. } => Some(secrets_runbook(entry)),
            _ => None,
        }
    }
}

/// The runbook entry of a refusal for the secret store's sake.
fn secrets_runbook(entry: &str) -> &'static str {
    match entry {
        "secrets-exposed" => "docs/runbook.md#secrets-exposed",
        "secret-quarantined" => "docs/runbook.md#secret-quarantined",
        _ => "docs/runbook.md#secrets-unreadable",
    }
}

/// Formats a wasmtime error with its whole cause chain (`{}` alone hides the cause).
pub(crate) fn chain(err: &wasmtime::Error) -> String {
    format!("{err:#}")
}
