//! Errors of the state directory: a file bx keeps that cannot be read, parsed or written.

/// Why a file of the state directory could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A configuration or state file is malformed.
    #[error("{path}:{line}:{column}: {message}{}", below(snippet))]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
        /// The source line with a caret under the place (empty when there is no text to
        /// show).
        snippet: String,
    },
    /// A file bx reads as its own is not a regular file (a FIFO, a device, a directory).
    #[error("{0} is not a regular file; bx reads its own files only from regular files")]
    NotRegular(String),
    /// A file bx reads as its own is larger than its bound.
    #[error("{path} is larger than {max} bytes; refused before parsing")]
    TooLarge {
        /// The file.
        path: String,
        /// The bound.
        max: u64,
    },
    /// A session id that cannot name a file.
    #[error(
        "bad session id {0:?}: use 1 to 64 of a-z, A-Z, 0-9, '.', '_', '-', not starting with '.'"
    )]
    BadSession(String),
    /// The secret store cannot be read or parsed: calls are refused, since the leak
    /// guard cannot know what to look for.
    #[error("the secret store {path} cannot be used: {why}")]
    SecretsUnreadable {
        /// The store file.
        path: String,
        /// Why.
        why: String,
    },
    /// The secret store holds as many secrets as it keeps; a new one is refused.
    #[error("{path}: the store holds {max} secrets, the most it keeps")]
    SecretsFull {
        /// The store file.
        path: String,
        /// The most it keeps.
        max: usize,
    },
    /// A name that cannot name a secret.
    #[error(
        "bad secret name {0:?}: use 1 to 64 of a-z, 0-9, '_' and '-', starting with a letter or digit"
    )]
    BadSecretName(String),
    /// No state directory could be found.
    #[error("no state directory: pass --state-dir or set BX_HOME")]
    NoStateDir,
    /// Reading or writing failed.
    #[error("{path}: {message}")]
    Io {
        /// The file or directory.
        path: String,
        /// What went wrong.
        message: String,
    },
}

impl StateError {
    /// The runbook entry for this error, which whoever prints it prints with it.
    pub fn runbook(&self) -> Option<&'static str> {
        match self {
            StateError::Parse { .. } | StateError::NotRegular(_) | StateError::TooLarge { .. } => {
                Some("docs/runbook.md#store-file-invalid")
            }
            StateError::SecretsUnreadable { .. } => Some("docs/runbook.md#secrets-unreadable"),
            _ => None,
        }
    }

    pub(crate) fn io(path: &std::path::Path, err: impl std::fmt::Display) -> StateError {
        StateError::Io { path: path.display().to_string(), message: err.to_string() }
    }

    /// A parse error at byte `offset` of `text`, located as line and column with a caret
    /// snippet, as policy errors are ([`bx_broker::SourceLines`]).
    pub fn parse_at(
        path: &std::path::Path,
        text: &str,
        offset: usize,
        message: String,
    ) -> StateError {
        StateError::parse_span(path, text, offset..offset, message)
    }

    /// A parse error over the bytes `span` of `text` (carets under all of its first line).
    pub fn parse_span(
        path: &std::path::Path,
        text: &str,
        span: std::ops::Range<usize>,
        message: String,
    ) -> StateError {
        let at = bx_broker::SourceLines::new(text).locate(span);
        // With no text there is no line to show.
        let snippet = if text.is_empty() { String::new() } else { at.snippet };
        let path = path.display().to_string();
        StateError::Parse { path, line: at.line, column: at.column, message, snippet }
    }
}

/// A snippet on the lines below the message, or nothing.
fn below(snippet: &str) -> String {
    if snippet.is_empty() { String::new() } else { format!("\n{snippet}") }
}
