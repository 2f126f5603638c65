//! Errors of the gateway: an upstream that cannot be added, started, listed or called.

/// Why an upstream MCP server could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// A name that cannot name an upstream.
    #[error(
        "bad upstream name {0:?}: use 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter (its tools are named NAME.TOOL)"
    )]
    BadName(String),
    /// An upstream of that name is already added.
    #[error("an upstream named {0:?} is already added; remove it first (bx mcp remove {0})")]
    Exists(String),
    /// No upstream of that name.
    #[error("no upstream named {0:?} is added (bx mcp list shows those that are)")]
    Unknown(String),
    /// The upstream's process could not be started.
    #[error("upstream {name}: its command {command:?} could not be started: {source}")]
    Spawn {
        /// The upstream.
        name: String,
        /// The command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The upstream did not finish a step by its deadline.
    #[error(
        "upstream {name}: no answer to {step} within {seconds} s; it is stopped (see docs/runbook.md#upstream-failed)"
    )]
    Timeout {
        /// The upstream.
        name: String,
        /// What was waited for (`initialize`, `tools/list`, a call).
        step: String,
        /// The deadline.
        seconds: u64,
    },
    /// The upstream broke the protocol, closed, or answered with an error.
    #[error("upstream {name}: {step} failed: {why} (see docs/runbook.md#upstream-failed)")]
    Failed {
        /// The upstream.
        name: String,
        /// What failed.
        step: String,
        /// Why, bounded and as the upstream said it.
        why: String,
    },
    /// An answer larger than bx takes from an upstream.
    #[error(
        "upstream {name}: its answer to {step} is larger than {max} bytes; refused (see docs/runbook.md#upstream-failed)"
    )]
    TooLarge {
        /// The upstream.
        name: String,
        /// What it answered.
        step: String,
        /// The bound.
        max: usize,
    },
    /// A pinned tool whose description or schema changed since the owner accepted it, or
    /// that the upstream no longer lists (or lists twice).
    #[error(
        "upstream {name}: its tool {tool} is not as it was pinned (its description or schema changed, or it is no longer listed once) and is off until `bx mcp accept {name}` (see docs/runbook.md#upstream-changed)"
    )]
    Changed {
        /// The upstream.
        name: String,
        /// The tool, as the upstream names it.
        tool: String,
    },
    /// An upstream that failed is not started again before its back-off ends.
    #[error(
        "upstream {name}: it failed and is started again in {millis} ms at the earliest (see docs/runbook.md#upstream-failed)"
    )]
    Backoff {
        /// The upstream.
        name: String,
        /// How long until it may start.
        millis: u64,
    },
    /// An upstream's manifest that cannot be read as one.
    #[error("{path}: not an upstream manifest{}: {why} (see docs/gateway.md#labels)", at.map(|a| format!(" at byte {a}")).unwrap_or_default())]
    Manifest {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
        /// Where, as a byte offset, when known.
        at: Option<usize>,
    },
    /// The upstream's process could not be confined (no Landlock on this kernel).
    #[error(
        "an upstream is not started unconfined, and this one could not be: {0} (see docs/runbook.md#upstream-unconfined)"
    )]
    Unconfined(String),
    /// An HTTP upstream's URL that bx does not reach.
    #[error("upstream {name}: {url}: {why} (see docs/gateway.md#over-http)")]
    Url {
        /// The upstream.
        name: String,
        /// The URL, as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// A secret bound to the upstream could not be read or put in.
    #[error("upstream {name}: not started: {why} (see docs/runbook.md#upstream-failed)")]
    Secret {
        /// The upstream.
        name: String,
        /// Why.
        why: SecretError,
    },
    /// The upstreams file cannot be read, parsed or written.
    #[error(transparent)]
    State(#[from] bx_state::StateError),
    /// Another I/O failure, on the named path.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl GatewayError {
    /// The runbook entry for this error, where it is a state the owner acts on.
    pub fn runbook(&self) -> Option<&'static str> {
        match self {
            GatewayError::Timeout { .. }
            | GatewayError::Failed { .. }
            | GatewayError::TooLarge { .. }
            | GatewayError::Spawn { .. }
            | GatewayError::Backoff { .. }
            | GatewayError::Secret { .. } => Some("docs/runbook.md#upstream-failed"),
            GatewayError::Changed { .. } => Some("docs/runbook.md#upstream-changed"),
            GatewayError::Unconfined(_) => Some("docs/runbook.md#upstream-unconfined"),
            _ => None,
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> GatewayError {
        GatewayError::Io { path: path.display().to_string(), source }
    }
}

/// Why a secret bound to an upstream could not be put into its environment or headers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// No secret of that name is in bx's store.
    #[error("secret {0} is not in bx's store (bx secret set {0})")]
    Missing(String),
    /// The store cannot be read.
    #[error("the secret store cannot be read: {0}")]
    Unreadable(String),
    /// Other users can read the store.
    #[error("{0} (see docs/runbook.md#secrets-exposed)")]
    Exposed(String),
    /// A header template with `{secret:` and no `}`.
    #[error("{0:?}: an unclosed {{secret:")]
    Unclosed(String),
    /// A header name or value HTTP does not take.
    #[error("header {0}: not a header name and value HTTP takes")]
    BadHeader(String),
}
