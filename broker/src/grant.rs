//! The [`Grant`]: the permission a call runs under, and the checks the runtime makes
//! against it at every operation.

use std::path::{Path, PathBuf};

use crate::label::Label;
use crate::net::HostRule;
use crate::path::{normalize, strip_root};

/// What a filesystem operation does to its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FsAccess {
    /// Read a file, list a directory, stat a path.
    Read,
    /// Create, overwrite, append, make a directory. A write root also allows reading.
    Write,
}

impl std::fmt::Display for FsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FsAccess::Read => "read",
            FsAccess::Write => "write",
        })
    }
}

/// One granted path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootGrant {
    pub(crate) path: PathBuf,
    pub(crate) access: FsAccess,
    pub(crate) label: Label,
}

/// Where a permitted filesystem operation lands: a granted root and the path below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRoute {
    /// Index of the root in [`Grant::roots`].
    pub root: usize,
    /// The path relative to that root; empty for the root itself.
    pub relative: PathBuf,
}

/// How a permitted URL was matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetRoute {
    /// By a host name: the runtime must refuse it if the name resolves to any address
    /// that is not public.
    ByName,
    /// By an address the owner wrote down: that address is reachable as granted.
    ByAddress,
}

/// Which way a root was granted, for reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootKind {
    /// Read-only.
    ReadOnly,
    /// Read and write.
    ReadWrite,
}

/// The label the owner gave a path: a path grant of the policy, in any mode, for any
/// tool. The label of a file a call touched comes from the longest rule covering it,
/// whichever tool touched it: a label is a property of the data, so a grant that names
/// one tool labels the path for every tool (fs.search of the parent cannot launder what
/// fs.read would label secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LabelRule {
    pub(crate) path: PathBuf,
    pub(crate) label: Label,
}

/// Why a grant does not reach a path or a URL (the runtime's lexical check, before
/// anything is opened).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError<'g> {
    /// The path is not one a grant can name.
    #[error(transparent)]
    Path(#[from] crate::PathError),
    /// The path is under something no grant reaches.
    #[error("{} is under {refusal}", path.display())]
    Refused {
        /// The path, normalised.
        path: PathBuf,
        /// What it is under.
        refusal: Refusal<'g>,
    },
    /// No root of the grant covers the path in this access.
    #[error("no {access} grant covers {}", path.display())]
    NotGranted {
        /// The access asked for.
        access: FsAccess,
        /// The path, normalised.
        path: PathBuf,
    },
    /// The URL's scheme is not http or https.
    #[error("scheme {0:?} is not http or https")]
    Scheme(String),
    /// The URL carries a user name or password.
    #[error("URLs with credentials are refused")]
    Credentials,
    /// The URL has no host.
    #[error("{0} has no host")]
    NoHost(url::Url),
    /// The URL has no port, and its scheme has no default.
    #[error("{0} has no port")]
    NoPort(url::Url),
    /// No host rule of the grant matches the name.
    #[error("host {name}:{port} is not granted")]
    HostNotGranted {
        /// The host name.
        name: String,
        /// The port.
        port: u16,
    },
    /// No address rule of the grant matches the IP literal (a name rule never does).
    #[error("address {0} is not granted by address")]
    AddressNotGranted(std::net::SocketAddr),
}

/// Why a path is out of a grant's reach, whatever its roots say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal<'g> {
    /// A `[[deny]]` rule (or a nested grant that refuses at this taint) covers it.
    Denied(&'g Path),
    /// It is bx's own state (`docs/runbook.md#own-state`), which no grant reaches.
    Own(&'g Path),
    /// It has a name a `[[deny]]` rule refuses (`.env`, `*.pem`, `.git/config`).
    Named(&'g crate::NamePattern),
    /// It has a name an `[[ask]]` rule covers in this access (`.git/hooks` for a write),
    /// and the call did not name it, so the owner was not asked about it.
    Asks(&'g crate::NamePattern),
}

impl std::fmt::Display for Refusal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Denied(p) => write!(f, "denied path {}", p.display()),
            Refusal::Named(n) => write!(f, "a name denied by rule ({n})"),
            Refusal::Asks(n) => write!(
                f,
                "a name that asks the owner first ({n}); only a call that names it reaches it"
            ),
            Refusal::Own(p) => write!(
                f,
                "bx's own state {} (no grant reaches it; see docs/runbook.md#own-state)",
                p.display()
            ),
        }
    }
}

/// The permission one tool call runs under: the tool it is for, the paths and hosts it
/// reaches, the sub-paths it never reaches, and the labels of what flows in.
///
/// Fields are private and there is no public constructor: only the broker's decision
/// function builds a `Grant`, and the runtime's entry point demands one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub(crate) tool: String,
    pub(crate) digest: String,
    pub(crate) roots: Vec<RootGrant>,
    pub(crate) denied: Vec<PathBuf>,
    /// Names no path component may have (the tool's `[[deny]] name = …` rules).
    pub(crate) denied_names: Vec<crate::NamePattern>,
    /// Names an `[[ask]]` rule of the tool covers for reading: this call never reads
    /// them, except under `approved`.
    pub(crate) asked_reads: Vec<crate::NamePattern>,
    /// Names an `[[ask]]` rule of the tool covers for writing: this call never writes
    /// them, except under `approved`.
    pub(crate) asked_writes: Vec<crate::NamePattern>,
    /// The paths the call declared that an `[[ask]]` rule covered (normalised, with their
    /// access): the owner approved the call naming them, so it reaches them and below.
    pub(crate) approved: Vec<(FsAccess, PathBuf)>,
    pub(crate) own: Vec<PathBuf>,
    /// Every path grant's label, shared with the policy (one index per policy, not a
    /// copy per call); filtered by the tool when read.
    pub(crate) labels: std::sync::Arc<[LabelRule]>,
    pub(crate) hosts: Vec<(HostRule, Label)>,
    /// The policy's `[[secret]]` bindings for this tool: which secrets its requests may
    /// carry, to which hosts (no values: the runtime puts those in).
    pub(crate) secrets: Vec<crate::SecretBinding>,
    /// The taint the call's writes and fetches were decided at: the session's, joined with
    /// what its declared reads reach. A write or fetch after the call read something
    /// labelled higher (a hard link, a symlink out of the folder it named) was not
    /// decided, and the runtime refuses it unless that label flows to where it goes.
    pub(crate) flow: Label,
}

impl Grant {
    /// The tool name this grant is for.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The `sha256:` digest of the component this grant is for.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The secret bindings that apply to this tool's requests.
    pub fn secrets(&self) -> &[crate::SecretBinding] {
        &self.secrets
    }

    /// The granted roots, normalised, with how each was granted.
    pub fn roots(&self) -> impl ExactSizeIterator<Item = (&Path, RootKind)> {
        self.roots.iter().map(|r| {
            let kind = match r.access {
                FsAccess::Read => RootKind::ReadOnly,
                FsAccess::Write => RootKind::ReadWrite,
            };
            (r.path.as_path(), kind)
        })
    }

    /// The sub-paths this grant never reaches, normalised: the deny rules' paths, the
    /// nested grants that refuse at this taint, and bx's own state.
    pub fn denied(&self) -> impl Iterator<Item = &Path> {
        self.denied.iter().chain(&self.own).map(PathBuf::as_path)
    }

    /// The host rules of this grant.
    pub fn hosts(&self) -> impl ExactSizeIterator<Item = &HostRule> {
        self.hosts.iter().map(|(h, _)| h)
    }

    /// The taint the call's writes and fetches were decided at (see the field's doc).
    pub fn flow(&self) -> Label {
        self.flow
    }

    /// Why a write or fetch to where data labelled `target` goes must not run, when the
    /// call has read data labelled `read` by then: it was decided (and, where it asked,
    /// approved) at [`Grant::flow`], and what it read rose past that, to data that does
    /// not flow to `target`. (Reading the file it writes, whose label is the target's,
    /// adds nothing the decision did not cover.) The label it would have to be decided
    /// at, or `None` when the operation may run.
    pub fn undecided_flow(&self, read: Label, target: Label) -> Option<Label> {
        let now = self.flow.join(read);
        (now != self.flow && !read.flows_to(target)).then_some(now)
    }

    /// The label of the grant that decided the root at `root`.
    pub fn root_label(&self, root: &Path) -> Option<Label> {
        self.roots.iter().find(|r| r.path == root).map(|r| r.label)
    }

    /// The label of data read from `path` (normalised, as the runtime resolved it): the
    /// label of the longest path grant of the policy covering it, whatever tool and mode
    /// that grant names, so a `secret` grant nested in a `public` one keeps its label
    /// through a search of the parent, a symlink, or another tool. Grants of equal length
    /// are joined. A path no grant covers gets the top label (fail closed). The one
    /// function every file operation's label comes from.
    pub fn path_label(&self, path: &Path) -> Label {
        let mut best: Option<(usize, Label)> = None;
        for rule in self.labels.iter().filter(|r| strip_root(path, &r.path).is_some()) {
            let depth = rule.path.as_os_str().len();
            best = match best {
                Some((d, l)) if d == depth => Some((d, l.join(rule.label))),
                Some((d, _)) if d > depth => best,
                _ => Some((depth, rule.label)),
            };
        }
        best.map_or(Label::TOP, |(_, l)| l)
    }

    /// The policy's path labels, every tool's: `(path, label)`, for a runtime that also
    /// labels what it opened by where it lies on disk.
    pub fn label_rules(&self) -> impl Iterator<Item = (&Path, Label)> {
        self.labels.iter().map(|r| (r.path.as_path(), r.label))
    }

    /// What a call stopped part-way might have read: the join of every label its roots
    /// and hosts reach (the roots' own, every grant nested under them, every host).
    pub fn reach_label(&self) -> Label {
        let mut label = Label::CLEAN;
        for root in &self.roots {
            label = label.join(self.path_label(&root.path));
            for rule in self.labels.iter().filter(|r| strip_root(&r.path, &root.path).is_some()) {
                label = label.join(rule.label);
            }
        }
        self.hosts.iter().fold(label, |acc, (_, l)| acc.join(*l))
    }

    /// The label of data fetched from `host` (a host name or address as the runtime
    /// reports it).
    pub fn host_label(&self, host: &str) -> Option<Label> {
        let url = url::Url::parse(&format!("http://{host}/")).ok()?;
        let parsed = url.host()?;
        let hit = |any: bool| {
            self.hosts.iter().find(|(rule, _)| {
                (*rule == HostRule::AnyName) == any && rule_ignoring_port(rule).matches(&parsed, 0)
            })
        };
        // A named host or address is more specific than `*`.
        hit(false).or_else(|| hit(true)).map(|(_, label)| *label)
    }

    /// Why `path` (normalised) is out of reach for reading, stating and listing, if it
    /// is: [`Grant::refusal`] with [`FsAccess::Read`]. A listing leaves such entries out.
    pub fn denied_prefix(&self, path: &Path) -> Option<Refusal<'_>> {
        self.refusal(path, FsAccess::Read)
    }

    /// Why `path` (normalised) is out of reach for `access`, whatever the roots say, if
    /// it is: bx's own state, a denied sub-path, a denied name (in any access), or a name
    /// an `[[ask]]` rule covers for `access` that the call did not declare. The runtime
    /// asks this for what a write will create or open with [`FsAccess::Write`].
    pub fn refusal(&self, path: &Path, access: FsAccess) -> Option<Refusal<'_>> {
        if let Some(own) = self.own.iter().find(|d| strip_root(path, d).is_some()) {
            return Some(Refusal::Own(own));
        }
        if let Some(d) = self.denied.iter().find(|d| strip_root(path, d).is_some()) {
            return Some(Refusal::Denied(d));
        }
        if let Some(n) = crate::name::denied_name(&self.denied_names, path) {
            return Some(Refusal::Named(n));
        }
        let asked = match access {
            FsAccess::Read => &self.asked_reads,
            FsAccess::Write => &self.asked_writes,
        };
        let approved =
            || self.approved.iter().any(|(a, p)| *a == access && strip_root(path, p).is_some());
        crate::name::denied_name(asked, path).filter(|_| !approved()).map(Refusal::Asks)
    }

    /// Whether `path` (a real path the kernel reported) is bx's own state.
    pub fn is_own(&self, path: &Path) -> bool {
        self.own.iter().any(|d| path.starts_with(d))
    }

    /// This grant cut down to exactly the resources a call declared: each declared path
    /// becomes a root of its own (with the label and access of the root that covered
    /// it), and each declared URL's host and port the only hosts. Only ever narrower: a
    /// declared resource this grant does not reach is left out, not added. For code
    /// whose every access is unknown in advance (`py.run`, a standard component's
    /// function), so it reaches what its call names and nothing beside it
    /// (docs/policy.md#how-a-call-is-decided).
    pub fn narrowed(mut self, declared: &[crate::Resource]) -> Grant {
        let mut roots: Vec<RootGrant> = Vec::new();
        let mut hosts: Vec<(HostRule, Label)> = Vec::new();
        for resource in declared {
            let (text, access) = match resource {
                crate::Resource::PathRead(p) => (p, FsAccess::Read),
                crate::Resource::PathWrite(p) => (p, FsAccess::Write),
                // A call of an upstream's tool reaches nothing of the host's.
                crate::Resource::Call { .. } => continue,
                crate::Resource::Url(u) => {
                    let Ok(url) = url::Url::parse(u) else { continue };
                    let (Some(host), Some(port)) = (url.host(), url.port_or_known_default()) else {
                        continue;
                    };
                    let Some((_, label)) = self.hosts.iter().find(|(r, _)| r.matches(&host, port))
                    else {
                        continue;
                    };
                    let rule = match host {
                        url::Host::Domain(d) => HostRule::Name {
                            name: d.trim_end_matches('.').to_owned(),
                            port: Some(port),
                        },
                        url::Host::Ipv4(a) => HostRule::Addr { addr: a.into(), port: Some(port) },
                        url::Host::Ipv6(a) => HostRule::Addr { addr: a.into(), port: Some(port) },
                    };
                    if !hosts.iter().any(|(r, _)| *r == rule) {
                        hosts.push((rule, *label));
                    }
                    continue;
                }
            };
            let Ok(route) = self.route_path(text, access) else { continue };
            let Some(covering) = self.roots.get(route.root) else { continue };
            let Ok(path) = normalize(Path::new(text)) else { continue };
            let narrowed = RootGrant { path, access, label: covering.label };
            if !roots.contains(&narrowed) {
                roots.push(narrowed);
            }
        }
        self.roots = roots;
        self.hosts = hosts;
        self
    }

    /// This grant held to what a scoped answer covers, so that the runtime enforces the
    /// scope at each operation, on what it actually opens and connects to: a path scope
    /// turns every root of its access above its directory into that directory (a symlink
    /// under it that leads elsewhere is then refused as leading out of a root); a host
    /// scope leaves only its origin's host and port (a redirect elsewhere is refused); an
    /// arguments scope cuts the grant down to what the call declared ([`Grant::narrowed`]).
    /// Only ever narrower.
    pub fn within(mut self, cover: &crate::Cover, declared: &[crate::Resource]) -> Grant {
        match cover {
            crate::Cover::Args(_) => self.narrowed(declared),
            crate::Cover::Path { prefix, write } => {
                // A read may go through any root, a write only through a write root.
                for root in self.roots.iter_mut().filter(|r| !*write || r.access == FsAccess::Write)
                {
                    if prefix.starts_with(&root.path) {
                        root.path = prefix.clone();
                    }
                }
                self.roots.dedup();
                self
            }
            crate::Cover::Host { host, port, .. } => {
                let bare = host.trim_start_matches('[').trim_end_matches(']');
                let (rule, as_url) = match bare.parse::<std::net::IpAddr>() {
                    Ok(addr) => (
                        HostRule::Addr { addr, port: Some(*port) },
                        match addr {
                            std::net::IpAddr::V4(a) => url::Host::Ipv4(a),
                            std::net::IpAddr::V6(a) => url::Host::Ipv6(a),
                        },
                    ),
                    // A rule's name has no trailing dot (the URL's may).
                    Err(_) => (
                        HostRule::Name {
                            name: host.trim_end_matches('.').to_owned(),
                            port: Some(*port),
                        },
                        url::Host::Domain(host.as_str()),
                    ),
                };
                let label =
                    self.hosts.iter().find_map(|(r, l)| r.matches(&as_url, *port).then_some(*l));
                self.hosts = label.map(|l| vec![(rule, l)]).unwrap_or_default();
                self
            }
        }
    }

    /// Checks a filesystem operation lexically: the path is normalised, must not lie under
    /// a denied sub-path, and must lie under a root that allows `access`; the longest such
    /// root wins. The runtime repeats the denied check on the object it actually opened.
    pub fn route_path(&self, path: &str, access: FsAccess) -> Result<FsRoute, RouteError<'_>> {
        let path = normalize(Path::new(path))?;
        if let Some(refusal) = self.refusal(&path, access) {
            return Err(RouteError::Refused { path, refusal });
        }
        let best = self
            .roots
            .iter()
            .enumerate()
            .filter(|(_, r)| access == FsAccess::Read || r.access == FsAccess::Write)
            .filter_map(|(i, r)| strip_root(&path, &r.path).map(|rel| (i, r, rel)))
            .max_by_key(|(_, r, _)| r.path.components().count());
        match best {
            Some((root, _, relative)) => Ok(FsRoute { root, relative: relative.to_path_buf() }),
            None => Err(RouteError::NotGranted { access, path }),
        }
    }

    /// Checks a URL: http or https, no credentials, and a host rule that matches.
    pub fn route_url(&self, url: &url::Url) -> Result<NetRoute, RouteError<'_>> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(RouteError::Scheme(url.scheme().to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(RouteError::Credentials);
        }
        let host = url.host().ok_or_else(|| RouteError::NoHost(url.clone()))?;
        let port = url.port_or_known_default().ok_or_else(|| RouteError::NoPort(url.clone()))?;
        let rule = self.hosts.iter().map(|(r, _)| r).find(|r| r.matches(&host, port));
        match rule {
            Some(HostRule::Name { .. } | HostRule::AnyName) => Ok(NetRoute::ByName),
            Some(HostRule::Addr { .. }) => Ok(NetRoute::ByAddress),
            None => Err(match host {
                url::Host::Domain(d) => RouteError::HostNotGranted { name: d.to_owned(), port },
                url::Host::Ipv4(a) => RouteError::AddressNotGranted((a, port).into()),
                url::Host::Ipv6(a) => RouteError::AddressNotGranted((a, port).into()),
            }),
        }
    }
}

fn rule_ignoring_port(rule: &HostRule) -> HostRule {
    match rule {
        HostRule::Name { name, .. } => HostRule::Name { name: name.clone(), port: None },
        HostRule::Addr { addr, .. } => HostRule::Addr { addr: *addr, port: None },
        HostRule::AnyName => HostRule::AnyName,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            tool: "t".into(),
            digest: "sha256:00".into(),
            roots: vec![
                RootGrant { path: "/home/o".into(), access: FsAccess::Read, label: Label::CLEAN },
                RootGrant {
                    path: "/home/o/out".into(),
                    access: FsAccess::Write,
                    label: Label::CLEAN,
                },
            ],
            denied: vec!["/home/o/.ssh".into()],
            denied_names: Vec::new(),
            asked_reads: Vec::new(),
            asked_writes: Vec::new(),
            approved: Vec::new(),
            own: vec!["/home/o/.local/state/bx".into()],
            labels: vec![
                LabelRule { path: "/home/o".into(), label: Label::CLEAN },
                LabelRule { path: "/home/o/out".into(), label: Label::TOP },
            ]
            .into(),
            hosts: vec![(HostRule::parse("example.com").unwrap(), Label::TOP)],
            secrets: Vec::new(),
            flow: Label::CLEAN,
        }
    }

    /// What a call read after its decision holds its writes and fetches only where it
    /// rose past the decided label and does not flow to the target.
    #[test]
    fn a_read_above_the_decided_flow_holds_only_targets_it_does_not_flow_to() {
        let l = |t: &str| crate::parse_label(t).unwrap();
        let mut g = grant();
        g.flow = l("public/untrusted");
        // An approved edit of a private file reads that file: nothing new flows.
        assert_eq!(g.undecided_flow(l("private/trusted"), l("private/trusted")), None);
        // A secret read through a hard link, then a private or public target.
        assert_eq!(
            g.undecided_flow(l("secret/trusted"), l("private/trusted")),
            Some(l("secret/untrusted"))
        );
        assert_eq!(g.undecided_flow(Label::TOP, l("public/untrusted")), Some(Label::TOP));
        // No rise: what the decision covered runs.
        assert_eq!(g.undecided_flow(l("public/trusted"), l("public/trusted")), None);
        g.flow = l("secret/trusted");
        assert_eq!(g.undecided_flow(l("secret/trusted"), l("public/trusted")), None);
    }

    #[test]
    fn longest_root_wins_and_write_needs_write_root() {
        let g = grant();
        assert_eq!(
            g.route_path("/home/o/out/a", FsAccess::Read),
            Ok(FsRoute { root: 1, relative: "a".into() })
        );
        assert_eq!(
            g.route_path("/home/o/notes", FsAccess::Read),
            Ok(FsRoute { root: 0, relative: "notes".into() })
        );
        assert!(g.route_path("/home/o/notes", FsAccess::Write).is_err());
        assert!(g.route_path("/home/other", FsAccess::Read).is_err());
        assert!(g.route_path("/home/oo", FsAccess::Read).is_err());
    }

    #[test]
    fn denied_sub_path_wins_over_root() {
        let g = grant();
        let err = g.route_path("/home/o/.ssh/id_ed25519", FsAccess::Read).unwrap_err();
        let ssh = Path::new("/home/o/.ssh");
        assert_eq!(
            err,
            RouteError::Refused {
                path: "/home/o/.ssh/id_ed25519".into(),
                refusal: Refusal::Denied(ssh)
            }
        );
        assert!(g.route_path("/home/o/./.ssh", FsAccess::Read).is_err());
        assert!(g.route_path("/home/o/.sshx", FsAccess::Read).is_ok());
        let err = g.route_path("/home/o/.local/state/bx/policy.toml", FsAccess::Read).unwrap_err();
        assert!(matches!(err, RouteError::Refused { refusal: Refusal::Own(_), .. }), "{err:?}");
    }

    #[test]
    fn labels_come_from_the_longest_covering_rule() {
        let g = grant();
        assert_eq!(g.path_label(Path::new("/home/o/a")), Label::CLEAN);
        assert_eq!(g.path_label(Path::new("/home/o/out/a")), Label::TOP);
        assert_eq!(g.path_label(Path::new("/elsewhere")), Label::TOP);
        assert_eq!(g.reach_label(), Label::TOP.join(Label::CLEAN));
    }

    #[test]
    fn narrowed_reaches_only_what_was_declared() {
        use crate::Resource;
        let g = grant().narrowed(&[
            Resource::PathRead("/home/o/notes/a.csv".into()),
            Resource::PathWrite("/home/o/out/b.txt".into()),
            Resource::PathRead("/home/o/.ssh/id".into()),
            Resource::PathRead("/elsewhere/x".into()),
            Resource::Url("https://example.com/api".into()),
            Resource::Url("https://other.org/".into()),
        ]);
        assert!(g.route_path("/home/o/notes/a.csv", FsAccess::Read).is_ok());
        assert!(g.route_path("/home/o/notes/b.csv", FsAccess::Read).is_err());
        assert!(g.route_path("/home/o/out/b.txt", FsAccess::Write).is_ok());
        assert!(g.route_path("/home/o/out/c.txt", FsAccess::Write).is_err());
        assert!(g.route_path("/home/o/.ssh/id", FsAccess::Read).is_err());
        assert!(g.route_path("/elsewhere/x", FsAccess::Read).is_err());
        let ok = url::Url::parse("https://example.com/other").unwrap();
        assert_eq!(g.route_url(&ok), Ok(NetRoute::ByName));
        let port = url::Url::parse("https://example.com:8443/").unwrap();
        assert!(g.route_url(&port).is_err());
        assert!(g.route_url(&url::Url::parse("https://other.org/").unwrap()).is_err());
        // A write declared under a read-only root is not made writable.
        let g = grant().narrowed(&[Resource::PathWrite("/home/o/notes/a.csv".into())]);
        assert!(g.route_path("/home/o/notes/a.csv", FsAccess::Write).is_err());
    }

    #[test]
    fn urls() {
        let g = grant();
        let ok = url::Url::parse("https://example.com/a").unwrap();
        assert_eq!(g.route_url(&ok), Ok(NetRoute::ByName));
        for bad in [
            "https://other.com/",
            "http://127.0.0.1/",
            "http://[::1]/",
            "http://169.254.169.254/latest/meta-data",
            "http://2130706433/",
            "http://0x7f000001/",
            "ftp://example.com/",
            "https://u:p@example.com/",
        ] {
            let url = url::Url::parse(bad).unwrap();
            assert!(g.route_url(&url).is_err(), "{bad} must be refused");
        }
    }
}
