//! Errors of the audit log.

/// Why the audit log refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// A write or sync failed earlier (or now): the log accepts nothing until the owner
    /// acts. Sticky on purpose; a failed sync is never retried.
    #[error("audit log unavailable: {0}; every call is refused until this is fixed")]
    Unavailable(String),
    /// Another writer (the daemon, or another command) holds the log; one writer at a
    /// time keeps the chain from forking.
    #[error("the audit log at {0} is held by another writer (the daemon, or another bx command)")]
    Locked(String),
    /// A record would be longer than the longest the log reads back; nothing was
    /// written and the log stays available.
    #[error("an audit record of {bytes} bytes is over the {max}-byte bound; it was not written")]
    TooLarge {
        /// The record's length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// The log's files could not be read for verification or recovery.
    #[error("audit log at {path}: {message}")]
    Io {
        /// The file or directory.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// `accept_break` was asked to accept a log that has no break, or more than one
    /// problem that is not a break.
    #[error("cannot accept a break: {0}")]
    NothingToAccept(String),
    /// The log is not the history that a checkpoint signed by its key, kept off the host,
    /// vouches for (records were rewritten or cut), or the key signed two histories. The
    /// writer signs and exports nothing and refuses every call; a proof is refused. (Its
    /// text names its runbook entry itself: it becomes the log's sticky failure, kept as
    /// text, and reaches the owner inside [`AuditError::Unavailable`].)
    #[error(
        "the audit log is not the history its signed checkpoints vouch for: {0} (run `bx audit verify`; see docs/runbook.md#audit-anchor-mismatch)"
    )]
    AnchorMismatch(String),
    /// The signing key of the checkpoints (or a verifier key) could not be read or used.
    #[error("audit key: {0}")]
    Key(String),
}

impl AuditError {
    /// The runbook entry for this error, which whoever prints it prints with it.
    pub fn runbook(&self) -> Option<&'static str> {
        Some(match self {
            AuditError::Unavailable(_) => "docs/runbook.md#audit-unavailable",
            AuditError::Locked(_) => "docs/runbook.md#audit-locked",
            AuditError::AnchorMismatch(_) => "docs/runbook.md#audit-anchor-mismatch",
            AuditError::Key(_) => "docs/runbook.md#audit-key",
            AuditError::TooLarge { .. }
            | AuditError::Io { .. }
            | AuditError::NothingToAccept(_) => {
                return None;
            }
        })
    }

    pub(crate) fn io(path: &std::path::Path, err: impl std::fmt::Display) -> AuditError {
        AuditError::Io { path: path.display().to_string(), message: err.to_string() }
    }
}
