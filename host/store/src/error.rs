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
        why: DigestError,
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
    /// The bytes are not a usable tool component. (The cause is in the message, and so not
    /// also a `source()`: a chain printed whole names it once.)
    #[error("refused component: {0}")]
    Component(bx_runtime::RunError),
    /// A name its tools cannot have (`--name`, or the name the component carries).
    #[error("tool name {0:?} must be 1 to 64 characters of a-z, 0-9, '.', '_' or '-'")]
    BadName(String),
    /// A standard component that carries no name, installed from a source whose name
    /// gives none a tool name can use, and no `--name`.
    #[error(
        "the component carries no name, and {from} gives none that a tool name can use: pass --name NAME (its tools are NAME.FUNCTION)"
    )]
    Unnamed {
        /// Where it came from, in words (`the file name "…"`, `its digest alone`).
        from: String,
    },
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
    #[error(transparent)]
    State(#[from] bx_state::StateError),
    /// A component's manifest cannot be read or asks for what cannot be granted.
    #[error("manifest {path}: {why}")]
    Manifest {
        /// The manifest file.
        path: String,
        /// What is wrong with it.
        why: ManifestError,
    },
    /// An `oci://` reference that cannot be read.
    #[error("bad reference {text:?}: {why}")]
    BadReference {
        /// What was given (cut).
        text: String,
        /// What is wrong with it.
        why: ReferenceError,
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
    /// An upstream MCP server could not be added, accepted or removed.
    #[error(transparent)]
    Upstream(#[from] bx_gateway::GatewayError),
    /// A name that another installed tool or upstream already has.
    #[error("{0}")]
    NameTaken(String),
    /// Reading or writing the store failed.
    #[error("{path}: {message}")]
    Io {
        /// The file or directory.
        path: String,
        /// What went wrong.
        message: String,
    },
}

impl From<bx_runtime::RunError> for StoreError {
    fn from(e: bx_runtime::RunError) -> StoreError {
        StoreError::Component(e)
    }
}

impl StoreError {
    /// The runbook entry for this error, which whoever prints it prints with it.
    pub fn runbook(&self) -> Option<&'static str> {
        match self {
            StoreError::DigestMismatch { .. }
            | StoreError::BadDigest { .. }
            | StoreError::Fetch { .. }
            | StoreError::BadName(_)
            | StoreError::Unnamed { .. } => Some("docs/runbook.md#install-refused"),
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
            StoreError::Upstream(e) => e.runbook(),
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

/// Why `sha256:` digest text is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// No `sha256:` prefix.
    #[error("must start with sha256:")]
    NoPrefix,
    /// Not 64 digits after it.
    #[error("must have 64 hex digits")]
    Length,
    /// Upper-case digits (one digest has one spelling).
    #[error("hex digits must be lower case")]
    UpperCase,
    /// Not hexadecimal.
    #[error("not hex")]
    NotHex,
}

/// Why an `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]` reference (or a part of one in
/// a trusted key's scope) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// No `oci://`.
    #[error("must start with oci://")]
    NoScheme,
    /// The manifest digest after `@` is malformed (as given, and why).
    #[error("bad digest {text:?}: {why}")]
    Digest {
        /// What was given.
        text: String,
        /// What is wrong with it.
        why: DigestError,
    },
    /// No `/` between a registry and a repository.
    #[error("needs a registry and a repository")]
    NoRepository,
    /// The registry is not a lower-case host or host:port in its one spelling.
    #[error("registry {0:?} is not a lower-case host or host:port")]
    Registry(String),
    /// The repository is not in the distribution spec's grammar.
    #[error("repository {0:?} is not lower-case path components")]
    Repository(String),
    /// The tag is not one.
    #[error("tag {0:?} is not 1 to 128 of A-Z a-z 0-9 _ . -")]
    Tag(String),
    /// Neither a tag nor a digest.
    #[error("needs a :TAG or an @sha256: manifest digest")]
    NoTagOrDigest,
}

/// Why a trusted key's scope (`REGISTRY` or `REGISTRY/REPOSITORY`) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyScopeError {
    /// The registry part (the scope as given, cut).
    #[error("scope {text:?}: {why}; a scope is REGISTRY or REGISTRY/REPOSITORY")]
    Registry {
        /// The scope as given, cut.
        text: String,
        /// What is wrong with the registry.
        why: ReferenceError,
    },
    /// The repository part.
    #[error("scope {text:?}: {why}, with no tag, digest or pattern")]
    Repository {
        /// The scope as given, cut.
        text: String,
        /// What is wrong with the repository.
        why: ReferenceError,
    },
}

/// Why a registry's manifest is not a Wasm component artifact bx installs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageManifestError {
    /// Another kind of manifest (an index of several, say): its media type, cut.
    #[error("media type {0:?} is not an image manifest (an index of several is not installed)")]
    NotAnImage(String),
    /// Not an image manifest's JSON.
    #[error("not an OCI image manifest: {}", cut(&.0.to_string(), 200))]
    Json(serde_json::Error),
    /// A schema version other than 2.
    #[error("schemaVersion {0} (only 2 is read)")]
    SchemaVersion(u32),
    /// The config's media type is not a Wasm artifact's (it, cut).
    #[error(
        "config media type {0:?} is not {wasm}: not a Wasm artifact",
        wasm = crate::oci::WASM_CONFIG_TYPE
    )]
    NotWasm(String),
    /// Not exactly one layer, a component.
    #[error(
        "a Wasm artifact has exactly one layer of type {}; this one has {layers} layers, {wasm} of them Wasm",
        crate::oci::WASM_LAYER_TYPE
    )]
    Layers {
        /// Layers it has.
        layers: usize,
        /// Of them, component layers.
        wasm: usize,
    },
}

/// What is wrong with a standard component's manifest, or with what it asks for. The
/// store adds which file ([`StoreError::Manifest`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file is not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// bx's TOML form does not parse (or holds an unknown key).
    #[error("{0}")]
    Toml(toml::de::Error),
    /// Wassette's YAML form does not parse.
    #[error("{0}")]
    Yaml(yaml_serde::Error),
    /// Brackets or braces nested deeper than a manifest needs (the YAML parser's time
    /// grows with the square of an unclosed nesting).
    #[error("brackets or braces nested more than {max} deep, at byte {at}; a manifest needs a few")]
    TooDeep {
        /// The bound.
        max: usize,
        /// Where it was passed.
        at: usize,
    },
    /// Neither form by its name.
    #[error("a manifest is bx's TOML (.toml) or Wassette's policy (.yaml, .yml)")]
    UnknownForm,
    /// A list longer than its bound.
    #[error("{list}: {count} entries, at most {max}")]
    TooManyEntries {
        /// Which list (`reach.read`, `functions.f.read`).
        list: String,
        /// Entries it has.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// An entry that is empty or longer than its bound.
    #[error("{list}: an entry of {bytes} bytes")]
    EntrySize {
        /// Which list.
        list: String,
        /// Its length.
        bytes: usize,
    },
    /// An entry holding a control character (the entry, cut).
    #[error("{list}: {entry:?} holds a control character")]
    ControlCharacter {
        /// Which list.
        list: String,
        /// The entry, cut.
        entry: String,
    },
    /// More functions than the bound.
    #[error("{count} functions, at most {max}")]
    TooManyFunctions {
        /// Functions it names.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A host that is not a host or host:port (it, cut).
    #[error("reach.hosts: {0:?} is not a host or host:port")]
    NotAHost(String),
    /// A Wassette storage URI that is not `fs://` (it, cut).
    #[error("storage uri {0:?}: bx reads only fs:// URIs")]
    NotAFileUri(String),
    /// A Wassette storage URI with a pattern (it, cut).
    #[error("storage uri {0:?}: bx grants a directory or a file, not a pattern")]
    Pattern(String),
    /// A Wassette storage access other than `read` and `write`.
    #[error("storage uri {uri:?}: access {access:?}")]
    Access {
        /// The URI, cut.
        uri: String,
        /// The access, cut.
        access: String,
    },
    /// A Wassette network entry with both or neither of `host` and `cidr`.
    #[error("a network allow entry names one host or one cidr")]
    NetworkEntry,
    /// It names a function the component does not export.
    #[error("names function {0:?}, which the component does not export")]
    NoSuchFunction(String),
    /// It names a parameter a function does not have.
    #[error("{function}: parameter {param:?} does not exist")]
    NoSuchParameter {
        /// The function.
        function: String,
        /// The parameter.
        param: String,
    },
    /// It names a parameter that is not a string (nor a list of strings).
    #[error("{function}: parameter {param:?} is not a string")]
    NotAString {
        /// The function.
        function: String,
        /// The parameter.
        param: String,
    },
    /// The owner's policy refuses a resource it asks for whatever the arguments.
    #[error("{0}")]
    Refused(StaticRefused),
}

/// A resource a tool reaches whatever its arguments (from its manifest) that the owner's
/// policy refuses: what [`crate::StaticCheck`] answers, and what refuses the install.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{tool} asks to {resource} whatever its arguments, and the policy refuses it: {reason}")]
pub struct StaticRefused {
    /// The tool.
    pub tool: String,
    /// The resource.
    pub resource: bx_broker::Resource,
    /// Why the policy refuses it.
    pub reason: bx_broker::DenyReason,
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
