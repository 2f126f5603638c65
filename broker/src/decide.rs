//! Decisions: `decide(policy, taint, call) -> Allow(Grant) | Ask(request) | Deny(reason)`,
//! a pure function, and `redecide`, the only way an answered `Ask` becomes a decision.

use std::path::Path;

use crate::grant::{FsAccess, Grant, RootGrant};
use crate::label::Label;
use crate::path::normalize;
use crate::scope::{Bearing, Cover, Scope, args_digest, bearing};

/// True when normalised `path` is `prefix` or below it: a byte comparison at a component
/// boundary, which for normalised absolute paths is the same as comparing components.
fn under(path: &Path, prefix: &Path) -> bool {
    let (path, prefix) =
        (path.as_os_str().as_encoded_bytes(), prefix.as_os_str().as_encoded_bytes());
    prefix == b"/"
        || (path.starts_with(prefix) && (path.len() == prefix.len() || path[prefix.len()] == b'/'))
}
use crate::policy::{GrantRule, Mode, OnTainted, Policy, ResourceRule};

/// A resource a call declares through its arguments, as the tool's `describe` names them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Resource {
    /// A path the tool reads.
    PathRead(String),
    /// A path the tool writes.
    PathWrite(String),
    /// A URL the tool fetches.
    Url(String),
    /// A call of an upstream MCP server's tool (docs/gateway.md). `sink` is the label of
    /// where what it sends goes, when its manifest says it acts on the world (a post, a
    /// mail, a payment); `None` for a tool that only reads.
    Call {
        /// Where what it sends goes.
        sink: Option<Label>,
        /// No manifest entry says what the tool does: it asks before every use, whatever
        /// its grant says, and no scoped answer covers it.
        unlabelled: bool,
    },
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resource::PathRead(p) => write!(f, "read {p}"),
            Resource::PathWrite(p) => write!(f, "write {p}"),
            Resource::Url(u) => write!(f, "fetch {u}"),
            Resource::Call { sink: None, .. } => f.write_str("call"),
            Resource::Call { sink: Some(l), unlabelled: false } => {
                write!(f, "call, sending to a sink labelled {l}")
            }
            Resource::Call { sink: Some(l), unlabelled: true } => {
                write!(f, "call of a tool no manifest labels, taken as a sink labelled {l}")
            }
        }
    }
}

/// One proposed call, as the broker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRequest {
    /// The tool's installed name.
    pub tool: String,
    /// The `sha256:` digest of the tool's component.
    pub digest: String,
    /// The resources its arguments name.
    pub resources: Vec<Resource>,
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DenyReason {
    /// What was refused and by which rule.
    pub message: String,
}

/// Which grant covered a resource, for the owner's view of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// The resource.
    pub resource: Resource,
    /// `grant[i]` in the policy file, and its line.
    pub grant: String,
    /// The grant's label.
    pub label: Label,
    /// Whether the session's taint flows to that label.
    pub clean: bool,
}

/// A call that waits for the owner. Only [`redecide`] turns it into a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskRequest {
    /// The call.
    pub call: CallRequest,
    /// Why it asks, one line per resource that asked.
    pub reasons: Vec<String>,
    /// The resources that asked.
    pub asking: Vec<Resource>,
    /// Of those, the ones an `[[ask]]` rule asks about before every use: no scoped
    /// answer covers them.
    pub every: Vec<Resource>,
    /// Every resource and the grant that covered it.
    pub matched: Vec<Matched>,
    /// The session's taint when it asked.
    pub taint: Label,
    /// The taint its writes and fetches were decided at: the session's joined with the
    /// labels of what the call itself reads.
    pub flow: Label,
    /// Where the session's taint came from, as the owner is shown it (filled in by the
    /// caller, which knows the session's history).
    pub taint_from: Vec<String>,
    /// What the policy would decide for the same call in a clean session, when the
    /// session is not clean: the owner sees what the taint changed.
    pub at_clean: Option<String>,
    /// The `[[secret]]` rules that would put a secret into the call's requests (the
    /// tool's, for a host the call names), as shown: the owner approves those too.
    pub secrets: Vec<String>,
    /// Whether a grant that covers the call says `approver = "owner"`: the owner answers
    /// in person, and no reviewer program is asked.
    pub person: bool,
}

/// The broker's answer to a call.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The call runs under this grant.
    Allow(Grant),
    /// The call waits for the owner.
    Ask(AskRequest),
    /// The call does not run.
    Deny(DenyReason),
}

/// The owner's answer to an `Ask`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Run it.
    Approve,
    /// Do not run it; the reason reaches the model.
    Refuse(String),
    /// Nobody answered in time.
    Expired,
    /// Approve or refuse it, and the session's later calls the scope covers.
    Scoped(ScopedAnswer),
}

/// An answer that also answers the session's later calls within `cover`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedAnswer {
    /// What it covers.
    pub cover: Cover,
    /// Approve, or refuse.
    pub approve: bool,
    /// The owner's reason, for a refusal.
    pub reason: String,
}

/// `grant[2] (line 14)`, or `--allow flag` / `--deny flag` for rules from the command line.
fn rule_name(kind: &str, index: usize, line: usize) -> String {
    if line == 0 {
        let flag = if kind == "deny" { "--deny" } else { "--allow" };
        format!("a {flag} flag")
    } else {
        format!("{kind}[{index}] (line {line})")
    }
}

fn deny(message: String) -> Decision {
    Decision::Deny(DenyReason { message })
}

/// The deny rule that covers `resource` for `tool`, if any.
fn denied_by(
    policy: &Policy,
    tool: &str,
    resource: &Resource,
    path: Option<&Path>,
    url: Option<&url::Url>,
) -> Option<String> {
    for d in policy.denies.iter().filter(|d| d.tool.matches(tool)) {
        // `Some("")` for a hit by path or host; `Some(", name …")` says which name hit.
        let hit = match (&d.resource, resource) {
            (ResourceRule::Path(p), Resource::PathRead(_) | Resource::PathWrite(_)) => {
                path.is_some_and(|path| under(path, p)).then(String::new)
            }
            (ResourceRule::Names(names), Resource::PathRead(_) | Resource::PathWrite(_)) => path
                .and_then(|path| crate::name::denied_name(names, path))
                .map(|n| format!(", {n}")),
            (ResourceRule::Call, Resource::Call { .. }) => Some(String::new()),
            (ResourceRule::Host(h), Resource::Url(_)) => url
                .is_some_and(|u| {
                    u.host().is_some_and(|host| {
                        h.matches(&host, u.port_or_known_default().unwrap_or(0))
                    })
                })
                .then(String::new),
            _ => None,
        };
        if let Some(which) = hit {
            return Some(format!(
                "{resource} is refused by {}{which}",
                rule_name("deny", d.index, d.line)
            ));
        }
    }
    None
}

/// The grant that covers `resource`: the mode must match; the longest path wins, then a
/// rule naming the tool over `*`, then file order.
/// The label of what a read of `path` (normalised) can reach: the grant covering it,
/// joined with every path grant's label nested under it, whatever tool or mode it names
/// (a label is a property of the data), except those this call cannot reach from there:
/// a nested grant of the tool's own that asks or refuses at `taint` is out of its reach
/// (see the nested grants in [`evaluate`]). `None` when no grant covers `path`.
fn read_reach(policy: &Policy, tool: &str, taint: Label, path: &Path) -> Option<Label> {
    let own = covering(policy, tool, Mode::Read, Some(path), None)?.label;
    let nested = |g: &&GrantRule| match &g.resource {
        ResourceRule::Path(p) => under(p, path) && p.as_os_str() != path.as_os_str(),
        ResourceRule::Host(_)
        | ResourceRule::Names(_)
        | ResourceRule::InWorkspace(_)
        | ResourceRule::Call => false,
    };
    let unreached: Vec<&Path> = policy
        .grants
        .iter()
        .filter(nested)
        .filter(|g| g.mode == Mode::Read && g.tool.matches(tool))
        .filter(|g| {
            g.when_clean != OnTainted::Allow
                || (!taint.flows_to(g.label) && g.when_tainted != OnTainted::Allow)
        })
        .filter_map(|g| match &g.resource {
            ResourceRule::Path(p) => Some(p.as_path()),
            _ => None,
        })
        .collect();
    Some(
        policy
            .grants
            .iter()
            .filter(nested)
            .filter(|g| match &g.resource {
                ResourceRule::Path(p) => !unreached.iter().any(|u| under(p, u)),
                _ => false,
            })
            .fold(own, |label, g| label.join(g.label)),
    )
}

fn covering<'p>(
    policy: &'p Policy,
    tool: &str,
    mode: Mode,
    path: Option<&Path>,
    url: Option<&url::Url>,
) -> Option<&'p GrantRule> {
    policy
        .grants
        .iter()
        .filter(|g| g.mode == mode && g.tool.matches(tool))
        .filter_map(|g| {
            let depth = match (&g.resource, path, url) {
                // Normalised prefixes of one path: the longer string is the deeper path.
                (ResourceRule::Path(p), Some(path), _) => {
                    under(path, p).then(|| p.as_os_str().len())
                }
                // A named host or address beats `*`.
                (ResourceRule::Host(h), _, Some(u)) => {
                    let port = u.port_or_known_default().unwrap_or(0);
                    let depth = usize::from(*h != crate::HostRule::AnyName);
                    u.host().filter(|host| h.matches(host, port)).map(|_| depth)
                }
                (ResourceRule::Call, None, None) => Some(0),
                _ => None,
            }?;
            let specific = g.tool.specificity();
            Some(((depth, specific, std::cmp::Reverse(g.index)), g))
        })
        .max_by_key(|(key, _)| *key)
        .map(|(_, g)| g)
}

/// Decides `call` under `policy` for a session whose taint is `taint`.
///
/// Every declared resource is decided on its own; the call's decision is the worst of
/// them (deny over ask over allow). A deny rule refuses at every taint. Otherwise the
/// covering grant decides: when the session's taint flows to the grant's label the
/// resource is allowed, else its `when_tainted` applies; an `[[ask]]` rule covering the
/// resource in its mode makes it ask at every taint. A resource no grant covers is
/// refused. The grant reaches the covering grants' resources and never the deny rules',
/// nor, in an ask rule's mode, what the rule covers and the call did not declare.
pub fn decide(policy: &Policy, taint: Label, call: &CallRequest) -> Decision {
    decide_scoped(policy, taint, call, "", &[]).0
}

/// [`decide`] in a session with scoped answers: a call the policy asks about is allowed
/// without a prompt when an approving scope covers it at its taint, refused when a
/// refusing one covers it, and asks again, saying why, when an approving one would
/// cover it but for a risen taint. `args` are the call's arguments as it runs (JSON
/// text). Deny rules, bx's own state and the grants decide first, as in [`decide`].
pub fn decide_scoped<'s>(
    policy: &Policy,
    taint: Label,
    call: &CallRequest,
    args: &str,
    scopes: &'s [Scope],
) -> (Decision, Bearing<'s>) {
    let (grant, mut ask) = match evaluate(policy, taint, call) {
        Err(reason) => return (Decision::Deny(reason), Bearing::None),
        Ok((grant, None)) => return (Decision::Allow(grant), Bearing::None),
        Ok((grant, Some(ask))) => (grant, ask),
    };
    if ask.flow != Label::CLEAN {
        ask.at_clean = Some(match evaluate(policy, Label::CLEAN, call) {
            Err(reason) => format!("refuse ({reason})"),
            Ok((_, None)) => "allow, without asking".to_owned(),
            Ok((_, Some(clean))) => format!("ask ({})", clean.reasons.join("; ")),
        });
    }
    let bearing =
        if scopes.is_empty() { Bearing::None } else { bearing(scopes, &ask, &args_digest(args)) };
    let decision = match &bearing {
        // The runtime holds the call to the scope, on what it actually opens.
        Bearing::Approved(s) => Decision::Allow(grant.within(&s.cover, &call.resources)),
        Bearing::Refused(s) => deny(format!(
            "refused by the owner's answer {} for the rest of this session ({}): {}; `bx session revoke` ends it (see docs/runbook.md#scope-refused)",
            s.id,
            s.cover.describe(&s.tool),
            s.reason
        )),
        Bearing::Voided(s) => {
            ask.reasons.push(format!(
                "the owner's answer {} ({}) was given at taint {}; this call is decided at {}, which does not flow to it, so it asks again (see docs/runbook.md#scope-voided)",
                s.id,
                s.cover.describe(&s.tool),
                s.taint,
                ask.flow
            ));
            Decision::Ask(ask)
        }
        Bearing::None => Decision::Ask(ask),
    };
    (decision, bearing)
}

type Evaluation = Result<(Grant, Option<AskRequest>), DenyReason>;

fn evaluate(policy: &Policy, taint: Label, call: &CallRequest) -> Evaluation {
    let deny = |message: String| Err(DenyReason { message });
    let mut roots: Vec<RootGrant> = Vec::new();
    let mut hosts = Vec::new();
    let mut reasons = Vec::new();
    let mut asking = Vec::new();
    let mut matched = Vec::new();
    let mut approved = Vec::new();
    let mut every = Vec::new();
    let mut person = false;
    // What the call itself reads or fetches flows into what it writes and fetches (py.run
    // reads a file and writes another in one call): those are decided at the session's taint
    // joined with the labels of everything the call's own reads can reach. A folder it
    // reads reaches every grant nested in it (a `secret` folder inside a `public` one),
    // so it counts at the highest of them (the runtime holds a call to that as it runs:
    // a write or fetch after a read labelled higher, through a hard link or a symlink,
    // is refused).
    // A fetch reads too: its answer comes into the call at its host's label. That counts
    // where the call sends something elsewhere (a write, or a second fetch); a call that
    // only fetches sends its answers nowhere but back, and is decided as before.
    let fetches = call.resources.iter().filter(|r| matches!(r, Resource::Url(_))).count();
    let writes = call.resources.iter().any(|r| matches!(r, Resource::PathWrite(_)));
    let fetch_reads = writes || fetches > 1;
    let reads = call
        .resources
        .iter()
        .filter_map(|r| match r {
            Resource::PathRead(p) => {
                normalize(Path::new(p)).ok().and_then(|p| read_reach(policy, &call.tool, taint, &p))
            }
            Resource::PathWrite(_) | Resource::Call { .. } => None,
            Resource::Url(u) => url::Url::parse(u)
                .ok()
                .filter(|_| fetch_reads)
                .and_then(|u| covering(policy, &call.tool, Mode::Fetch, None, Some(&u)))
                .map(|g| g.label),
        })
        .fold(Label::CLEAN, Label::join);
    let outward = taint.join(reads);
    for resource in &call.resources {
        let (mode, path, url) = match resource {
            Resource::PathRead(p) | Resource::PathWrite(p) => {
                let norm = match normalize(Path::new(p)) {
                    Ok(n) => n,
                    Err(e) => return deny(format!("{resource}: {e}")),
                };
                let mode = if matches!(resource, Resource::PathRead(_)) {
                    Mode::Read
                } else {
                    Mode::Write
                };
                (mode, Some(norm), None)
            }
            Resource::Url(u) => match url::Url::parse(u) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {
                    (Mode::Fetch, None, Some(url))
                }
                Ok(url) => {
                    return deny(format!(
                        "{resource}: scheme {} is not http or https",
                        url.scheme()
                    ));
                }
                Err(e) => return deny(format!("{resource}: not a URL: {e}")),
            },
            Resource::Call { .. } => (Mode::Call, None, None),
        };
        if let Some(own) = path.as_deref().and_then(|p| policy.own.iter().find(|o| under(p, o))) {
            return deny(format!(
                "{resource}: {} is bx's own state; no grant reaches it (see docs/runbook.md#own-state)",
                own.display()
            ));
        }
        if let Some(why) = denied_by(policy, &call.tool, resource, path.as_deref(), url.as_ref()) {
            return deny(why);
        }
        let Some(g) = covering(policy, &call.tool, mode, path.as_deref(), url.as_ref()) else {
            return deny(format!("no grant covers {resource} for {}", call.tool));
        };
        // (A read is decided at the session's taint; a write or a fetch at the call's.)
        let taint = if mode == Mode::Read { taint } else { outward };
        let name = rule_name("grant", g.index, g.line);
        person |= g.approver == crate::policy::Approver::Owner;
        // Where the resource's data goes, and its label: the grant's, or for an upstream
        // tool that acts on the world, its sink's (a tool that only reads sends nothing).
        let label = match resource {
            Resource::Call { sink: Some(l), .. } => *l,
            Resource::Call { sink: None, .. } => Label::TOP,
            _ => g.label,
        };
        let to = |which: &str| match resource {
            Resource::Call { .. } => format!("the sink's label {label} ({name}, which {which})"),
            _ => format!("{name}'s label {label}, which {which}"),
        };
        let clean = taint.flows_to(label);
        matched.push(Matched {
            resource: resource.clone(),
            grant: name.clone(),
            label: if matches!(resource, Resource::Call { sink: None, .. }) {
                Label::CLEAN
            } else {
                label
            },
            clean,
        });
        // An `[[ask]]` rule asks at every taint; it allows nothing a grant does not.
        let asked_by = path.as_deref().and_then(|path| {
            policy
                .asks
                .iter()
                .filter(|a| a.mode == mode && a.tool.matches(&call.tool))
                .find_map(|a| crate::name::denied_name(&a.names, path).map(|n| (a, n)))
        });
        if let (Some((a, n)), Some(path)) = (asked_by, path.as_deref()) {
            let access = if mode == Mode::Write { FsAccess::Write } else { FsAccess::Read };
            reasons.push(format!(
                "{resource}: {} asks before every {access} of {n}",
                rule_name("ask", a.index, a.line)
            ));
            asking.push(resource.clone());
            approved.push((access, path.to_path_buf()));
            every.push(resource.clone());
        }
        if let Resource::Call { unlabelled: true, .. } = resource {
            reasons.push(format!(
                "{resource}: no manifest entry says what {} does, so it asks before every use",
                call.tool
            ));
            asking.push(resource.clone());
            every.push(resource.clone());
        }
        if clean && g.when_clean == OnTainted::Ask {
            reasons.push(format!("{resource}: {name} asks before every use"));
            asking.push(resource.clone());
        }
        if !clean {
            match g.when_tainted {
                OnTainted::Allow => {}
                OnTainted::Ask => {
                    reasons.push(format!(
                        "{resource}: session taint {taint} does not flow to {}",
                        to("asks")
                    ));
                    asking.push(resource.clone());
                }
                OnTainted::Deny => {
                    return deny(format!(
                        "{resource}: session taint {taint} does not flow to {}",
                        to("denies when tainted")
                    ));
                }
            }
        }
        match &g.resource {
            ResourceRule::Path(p) => {
                let access = if g.mode == Mode::Write { FsAccess::Write } else { FsAccess::Read };
                if !roots.iter().any(|r| r.path == *p && r.access == access) {
                    roots.push(RootGrant { path: p.clone(), access, label: g.label });
                }
            }
            ResourceRule::Host(h) => {
                if !hosts.iter().any(|(r, _)| r == h) {
                    hosts.push((h.clone(), g.label));
                }
            }
            // `covering` never picks one (it covers nothing before `for_workspace`, and a
            // grant has no name rule); a call grant reaches no path or host.
            ResourceRule::InWorkspace(_) | ResourceRule::Names(_) | ResourceRule::Call => {}
        }
    }
    let mut denied: Vec<std::path::PathBuf> = policy
        .denies
        .iter()
        .filter(|d| d.tool.matches(&call.tool))
        .filter_map(|d| match &d.resource {
            ResourceRule::Path(p) => Some(p.clone()),
            ResourceRule::Host(_)
            | ResourceRule::Names(_)
            | ResourceRule::InWorkspace(_)
            | ResourceRule::Call => None,
        })
        .collect();
    let denied_names = policy
        .denies
        .iter()
        .filter(|d| d.tool.matches(&call.tool))
        .flat_map(|d| match &d.resource {
            ResourceRule::Names(names) => names.as_slice(),
            ResourceRule::Path(_)
            | ResourceRule::Host(_)
            | ResourceRule::InWorkspace(_)
            | ResourceRule::Call => &[],
        })
        .cloned()
        .collect();
    // The names an `[[ask]]` rule covers are out of this call's reach in the rule's mode
    // (a write of the workspace never reaches `.git/hooks`), except the paths it declared
    // and so was asked about.
    let asked = |mode: Mode| -> Vec<crate::NamePattern> {
        let rules = policy.asks.iter().filter(|a| a.mode == mode && a.tool.matches(&call.tool));
        rules.flat_map(|a| a.names.iter().cloned()).collect()
    };
    // A grant nested under a root, of the root's mode, that would ask or refuse at this
    // taint: the call does not reach it through the wider root (a search of the parent
    // must not read what a direct read would have to ask about).
    for g in policy.grants.iter().filter(|g| g.tool.matches(&call.tool)) {
        let ResourceRule::Path(p) = &g.resource else { continue };
        // Byte comparisons first: `Path`'s own equality walks components, and this runs
        // for every grant of every decision.
        let nested = roots.iter().any(|r| {
            under(p, &r.path)
                && r.path.as_os_str() != p.as_os_str()
                && (g.mode == Mode::Write) == (r.access == FsAccess::Write)
        });
        let asks = g.when_clean != OnTainted::Allow
            || (!taint.flows_to(g.label) && g.when_tainted != OnTainted::Allow);
        if nested && asks {
            denied.push(p.clone());
        }
    }
    let grant = Grant {
        tool: call.tool.clone(),
        digest: call.digest.clone(),
        roots,
        denied,
        denied_names,
        asked_reads: asked(Mode::Read),
        asked_writes: asked(Mode::Write),
        approved,
        own: policy.own.clone(),
        labels: std::sync::Arc::clone(&policy.labels),
        hosts,
        secrets: policy.secrets.iter().filter(|s| s.tool.matches(&call.tool)).cloned().collect(),
        flow: outward,
    };
    let secrets = secrets_for(&grant, &call.resources);
    let ask = (!reasons.is_empty()).then(|| AskRequest {
        call: call.clone(),
        reasons,
        asking,
        every,
        matched,
        taint,
        flow: outward,
        secrets,
        taint_from: Vec::new(),
        at_clean: None,
        person,
    });
    Ok((grant, ask))
}

/// Turns an answered `Ask` into a decision against the policy and taint of this moment.
/// A refusal or expiry denies. An approval runs the call only if the policy still covers
/// it (a deny rule or a removed grant still refuses) and nothing asks now that the owner
/// was not shown (the taint may have risen while the call waited).
pub fn redecide(policy: &Policy, taint: Label, request: &AskRequest, answer: &Answer) -> Decision {
    match answer {
        Answer::Refuse(why) => deny(format!("refused by the owner: {why}")),
        Answer::Expired => deny("no answer before the approval expired; refused".to_owned()),
        Answer::Scoped(ScopedAnswer { approve: false, reason, .. }) => {
            deny(format!("refused by the owner: {reason}"))
        }
        Answer::Approve | Answer::Scoped(ScopedAnswer { approve: true, .. }) => {
            match evaluate(policy, taint, &request.call) {
                Err(reason) => Decision::Deny(reason),
                Ok((grant, None)) => Decision::Allow(grant),
                Ok((grant, Some(now))) => {
                    match now.asking.iter().find(|r| !request.asking.contains(r)) {
                        None => Decision::Allow(grant),
                        Some(unseen) => deny(format!(
                            "{unseen} now needs approval too (the session's taint rose to {taint}); refused, ask again"
                        )),
                    }
                }
            }
        }
    }
}

/// The tool's secret bindings that cover a host among `resources`, as shown.
fn secrets_for(grant: &Grant, resources: &[Resource]) -> Vec<String> {
    let urls: Vec<url::Url> = resources
        .iter()
        .filter_map(|r| match r {
            Resource::Url(u) => url::Url::parse(u).ok(),
            Resource::PathRead(_) | Resource::PathWrite(_) | Resource::Call { .. } => None,
        })
        .collect();
    grant
        .secrets()
        .iter()
        .filter(|b| {
            urls.iter().any(|u| match (u.host(), u.port_or_known_default()) {
                (Some(h), Some(p)) => b.covers(&h, p),
                _ => false,
            })
        })
        .map(ToString::to_string)
        .collect()
}
