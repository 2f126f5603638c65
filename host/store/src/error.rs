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
    /// An `oci://` reference that cannot be read.
    #[error("bad reference {text:?}: {why}")]
    BadReference {
        /// What was given (cut).
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// The registry could not be reached, refused, or sent what bx does not read.
    #[error("registry {reference}: {message}; nothing was installed")]
    Registry {
        /// The reference being pulled or pushed.
        reference: String,
        /// What went wrong, cut.
        message: String,
    },
    /// A registry refused or failed a publish.
    #[error("registry {reference}: {message}; nothing was published")]
    Publish {
        /// The reference being pushed.
        reference: String,
        /// What went wrong, cut.
        message: String,
    },
    /// A tag points at a manifest whose component is not the one `--digest` names.
    #[error(
        "{reference} now points at manifest {manifest}, whose component is {actual}, not the {expected} you named; nothing was installed"
    )]
    TagMoved {
        /// The tag's reference.
        reference: String,
        /// The manifest it points at now.
        manifest: String,
        /// The component digest the owner gave.
        expected: String,
        /// The component digest the manifest names.
        actual: String,
    },
    /// A registry's manifest is not signed as a pinned key's scope requires.
    #[error("{problem}: {reference} ({detail}); keys pinned for it: {keys}; nothing was installed")]
    Signature {
        /// The manifest, by digest.
        reference: String,
        /// Which refusal it is.
        problem: SignatureProblem,
        /// What was found.
        detail: String,
        /// The keys pinned for its scope, as `name (fingerprint)`.
        keys: String,
    },
    /// A `[[tools.trusted_keys]]` entry cannot be used.
    #[error("config.toml: trusted key {index} ({name:?}): {message}")]
    TrustedKey {
        /// Its name, cut.
        name: String,
        /// Its place among the entries, from 1.
        index: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A replacement declares more than what it replaces, without `--accept-widening`.
    #[error(
        "{name}: the new version declares more than the installed one:\n{}\npass --accept-widening to install it anyway; nothing was installed",
        lines.join("\n")
    )]
    Widening {
        /// The tool or component.
        name: String,
        /// The difference, a line each: `+ …` added, `- …` gone.
        lines: Vec<String>,
    },
    /// The change could not be recorded on the audit log, so it was not made.
    #[error("the change could not be recorded, so it was not made: {0}")]
    Unrecorded(String),
    /// Tool changes waiting in `tools/pending.jsonl` could not be put on the audit log.
    #[error(
        "tool changes waiting in tools/pending.jsonl could not be written to the audit log: {0}"
    )]
    Pending(String),
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
            StoreError::BadReference { .. }
            | StoreError::Registry { .. }
            | StoreError::Publish { .. } => Some("docs/runbook.md#registry-failed"),
            StoreError::TagMoved { .. } => Some("docs/runbook.md#tag-moved"),
            StoreError::Signature { .. } => Some("docs/runbook.md#signature-refused"),
            StoreError::TrustedKey { .. } => Some("docs/runbook.md#signature-refused"),
            StoreError::Widening { .. } => Some("docs/runbook.md#capabilities-widened"),
            StoreError::Unrecorded(_) | StoreError::Pending(_) => {
                Some("docs/runbook.md#audit-unavailable")
            }
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

/// Which signature refusal it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureProblem {
    /// The registry holds no signature of the manifest.
    Unsigned,
    /// Signatures are there, and no key pinned for the scope verifies any: signed by
    /// another key, or altered after signing.
    NotPinned,
    /// A pinned key signed another manifest or repository, not this one.
    OtherManifest,
    /// What is there is not a signature (bad encoding, a payload that is not one).
    Malformed,
}

impl std::fmt::Display for SignatureProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SignatureProblem::Unsigned => "unsigned",
            SignatureProblem::NotPinned => {
                "signed by a key not pinned for it, or altered after signing"
            }
            SignatureProblem::OtherManifest => "a signature of another manifest",
            SignatureProblem::Malformed => "a malformed signature",
        })
    }
}

/// Text from outside bx (a registry, a signature, a reference as typed) for a message:
/// cut to at most `max` bytes on a character boundary, with `…` when cut, and every
/// hidden character, tab and newline written as `\u{..}` (`bx_broker::escape_untrusted`),
/// so it stays on its line.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = bx_broker::escape_untrusted(&text[..end], false);
    if end < text.len() {
        out.push('…');
    }
    out
}
