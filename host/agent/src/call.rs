//! One tool call's trust path, shared by the agent loop and `bx tool run`: the resources
//! a call names, its records on the audit log, the run under its grant, and the label
//! of what it returned.

use bx_audit::{AuditError, AuditLog, Kind};
use bx_broker::{Answer, Decision, Grant, Label, Resource};
use bx_runtime::{
    CallError, CallReport, LoadedTool, Output, ResourceKind, RunError, Runtime, Touched,
};
use bx_store::Sessions;
use serde_json::Value;
use sha2::Digest as _;

use crate::error::AgentError;

/// Fields of an audit record.
type Fields = serde_json::Map<String, Value>;

/// The resources a call's arguments name, per the tool's own description. An argument
/// that names a resource must be a string.
pub fn resources(tool: &LoadedTool, args: &Value) -> Result<Vec<Resource>, String> {
    let mut out = Vec::new();
    for r in &tool.description().resources {
        let Some(value) = args.get(&r.arg) else { continue };
        let Some(text) = value.as_str() else {
            return Err(format!(
                "argument {:?} names a resource and must be a string, not {value}",
                r.arg
            ));
        };
        out.push(match r.kind {
            ResourceKind::PathRead => Resource::PathRead(text.to_owned()),
            ResourceKind::PathWrite => Resource::PathWrite(text.to_owned()),
            ResourceKind::UrlFetch => Resource::Url(text.to_owned()),
        });
    }
    Ok(out)
}

/// The label of a result: the join over every grant the call actually touched. Anything
/// touched that the grant cannot label counts as the top label (fail closed).
pub fn result_label(grant: &Grant, touched: &[Touched]) -> Label {
    touched.iter().fold(Label::CLEAN, |acc, t| {
        let l = match t {
            Touched::Path { root, .. } => grant.root_label(root),
            Touched::Host(host) => grant.host_label(host),
        };
        acc.join(l.unwrap_or(Label::TOP))
    })
}

/// The join over every root and host of a grant: what a call stopped part-way might
/// have read.
pub fn whole_grant_label(grant: &Grant) -> Label {
    let roots: Vec<Touched> = grant
        .roots()
        .map(|(root, _)| Touched::Path {
            root: root.to_path_buf(),
            access: bx_broker::FsAccess::Read,
        })
        .collect();
    let mut label = result_label(grant, &roots);
    for host in grant.hosts() {
        label = label.join(grant.host_label(&host.to_string()).unwrap_or(Label::TOP));
    }
    label
}

/// Appends one record about call `call` of `session`, with `more` fields.
fn record(
    log: &AuditLog,
    kind: Kind,
    session: &str,
    call: &str,
    more: Vec<(&str, Value)>,
) -> Result<(), AuditError> {
    let mut fields = Fields::new();
    fields.insert("session".into(), session.into());
    fields.insert("call".into(), call.into());
    for (k, v) in more {
        fields.insert(k.to_owned(), v);
    }
    log.append(kind, fields).map(drop)
}

/// Puts the `request` record of call `call` on the log: on disk before anything is
/// decided.
pub fn record_request(
    log: &AuditLog,
    session: &str,
    call: &str,
    tool: &str,
    digest: &str,
    args: &str,
    resources: &[Resource],
) -> Result<(), AuditError> {
    let list: Vec<String> = resources.iter().map(ToString::to_string).collect();
    let fields = vec![
        ("tool", tool.into()),
        ("digest", digest.into()),
        ("args", args.into()),
        ("resources", list.into()),
    ];
    record(log, Kind::Request, session, call, fields)
}

/// The session's taint as a call sees it. State that cannot be read counts as the top
/// label, and that is recorded (the second value says why, for the caller to show).
pub fn session_taint(
    log: &AuditLog,
    sessions: &Sessions,
    session: &str,
    call: &str,
) -> Result<(Label, Option<String>), AgentError> {
    let (taint, damage) = sessions.taint(session)?;
    if let Some(why) = &damage {
        let fields = vec![("event", "state-damaged".into()), ("detail", why.as_str().into())];
        record(log, Kind::Session, session, call, fields)?;
    }
    Ok((taint, damage))
}

/// Puts the broker's `decision` on the log.
pub fn record_decision(
    log: &AuditLog,
    session: &str,
    call: &str,
    decision: &Decision,
    taint: Label,
) -> Result<(), AuditError> {
    let (name, why) = match decision {
        Decision::Allow(_) => ("allow", String::new()),
        Decision::Ask(ask) => ("ask", ask.reasons.join("; ")),
        Decision::Deny(reason) => ("deny", reason.message.clone()),
    };
    let fields =
        vec![("decision", name.into()), ("taint", taint.to_string().into()), ("why", why.into())];
    record(log, Kind::Decision, session, call, fields)
}

/// Puts a refusal made before the broker was asked (unknown tool, bad arguments, no
/// policy, a turn limit) on the log, as a `deny` decision.
pub fn record_refusal(
    log: &AuditLog,
    session: &str,
    call: &str,
    taint: Label,
    reason: &str,
) -> Result<(), AuditError> {
    let denied = Decision::Deny(bx_broker::DenyReason { message: reason.to_owned() });
    record_decision(log, session, call, &denied, taint)
}

/// Puts the owner's `answer` to approval `approval`, and the decision it led to, on the
/// log.
pub fn record_answer(
    log: &AuditLog,
    session: &str,
    call: &str,
    approval: &str,
    answer: &Answer,
    decision: &Decision,
) -> Result<(), AuditError> {
    let (name, reason) = match answer {
        Answer::Approve => ("approve", String::new()),
        Answer::Refuse(r) => ("refuse", r.clone()),
        Answer::Expired => ("expired", String::new()),
    };
    let outcome = match decision {
        Decision::Allow(_) => "allow",
        Decision::Ask(_) | Decision::Deny(_) => "deny",
    };
    let fields = vec![
        ("id", approval.into()),
        ("answer", name.into()),
        ("reason", reason.into()),
        ("decision", outcome.into()),
    ];
    record(log, Kind::Approval, session, call, fields)
}

/// How a call that ran ended, as recorded and reported.
#[derive(Debug)]
pub struct Finished {
    /// `ok`, `error` (the tool returned an error) or `stopped` (a limit or a host fault).
    pub status: &'static str,
    /// The result's label.
    pub label: Label,
    /// What the model is told: the output, or what went wrong.
    pub for_model: String,
    /// Bytes of output.
    pub bytes: u64,
    /// The runtime's report, or why the call stopped.
    pub outcome: Result<CallReport, RunError>,
}

/// Runs `tool` under `grant` and puts the `result` record on the log before returning:
/// nobody sees a result that is not on the log. The record holds the output's hash and
/// size, not the output (the log must not become a copy of everything tools read).
pub fn run_and_record(
    log: &AuditLog,
    runtime: &Runtime,
    tool: &LoadedTool,
    grant: Grant,
    args: &str,
    session: &str,
    call: &str,
) -> Result<Finished, AuditError> {
    let labels = grant.clone();
    let outcome = runtime.call(tool, grant, args);
    let (status, label, for_model, touched, output) = match &outcome {
        Ok(report) => {
            let label = result_label(&labels, &report.touched);
            let (status, text, output) = match &report.result {
                Ok(Output::Json(t) | Output::Text(t)) => ("ok", t.clone(), Some(t.as_str())),
                Err(e) => ("error", call_error_text(e), None),
            };
            (status, label, text, report.touched.clone(), output)
        }
        // A call stopped part-way may have read anything its grant reaches.
        Err(e) => (
            "stopped",
            whole_grant_label(&labels),
            format!("error: the call was stopped: {e}"),
            vec![],
            None,
        ),
    };
    let touched_list: Vec<String> = touched
        .iter()
        .map(|t| match t {
            Touched::Path { root, access } => format!("{access} {}", root.display()),
            Touched::Host(h) => format!("fetch {h}"),
        })
        .collect();
    let mut more = vec![
        ("status", status.into()),
        ("label", label.to_string().into()),
        ("touched", touched_list.into()),
    ];
    match output {
        Some(t) => {
            more.push(("output_sha256", hex::encode(sha2::Sha256::digest(t.as_bytes())).into()));
            more.push(("output_bytes", t.len().into()));
        }
        None => more.push(("error", for_model.as_str().into())),
    }
    record(log, Kind::Result, session, call, more)?;
    let bytes = output.map_or(0, |t| t.len() as u64);
    Ok(Finished { status, label, for_model, bytes, outcome })
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
