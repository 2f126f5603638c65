//! Errors of the state directory: a file bx keeps that cannot be read, parsed or written.

/// Why a file of the state directory could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A configuration or state file is malformed.
    #[error("{path}:{line}:{column}: {message} (see docs/runbook.md#store-file-invalid)")]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A file bx reads as its own is not a regular file (a FIFO, a device, a directory).
    #[error(
        "{0} is not a regular file; bx reads its own files only from regular files (see docs/runbook.md#store-file-invalid)"
    )]
    NotRegular(String),
    /// A file bx reads as its own is larger than its bound.
    #[error(
        "{path} is larger than {max} bytes; refused before parsing (see docs/runbook.md#store-file-invalid)"
    )]
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
    pub(crate) fn io(path: &std::path::Path, err: impl std::fmt::Display) -> StateError {
        StateError::Io { path: path.display().to_string(), message: err.to_string() }
    }

    /// A parse error at byte `offset` of `text`, located as line and column.
    pub fn parse_at(
        path: &std::path::Path,
        text: &str,
        offset: usize,
        message: String,
    ) -> StateError {
        let before = &text[..offset.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        StateError::Parse { path: path.display().to_string(), line, column, message }
    }
}
