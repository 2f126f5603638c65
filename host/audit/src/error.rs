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

/// Why a signed checkpoint does not open: the note, its signature, its body or its
/// origin is not what the verifier key vouches for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The checkpoint file could not be read.
    #[error("{0}")]
    Unreadable(std::io::Error),
    /// The verifier key is not one.
    #[error("verifier key: {0}")]
    Verifier(signed_note::VerifierError),
    /// The bytes are not a signed note, or its signatures do not check.
    #[error("{0}")]
    Note(signed_note::NoteError),
    /// No signature on it is the verifier key's (the key named).
    #[error("not signed by {0}")]
    NotSigned(String),
    /// The signed text is not a checkpoint body.
    #[error("{0}")]
    Body(tlog_tiles::checkpoint::MalformedCheckpointError),
    /// The checkpoint's origin is not the key's name.
    #[error("origin {origin:?} is not the key's name {name:?}")]
    Origin {
        /// The origin it names.
        origin: String,
        /// The key's name.
        name: String,
    },
}

/// Why a `tlog-proof` bundle does not check ([`crate::check_proof`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// Longer than [`crate::MAX_PROOF_BYTES`].
    #[error("over {} bytes", crate::MAX_PROOF_BYTES)]
    TooLarge,
    /// The bundle is not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// No blank line, and no checkpoint after it.
    #[error("no checkpoint after the proof")]
    NoCheckpoint,
    /// The first line is not the `tlog-proof` header.
    #[error("the first line is not {}", crate::prove::HEADER)]
    NoHeader,
    /// The `extra` line is not base64.
    #[error("extra: {0}")]
    Extra(base64::DecodeError),
    /// The `extra` data is not UTF-8.
    #[error("extra: not UTF-8")]
    ExtraNotUtf8,
    /// No `index N` line (or one whose number is not a plain decimal).
    #[error("no `index N` line")]
    NoIndex,
    /// A line of the proof is not a hash (the line, cut at 60 characters).
    #[error("proof hash {line}: {error}")]
    Hash {
        /// The line, cut.
        line: String,
        /// Why it is not a hash.
        error: tlog_tiles::tlog::Error,
    },
    /// The checkpoint does not open with the verifier key.
    #[error("{0}")]
    Checkpoint(CheckpointError),
    /// No `extra` data: no record to check.
    #[error("no record in the proof's extra data to check")]
    NoRecord,
    /// The record is not at that index under the checkpoint's root.
    #[error("the record is not at index {index} of the {size} records the checkpoint signs")]
    NotIncluded {
        /// The index the proof names.
        index: u64,
        /// The records the checkpoint signs.
        size: u64,
    },
}
