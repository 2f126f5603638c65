//! Scoped answers: an owner's answer to one `ask` that also answers the session's later
//! calls like it. A scope is one of three shapes, each for one tool (name and digest):
//! the same exact arguments, paths of one access under a directory, or one origin
//! (scheme, host and port). It only ever turns an `ask` into an `allow` (or a refusal)
//! for what the policy already asks about: deny rules, bx's own state and every grant are
//! decided first, by [`decide`](crate::decide), exactly as without it. An approving scope
//! covers a call only while the taint the call is decided at flows to the taint the
//! owner answered at; a refusing one holds at every taint.

use std::path::{Path, PathBuf};

use crate::decide::{AskRequest, Resource};
use crate::label::{Integrity, Label};
use crate::path::normalize;

/// What a scope covers (beyond the tool, which every scope names).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Cover {
    /// Calls with exactly these arguments: the SHA-256 (hex) of their JSON text as they
    /// run (relative paths resolved).
    Args(String),
    /// Reads (or writes) of paths at or below `prefix`, compared by component.
    Path {
        /// A normalised absolute directory.
        prefix: PathBuf,
        /// Writes, not reads.
        write: bool,
    },
    /// Fetches from one origin.
    Host {
        /// `http` or `https`.
        scheme: String,
        /// The host as the URL parser normalises it.
        host: String,
        /// The port, the scheme's default when the URL names none.
        port: u16,
    },
}

/// The scope an owner names when answering (`--scope args`, `path`, `path=/dir`,
/// `host`); [`cover_for`] makes it concrete for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeKind {
    /// This call only (an answer without a scope).
    Call,
    /// The same tool with the same exact arguments.
    Args,
    /// The same tool under a directory: the call's own paths' nearest common directory,
    /// or the one named (which must hold every path the call asks about).
    Path(Option<PathBuf>),
    /// The same tool to the call's origin.
    Host,
}

impl ScopeKind {
    /// Parses a scope as the owner types it: `call`, `args`, `path`, `path=/dir` or
    /// `host`.
    pub fn parse(text: &str) -> Result<ScopeKind, ScopeError> {
        let text = text.trim();
        match text {
            "" | "call" => Ok(ScopeKind::Call),
            "args" => Ok(ScopeKind::Args),
            "path" => Ok(ScopeKind::Path(None)),
            "host" => Ok(ScopeKind::Host),
            _ => match text.strip_prefix("path=") {
                Some(dir) => {
                    let dir = Path::new(dir);
                    if !dir.is_absolute() {
                        return Err(ScopeError::RelativeDir(dir.to_path_buf()));
                    }
                    let dir = normalize(dir).map_err(ScopeError::BadDir)?;
                    let unclear = dir.components().any(|c| {
                        let name = c.as_os_str().to_string_lossy();
                        name.trim() != name || name.chars().any(char::is_control)
                    });
                    if unclear {
                        return Err(ScopeError::UnclearDir(dir));
                    }
                    Ok(ScopeKind::Path(Some(dir)))
                }
                None => Err(ScopeError::Unknown(bounded(text, 64))),
            },
        }
    }
}

impl std::fmt::Display for ScopeKind {
    /// As [`ScopeKind::parse`] reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScopeKind::Call => f.write_str("call"),
            ScopeKind::Args => f.write_str("args"),
            ScopeKind::Path(None) => f.write_str("path"),
            ScopeKind::Path(Some(dir)) => write!(f, "path={}", dir.display()),
            ScopeKind::Host => f.write_str("host"),
        }
    }
}

/// The most bytes of an error about a scope: it can echo a path the call or the owner
/// named, of any length.
const MAX_ERROR_BYTES: usize = 1 << 10;

/// Why a scope the owner named is refused, or does not fit the call it would answer.
///
/// Its text is what the owner and the model are shown: escaped, and cut at
/// [`MAX_ERROR_BYTES`] with the length it had (it can echo a path or a URL the call named,
/// of any length, with any characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", shown_error(self.unbounded()))]
#[non_exhaustive]
pub enum ScopeError {
    /// `path=DIR` with a relative directory.
    RelativeDir(PathBuf),
    /// `path=DIR` whose directory does not normalise.
    BadDir(crate::PathError),
    /// `path=DIR` with a name that begins or ends with white space, or holds a control
    /// character: what the owner reads back would not show what it covers.
    UnclearDir(PathBuf),
    /// Not a scope (what was typed, cut at 64 bytes).
    Unknown(String),
    /// An approving scope, in a session that has read untrusted content.
    Untrusted,
    /// An `[[ask]]` rule asks before every use of a path the call names.
    AskedEveryUse,
    /// The scope's kind does not fit a resource the call asks about (`path` for a URL,
    /// `host` for a path).
    Unfit {
        /// The scope typed: `path` or `host`.
        scope: &'static str,
        /// The resource it does not fit.
        resource: Resource,
        /// The scopes that would fit, in words.
        instead: &'static str,
    },
    /// `path` for a call that both reads and writes.
    ReadAndWrite,
    /// A path the call asks about does not normalise.
    BadPath {
        /// The resource.
        resource: Resource,
        /// Why its path does not normalise.
        error: crate::PathError,
    },
    /// `path` for a call that asks about no path.
    NoPath,
    /// The directory named (`path=DIR`) does not hold a path the call asks about.
    NotHeld {
        /// The path outside it.
        path: PathBuf,
        /// The directory named.
        dir: PathBuf,
    },
    /// The scope would cover the whole file system.
    WholeFileSystem,
    /// A URL the call asks about has no host.
    NoHost(Resource),
    /// `host` for a call that asks about more than one origin.
    ManyOrigins,
    /// `host` for a call that asks about no URL.
    NoUrl,
}

impl ScopeError {
    /// The message before it is cut and escaped.
    fn unbounded(&self) -> String {
        match self {
            ScopeError::RelativeDir(dir) => {
                format!("scope path={}: the directory must be an absolute path", dir.display())
            }
            ScopeError::BadDir(e) => format!("scope path=: {e}"),
            ScopeError::UnclearDir(dir) => format!(
                "scope path={:?}: a name in it begins or ends with white space or holds a control character",
                dir.display().to_string()
            ),
            ScopeError::Unknown(text) => {
                format!("unknown scope {text:?}: use call, args, path, path=/dir or host")
            }
            ScopeError::Untrusted => format!("no scope: {UNTRUSTED_NO_SCOPE}"),
            ScopeError::AskedEveryUse => "this call asks before every use (an [[ask]] rule names a path it reaches, or it calls a tool no manifest labels); only this call can be answered".to_owned(),
            ScopeError::Unfit { scope, resource, instead } => format!(
                "scope {scope} does not fit: this call also asks to {resource}; use {instead}"
            ),
            ScopeError::ReadAndWrite => {
                "scope path does not fit: this call asks both to read and to write; use args"
                    .to_owned()
            }
            ScopeError::BadPath { resource, error } => format!("{resource}: {error}"),
            ScopeError::NoPath => "scope path does not fit: this call asks about no path".to_owned(),
            ScopeError::NotHeld { path, dir } => format!(
                "the scope's directory does not hold {}, which this call asks about (scope path={})",
                path.display(),
                dir.display()
            ),
            ScopeError::WholeFileSystem => {
                "scope path would cover the whole file system; name a directory with path=/dir"
                    .to_owned()
            }
            ScopeError::NoHost(resource) => format!("{resource}: not a URL with a host"),
            ScopeError::ManyOrigins => {
                "scope host does not fit: this call asks about more than one origin; use args"
                    .to_owned()
            }
            ScopeError::NoUrl => "scope host does not fit: this call asks about no URL".to_owned(),
        }
    }
}

/// An error about a scope as the owner and the model are shown it: escaped, and cut at
/// [`MAX_ERROR_BYTES`] with the length it had.
fn shown_error(why: String) -> String {
    let cut = if why.len() > MAX_ERROR_BYTES {
        format!("{}…[{} bytes]", bounded(&why, MAX_ERROR_BYTES), why.len())
    } else {
        why
    };
    crate::approval::escape_untrusted(&cut, false)
}

fn bounded(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// One scoped answer of one session, as the owner gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The approval id it was given for (it names the answer on the log).
    pub id: String,
    /// The tool's installed name.
    pub tool: String,
    /// The tool's digest: a tool installed anew under the name is not covered.
    pub digest: String,
    /// The taint the answered call was decided at: an approving scope covers a call only
    /// while the call's taint flows to it.
    pub taint: Label,
    /// What it covers.
    pub cover: Cover,
    /// Approve, or refuse.
    pub approve: bool,
    /// The owner's reason, for a refusal.
    pub reason: String,
    /// Given by the owner's reviewer program, not the owner: an approving one never
    /// covers a call a grant keeps for the owner in person (`approver = "owner"`).
    pub reviewer: bool,
}

/// SHA-256 of `bytes`, hex.
pub fn args_digest(args: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(args.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// True when normalised `path` is `prefix` or below it, by component.
fn under(path: &Path, prefix: &Path) -> bool {
    path.starts_with(prefix)
}

/// The URL's origin, as a [`Cover::Host`] compares it.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let url = url::Url::parse(url).ok()?;
    Some((url.scheme().to_owned(), url.host_str()?.to_owned(), url.port_or_known_default()?))
}

impl Cover {
    /// Whether it covers `resource` of a call with arguments hashing to `args`.
    pub fn covers(&self, resource: &Resource, args: &str) -> bool {
        match (self, resource) {
            (Cover::Args(sha), _) => *sha == args,
            (Cover::Path { prefix, write }, Resource::PathWrite(p)) if *write => {
                normalize(Path::new(p)).is_ok_and(|p| under(&p, prefix))
            }
            (Cover::Path { prefix, write }, Resource::PathRead(p)) if !*write => {
                normalize(Path::new(p)).is_ok_and(|p| under(&p, prefix))
            }
            (Cover::Host { scheme, host, port }, Resource::Url(u)) => {
                origin(u).is_some_and(|(s, h, p)| s == *scheme && h == *host && p == *port)
            }
            _ => false,
        }
    }

    /// The scope's kind, as a record and the owner name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Cover::Args(_) => "args",
            Cover::Path { .. } => "path",
            Cover::Host { .. } => "host",
        }
    }

    /// What it covers, as a record keeps it: the arguments' SHA-256, `read DIR` or
    /// `write DIR`, or the origin `scheme://host:port`.
    pub fn what(&self) -> String {
        match self {
            Cover::Args(sha) => sha.clone(),
            Cover::Path { prefix, write } => {
                format!("{} {}", if *write { "write" } else { "read" }, prefix.display())
            }
            Cover::Host { scheme, host, port } => format!("{scheme}://{host}:{port}"),
        }
    }

    /// The inverse of [`Cover::kind`] and [`Cover::what`], for a record read back;
    /// `None` for one that does not parse (it then covers nothing).
    pub fn from_record(kind: &str, what: &str) -> Option<Cover> {
        match kind {
            "args" => (what.len() == 64 && what.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| Cover::Args(what.to_owned())),
            "path" => {
                let (access, dir) = what.split_once(' ')?;
                let write = match access {
                    "write" => true,
                    "read" => false,
                    _ => return None,
                };
                let dir = Path::new(dir);
                let prefix = normalize(dir).ok().filter(|p| p.is_absolute())?;
                (prefix == dir).then_some(Cover::Path { prefix, write })
            }
            "host" => {
                let (scheme, host, port) = origin(what)?;
                (format!("{scheme}://{host}:{port}") == what).then_some(Cover::Host {
                    scheme,
                    host,
                    port,
                })
            }
            _ => None,
        }
    }

    /// What it covers, in words, for the owner.
    pub fn describe(&self, tool: &str) -> String {
        match self {
            Cover::Args(_) => format!("{tool} with exactly these arguments"),
            Cover::Path { prefix, write } => format!(
                "{tool} {} anything under {}/",
                if *write { "writing" } else { "reading" },
                prefix.display().to_string().trim_end_matches('/')
            ),
            Cover::Host { scheme, host, port } => {
                format!("{tool} fetching from {scheme}://{host}:{port} (any path)")
            }
        }
    }
}

impl Scope {
    /// Whether it speaks to a call of `tool` with component `digest`.
    fn same_tool(&self, tool: &str, digest: &str) -> bool {
        self.tool == tool && self.digest == digest
    }

    /// What it covers, in words, with its verdict.
    pub fn describe(&self) -> String {
        format!(
            "{} {}, for the rest of this session",
            if self.approve { "approve" } else { "refuse" },
            self.cover.describe(&self.tool)
        )
    }
}

/// The resources of `ask` that a scope may answer: the asking ones, less those an
/// `[[ask]]` rule asks about (that rule asks before every such use, and only a one-call
/// answer answers it). Empty when one of them is such (the call then always asks).
fn coverable(ask: &AskRequest) -> Option<&[Resource]> {
    ask.asking.iter().all(|r| !ask.every.contains(r)).then_some(ask.asking.as_slice())
}

/// The answer that approves (`approve`) or refuses (with `reason`) the call `ask` asks
/// about, with the scope `kind` made from the call itself ([`cover_for`]), or why that
/// scope does not fit the call. What every answerer (the prompt, `bx approve`, the
/// reviewer program) gives the broker.
pub fn scoped_answer(
    ask: &AskRequest,
    args: &str,
    kind: &ScopeKind,
    approve: bool,
    reason: String,
) -> Result<crate::Answer, ScopeError> {
    Ok(match (cover_for(ask, args, kind, approve)?, approve) {
        (Some(cover), approve) => {
            crate::Answer::Scoped(crate::ScopedAnswer { cover, approve, reason })
        }
        (None, true) => crate::Answer::Approve,
        (None, false) => crate::Answer::Refuse(reason),
    })
}

/// Why no approving scope is given in a session that has read untrusted content.
pub(crate) const UNTRUSTED_NO_SCOPE: &str = "this session has read untrusted content, so the model's later calls may be steered by it: each is approved on its own (a refusal can still take a scope)";

/// The concrete cover of `kind` for the call `ask` asks about (with arguments `args`,
/// JSON text as they run), for an answer that approves (`approve`) or refuses, or why
/// that scope does not fit the call. `Ok(None)` for [`ScopeKind::Call`]. No approving
/// scope is given to a call decided at an untrusted integrity: the later calls it would
/// cover come from a model that has read what an attacker may have written.
pub fn cover_for(
    ask: &AskRequest,
    args: &str,
    kind: &ScopeKind,
    approve: bool,
) -> Result<Option<Cover>, ScopeError> {
    if *kind == ScopeKind::Call {
        return Ok(None);
    }
    if approve && ask.flow.integrity == Integrity::Untrusted {
        return Err(ScopeError::Untrusted);
    }
    let asking = coverable(ask).ok_or(ScopeError::AskedEveryUse)?;
    match kind {
        ScopeKind::Call => Ok(None),
        ScopeKind::Args => Ok(Some(Cover::Args(args_digest(args)))),
        ScopeKind::Path(named) => {
            let mut paths = Vec::new();
            let mut writes = None;
            for r in asking {
                let (p, write) = match r {
                    Resource::PathRead(p) => (p, false),
                    Resource::PathWrite(p) => (p, true),
                    Resource::Url(_) => {
                        return Err(ScopeError::Unfit {
                            scope: "path",
                            resource: r.clone(),
                            instead: "host or args",
                        });
                    }
                    Resource::Call { .. } => {
                        return Err(ScopeError::Unfit {
                            scope: "path",
                            resource: r.clone(),
                            instead: "args",
                        });
                    }
                };
                if writes.is_some_and(|w| w != write) {
                    return Err(ScopeError::ReadAndWrite);
                }
                writes = Some(write);
                paths.push(
                    normalize(Path::new(p))
                        .map_err(|error| ScopeError::BadPath { resource: r.clone(), error })?,
                );
            }
            let write = writes.ok_or(ScopeError::NoPath)?;
            let prefix = match named {
                Some(dir) => {
                    if let Some(outside) = paths.iter().find(|p| !under(p, dir)) {
                        return Err(ScopeError::NotHeld {
                            path: outside.clone(),
                            dir: dir.clone(),
                        });
                    }
                    dir.clone()
                }
                None => common_parent(&paths),
            };
            if prefix == Path::new("/") {
                return Err(ScopeError::WholeFileSystem);
            }
            Ok(Some(Cover::Path { prefix, write }))
        }
        ScopeKind::Host => {
            let mut found: Option<(String, String, u16)> = None;
            for r in asking {
                let Resource::Url(u) = r else {
                    return Err(ScopeError::Unfit {
                        scope: "host",
                        resource: r.clone(),
                        instead: if matches!(r, Resource::Call { .. }) {
                            "args"
                        } else {
                            "path or args"
                        },
                    });
                };
                let o = origin(u).ok_or_else(|| ScopeError::NoHost(r.clone()))?;
                if found.as_ref().is_some_and(|f| *f != o) {
                    return Err(ScopeError::ManyOrigins);
                }
                found = Some(o);
            }
            let (scheme, host, port) = found.ok_or(ScopeError::NoUrl)?;
            Ok(Some(Cover::Host { scheme, host, port }))
        }
    }
}

/// The deepest directory that holds every path in `paths` (each normalised, absolute).
fn common_parent(paths: &[PathBuf]) -> PathBuf {
    let mut common = match paths.first().and_then(|p| p.parent()) {
        Some(p) => p.to_path_buf(),
        None => return PathBuf::from("/"),
    };
    for p in &paths[1..] {
        while !under(p, &common) {
            if !common.pop() {
                return PathBuf::from("/");
            }
        }
    }
    common
}

/// The scopes the owner may answer `ask` with, each with what it would cover, for the
/// approval block: `(name, cover)`, where `name` is what `--scope` takes.
pub fn offers(ask: &AskRequest, args: &str) -> Vec<(&'static str, Cover)> {
    [("args", ScopeKind::Args), ("path", ScopeKind::Path(None)), ("host", ScopeKind::Host)]
        .into_iter()
        .filter_map(|(name, kind)| Some((name, cover_for(ask, args, &kind, true).ok()??)))
        .collect()
}

/// How a session's scoped answers bear on a call that asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bearing<'s> {
    /// None speaks to it.
    None,
    /// An approving scope covers it: it runs without a prompt.
    Approved(&'s Scope),
    /// A refusing scope covers it: it is refused without a prompt.
    Refused(&'s Scope),
    /// An approving scope would cover it, but the call is decided at a taint that does
    /// not flow to the one the owner answered at: it asks again.
    Voided(&'s Scope),
}

/// How `scopes` bear on the call `ask` asks about, whose arguments hash to `args`
/// ([`args_digest`]). A refusal that covers any resource the call asks about wins; an
/// approval must cover every one, from one scope, at a taint that flows to its own.
pub(crate) fn bearing<'s>(scopes: &'s [Scope], ask: &AskRequest, args: &str) -> Bearing<'s> {
    let Some(asking) = coverable(ask) else { return Bearing::None };
    let same = || scopes.iter().filter(|s| s.same_tool(&ask.call.tool, &ask.call.digest));
    if let Some(s) = same().find(|s| !s.approve && asking.iter().any(|r| s.cover.covers(r, args))) {
        return Bearing::Refused(s);
    }
    let mut voided = None;
    // A reviewer's approval stands for no call the owner must answer in person.
    for s in same().filter(|s| s.approve && !(s.reviewer && ask.person)) {
        if asking.is_empty() || !asking.iter().all(|r| s.cover.covers(r, args)) {
            continue;
        }
        if ask.flow.flows_to(s.taint) {
            return Bearing::Approved(s);
        }
        voided.get_or_insert(s);
    }
    voided.map_or(Bearing::None, Bearing::Voided)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::CallRequest;

    fn ask(resources: Vec<Resource>) -> AskRequest {
        AskRequest {
            call: CallRequest {
                tool: "fs.write".into(),
                digest: "sha256:ab".into(),
                resources: resources.clone(),
            },
            reasons: vec![],
            asking: resources,
            every: vec![],
            matched: vec![],
            taint: Label::CLEAN,
            flow: Label::CLEAN,
            secrets: vec![],
            taint_from: vec![],
            at_clean: None,
            person: false,
        }
    }

    #[test]
    fn a_path_scope_is_a_prefix_by_component_not_by_string() {
        let a = ask(vec![Resource::PathWrite("/a/b/x.md".into())]);
        let cover = cover_for(&a, "{}", &ScopeKind::Path(None), true).unwrap().unwrap();
        assert_eq!(cover, Cover::Path { prefix: "/a/b".into(), write: true });
        assert!(cover.covers(&Resource::PathWrite("/a/b/y/z".into()), ""));
        assert!(!cover.covers(&Resource::PathWrite("/a/bc/x".into()), ""));
        assert!(!cover.covers(&Resource::PathWrite("/a/b/../c".into()), ""));
        assert!(!cover.covers(&Resource::PathRead("/a/b/x.md".into()), ""));
    }

    #[test]
    fn a_host_scope_is_one_origin() {
        let a = ask(vec![Resource::Url("https://api.example.com/v1?q=1".into())]);
        let cover = cover_for(&a, "{}", &ScopeKind::Host, true).unwrap().unwrap();
        assert!(cover.covers(&Resource::Url("https://API.example.com:443/other".into()), ""));
        for other in [
            "https://api.example.com:8443/v1",
            "http://api.example.com/v1",
            "https://api.example.com.evil.net/v1",
            "https://evil.net/?https://api.example.com",
        ] {
            assert!(!cover.covers(&Resource::Url(other.into()), ""), "{other}");
        }
    }

    #[test]
    fn records_round_trip_and_odd_ones_cover_nothing() {
        for cover in [
            Cover::Args(args_digest("{}")),
            Cover::Path { prefix: "/w/docs".into(), write: false },
            Cover::Host { scheme: "https".into(), host: "x.org".into(), port: 443 },
        ] {
            assert_eq!(Cover::from_record(cover.kind(), &cover.what()), Some(cover));
        }
        for (kind, what) in [
            ("path", "write relative"),
            ("path", "write /w/../etc"),
            ("path", "delete /w"),
            ("host", "https://x.org/path"),
            ("args", "zz"),
            ("all", ""),
        ] {
            assert_eq!(Cover::from_record(kind, what), None, "{kind} {what}");
        }
    }

    #[test]
    fn a_named_directory_must_hold_the_call() {
        let a = ask(vec![Resource::PathWrite("/w/docs/a".into())]);
        assert!(cover_for(&a, "{}", &ScopeKind::parse("path=/w").unwrap(), true).is_ok());
        assert_eq!(
            cover_for(&a, "{}", &ScopeKind::parse("path=/w/doc").unwrap(), true),
            Err(ScopeError::NotHeld { path: "/w/docs/a".into(), dir: "/w/doc".into() })
        );
        assert_eq!(
            cover_for(&a, "{}", &ScopeKind::parse("path=/").unwrap(), true),
            Err(ScopeError::WholeFileSystem)
        );
        assert_eq!(ScopeKind::parse("path=w"), Err(ScopeError::RelativeDir("w".into())));
        let unfit = cover_for(&a, "{}", &ScopeKind::Host, true).unwrap_err();
        assert!(matches!(unfit, ScopeError::Unfit { scope: "host", .. }), "{unfit:?}");
        assert_eq!(
            unfit.to_string(),
            "scope host does not fit: this call also asks to write /w/docs/a; use path or args"
        );
    }

    #[test]
    fn an_error_echoes_at_most_a_kibibyte_escaped() {
        let long = format!("path=relative/{}\u{1b}[31m", "x".repeat(1 << 20));
        let why = ScopeKind::parse(&long).unwrap_err().to_string();
        assert!(why.len() < 1200 && why.contains("bytes]"), "{} bytes", why.len());
        let named = format!("path=/{}", "d/".repeat(100_000));
        let a = ask(vec![Resource::PathWrite(format!("/w/{}x", "e/".repeat(100_000)))]);
        let why =
            cover_for(&a, "{}", &ScopeKind::parse(&named).unwrap(), true).unwrap_err().to_string();
        assert!(why.len() < 1200 && why.contains("does not hold"), "{} bytes", why.len());
        let hostile = ScopeKind::parse("\u{1b}]0;pwned\u{7}").unwrap_err().to_string();
        assert!(!hostile.chars().any(crate::approval::is_hidden), "{hostile}");
    }
}
