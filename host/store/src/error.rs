//! Errors of the tool store. Each says what was refused and why; none leaves a partial
//! install behind.

/// Why the store refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The digest text is malformed.
    #[error("bad digest {text:?}: {why}")]
    BadDigest {
        /// What was given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// The bytes do not hash to the digest the owner gave.
    #[error("digest mismatch: expected {expected}, got {actual}; nothing was installed")]
    DigestMismatch {
        /// The digest the owner asked for.
        expected: String,
        /// The digest of the bytes received.
        actual: String,
    },
    /// The component could not be fetched (file, URL or mirror).
    #[error("cannot fetch {source_name}: {message}")]
    Fetch {
        /// The file, URL or mirror.
        source_name: String,
        /// What went wrong.
        message: String,
    },
    /// The bytes are not a usable tool component.
    #[error("refused component: {0}")]
    Component(#[from] bx_runtime::RunError),
    /// Another tool with this name is installed.
    #[error(
        "a tool named {name} is already installed as {installed}; pass --replace to replace it"
    )]
    NameClash {
        /// The tool name.
        name: String,
        /// The digest installed under it now.
        installed: String,
    },
    /// A file of the state directory could not be read or is malformed (config, the
    /// installed set).
    #[error("{0}")]
    State(#[from] bx_state::StateError),
    /// A component's manifest cannot be read or asks for what cannot be granted.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// The manifest file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// No tool by this name.
    #[error("no tool named {0} is installed (see `bx tool list`)")]
    NotInstalled(String),
    /// Reading or writing the store failed.
    #[error("{path}: {message}")]
    Io {
        /// The file or directory.
        path: String,
        /// What went wrong.
        message: String,
    },
}

impl StoreError {
    /// The runbook entry for this error, which whoever prints it prints with it.
    pub fn runbook(&self) -> Option<&'static str> {
        match self {
            StoreError::DigestMismatch { .. }
            | StoreError::BadDigest { .. }
            | StoreError::Fetch { .. } => Some("docs/runbook.md#install-refused"),
            StoreError::Manifest { .. } => Some("docs/runbook.md#manifest-refused"),
            // A limit the component hit while it described itself is the more specific.
            StoreError::Component(e) => e.runbook().or(Some("docs/runbook.md#install-refused")),
            StoreError::State(e) => e.runbook(),
            _ => None,
        }
    }

    pub(crate) fn io(path: &std::path::Path, err: impl std::fmt::Display) -> StoreError {
        StoreError::Io { path: path.display().to_string(), message: err.to_string() }
    }
}
