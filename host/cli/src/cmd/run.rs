//! `bx tool run`: one call by hand, through the whole trust path: the request on the
//! audit log, the broker's decision against the policy and the session's taint, the
//! owner's approval at the prompt when the policy asks, the call under its grant, the
//! result on the log before anyone sees it, and the session's taint raised.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bx_agent::{call, now_ms};
use bx_audit::AuditLog;
use bx_broker::{AllowList, Answer, Answered, ApprovalTable, CallRequest, Decision};
use bx_runtime::{CallError, Limits, Output, RunError, Runtime};
use bx_store::{PolicyFile, PolicyStatus, Sessions, Store};
use clap::Args;

use super::{EXIT_DENIED, EXIT_ERROR, EXIT_LIMIT, EXIT_OK, EXIT_UNAVAILABLE};

/// How long an approval waits at the prompt before it counts as a refusal.
const DEFAULT_APPROVAL_SECS: u64 = 120;

/// `bx tool run`
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The tool's name.
    name: String,
    /// The arguments, a JSON object.
    #[arg(long, value_name = "JSON")]
    args: String,
    /// The session whose taint the call sees and raises.
    #[arg(long, default_value = "cli", value_name = "ID")]
    session: String,
    /// Also allow reading under PATH, on top of the policy (repeatable).
    #[arg(long, value_name = "PATH")]
    allow_read: Vec<PathBuf>,
    /// Also allow reading and writing under PATH, on top of the policy (repeatable).
    #[arg(long, value_name = "PATH")]
    allow_write: Vec<PathBuf>,
    /// Also allow requests to HOST, HOST:PORT or an address, on top of the policy.
    #[arg(long, value_name = "HOST")]
    allow_host: Vec<String>,
    /// Never reach PATH or below, whatever else is allowed (repeatable).
    #[arg(long, value_name = "PATH")]
    deny: Vec<PathBuf>,
    /// Seconds an approval waits for an answer before it is refused.
    #[arg(long, default_value_t = DEFAULT_APPROVAL_SECS, value_name = "SECS")]
    approval_timeout: u64,
}

fn absolute(path: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(path).with_context(|| format!("path {}", path.display()))?;
    abs.to_str().map(str::to_owned).with_context(|| format!("path {} is not UTF-8", abs.display()))
}

/// Loads the policy in force for a one-shot command: an invalid file refuses (a one-shot
/// command has no earlier valid policy to fall back on).
pub(crate) fn policy_in_force(state_dir: &Path) -> anyhow::Result<Arc<bx_broker::Policy>> {
    let file = PolicyFile::open(&state_dir.join("policy.toml"));
    match (file.status(), file.in_force()) {
        (PolicyStatus::Valid | PolicyStatus::Missing, Some(p)) => Ok(p),
        (PolicyStatus::Invalid(errors), _) => {
            bail!("{errors}\nthe policy is invalid; every call is refused")
        }
        (PolicyStatus::Unreadable(why), _) => {
            bail!(
                "policy unreadable: {why}; every call is refused (see docs/runbook.md#policy-invalid)"
            )
        }
        (_, None) => {
            bail!("no valid policy; every call is refused (see docs/runbook.md#policy-invalid)")
        }
    }
}

/// Asks the owner at the terminal: the whole block, then the id to approve.
fn ask_owner(block: &str, id: &str, timeout: Duration) -> Answer {
    eprint!("{block}");
    eprint!("type {id} to approve, or a reason to refuse: ");
    let _ = std::io::stderr().flush();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::stdin().lock().read_line(&mut line);
        let _ = tx.send(read.map(|n| (n, line)));
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok((0, _))) => Answer::Expired, // end of input: nobody is there to answer
        Ok(Ok((_, line))) => bx_broker::typed_answer(id, &line),
        Ok(Err(_)) | Err(_) => Answer::Expired,
    }
}

pub(crate) fn run(state_dir: &Path, store: &Store, args: &RunArgs) -> anyhow::Result<u8> {
    let call_args: serde_json::Value =
        serde_json::from_str(&args.args).context("--args is not valid JSON")?;
    if !call_args.is_object() {
        bail!("--args must be a JSON object");
    }
    // The log first: if it cannot record, nothing runs.
    let log = match AuditLog::open(&crate::state_dir::audit_dir(state_dir)?) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("bx: {e}");
            return Ok(EXIT_UNAVAILABLE);
        }
    };
    let policy = match policy_in_force(state_dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bx: {e:#}");
            return Ok(EXIT_UNAVAILABLE);
        }
    };
    let mut allow = AllowList::on_top_of((*policy).clone());
    for p in &args.allow_read {
        allow = allow.read(&absolute(p)?).map_err(anyhow::Error::msg)?;
    }
    for p in &args.allow_write {
        allow = allow.write(&absolute(p)?).map_err(anyhow::Error::msg)?;
    }
    for p in &args.deny {
        allow = allow.deny(&absolute(p)?).map_err(anyhow::Error::msg)?;
    }
    for h in &args.allow_host {
        allow = allow.host(h).map_err(anyhow::Error::msg)?;
    }
    let sessions = Sessions::open(state_dir)?;
    let session = args.session.as_str();
    let runtime = Runtime::new(Limits::default())?;
    let tool = store.open_tool(&runtime, &args.name)?;
    let call = CallRequest {
        tool: args.name.clone(),
        digest: tool.digest().to_owned(),
        resources: call::resources(&tool, &call_args).map_err(anyhow::Error::msg)?,
    };
    let call_id = format!("c{:x}{:x}", now_ms(), std::process::id());
    let recorded = call::record_request(
        &log,
        session,
        &call_id,
        &call.tool,
        &call.digest,
        &args.args,
        &call.resources,
    );
    if let Err(e) = recorded {
        eprintln!("bx: {e}");
        return Ok(EXIT_UNAVAILABLE);
    }
    let (taint, damage) = call::session_taint(&log, &sessions, session, &call_id)?;
    if let Some(why) = &damage {
        eprintln!("bx: session state damaged: {why} (see docs/runbook.md#session-state-damaged)");
    }

    let decision = bx_broker::decide(allow.policy(), taint, &call);
    call::record_decision(&log, session, &call_id, &decision, taint)?;
    let decision = match decision {
        Decision::Ask(ask) => {
            let table = ApprovalTable::new();
            let timeout = Duration::from_secs(args.approval_timeout);
            let pending =
                table.insert(ask.clone(), args.args.clone(), now_ms(), timeout.as_millis() as u64);
            let block = bx_broker::render_block(&pending, tool.digest(), now_ms());
            // The answer comes from standard input: a terminal, or a pipe the owner set
            // up; end of input is no answer.
            let answer = ask_owner(&block, &pending.id, timeout);
            // Answering takes the entry out of the table, as the daemon does.
            let answer = match table.take(&pending.id, now_ms()) {
                Answered::Taken(_) => answer,
                Answered::Expired(_) | Answered::AlreadyAnswered | Answered::Unknown => {
                    Answer::Expired
                }
            };
            let decided = bx_broker::redecide(allow.policy(), taint, &ask, &answer);
            call::record_answer(&log, session, &call_id, &pending.id, &answer, &decided)?;
            decided
        }
        other => other,
    };
    let grant = match decision {
        Decision::Allow(grant) => grant,
        Decision::Deny(reason) => {
            eprintln!("bx: denied: {reason} (see docs/runbook.md#tool-denied)");
            return Ok(EXIT_DENIED);
        }
        Decision::Ask(_) => {
            eprintln!("bx: the call still asks after the owner's answer; refused");
            return Ok(EXIT_DENIED);
        }
    };

    let finished =
        match call::run_and_record(&log, &runtime, &tool, grant, &args.args, session, &call_id) {
            Ok(finished) => finished,
            Err(e) => {
                // Nobody sees a result that is not on the log.
                eprintln!("bx: {e}");
                return Ok(EXIT_UNAVAILABLE);
            }
        };
    sessions.observe(session, finished.label)?;
    log.close()?;
    let outcome = finished.outcome;

    let report = match outcome {
        Ok(report) => report,
        Err(e @ RunError::Limit { .. }) => {
            eprintln!("bx: {e}");
            return Ok(EXIT_LIMIT);
        }
        Err(e) => return Err(e.into()),
    };
    if !report.stderr.is_empty() {
        eprintln!("{}", String::from_utf8_lossy(&report.stderr));
    }
    match report.result {
        Ok(Output::Json(text)) => {
            let pretty = serde_json::from_str::<serde_json::Value>(&text)
                .and_then(|v| serde_json::to_string_pretty(&v))
                .unwrap_or(text);
            println!("{pretty}");
            Ok(EXIT_OK)
        }
        Ok(Output::Text(text)) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            Ok(EXIT_OK)
        }
        Err(CallError::Denied(reason)) => {
            eprintln!("bx: denied by the host: {reason} (see docs/runbook.md#tool-denied)");
            Ok(EXIT_DENIED)
        }
        Err(CallError::InvalidArgs(m)) => {
            eprintln!("bx: invalid arguments: {m}");
            Ok(EXIT_ERROR)
        }
        Err(CallError::Failed(m)) => {
            eprintln!("bx: tool failed: {m}");
            Ok(EXIT_ERROR)
        }
        Err(CallError::OutputTooLarge(m)) => {
            eprintln!("bx: tool output too large: {m}");
            Ok(EXIT_ERROR)
        }
    }
}
