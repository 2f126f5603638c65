//! One tool call's trust path, written once as typed steps that only allow the next one:
//! [`Trust::propose`] puts the request on the log and gives a [`Requested`];
//! [`Requested::decide`] records the decision and gives a [`Decided`]: an [`Allowed`],
//! an [`Asking`] (which only [`Asking::answer`] turns into a decision, recorded) or a
//! [`Refused`]; [`Allowed::run`] runs the call under its grant and records the result
//! before anyone sees it, and raises the session's taint. One function drives these
//! steps in order, [`Trust::settle`](crate::settle); the agent loop, `bx tool run` and
//! the daemon's one-shot calls all call it. `bx policy explain` uses [`explain`], which
//! decides without recording.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bx_audit::{AuditLog, Entry, MAX_FIELD_BYTES, bounded, sha256_hex};
use bx_broker::{
    AllowList, Answer, AskRequest, CallRequest, Decision, DenyReason, Grant, Label, Policy,
    Resource,
};
use bx_runtime::{
    CallError, CallReport, LoadedTool, Output, ResourceKind, RunError, Runtime, SecretActivity,
};
use bx_state::{PolicyFile, PolicyStatus};
use parking_lot::Mutex;
use serde_json::Value;

use crate::error::AgentError;
use crate::ledger::Ledger;
use crate::toolset::Tool;

/// Why a call's arguments do not name their resources properly; the call is refused
/// with this as its reason (which the model reads).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// An argument that names a resource is not a string (or a list of at most 64).
    #[error(
        "argument {arg:?} names resources and must be a string or a list of at most 64 strings, not {shown}"
    )]
    NotAString {
        /// The argument's name.
        arg: String,
        /// Its value, bounded.
        shown: String,
    },
    /// An empty path.
    #[error("the path is empty; use \".\" for the workspace")]
    EmptyPath,
    /// A path that starts with `~`.
    #[error(
        "path {0:?}: `~` is not expanded; give a path relative to the workspace, or an absolute one"
    )]
    Tilde(String),
    /// A relative path in a session without a workspace. (The reason goes to the model
    /// as well as the owner, so it names its runbook entry itself.)
    #[error(
        "path {0:?} is relative and this session has no workspace to resolve it against (see docs/runbook.md#no-workspace)"
    )]
    NoWorkspace(String),
    /// Arguments that do not fit a standard component's function (its WIT types).
    #[error("the arguments do not fit the function's types: {0}")]
    Types(String),
}

/// The resources a call's arguments name, per the tool's own description. An argument
/// that names a resource must be a string. Relative paths are not resolved here (see
/// [`resolve`]), so the broker refuses them.
pub fn resources(tool: &LoadedTool, args: &Value) -> Result<Vec<Resource>, ArgsError> {
    resolve(tool, args, None).map(|(resources, _)| resources)
}

/// The resources a call's arguments name, with every relative path argument joined to
/// the session's `workspace`, and the arguments as the tool is to get them (those paths
/// replaced by the joined ones). A relative path with no workspace is refused here, with
/// its runbook entry; `..` is left in for the broker to refuse.
pub fn resolve(
    tool: &LoadedTool,
    args: &Value,
    workspace: Option<&Path>,
) -> Result<(Vec<Resource>, Value), ArgsError> {
    resolve_noting(tool, args, workspace).map(|(resources, args, _)| (resources, args))
}

/// A write path whose directories lead somewhere else on disk: the path as the call
/// named it (joined to the workspace) and where the write will land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirected {
    /// As named.
    pub named: String,
    /// As it resolves: what the broker decides on and the tool is given.
    pub resolved: String,
    /// A read (a standard component's listed path that is a symlink), not a write.
    pub read: bool,
}

/// [`resolve`], and every write path whose existing directories resolve elsewhere (a
/// symlink among them): the broker decides on the resolved path, the tool is given it,
/// and the runtime refuses a write that passes through a symlink, so what the owner is
/// shown is where the write lands.
pub fn resolve_noting(
    tool: &LoadedTool,
    args: &Value,
    workspace: Option<&Path>,
) -> Result<(Vec<Resource>, Value, Vec<Redirected>), ArgsError> {
    // A standard component's function takes typed values: arguments that do not
    // convert are refused before the broker, by the conversion the call itself makes.
    tool.check_args(args).map_err(|e| ArgsError::Types(e.to_string()))?;
    let mut out = Vec::new();
    let mut redirected = Vec::new();
    let mut resolved = args.clone();
    // What it reaches whatever the arguments (its manifest), relative paths joined to
    // the workspace as an argument's are; decided with the rest, shown with the rest.
    for (kind, text) in tool.statics() {
        out.push(match kind {
            ResourceKind::PathRead => Resource::PathRead(resolve_path(text, workspace)?),
            ResourceKind::PathWrite => {
                let joined = resolve_path(text, workspace)?;
                Resource::PathWrite(resolve_write_path(&joined).unwrap_or(joined))
            }
            ResourceKind::UrlFetch => Resource::Url(text.clone()),
        });
    }
    for r in &tool.description().resources {
        let Some(value) = args.get(&r.arg) else { continue };
        // One string, or a list of them (each one resource); null is an absent option.
        let texts: Vec<&str> = match value {
            Value::Null => continue,
            Value::String(text) => vec![text.as_str()],
            Value::Array(items) if items.len() <= MAX_LISTED_RESOURCES => {
                let texts: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
                texts.ok_or_else(|| ArgsError::NotAString {
                    arg: r.arg.clone(),
                    shown: bounded(&value.to_string(), 200),
                })?
            }
            other => {
                let shown = bounded(&other.to_string(), 200);
                return Err(ArgsError::NotAString { arg: r.arg.clone(), shown });
            }
        };
        let write = matches!(r.kind, ResourceKind::PathWrite);
        for (i, text) in texts.into_iter().enumerate() {
            let mut joined = match r.kind {
                ResourceKind::UrlFetch => {
                    out.push(Resource::Url(text.to_owned()));
                    continue;
                }
                ResourceKind::PathRead | ResourceKind::PathWrite => resolve_path(text, workspace)?,
            };
            if write && let Some(real) = resolve_write_path(&joined) {
                redirected.push(Redirected { named: joined, resolved: real.clone(), read: false });
                joined = real;
            }
            if joined != text {
                let slot = match resolved.get_mut(&r.arg) {
                    Some(Value::Array(items)) => items.get_mut(i),
                    other => other,
                };
                if let Some(slot) = slot {
                    *slot = Value::String(joined.clone());
                }
            }
            // A standard component's grant is cut down to its listed paths, so a listed
            // read that is a symlink is decided, and shown, where it leads as well.
            if !write
                && tool.export().is_some()
                && let Ok(real) = std::fs::canonicalize(&joined)
                && let Some(real) = real.to_str().filter(|r| *r != joined)
            {
                redirected.push(Redirected {
                    named: joined.clone(),
                    resolved: real.to_owned(),
                    read: true,
                });
                out.push(Resource::PathRead(real.to_owned()));
            }
            out.push(if write { Resource::PathWrite(joined) } else { Resource::PathRead(joined) });
        }
    }
    Ok((out, resolved, redirected))
}

/// The most resources one list argument names (`py.run`'s `reads`, say): each is decided
/// and shown, and a grant holds each as a root of its own.
const MAX_LISTED_RESOURCES: usize = 64;

/// The longest write path [`resolve_write_path`] resolves: Linux's `PATH_MAX`.
const MAX_RESOLVED_PATH: usize = 4096;

/// Where a write to `path` (absolute, normalised) lands on disk, when that is not
/// `path`: its deepest existing directory as the kernel resolves it, with the rest
/// appended. The last component is kept as named (a write never follows a symlink
/// there; the runtime refuses it). `None` when nothing along the way is a symlink, or
/// for a path the broker will refuse anyway (relative, or with `..`).
pub fn resolve_write_path(path: &str) -> Option<String> {
    // Longer than the kernel resolves (PATH_MAX) is refused when opened anyway; and each
    // step up below copies the path, so a model's megabyte of `x/x/…` would cost its
    // square in time.
    if path.len() > MAX_RESOLVED_PATH {
        return None;
    }
    let path = Path::new(path);
    if !path.is_absolute()
        || path.components().any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return None;
    }
    let name = path.file_name()?;
    let mut existing = path.parent()?;
    let mut rest = Vec::new();
    let real = loop {
        match std::fs::canonicalize(existing) {
            Ok(real) => break real,
            Err(_) => {
                rest.push(existing.file_name()?);
                existing = existing.parent()?;
            }
        }
    };
    let mut landed = real;
    landed.extend(rest.iter().rev());
    landed.push(name);
    let landed = landed.to_str()?.to_owned();
    (landed != path.to_str()?).then_some(landed)
}

/// A path argument as the broker is to see it: an absolute one as written, a relative
/// one joined to `workspace`. `~` is not expanded (the owner's home is not the model's
/// to name), and a relative path in a session with no workspace is refused.
pub fn resolve_path(text: &str, workspace: Option<&Path>) -> Result<String, ArgsError> {
    let shown = || bounded(text, 200);
    if text.starts_with('/') {
        return Ok(text.to_owned());
    }
    if text.is_empty() {
        return Err(ArgsError::EmptyPath);
    }
    if text.starts_with('~') {
        return Err(ArgsError::Tilde(shown()));
    }
    match workspace {
        // Normalised (`notes/./a` is `notes/a`, `.` the workspace itself); a `..` is left
        // in for the broker to refuse by name.
        Some(ws) => {
            let joined = ws.join(text);
            Ok(bx_broker::normalize(&joined).unwrap_or(joined).display().to_string())
        }
        None => Err(ArgsError::NoWorkspace(shown())),
    }
}

/// How `policy` decides `tool` with `args` at `taint`, without recording anything: the
/// resources the arguments name and the decision, for `bx policy explain`.
pub fn explain(
    policy: &Policy,
    taint: Label,
    tool: &LoadedTool,
    args: &Value,
    workspace: Option<&Path>,
) -> Result<(Vec<Resource>, Decision), ArgsError> {
    let (resources, _) = resolve(tool, args, workspace)?;
    let request = CallRequest {
        tool: tool.description().name.clone(),
        digest: tool.digest().to_owned(),
        resources: resources.clone(),
    };
    let policy = policy.for_workspace(workspace);
    Ok((resources, bx_broker::decide(&policy, taint, &request)))
}

pub use bx_protocol::Overlay;

/// `policy` with the grants of `overlay` added (its own paths stay protected). An
/// [`Overlay`] is what the owner adds by hand on top of the policy for one call (`bx
/// tool run --allow-read …`): paths labelled `private/trusted`, hosts
/// `public/untrusted`, and tainted sessions allowed, since the owner is at the
/// keyboard. Applied to the policy in force each time the call is decided, so a refusal
/// in the policy still holds.
pub fn overlaid(policy: &Policy, overlay: &Overlay) -> Result<Policy, bx_broker::AllowError> {
    let mut allow = AllowList::on_top_of(policy.clone());
    for p in &overlay.read {
        allow = allow.read(p)?;
    }
    for p in &overlay.write {
        allow = allow.write(p)?;
    }
    for p in &overlay.deny {
        allow = allow.deny(p)?;
    }
    for h in &overlay.hosts {
        allow = allow.host(h)?;
    }
    Ok(allow.policy().clone())
}

/// Why a call has no policy to be decided by: none is in force, or the call's overlay
/// (`bx tool run --allow-*`) cannot be laid on it. Either refuses the call.
#[derive(Debug, thiserror::Error)]
pub enum PolicyUnusable {
    /// No policy is in force.
    #[error(transparent)]
    None(#[from] NoPolicy),
    /// The overlay names what no grant can hold.
    #[error(transparent)]
    Overlay(#[from] bx_broker::AllowError),
}

/// Why no policy is in force, so that every call is refused
/// (`docs/runbook.md#policy-invalid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoPolicy {
    /// The file is invalid and no earlier version of it was ever valid.
    #[error("the policy is invalid and none was ever valid: {0}")]
    Invalid(String),
    /// The file cannot be read (its status).
    #[error("no valid policy ({0}); every call is refused")]
    None(String),
}

/// What every call goes through: the audit log (this process is its one writer), the
/// session ledger and the owner's policy file.
#[derive(Debug)]
pub struct Trust {
    audit: Arc<AuditLog>,
    ledger: Ledger,
    policy: Mutex<PolicyFile>,
    secrets: Arc<crate::SecretSource>,
    /// When each session's calls counted by each `[[limit]]` were decided, in the last
    /// minute, by session and the rule's tools.
    counted: Mutex<
        std::collections::HashMap<(String, String), std::collections::VecDeque<std::time::Instant>>,
    >,
    /// The reviewer program and the notice of `[approvals]`: none unless set.
    approvers: Arc<crate::Approvers>,
}

/// The window a `[[limit]]` counts calls in.
const LIMIT_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

impl Trust {
    /// The trust path over `audit`, `ledger`, `policy` and the secret store `secrets`.
    pub fn new(
        audit: Arc<AuditLog>,
        ledger: Ledger,
        policy: PolicyFile,
        secrets: bx_state::SecretStore,
    ) -> Trust {
        let secrets = Arc::new(crate::SecretSource::new(secrets));
        // No record holds a secret's value: arguments the model wrote, resources, reasons
        // and errors all pass the leak guard on their way to the log.
        let guard = Arc::clone(&secrets);
        audit.set_redactor(Arc::new(move |line: &str| guard.redact_line(line)));
        Trust {
            audit,
            ledger,
            policy: Mutex::new(policy),
            secrets,
            counted: Mutex::new(std::collections::HashMap::new()),
            approvers: Arc::new(crate::Approvers::default()),
        }
    }

    /// The trust path with `config`'s reviewer program and notice.
    pub fn with_approvers(self, config: &bx_state::ApprovalsConfig) -> Trust {
        Trust { approvers: Arc::new(crate::Approvers::new(config)), ..self }
    }

    /// The reviewer program and the notice.
    pub fn approvers(&self) -> &Arc<crate::Approvers> {
        &self.approvers
    }

    /// Counts a call of `tool` in `session` against every `[[limit]]` of `policy` that
    /// names it, or says which one it is past (and then counts nothing). Counted by this
    /// process, the log's one writer: a daemon counts every call it decides.
    fn within_limits(
        &self,
        policy: &Policy,
        session: &str,
        tool: &str,
    ) -> Result<(), crate::RateLimited> {
        let rules: Vec<&bx_broker::LimitRule> =
            policy.limits().iter().filter(|l| l.tool.matches(tool)).collect();
        if rules.is_empty() {
            return Ok(());
        }
        let now = std::time::Instant::now();
        let mut counted = self.counted.lock();
        counted.retain(|_, times| {
            while times.front().is_some_and(|t| now.duration_since(*t) >= LIMIT_WINDOW) {
                times.pop_front();
            }
            !times.is_empty()
        });
        for rule in &rules {
            let key = (session.to_owned(), rule.tool.to_string());
            let made = counted.get(&key).map_or(0, std::collections::VecDeque::len);
            if made >= rule.per_minute as usize {
                let (tool, rule) = (tool.to_owned(), rule.to_string());
                return Err(crate::RateLimited { tool, made, rule });
            }
        }
        for rule in rules {
            counted.entry((session.to_owned(), rule.tool.to_string())).or_default().push_back(now);
        }
        Ok(())
    }

    /// The secret store, as calls read it.
    pub fn secrets(&self) -> &crate::SecretSource {
        &self.secrets
    }

    /// The audit log.
    pub fn audit(&self) -> &Arc<AuditLog> {
        &self.audit
    }

    /// The session ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Whether the log can record: `Err` when it cannot (every call is refused).
    pub fn available(&self) -> Result<(), AgentError> {
        match self.audit.failure() {
            Some(why) => Err(AgentError::Audit(bx_audit::AuditError::Unavailable(why))),
            None => Ok(()),
        }
    }

    /// The policy in force (re-read when the file's content changed; an invalid edit
    /// keeps the last valid one), or why every call is refused.
    pub fn policy(&self) -> Result<Arc<Policy>, NoPolicy> {
        let mut file = self.policy.lock();
        file.refresh();
        match (file.in_force(), file.status()) {
            (Some(p), _) => Ok(p),
            (None, PolicyStatus::Invalid(errors)) => Err(NoPolicy::Invalid(errors.to_string())),
            (None, status) => Err(NoPolicy::None(format!("{status:?}"))),
        }
    }

    /// The session's workspace: the one it was created with, else `requested` (checked
    /// by [`check_workspace`]), recorded now and fixed from here on. A session asked
    /// for with another workspace than its own is refused.
    pub fn workspace(
        &self,
        session: &str,
        requested: Option<&str>,
    ) -> Result<Option<PathBuf>, AgentError> {
        let requested = requested.map(check_workspace).transpose()?;
        let (workspace, moved) =
            self.ledger.workspace(&self.audit, session, requested.as_deref())?;
        if moved {
            return Err(AgentError::workspace_moved(
                session,
                requested.as_deref(),
                workspace.as_deref(),
            ));
        }
        Ok(workspace)
    }

    /// Where the policy file stands now (after a refresh).
    pub fn policy_status(&self) -> PolicyStatus {
        let mut file = self.policy.lock();
        file.refresh().clone()
    }

    fn policy_with(&self, overlay: &Overlay) -> Result<Arc<Policy>, PolicyUnusable> {
        let policy = self.policy()?;
        if overlay.is_empty() {
            return Ok(policy);
        }
        Ok(Arc::new(overlaid(&policy, overlay)?))
    }

    /// A proposed call: its request goes on the log before anything is decided, whatever
    /// is wrong with it. The record is written now and synced with the decision's:
    /// [`Requested::decide`] returns only once both are on disk, so the request is
    /// durable before its decision takes effect, at one fsync for the two
    /// ([`bx_audit::AuditLog::append_deferred`]). The proposal's `tool` is the installed
    /// tool of that name, if any; relative paths in its `args` resolve against its
    /// `workspace` (the session's). An upstream tool's call names `call_resource`, as
    /// [`crate::UpstreamTool::resource`] placed it. The record keeps the arguments as
    /// written and the resources as decided.
    pub fn propose<'t>(
        &'t self,
        proposal: &crate::Proposal<'t>,
        call_resource: Option<Resource>,
    ) -> Result<Requested<'t>, AgentError> {
        let crate::Proposal { session, call, name, tool, args, workspace } = *proposal;
        let args_text = args.to_string();
        let resolved = match (tool, call_resource) {
            (Some(Tool::Component(t)), _) => Some(resolve_noting(t, args, workspace)),
            // An upstream's tool names one resource, its call (placed by its guard or its
            // manifest, see `UpstreamTool::resource`); its arguments go as they are.
            (Some(Tool::Upstream(_)), Some(resource)) => Some(match args {
                Value::Object(_) => Ok((vec![resource], args.clone(), Vec::new())),
                _ => Err(ArgsError::Types("an upstream tool's arguments are an object".into())),
            }),
            (Some(Tool::Upstream(_)), None) => {
                return Err(AgentError::Internal("an upstream call with no resource".into()));
            }
            (None, _) => None,
        };
        let (resources, run_args, redirected) = match resolved {
            Some(Ok((resources, resolved, redirected))) => {
                (Ok(resources), resolved.to_string(), redirected)
            }
            Some(Err(why)) => (Err(why), args_text.clone(), Vec::new()),
            None => (Ok(Vec::new()), args_text.clone(), Vec::new()),
        };
        let listed =
            resources.as_deref().unwrap_or_default().iter().map(ToString::to_string).collect();
        let digest = tool.as_ref().map_or("", Tool::digest);
        let receipt = self.audit.append_deferred(&Entry::Request(bx_audit::Request::new(
            session, call, name, digest, &args_text, listed,
        )))?;
        Ok(Requested {
            seq: receipt.seq,
            trust: self,
            session: session.to_owned(),
            call: call.to_owned(),
            name: name.to_owned(),
            tool,
            args: run_args,
            resources,
            redirected,
            workspace: workspace.map(Path::to_path_buf),
        })
    }

    /// Puts a call's decision on the log: synced (with the request before it) unless
    /// `deferred`, when the call's result record, synced before anyone sees the result,
    /// makes both durable (docs/audit.md#durability).
    #[allow(clippy::too_many_arguments, reason = "the decision record's fields")]
    fn decision(
        &self,
        session: &str,
        call: &str,
        decision: &Decision,
        taint: Label,
        approval: Option<&str>,
        bearing: &bx_broker::Bearing<'_>,
        deferred: bool,
    ) -> Result<(), AgentError> {
        let (name, why) = match decision {
            Decision::Allow(_) => (bx_audit::Verdict::Allow, String::new()),
            Decision::Ask(ask) => (bx_audit::Verdict::Ask, ask.reasons.join("; ")),
            Decision::Deny(reason) => (bx_audit::Verdict::Deny, reason.message.clone()),
        };
        let entry = Entry::Decision(bx_audit::Decision {
            session: session.to_owned(),
            call: call.to_owned(),
            decision: name,
            taint: taint.to_string(),
            why: bounded(&why, MAX_FIELD_BYTES),
            approval: approval.map(str::to_owned),
            covered_by: match bearing {
                bx_broker::Bearing::Approved(s) | bx_broker::Bearing::Refused(s) => {
                    Some(s.id.clone())
                }
                bx_broker::Bearing::Voided(_) | bx_broker::Bearing::None => None,
            },
            voided: match bearing {
                bx_broker::Bearing::Voided(s) => Some(s.id.clone()),
                _ => None,
            },
        });
        if deferred {
            self.audit.append_deferred(&entry)?;
        } else {
            self.audit.append(&entry)?;
        }
        Ok(())
    }
}

/// A call whose request is on the log.
#[derive(Debug)]
pub struct Requested<'t> {
    /// The request record's sequence number.
    seq: u64,
    trust: &'t Trust,
    session: String,
    call: String,
    name: String,
    tool: Option<Tool<'t>>,
    /// The arguments the tool runs with (relative paths resolved), JSON text.
    args: String,
    resources: Result<Vec<Resource>, ArgsError>,
    /// Write paths named through a symlink, and where they land.
    redirected: Vec<Redirected>,
    /// The session's workspace, for the policy's `{workspace}` rules.
    workspace: Option<std::path::PathBuf>,
}

/// Where a call stands once decided.
#[must_use]
#[derive(Debug)]
pub enum Decided<'t> {
    /// It runs.
    Allowed(Allowed<'t>),
    /// It waits for the owner.
    Asking(Asking<'t>),
    /// It does not run.
    Refused(Refused),
}

/// The longest refusal reason the model and the owner are shown (the audit record keeps
/// up to [`MAX_FIELD_BYTES`]).
pub const MAX_REASON_BYTES: usize = 2 << 10;

/// A call refused, with the reason the model (and the owner) read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub reason: String,
    /// Who or what refused it.
    pub by: RefusedBy,
}

impl Refused {
    /// Whether the refusal is a fail-closed state (no valid policy), not a decision
    /// about this call: every call is refused until the owner acts.
    pub fn unavailable(&self) -> bool {
        self.by == RefusedBy::Unavailable
    }
}

/// Who or what refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// The loop, before the broker: a refused call proposed again, the turn's end, or
    /// its limit of calls.
    Loop,
    /// No tool of that name is installed.
    NoSuchTool,
    /// The arguments do not name what the tool reaches (a path, a URL) as it declares.
    Arguments,
    /// No valid policy: every call is refused until the owner acts.
    Unavailable,
    /// The policy's limits on calls (per session, per tool).
    Limit,
    /// The policy: no grant covers the call, or a rule denies it.
    Policy,
    /// The call asked, and the owner (or the owner's reviewer) answered no.
    Owner,
}

/// A call that waits for the owner's answer.
#[derive(Debug)]
pub struct Asking<'t> {
    requested: Requested<'t>,
    ask: AskRequest,
    overlay: Overlay,
    /// The approval id, on the log with the `ask` decision.
    approval: String,
}

/// A call allowed to run, with its grant.
#[derive(Debug)]
pub struct Allowed<'t> {
    requested: Requested<'t>,
    grant: Grant,
    /// The owner's scoped answer that allowed it without a prompt, if one did.
    covered_by: Option<Covered>,
}

/// The owner's scoped answer that covered a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered {
    /// The approval id it was given for.
    pub id: String,
    /// What it covers, in words.
    pub what: String,
}

impl<'t> Requested<'t> {
    /// The call's id.
    pub fn call(&self) -> &str {
        &self.call
    }

    /// The arguments the call runs with, relative paths resolved, as JSON text.
    pub fn args(&self) -> &str {
        &self.args
    }

    /// The request record's sequence number in the log.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the call can act on nothing outside bx: a component (not an upstream
    /// server, which sees the call), whose every resource, its manifest's static reach
    /// included, is a path it reads. Its network is refused at every operation unless a
    /// resource names a host, and a secret goes only to a host a resource names.
    pub fn effect_free(&self) -> bool {
        matches!(self.tool, Some(Tool::Component(_)))
            && self
                .resources
                .as_ref()
                .is_ok_and(|r| r.iter().all(|r| matches!(r, Resource::PathRead(_))))
    }

    /// Decides the call and puts the decision on the log: refused at once when
    /// `refusal` says so (a turn limit), when no such tool is installed, when the
    /// arguments do not name their resources properly, or when there is no valid
    /// policy; otherwise by the broker, under the policy in force (with `overlay` on
    /// top) and the session's taint now, which it returns beside the decision.
    pub fn decide(
        self,
        overlay: &Overlay,
        refusal: Option<String>,
    ) -> Result<(Decided<'t>, Label), AgentError> {
        let trust = self.trust;
        let (taint, note) =
            trust.ledger.taint_noting(&trust.audit, &self.session, Some(&self.call))?;
        // Bounded: a reason may echo the model's arguments, and it goes back to the model
        // and onto the owner's terminal.
        let with_note = |reason: String| {
            let reason = bounded(&reason, MAX_REASON_BYTES);
            match &note {
                Some(n) => format!("{reason} ({n})"),
                None => reason,
            }
        };
        let (reason, by) = match (self.tool, &self.resources) {
            _ if refusal.is_some() => (refusal.unwrap_or_default(), RefusedBy::Loop),
            (None, _) => (
                format!("no tool named {:?} is installed", bounded(&self.name, 200)),
                RefusedBy::NoSuchTool,
            ),
            (Some(_), Err(why)) => (why.to_string(), RefusedBy::Arguments),
            (Some(tool), Ok(resources)) => match trust.policy_with(overlay) {
                Err(why) => (why.to_string(), RefusedBy::Unavailable),
                Ok(policy)
                    if let Err(limited) =
                        trust.within_limits(&policy, &self.session, &self.name) =>
                {
                    (limited.to_string(), RefusedBy::Limit)
                }
                Ok(policy) => {
                    let request = CallRequest {
                        tool: self.name.clone(),
                        digest: tool.digest().to_owned(),
                        resources: resources.clone(),
                    };
                    let policy = policy.for_workspace(self.workspace.as_deref());
                    // The owner's scoped answers of this session: each only ever answers
                    // what the policy asks about.
                    let scopes = trust.ledger.scopes(&self.session);
                    let (mut decision, bearing) =
                        bx_broker::decide_scoped(&policy, taint, &request, &self.args, &scopes);
                    // The owner reads where each write lands and how the call named it.
                    let notes = self.redirected.iter().map(|r| {
                        format!(
                            "{} {}: named as {}, which leads there through a symlink",
                            if r.read { "read" } else { "write" },
                            r.resolved,
                            r.named
                        )
                    });
                    match &mut decision {
                        Decision::Ask(ask) => {
                            ask.reasons.extend(notes);
                            ask.taint_from = trust.ledger.taint_from(&self.session);
                        }
                        Decision::Deny(reason) => {
                            for note in notes {
                                reason.message.push_str(&format!(" ({note})"));
                            }
                        }
                        Decision::Allow(_) => {}
                    }
                    let approval =
                        matches!(decision, Decision::Ask(_)).then(bx_broker::new_approval_id);
                    // An allowed call whose only effect is what it returns (a component
                    // that reads paths and reaches nothing else) acts on nothing outside
                    // bx before its result is synced: its request and decision are made
                    // durable by that sync. Every other call's are synced before it acts.
                    let deferred = matches!(decision, Decision::Allow(_)) && self.effect_free();
                    trust.decision(
                        &self.session,
                        &self.call,
                        &decision,
                        taint,
                        approval.as_deref(),
                        &bearing,
                        deferred,
                    )?;
                    let covered_by = match &bearing {
                        bx_broker::Bearing::Approved(s) => {
                            Some(Covered { id: s.id.clone(), what: s.cover.describe(&s.tool) })
                        }
                        _ => None,
                    };
                    let decided = match decision {
                        Decision::Allow(grant) => {
                            Decided::Allowed(Allowed { requested: self, grant, covered_by })
                        }
                        Decision::Ask(ask) => Decided::Asking(Asking {
                            requested: self,
                            ask,
                            overlay: overlay.clone(),
                            approval: approval.unwrap_or_default(),
                        }),
                        Decision::Deny(reason) => Decided::Refused(Refused {
                            reason: with_note(reason.message),
                            by: RefusedBy::Policy,
                        }),
                    };
                    return Ok((decided, taint));
                }
            },
        };
        let denied = Decision::Deny(DenyReason { message: reason.clone() });
        trust.decision(
            &self.session,
            &self.call,
            &denied,
            taint,
            None,
            &bx_broker::Bearing::None,
            false,
        )?;
        Ok((Decided::Refused(Refused { reason: with_note(reason), by }), taint))
    }
}

impl<'t> Asking<'t> {
    /// The id the owner answers by, as the `ask` decision's record names it.
    pub fn approval(&self) -> &str {
        &self.approval
    }

    /// What the broker asks the owner.
    pub fn request(&self) -> &AskRequest {
        &self.ask
    }

    /// The call's arguments, JSON text, as the owner is shown them.
    pub fn args(&self) -> &str {
        &self.requested.args
    }

    /// The call's id.
    pub fn call(&self) -> &str {
        &self.requested.call
    }

    /// The call's session.
    pub fn session(&self) -> &str {
        &self.requested.session
    }

    /// The owner's answer: decided again against the policy and the taint of this
    /// moment (the taint may have risen while the owner read), and recorded with the
    /// decision it led to. The call runs only when that decision allows it.
    /// `by` is who gave it: the owner, or the reviewer program.
    pub fn answer(
        self,
        answer: &Answer,
        by: bx_audit::AnsweredBy,
    ) -> Result<Result<Allowed<'t>, Refused>, AgentError> {
        let r = &self.requested;
        let trust = r.trust;
        let taint =
            trust.ledger.taint(&trust.audit, &r.session, Some(&r.call))?.join(self.ask.taint);
        let decision = match trust.policy_with(&self.overlay) {
            Ok(policy) => {
                let policy = policy.for_workspace(r.workspace.as_deref());
                bx_broker::redecide(&policy, taint, &self.ask, answer)
            }
            Err(why) => Decision::Deny(DenyReason { message: why.to_string() }),
        };
        let (name, reason) = match answer {
            Answer::Approve | Answer::Scoped(bx_broker::ScopedAnswer { approve: true, .. }) => {
                (bx_audit::OwnerAnswer::Approve, String::new())
            }
            Answer::Refuse(r)
            | Answer::Scoped(bx_broker::ScopedAnswer { approve: false, reason: r, .. }) => {
                (bx_audit::OwnerAnswer::Refuse, r.clone())
            }
            Answer::Expired => (bx_audit::OwnerAnswer::Expired, String::new()),
        };
        // A scoped answer holds for the session's later calls of the same tool, at no
        // higher taint than this call was decided at (what the owner was shown).
        let scope = match answer {
            Answer::Scoped(a) => Some(bx_broker::Scope {
                id: self.approval.clone(),
                tool: self.ask.call.tool.clone(),
                digest: self.ask.call.digest.clone(),
                taint: accepted(&self.ask),
                cover: a.cover.clone(),
                approve: a.approve,
                reason: bounded(&reason, MAX_FIELD_BYTES),
                reviewer: !by.is_owner(),
            }),
            Answer::Approve | Answer::Refuse(_) | Answer::Expired => None,
        };
        let outcome = match decision {
            Decision::Allow(_) => bx_audit::Settled::Allow,
            Decision::Ask(_) | Decision::Deny(_) => bx_audit::Settled::Deny,
        };
        trust.audit.append(&Entry::Approval(bx_audit::Approval {
            session: r.session.clone(),
            call: r.call.clone(),
            id: self.approval.clone(),
            answer: name,
            by: by.clone(),
            reason: bounded(&reason, MAX_FIELD_BYTES),
            decision: outcome,
            scope: scope.as_ref().map(|s| bx_audit::ScopeRecord {
                tool: s.tool.clone(),
                digest: s.digest.clone(),
                taint: s.taint.to_string(),
                kind: s.cover.kind().to_owned(),
                what: s.cover.what(),
            }),
        }))?;
        if let Some(scope) = scope {
            trust.ledger.add_scope(&r.session, scope);
        }
        Ok(match decision {
            Decision::Allow(grant) => {
                Ok(Allowed { requested: self.requested, grant, covered_by: None })
            }
            Decision::Deny(why) => {
                // The broker words a refusal as the owner's; the reviewer's is its own.
                let message = match (&by, name) {
                    (bx_audit::AnsweredBy::Reviewer(r), bx_audit::OwnerAnswer::Refuse) => {
                        format!("refused by the owner's reviewer {}: {reason}", r.command)
                    }
                    _ => why.message,
                };
                Err(Refused { reason: bounded(&message, MAX_REASON_BYTES), by: RefusedBy::Owner })
            }
            // The broker's redecide never asks twice; were it to, nothing runs.
            Decision::Ask(_) => Err(Refused {
                reason: "the call still asks after the owner's answer".into(),
                by: RefusedBy::Owner,
            }),
        })
    }
}

/// The taint an owner's answer to `ask` accepts: the one the call was decided at,
/// joined with the labels of everything it reaches (what the session's taint becomes when
/// it runs). A scoped answer covers later calls decided at no higher taint: the call the
/// owner approved does not void its own scope, and anything read since that the owner
/// did not see (an untrusted page after a scope for writes, a private file after one for
/// fetches) does.
fn accepted(ask: &AskRequest) -> Label {
    ask.matched.iter().map(|m| m.label).fold(ask.flow, Label::join)
}

/// How a call that ran ended, as recorded and reported.
#[derive(Debug)]
pub struct Finished {
    /// `ok`, `error` (the tool returned an error) or `stopped` (a limit or a host fault).
    pub status: bx_audit::CallStatus,
    /// The result's label.
    pub label: Label,
    /// The session's taint after it.
    pub taint: Label,
    /// What went wrong, when the call has no output (see [`Finished::for_model`]).
    failure: String,
    /// Bytes of output.
    pub bytes: u64,
    /// The runtime's report, or why the call stopped.
    pub outcome: Result<CallReport, RunError>,
    /// The secrets put into its requests, and what the leak guard found.
    pub secrets: SecretActivity,
}

impl Finished {
    /// What the model is told: the output, or what went wrong.
    pub fn for_model(&self) -> &str {
        match &self.outcome {
            Ok(CallReport { result: Ok(Output::Json(t) | Output::Text(t)), .. }) => t,
            _ => &self.failure,
        }
    }

    /// [`Finished::for_model`], taken.
    pub fn into_for_model(self) -> String {
        match self.outcome {
            Ok(CallReport { result: Ok(Output::Json(t) | Output::Text(t)), .. }) => t,
            _ => self.failure,
        }
    }
}

impl Allowed<'_> {
    /// The grant the call runs under.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The call's id.
    pub fn call(&self) -> &str {
        &self.requested.call
    }

    /// The owner's scoped answer that allowed it without a prompt, if one did.
    pub fn covered_by(&self) -> Option<&Covered> {
        self.covered_by.as_ref()
    }

    /// Runs the call under its grant, puts the `result` record on the log before
    /// returning (nobody sees a result that is not on the log), and raises the
    /// session's taint by the result's label. The record holds the output's hash and
    /// size, not the output (the log must not become a copy of everything tools read).
    pub async fn run(self, runtime: &Runtime) -> Result<Finished, AgentError> {
        let r = self.requested;
        let trust = r.trust;
        let tool = match r.tool {
            Some(Tool::Component(tool)) => tool,
            Some(Tool::Upstream(tool)) => {
                let outcome = call_upstream(trust, runtime, tool, &r.args).await;
                return finish(&r, outcome, tool.result, SecretActivity::default());
            }
            None => return Err(AgentError::Internal("an allowed call has no tool".into())),
        };
        // A standard component's code is not the owner's to read: it reaches exactly what
        // its call declared (the grant's roots cut down to those paths and hosts).
        let grant = match (tool.export(), &r.resources) {
            (Some(_), Ok(declared)) => self.grant.narrowed(declared),
            _ => self.grant,
        };
        let reach = grant.reach_label();
        let (outcome, activity) = match trust.secrets.for_call(&grant) {
            Ok(secrets) => runtime.call_with(tool, grant, &r.args, &secrets).await,
            Err(refused) => (Err(refused), SecretActivity::default()),
        };
        finish(&r, outcome, reach, activity)
    }
}

/// Calls an upstream's tool through the gateway: its result is labelled by the tool's
/// manifest entry, whatever came back (an error's text is the upstream's too). A call
/// whose arguments carry a secret's value is not sent: a secret reaches an upstream only
/// the way the owner bound it, never through what the model wrote.
async fn call_upstream(
    trust: &Trust,
    runtime: &Runtime,
    tool: &crate::UpstreamTool,
    args: &str,
) -> Result<CallReport, RunError> {
    let report = |result, label| CallReport {
        result,
        stdout: Vec::new(),
        stderr: Vec::new(),
        host_calls: 1,
        label,
        touched: Vec::new(),
        touched_more: 0,
        refused: Vec::new(),
    };
    if trust.secrets.redact_text(args) != args {
        let why = "its arguments carry a secret's value; it was not sent (see docs/runbook.md#secret-leak)";
        return Ok(report(Err(CallError::Denied(why.into())), Label::CLEAN));
    }
    let text = args;
    let args = match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(map)) => map,
        _ => {
            let why = "an upstream tool's arguments are an object".to_owned();
            return Ok(report(Err(CallError::InvalidArgs(why)), Label::CLEAN));
        }
    };
    // What comes back carries no secret's value (one bound to the upstream, echoed), as
    // a component's output carries none.
    // A client span of its own, whose context the upstream continues.
    let span = crate::traced::UpstreamSpan::start(&tool.server, &tool.tool);
    let (result, output) = match tool
        .gateway
        .call(&tool.server, &tool.upstream, &tool.tool, args, span.carried())
        .await
    {
        Ok(out) => {
            let text = trust.secrets.redact_text(&out.text);
            match out.is_error {
                true => (Err(CallError::Failed(text.clone())), text),
                false => (Ok(Output::Text(text.clone())), text),
            }
        }
        Err(e) => {
            let text = trust.secrets.redact_text(&e.to_string());
            (Err(CallError::Failed(text.clone())), text)
        }
    };
    span.end(result.is_err());
    let label = tool.result_label(runtime, text, &output).await;
    Ok(report(result, label))
}

/// Records how a call that ran ended and raises the session's taint (see
/// [`Allowed::run`]): `label` is its result's, `reach` what a call stopped part-way may
/// have read.
fn finish(
    r: &Requested<'_>,
    outcome: Result<CallReport, RunError>,
    reach: Label,
    activity: SecretActivity,
) -> Result<Finished, AgentError> {
    let trust = r.trust;
    // `failure` is empty when there is an output: the output itself is what the model
    // is told, not a copy of it (a result can be megabytes).
    let (status, label, failure, output) = match &outcome {
        Ok(report) => {
            let (status, text, output) = match &report.result {
                Ok(Output::Json(t) | Output::Text(t)) => {
                    (bx_audit::CallStatus::Ok, String::new(), Some(t.as_str()))
                }
                Err(e) => (bx_audit::CallStatus::Error, call_error_text(e), None),
            };
            (status, report.label, text, output)
        }
        // Not started: it read nothing.
        Err(e @ RunError::Secrets { .. }) => {
            (bx_audit::CallStatus::Stopped, Label::CLEAN, format!("error: {e}"), None)
        }
        // A call stopped part-way may have read anything its grant reaches.
        Err(e) => (
            bx_audit::CallStatus::Stopped,
            reach,
            format!("error: the call was stopped: {e}"),
            None,
        ),
    };
    let refused = match &outcome {
        Ok(report) => report.refused.iter().map(|r| bounded(r, bx_audit::MAX_ITEM_BYTES)).collect(),
        Err(_) => Vec::new(),
    };
    let (touched, touched_more): (Vec<String>, u64) = match &outcome {
        Ok(report) => (
            report
                .touched
                .iter()
                .map(|t| bounded(&t.to_string(), bx_audit::MAX_ITEM_BYTES))
                .collect(),
            report.touched_more,
        ),
        Err(_) => (Vec::new(), 0),
    };
    let (output_sha256, output_bytes, error) = match output {
        Some(t) => (Some(sha256_hex(t.as_bytes())), Some(t.len() as u64), None),
        None => (None, None, Some(bounded(&failure, MAX_FIELD_BYTES))),
    };
    // Off the async threads, in one hand-off: the taint, then the result's record.
    let taint = in_place(|| -> Result<Label, AgentError> {
        // The taint rises first (a call that ran has been seen, even if its record then
        // cannot be written, and then nobody sees its output), noting what it reached with
        // each item's label, as its record shows it, and the URLs it named: what raised it.
        let reached: Vec<(Label, &str)> = match &outcome {
            Ok(report) => {
                { report.touched.iter().map(|t| t.label()).zip(touched.iter().map(String::as_str)) }
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        let urls: Vec<&str> = r
            .resources
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter_map(|r| match r {
                Resource::Url(u) => Some(u.as_str()),
                Resource::PathRead(_) | Resource::PathWrite(_) | Resource::Call { .. } => None,
            })
            .collect();
        let taint = trust.ledger.observe(&r.session, &r.call, label, &reached, &urls)?;
        let record = Entry::Result(bx_audit::Outcome {
            session: r.session.clone(),
            call: r.call.clone(),
            status,
            label: label.to_string(),
            touched,
            touched_more,
            output_sha256,
            output_bytes,
            error,
            refused,
            secrets: activity
                .used
                .iter()
                .map(|(name, host)| bx_audit::SecretUse {
                    name: name.clone(),
                    host: bounded(host, bx_audit::MAX_ITEM_BYTES),
                })
                .collect(),
            leaks: activity
                .leaks
                .iter()
                .map(|l| bx_audit::LeakFound {
                    name: l.name.clone(),
                    direction: l.direction.to_string(),
                    host: bounded(&l.host, bx_audit::MAX_ITEM_BYTES),
                    encoding: l.encoding.to_string(),
                })
                .collect(),
        });
        trust.audit.append(&record)?;
        Ok(taint)
    })?;
    let now = bx_audit::format_rfc3339(std::time::SystemTime::now());
    trust.secrets.note_uses(&activity.used, &now);
    trust.secrets.quarantine(&activity.leaks, &now);
    let bytes = output.map_or(0, |t| t.len() as u64);
    Ok(Finished { status, label, taint, failure, bytes, outcome, secrets: activity })
}

/// The arguments of a call made by hand, as JSON: `(value, refusal)`, where text that
/// is not a JSON object is kept as a JSON string (so its request records it as given)
/// with the reason it is refused.
pub fn parse_args(text: &str) -> (Value, Option<String>) {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => (v, None),
        Ok(other) => {
            let kind = match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                Value::Null | Value::Object(_) => "null",
            };
            (other, Some(format!("the arguments must be a JSON object, not {kind}")))
        }
        Err(e) => {
            (Value::String(text.to_owned()), Some(format!("the arguments are not JSON: {e}")))
        }
    }
}

/// How a settled call ended, as the end of a one-shot run reports it. It takes the call
/// whole, so that its output moves into the message rather than being copied.
pub fn output_of(call: &str, settled: Result<Finished, Refused>) -> bx_protocol::Body {
    use bx_protocol::RunOutcome as O;
    let finished = match settled {
        Ok(finished) => finished,
        Err(refused) => {
            return bx_protocol::Body::ToolOutput {
                call: call.to_owned(),
                outcome: if refused.unavailable() { O::Unavailable } else { O::Refused },
                label: String::new(),
                text: refused.reason,
                stderr: String::new(),
            };
        }
    };
    let label = finished.label.to_string();
    let (outcome, text, stderr) = match finished.outcome {
        Ok(report) => {
            let stderr = String::from_utf8_lossy(&report.stderr).into_owned();
            let (outcome, text) = match report.result {
                Ok(Output::Json(t)) => (O::Json, t),
                Ok(Output::Text(t)) => (O::Text, t),
                Err(CallError::Denied(m)) => (O::HostDenied, m),
                Err(CallError::InvalidArgs(m)) => (O::InvalidArgs, m),
                Err(CallError::Failed(m)) => (O::Failed, m),
                Err(CallError::OutputTooLarge(m)) => (O::OutputTooLarge, m),
            };
            (outcome, text, stderr)
        }
        Err(e @ RunError::Limit { .. }) => (O::Limit, e.to_string(), String::new()),
        Err(e) => (O::Stopped, e.to_string(), String::new()),
    };
    // What the host did with secrets, for the owner (names and hosts, never a value).
    let mut stderr = stderr;
    for (name, host) in &finished.secrets.used {
        stderr.push_str(&format!("bx: secret {name} was put into a request to {host}\n"));
    }
    for leak in &finished.secrets.leaks {
        stderr.push_str(&format!("bx: {leak}\n"));
    }
    bx_protocol::Body::ToolOutput { call: call.to_owned(), outcome, label, text, stderr }
}

/// Runs `f`, which blocks (an fsync of the audit log or a state file, or a wait for
/// another's), so that it does not stall the async worker it is called on: on a
/// multi-threaded runtime the worker hands its other tasks off while `f` runs; elsewhere
/// (a one-shot command's own runtime, or no runtime) it simply runs. Each hand-off wakes
/// another thread, so adjacent steps share one, and a step that blocks only sometimes
/// (the ledger's writes) calls this where it does. Nested, the inner call just runs.
pub fn in_place<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// A tool's error, as the model (and the owner) read it.
pub fn call_error_text(e: &CallError) -> String {
    match e {
        CallError::Denied(r) => format!("error: the host refused an operation: {r}"),
        CallError::InvalidArgs(m) => format!("error: invalid arguments: {m}"),
        CallError::Failed(m) => format!("error: {m}"),
        CallError::OutputTooLarge(m) => format!("error: output too large: {m}"),
    }
}

/// The longest workspace path accepted (Linux's `PATH_MAX`).
const MAX_WORKSPACE_BYTES: usize = 4096;

/// Checks a workspace a client names: an absolute path, as it resolves on disk (no
/// symlink in it, no `.` or `..`), to a directory other than `/`, of at most 4 KiB.
/// The client resolves its directory before it sends it; the daemon checks that it
/// did, so the policy's `{workspace}` rules match the paths the runtime opens.
pub fn check_workspace(text: &str) -> Result<PathBuf, AgentError> {
    let bad = |why: &str| AgentError::BadWorkspace {
        path: bx_audit::bounded(text, 200),
        why: why.to_owned(),
    };
    if text.len() > MAX_WORKSPACE_BYTES {
        return Err(bad("longer than 4096 bytes"));
    }
    let path = Path::new(text);
    if !path.is_absolute() {
        return Err(bad("not an absolute path"));
    }
    if path == Path::new("/") {
        return Err(bad("the root directory cannot be a workspace; name a project directory"));
    }
    match std::fs::canonicalize(path) {
        Ok(real) if real != path => Err(bad(&format!(
            "not as it resolves on disk ({}); name the resolved path",
            bx_audit::bounded(&real.display().to_string(), 200)
        ))),
        Ok(real) if !real.is_dir() => Err(bad("not a directory")),
        Ok(real) => Ok(real),
        Err(e) => Err(bad(&format!("cannot be resolved: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::resolve_write_path;

    #[test]
    fn a_write_path_resolves_through_its_existing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink(".git/hooks", ws.join("docs")).unwrap();
        let named = format!("{}/docs/new/post-commit", ws.display());
        let landed = format!("{}/.git/hooks/new/post-commit", ws.display());
        assert_eq!(resolve_write_path(&named), Some(landed));
        assert_eq!(resolve_write_path(&format!("{}/notes.md", ws.display())), None);
        assert_eq!(resolve_write_path("relative/x"), None);
        assert_eq!(resolve_write_path(&format!("{}/docs/../x", ws.display())), None);
    }

    /// Regression: each step up copied the path, so a megabyte of `x/x/…` cost its
    /// square; a path longer than the kernel resolves is left for the open to refuse.
    #[test]
    fn a_path_longer_than_path_max_is_not_walked() {
        let long = format!("/tmp/{}f", "x/".repeat(500_000));
        assert_eq!(resolve_write_path(&long), None);
    }
}
