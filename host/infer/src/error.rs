//! Errors of the inference client. Each says what happened to the request.

/// Why a request did not produce a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InferError {
    /// The server could not be reached within the retry window and attempt budget.
    #[error("inference server unreachable at {url} after {attempts} attempts: {last}")]
    Unreachable {
        /// The server's base URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: String,
    },
    /// Every slot is busy and the queue is full.
    #[error("inference busy: all {slots} slots in use and {queued} requests queued")]
    Busy {
        /// Slots on the server.
        slots: usize,
        /// Requests waiting.
        queued: usize,
    },
    /// The server answered with an HTTP error.
    #[error("inference server answered {status}: {body}")]
    Http {
        /// HTTP status.
        status: u16,
        /// The body, cut to 1 KiB.
        body: String,
    },
    /// The stream ended before a finish reason: the server went away mid-answer.
    #[error("reply truncated: the stream ended before the model finished ({0})")]
    Truncated(String),
    /// No event arrived within the idle timeout.
    #[error("no data from the inference server for {0:?}")]
    IdleTimeout(std::time::Duration),
    /// One SSE event was larger than the cap.
    #[error("an SSE event exceeded {0} bytes")]
    EventTooLarge(usize),
    /// The server sent an `error` event.
    #[error("inference server error: {0}")]
    Server(String),
    /// The reply did not follow the protocol (bad JSON, a tool call with bad arguments).
    #[error("malformed reply: {0}")]
    Protocol(String),
    /// `/props` said something the client cannot work with.
    #[error("server properties: {0}")]
    Props(String),
    /// A probe's body (`/props`, `/slots`) was larger than the client reads.
    #[error("a probe's body is over {0} bytes")]
    ProbeTooLarge(usize),
    /// A probe's body broke off or did not arrive within its deadline.
    #[error("reading a probe's body: {0}")]
    ProbeBody(String),
}

impl InferError {
    /// The runbook entry for this error, which whoever prints it prints with it.
    pub fn runbook(&self) -> Option<&'static str> {
        match self {
            InferError::Unreachable { .. } => Some("docs/runbook.md#inference-unreachable"),
            InferError::Busy { .. } => Some("docs/runbook.md#inference-busy"),
            _ => None,
        }
    }
}
