//! `bx tool run`: one call by hand, through the whole trust path: the request on the
//! audit log, the broker's decision against the policy (with any `--allow` flags on top)
//! and the session's taint, the owner's approval at the prompt when the policy asks, the
//! call under its grant, the result on the log before anyone sees it, and the session's
//! taint raised. Through the daemon when one runs (one writer of the log); otherwise
//! here, holding the log's lock for the length of the call.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bx_agent::call::{self, Asking, Overlay, Trust};
use bx_agent::{AgentError, Ledger, Owner, Proposal, now_ms};
use bx_audit::AuditLog;
use bx_broker::{Answer, Answered, ApprovalTable, ScopeKind};
use bx_protocol::{Body, RunOutcome};
use bx_runtime::{CacheOutcome, Limits, Runtime};
use bx_state::{Config, PolicyStatus, StateDir};
use bx_store::Store;
use clap::Args;

use super::{EXIT_ERROR, EXIT_UNAVAILABLE, outcome};
use crate::client::Conn;
use crate::term;

/// How long an approval waits at the prompt before it counts as a refusal.
const DEFAULT_APPROVAL_SECS: u64 = 120;
/// How long a one-shot command waits for the audit log's lock (another command's call).
const LOG_LOCK_WAIT: Duration = Duration::from_secs(60);

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
    /// The session's workspace, for a session this creates: relative paths in the
    /// arguments resolve against it (without one they are refused).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

fn absolute(path: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(path).with_context(|| format!("path {}", path.display()))?;
    abs.to_str().map(str::to_owned).with_context(|| format!("path {} is not UTF-8", abs.display()))
}

/// Loads the policy in force for a one-shot command: an invalid file refuses (a one-shot
/// command has no earlier valid policy to fall back on).
pub(crate) fn policy_in_force(
    state: &StateDir,
    config: &Config,
) -> anyhow::Result<Arc<bx_broker::Policy>> {
    let file = state.watch_policy(config);
    match (file.status(), file.in_force()) {
        (PolicyStatus::Valid | PolicyStatus::Missing, Some(p)) => Ok(p),
        (PolicyStatus::Invalid(errors), _) => {
            bail!(
                "{errors}\nthe policy is invalid; every call is refused (see {})",
                errors.runbook()
            )
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

/// A line read from standard input (its length, 0 at end of input), or why it could not be.
type Line = std::io::Result<(usize, String)>;

/// Why a call is refused when its approval block could not be shown.
const UNSEEN: &str = "the approval block could not be shown (standard error is closed, a device that is not a terminal, or failed)";

/// Reads a line from standard input on a thread of its own, so the wait for it can end,
/// and sends it to `tx` as `wrap` makes it.
fn read_line_into<T: Send + 'static>(tx: mpsc::Sender<T>, wrap: fn(Line) -> T) {
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::stdin().lock().read_line(&mut line);
        let _ = tx.send(wrap(read.map(|n| (n, line))));
    });
}

/// What a line typed at the prompt answers for approval `id`, and with what scope: end
/// of input, or input that cannot be read, is no answer.
fn answer_of(id: &str, line: Line) -> (Answer, ScopeKind) {
    match line {
        Ok((n, line)) if n > 0 => bx_broker::typed_answer(id, &line),
        _ => (Answer::Expired, ScopeKind::Call),
    }
}

/// Shows the block and the prompt on stderr; false when they could not be shown (stderr
/// closed, a device that is not a terminal, or a write failed), and then nobody may
/// answer: nothing is approved unseen.
fn prompt(block: &str, id: &str, rest: Option<&[String]>, until: std::time::Instant) -> bool {
    if term::stderr_is_void() {
        return false;
    }
    let wrote = {
        let mut err = std::io::stderr().lock();
        write!(err, "{}", term::shown(block)).and_then(|()| err.flush()).is_ok()
    };
    // A block shown in part: the rest comes before the prompt that takes the id.
    if !wrote || rest.is_some_and(|parts| !super::rest::show(parts, until)) {
        return false;
    }
    let mut err = std::io::stderr().lock();
    Ok(())
        .and_then(|()| {
            write!(
                err,
                "type {} to approve (with a scope after it for this session's later calls), or a reason to refuse: ",
                term::one_line(id)
            )
        })
        .and_then(|()| err.flush())
        .is_ok()
}

/// Asks the owner at the terminal: the whole block, then the id to approve. A block that
/// could not be shown is a refusal.
fn ask_owner(
    block: &str,
    id: &str,
    rest: Option<&[String]>,
    timeout: Duration,
) -> (Answer, ScopeKind) {
    if !prompt(block, id, rest, std::time::Instant::now() + timeout) {
        return (Answer::Refuse(UNSEEN.into()), ScopeKind::Call);
    }
    let (tx, rx) = mpsc::channel();
    read_line_into(tx, |line| line);
    rx.recv_timeout(timeout).map_or((Answer::Expired, ScopeKind::Call), |line| answer_of(id, line))
}

fn overlay(args: &RunArgs) -> anyhow::Result<Overlay> {
    let abs =
        |paths: &[PathBuf]| paths.iter().map(|p| absolute(p)).collect::<anyhow::Result<Vec<_>>>();
    Ok(Overlay {
        read: abs(&args.allow_read)?,
        write: with_resolved(abs(&args.allow_write)?),
        hosts: args.allow_host.clone(),
        deny: abs(&args.deny)?,
    })
}

/// Write grants as named and, where that differs, as they resolve on disk: a write is
/// decided on the path it resolves to, so `--allow-write LINK` must cover LINK's target
/// for writes as well as LINK for reads.
fn with_resolved(paths: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let real = std::fs::canonicalize(&p).ok().and_then(|r| r.to_str().map(str::to_owned));
        out.push(p);
        if let Some(real) = real.filter(|r| !out.contains(r)) {
            out.push(real);
        }
    }
    out
}

pub(crate) fn run(state: &StateDir, args: &RunArgs) -> anyhow::Result<u8> {
    let overlay = overlay(args)?;
    // Catch a bad flag here, before anything is recorded.
    call::overlaid(&bx_broker::Policy::empty(), &overlay)?;
    let workspace =
        args.workspace.as_deref().map(|d| super::chat::workspace(Some(d))).transpose()?;
    match Conn::connect(state) {
        Ok(conn) => via_daemon(state, conn, args, &overlay, workspace),
        Err(_) => here(state, args, &overlay, workspace.as_deref()),
    }
}

/// What the call through the daemon hears next.
enum Heard {
    /// A frame from the daemon.
    Frame(Box<bx_protocol::Envelope>),
    /// The daemon closed the connection.
    Closed,
    /// A line typed at the prompt (0 bytes: end of input).
    Line(Line),
}

/// The owner's answer as the daemon takes it.
fn wire_answer((answer, scope): (Answer, ScopeKind), seen: Option<String>) -> bx_protocol::Answer {
    super::approvals::to_wire(answer, &scope, seen).unwrap_or_else(|| bx_protocol::Answer::Refuse {
        reason: "no answer at the prompt".into(),
        scope: None,
    })
}

/// The call through the running daemon, the log's one writer.
fn via_daemon(
    state: &StateDir,
    mut conn: Conn,
    args: &RunArgs,
    overlay: &Overlay,
    workspace: Option<String>,
) -> anyhow::Result<u8> {
    let (tx, heard) = mpsc::channel();
    let mut reader = conn.reader()?;
    let frames = tx.clone();
    std::thread::spawn(move || {
        while let Ok(Some(envelope)) = reader.recv() {
            if frames.send(Heard::Frame(Box::new(envelope))).is_err() {
                break;
            }
        }
        let _ = frames.send(Heard::Closed);
    });
    let id = conn.send(Body::RunTool {
        session: args.session.clone(),
        tool: args.name.clone(),
        args: args.args.clone(),
        overlay: overlay.clone(),
        workspace,
        quiet: false,
        traceparent: None,
    })?;
    // The approval shown at the prompt and when its wait there ends. The daemon's
    // replies are read meanwhile: an approval that expired there, or was answered by
    // `bx approve`, ends the call without waiting for the prompt.
    let mut asked: Option<(String, std::time::Instant)> = None;
    // A scoped answer the daemon may refuse (a scope that does not fit): its request id,
    // the approval and its deadline, to ask again at the prompt.
    let mut answered: Option<(u64, String, std::time::Instant)> = None;
    // The seal at the end of the rest shown, for a block shown in part.
    let mut seal: Option<String> = None;
    loop {
        let next = match &asked {
            Some((_, until)) => {
                heard.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
            }
            None => heard.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        let envelope = match next {
            Ok(Heard::Frame(envelope)) => *envelope,
            Ok(Heard::Line(line)) => {
                if let Some((approval, until)) = asked.take() {
                    let answer = wire_answer(answer_of(&approval, line), seal.clone());
                    let sent =
                        conn.send(Body::AnswerApproval { approval: approval.clone(), answer })?;
                    answered = Some((sent, approval, until));
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some((approval, _)) = asked.take() {
                    let reason = "no answer at the prompt before it timed out".into();
                    let answer = bx_protocol::Answer::Refuse { reason, scope: None };
                    conn.send(Body::AnswerApproval { approval, answer })?;
                }
                continue;
            }
            Ok(Heard::Closed) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                errln!("bx: the daemon closed the connection before the call ended");
                return Ok(EXIT_UNAVAILABLE);
            }
        };
        if envelope.id != id && envelope.id != 0 {
            // The daemon refused the answer typed (a scope that does not fit the call):
            // the call still waits, so the prompt asks again, saying why.
            if let (Some((sent, approval, until)), Body::Refused { reason }) =
                (&answered, &envelope.msg)
                && *sent == envelope.id
            {
                errln!("bx: {}", term::reason(reason));
                errp!(
                    "type {} to approve (with a scope after it for this session's later calls), or a reason to refuse: ",
                    term::one_line(approval)
                );
                read_line_into(tx.clone(), Heard::Line);
                asked = Some((approval.clone(), *until));
                answered = None;
            }
            continue;
        }
        match envelope.msg {
            Body::ApprovalNeeded { approval, block, in_part, .. } => {
                let rest = match in_part.then(|| super::rest::fetch(state, &approval)) {
                    Some(Ok(rest)) => Some(rest),
                    Some(Err(e)) => {
                        errln!("bx: the rest of approval {}: {e:#}", term::one_line(&approval));
                        None
                    }
                    None => None,
                };
                seal = rest.as_ref().and_then(|r| r.seal.clone());
                let until = std::time::Instant::now() + Duration::from_secs(args.approval_timeout);
                let shown = match &rest {
                    Some(rest) => prompt(&block, &approval, Some(&rest.parts), until),
                    None if in_part => false,
                    None => prompt(&block, &approval, None, until),
                };
                if !shown {
                    let answer = bx_protocol::Answer::Refuse { reason: UNSEEN.into(), scope: None };
                    conn.send(Body::AnswerApproval { approval, answer })?;
                    continue;
                }
                read_line_into(tx.clone(), Heard::Line);
                let until = std::time::Instant::now() + Duration::from_secs(args.approval_timeout);
                asked = Some((approval, until));
            }
            Body::ToolStarted { covered_by: Some(answer), .. } => covered(&answer),
            Body::ToolOutput { outcome, text, stderr, .. } => {
                return Ok(print(outcome, &text, &stderr));
            }
            Body::Error { message, runbook, code } => {
                errln!("bx: {}\n    runbook: {}", term::shown(&message), term::one_line(&runbook));
                return Ok(match code {
                    bx_protocol::ErrorCode::AuditUnavailable
                    | bx_protocol::ErrorCode::PolicyInvalid
                    | bx_protocol::ErrorCode::DaemonBusy => EXIT_UNAVAILABLE,
                    _ => EXIT_ERROR,
                });
            }
            _ => {}
        }
    }
}

/// Checkpoints the log however the call ends, so its records are covered.
struct Closing<'a>(&'a AuditLog);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.checkpoint() {
            errln!(
                "bx: {e}\n    runbook: {}",
                e.runbook().unwrap_or("docs/runbook.md#audit-unavailable")
            );
        }
    }
}

/// The call here, holding the audit log's lock for its length.
fn here(
    state: &StateDir,
    args: &RunArgs,
    overlay: &Overlay,
    workspace: Option<&str>,
) -> anyhow::Result<u8> {
    let config = bx_daemon::load_config(state)?;
    // The log first: if it cannot record, nothing runs.
    let log = match bx_daemon::open_audit(state, &config, LOG_LOCK_WAIT) {
        Ok(log) => Arc::new(log),
        Err(e) => {
            errln!(
                "bx: {e}\n    runbook: {}",
                e.runbook().unwrap_or("docs/runbook.md#audit-unavailable")
            );
            return Ok(EXIT_UNAVAILABLE);
        }
    };
    let _closing = Closing(&log);
    let files = bx_state::Sessions::open(&state.sessions_dir())?;
    let ledger = Ledger::open_writing(files, &log)?;
    if let bx_agent::Replayed::Mismatch { .. } = ledger.replayed() {
        errln!("bx: warning: the ledger {}", term::reason(&ledger.replayed().to_string()));
    }
    if let Some(why) = ledger.unsaved() {
        errln!(
            "bx: warning: the ledger's checkpoint could not be written ({}); see docs/runbook.md#ledger-checkpoint",
            term::reason(why)
        );
    }
    let trust = Trust::new(Arc::clone(&log), ledger, state.watch_policy(&config), state.secrets())
        .with_approvers(&config.approvals);
    let store = Store::open(state, &config)?;
    // Tool changes made while a daemon held the log go on it before this call.
    bx_agent::record_pending(&store, &log)?;
    let runtime = Runtime::new(Limits::default())?;
    let tool = match store.open_tool(&runtime, &args.name) {
        Ok((tool, outcome)) => {
            if let CacheOutcome::Replaced(why) = outcome {
                errln!(
                    "bx: warning: the precompiled code of {} was refused and compiled again: {} (see docs/runbook.md#precompiled-cache)",
                    term::one_line(&args.name),
                    term::one_line(&why)
                );
            }
            Some(tool)
        }
        Err(bx_store::StoreError::NotInstalled(_)) => None,
        Err(e) => return Err(e.into()),
    };
    // Or a tool of an upstream MCP server (`NAME.TOOL`), started for this call alone.
    let gateway = Arc::new(bx_gateway::Gateway::new(
        state.upstreams_dir(),
        bx_gateway::Limits::default(),
        bx_gateway::Confine::for_state(state, &config)?,
        bx_gateway::store_secrets(state.secrets()),
    ));
    let installed = store.installed()?;
    let upstream = match (&tool, args.name.split_once('.')) {
        (None, Some((server, name))) => {
            installed.upstreams.get(server).filter(|up| up.tools.contains_key(name)).map(|up| {
                let guard = bx_agent::guard_of(&runtime, &gateway, up);
                bx_agent::UpstreamTool::new(server, up, name, &gateway, guard).0
            })
        }
        _ => None,
    };
    let call_id = format!("c{:x}{:x}", now_ms(), std::process::id());
    let (value, refusal) = call::parse_args(&args.args);
    let unavailable = |e: AgentError| {
        errln!("bx: {}\n    runbook: {}", term::shown(&e.to_string()), e.runbook());
        Ok(EXIT_UNAVAILABLE)
    };
    let workspace = match trust.workspace(&args.session, workspace) {
        Ok(w) => w,
        Err(e @ AgentError::BadWorkspace { .. }) => {
            errln!("bx: {}\n    runbook: {}", term::reason(&e.to_string()), e.runbook());
            return Ok(EXIT_ERROR);
        }
        Err(e) => return unavailable(e),
    };
    let proposal = Proposal {
        session: &args.session,
        call: &call_id,
        name: &args.name,
        tool: tool
            .as_ref()
            .map(bx_agent::Tool::Component)
            .or(upstream.as_ref().map(bx_agent::Tool::Upstream)),
        args: &value,
        workspace: workspace.as_deref(),
    };
    let mut owner = Prompt { timeout: Duration::from_secs(args.approval_timeout) };
    let executor = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let settled =
        match executor.block_on(trust.settle(proposal, overlay, refusal, &mut owner, &runtime)) {
            Ok(settled) => settled,
            // Nobody sees a result that is not on the log.
            Err(e) => return unavailable(e),
        };
    match call::output_of(&call_id, settled) {
        Body::ToolOutput { outcome, text, stderr, .. } => Ok(print(outcome, &text, &stderr)),
        _ => Ok(EXIT_ERROR),
    }
}

/// The owner at this terminal: a call that asks shows its block on standard error and
/// waits up to `timeout` for the id (or a reason to refuse) on standard input.
struct Prompt {
    timeout: Duration,
}

/// Says that the call runs without a prompt because of the owner's scoped answer: what
/// runs unasked is still shown.
fn covered(answer: &str) {
    errln!("bx: runs under your scoped answer {}", term::reason(answer));
}

impl Owner for Prompt {
    fn started(&mut self, _proposal: &bx_agent::Proposal<'_>, by: Option<&bx_agent::Covered>) {
        if let Some(c) = by {
            covered(&format!("{}: {}", c.id, c.what));
        }
    }

    // It blocks its thread while the owner reads and types (up to `timeout`): the call
    // runs on a one-shot command's own current-thread runtime, where nothing else waits.
    async fn answer(&mut self, asking: &Asking<'_>) -> Answer {
        let table = ApprovalTable::new();
        // A fresh table: the id the `ask` record names is free in it.
        let Some(pending) = table.insert_as(
            asking.approval().to_owned(),
            asking.request().clone(),
            asking.args().to_owned(),
            now_ms(),
            self.timeout.as_millis() as u64,
        ) else {
            return Answer::Refuse("an empty approval table refused an id".into());
        };
        let block = bx_broker::render_block(&pending, &asking.request().call.digest, now_ms());
        // The answer comes from standard input: a terminal, or a pipe the owner set up;
        // end of input is no answer.
        // A block shown in part: its rest is shown here before the prompt.
        let rest = pending.seal.as_ref().map(|_| bx_broker::rest_parts(&pending.id, &pending.args));
        let (answer, scope) = ask_owner(&block, &pending.id, rest.as_deref(), self.timeout);
        // A scope is made from the call itself, as the daemon makes it; one that does not
        // fit the call refuses it, saying why.
        let (request, args) = (&pending.request, pending.args.as_str());
        let answer = match answer {
            Answer::Approve => bx_broker::scoped_answer(request, args, &scope, true, String::new()),
            Answer::Refuse(why) => bx_broker::scoped_answer(request, args, &scope, false, why),
            other => Ok(other),
        }
        .unwrap_or_else(|why| Answer::Refuse(why.to_string()));
        // Answering takes the entry out of the table, as the daemon does: an answer
        // after its deadline is no answer.
        // (This process showed the rest itself, so it holds the seal.)
        match table.take_approving(&pending.id, pending.seal.as_deref(), now_ms()) {
            Answered::Taken(_) => answer,
            Answered::Expired(_)
            | Answered::AlreadyAnswered
            | Answered::Unknown
            | Answered::Unseen(_) => Answer::Expired,
        }
    }
}

/// Prints what a call produced, escaped for the terminal, and returns its exit status
/// ([`outcome::meaning`]).
fn print(outcome: RunOutcome, text: &str, stderr: &str) -> u8 {
    if !stderr.is_empty() {
        errln!("{}", term::shown(stderr));
    }
    let meaning = outcome::meaning(outcome);
    match outcome {
        RunOutcome::Json => {
            let pretty = serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| term::json_pretty(&v).ok())
                .unwrap_or_else(|| term::shown(text));
            outln!("{pretty}");
        }
        RunOutcome::Text => {
            let shown = term::shown(text);
            outp!("{shown}");
            if !shown.ends_with('\n') {
                outln!();
            }
        }
        // No policy: the policy's own errors, several lines with their snippets.
        RunOutcome::Unavailable => errln!("bx: {}", meaning.line(&term::shown(text))),
        _ => errln!("bx: {}", meaning.line(&term::reason(text))),
    }
    meaning.exit
}
