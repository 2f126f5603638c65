//! What the page shows, gathered where bx keeps it: waiting calls and sessions from the
//! daemon (over its socket, as `bx approvals` asks), scoped answers from the sessions'
//! ledger (as `bx session show` reads them), the tools from the store, and records from
//! the audit log. Every string here is still as its writer made it; the view escapes.

use std::collections::BTreeMap;
use std::path::Path;

use bx_agent::Ledger;
use bx_audit::{Kind, Record};
use bx_protocol::{ApprovalSummary, Body, SessionSummary};
use bx_state::{Sessions, StateDir};

use crate::client::Conn;

/// Records of the log the overview lists, the newest.
pub(super) const RECENT_RECORDS: usize = 50;
/// Calls a session's picture draws, the latest.
pub(super) const MAX_CALLS_DRAWN: usize = 400;
/// The most bytes of one day file read for the page (as `bx audit tail` reads them).
const MAX_DAY_FILE: u64 = 1 << 30;

/// One request to the daemon, on a connection of its own.
pub(super) fn ask(state: &StateDir, body: Body) -> anyhow::Result<Body> {
    let mut conn = Conn::connect(state).map_err(|e| {
        anyhow::anyhow!("the daemon does not answer on {}: {e}", state.socket().display())
    })?;
    conn.request(body)
}

/// The calls waiting, oldest first, and how many more than the listing holds.
pub(super) fn approvals(state: &StateDir) -> anyhow::Result<(Vec<ApprovalSummary>, u64)> {
    match ask(state, Body::ListApprovals {})? {
        Body::Approvals { items, more } => Ok((items, more)),
        other => anyhow::bail!("unexpected reply: {}", other.type_name()),
    }
}

/// The daemon's sessions.
pub(super) fn sessions(state: &StateDir) -> anyhow::Result<Vec<SessionSummary>> {
    match ask(state, Body::ListSessions {})? {
        Body::Sessions { items } => Ok(items),
        other => anyhow::bail!("unexpected reply: {}", other.type_name()),
    }
}

/// An installed tool, as the page lists it.
#[derive(Debug)]
pub(super) struct ToolRow {
    pub(super) name: String,
    /// `bx:tool`, `wasi` or `mcp`.
    pub(super) kind: &'static str,
    pub(super) digest: String,
    pub(super) source: Option<String>,
    pub(super) signer: Option<String>,
    /// What it may reach: its declared capabilities, or an upstream tool's labels.
    pub(super) reach: Vec<String>,
}

/// The installed tools and the owner's upstream MCP servers' tools.
pub(super) fn tools(state: &StateDir) -> anyhow::Result<Vec<ToolRow>> {
    let config = bx_daemon::load_config(state)?;
    let installed = bx_store::Store::open(state, &config)?.installed()?;
    let mut rows = Vec::new();
    for (name, tool) in &installed.tools {
        let mut reach = tool.declared.lines(name);
        if reach.is_empty() {
            reach = tool
                .resources
                .iter()
                .map(|r| format!("{name}: reaches its argument {r}"))
                .collect();
        }
        rows.push(ToolRow {
            name: name.clone(),
            kind: if tool.function.is_some() { "wasi" } else { "bx:tool" },
            digest: tool.digest.clone(),
            source: tool.source.clone(),
            signer: tool.signer.clone(),
            reach,
        });
    }
    for (server, up) in &installed.upstreams {
        for (tool, pin) in &up.tools {
            let labels = super::super::tool::upstream_labels(up, tool);
            rows.push(ToolRow {
                name: format!("{server}.{tool}"),
                kind: "mcp",
                digest: pin.digest.clone(),
                source: Some(format!("the MCP server {server}")),
                signer: None,
                reach: vec![labels],
            });
        }
    }
    Ok(rows)
}

/// The newest `n` records of the log, oldest first, read from the newest day file back.
pub(super) fn recent_records(state: &StateDir, n: usize) -> anyhow::Result<Vec<Record>> {
    let dir = audit_dir(state)?;
    let mut newest_first = Vec::new();
    for file in bx_audit::day_files(&dir)?.into_iter().rev() {
        let bytes = bx_state::read_own(&file, MAX_DAY_FILE)?.unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        for line in text.lines().rev() {
            if let Ok(record) = Record::parse(line) {
                newest_first.push(record);
                if newest_first.len() == n {
                    break;
                }
            }
        }
        if newest_first.len() == n {
            break;
        }
    }
    newest_first.reverse();
    Ok(newest_first)
}

fn audit_dir(state: &StateDir) -> anyhow::Result<std::path::PathBuf> {
    let config = bx_daemon::load_config(state)?;
    Ok(state.audit_dir(&config))
}

/// `bx audit verify`'s state, as the page shows it.
#[derive(Debug)]
pub(super) struct Verified {
    pub(super) clean: bool,
    pub(super) records: u64,
    pub(super) head: Option<u64>,
    /// The first problems, as `bx audit verify` names them.
    pub(super) problems: Vec<String>,
    pub(super) problems_more: u64,
    /// The owner's notes (where the keys are, what was verified against).
    pub(super) notes: Vec<String>,
}

/// Verifies the log as `bx audit verify` does with no arguments.
pub(super) fn verify(state: &StateDir) -> anyhow::Result<Verified> {
    /// Problems listed on the page; `bx audit verify` lists them all.
    const SHOWN: usize = 5;
    let report = super::super::audit::verify_default(state)?;
    let problems: Vec<String> = report
        .problems
        .iter()
        .take(SHOWN)
        .map(|p| format!("{} at {}:{}: {}", p.kind, p.file, p.line, p.detail))
        .collect();
    let more = (report.problems.len() - problems.len()) as u64 + report.problems_more;
    Ok(Verified {
        clean: report.is_clean(),
        records: report.records,
        head: report.head.as_ref().map(|(seq, _)| *seq),
        problems,
        problems_more: more,
        notes: report.anchor.notes.clone(),
    })
}

/// A scoped answer, as the session's page lists it.
#[derive(Debug)]
pub(super) struct ScopeRow {
    /// The approval id it was given for: what revokes it.
    pub(super) id: String,
    pub(super) what: String,
    pub(super) state: String,
}

/// One call of a session, as its picture draws it.
#[derive(Debug, Default)]
pub(super) struct CallRow {
    pub(super) seq: u64,
    pub(super) time: String,
    pub(super) tool: String,
    /// `allow`, `ask` or `deny`, as the broker decided.
    pub(super) decision: String,
    /// The taint it was decided at.
    pub(super) taint: String,
    /// `approve`, `refuse` or `expired`, for a call that asked.
    pub(super) answer: Option<String>,
    /// Who answered: `owner`, or the reviewer's command.
    pub(super) by: Option<String>,
    /// How it ended and its result's label, for a call that ran.
    pub(super) result: Option<String>,
}

impl CallRow {
    /// How it ended, for its colour: `ran` (allowed), `approved`, `refused` (by the
    /// owner or the reviewer), `denied` (by the policy), `expired`, `waiting`.
    pub(super) fn outcome(&self) -> &'static str {
        match (self.decision.as_str(), self.answer.as_deref()) {
            ("allow", _) => "ran",
            ("deny", _) => "denied",
            (_, Some("approve")) => "approved",
            (_, Some("refuse")) => "refused",
            (_, Some("expired")) => "expired",
            _ => "waiting",
        }
    }
}

/// A session as its page shows it.
#[derive(Debug)]
pub(super) struct SessionView {
    pub(super) taint: String,
    pub(super) workspace: Option<String>,
    pub(super) damage: Option<String>,
    pub(super) taint_from: Vec<String>,
    pub(super) scopes: Vec<ScopeRow>,
    /// Its latest calls, in time order.
    pub(super) calls: Vec<CallRow>,
    /// How many earlier calls the picture leaves out.
    pub(super) calls_more: u64,
}

/// Session `id`: its taint and scoped answers from the ledger, its calls from the log.
pub(super) fn session(state: &StateDir, id: &str) -> anyhow::Result<SessionView> {
    anyhow::ensure!(bx_state::valid_session_id(id), "not a session id");
    let dir = audit_dir(state)?;
    let ledger = Ledger::open(Sessions::open(&state.sessions_dir())?, &dir)?;
    let (taint, damage) = ledger.peek(id)?;
    let scopes = ledger
        .scopes(id)
        .into_iter()
        .map(|s| {
            let state = if s.approve && !taint.flows_to(s.taint) {
                format!("void: given at taint {}, the session's is now {taint}", s.taint)
            } else {
                format!("given at taint {}", s.taint)
            };
            ScopeRow { id: s.id.clone(), what: s.describe(), state }
        })
        .collect();
    let (calls, calls_more) = calls(&dir, id)?;
    Ok(SessionView {
        taint: taint.to_string(),
        workspace: ledger.workspace_of(id).map(|w| w.display().to_string()),
        damage,
        taint_from: ledger.taint_from(id),
        scopes,
        calls,
        calls_more,
    })
}

/// Session `id`'s calls in the log, in time order: the latest [`MAX_CALLS_DRAWN`], and
/// how many came before them.
fn calls(dir: &Path, id: &str) -> anyhow::Result<(Vec<CallRow>, u64)> {
    // A line of another session cannot hold this one's id as its session field; the
    // cheap test first, the parse only for lines that pass it.
    let needle = format!("\"session\":{}", serde_json::to_string(id)?);
    let mut calls: BTreeMap<String, CallRow> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for file in bx_audit::day_files(dir)? {
        let bytes = bx_state::read_own(&file, MAX_DAY_FILE)?.unwrap_or_default();
        for line in String::from_utf8_lossy(&bytes).lines() {
            if !line.contains(&needle) {
                continue;
            }
            let Ok(record) = Record::parse(line) else { continue };
            let field = |name: &str| {
                record.fields.get(name).and_then(|v| v.as_str()).unwrap_or_default().to_owned()
            };
            if field("session") != id {
                continue;
            }
            let call = field("call");
            if call.is_empty() {
                continue;
            }
            if record.kind == Kind::Request && !calls.contains_key(&call) {
                order.push(call.clone());
                calls.insert(
                    call.clone(),
                    CallRow {
                        seq: record.seq,
                        time: record.time.clone(),
                        tool: field("tool"),
                        ..CallRow::default()
                    },
                );
                continue;
            }
            let Some(row) = calls.get_mut(&call) else { continue };
            match record.kind {
                Kind::Decision => {
                    row.decision = field("decision");
                    row.taint = field("taint");
                }
                Kind::Approval => {
                    row.answer = Some(field("answer"));
                    row.by = Some(match record.fields.get("by") {
                        Some(by) => by
                            .pointer("/reviewer/command")
                            .and_then(|c| c.as_str())
                            .map_or_else(|| "someone else".to_owned(), |c| format!("reviewer {c}")),
                        None => "owner".to_owned(),
                    });
                }
                Kind::Result => {
                    row.result = Some(format!("{} {}", field("status"), field("label")));
                }
                _ => {}
            }
        }
    }
    let more = order.len().saturating_sub(MAX_CALLS_DRAWN);
    let rows = order.into_iter().skip(more).filter_map(|c| calls.remove(&c)).collect();
    Ok((rows, more as u64))
}
