//! `bx session`: show a session's taint and scoped answers, rebuild its taint from the
//! audit log, revoke its scoped answers, end it.

use std::sync::Arc;
use std::time::Duration;

use bx_agent::Ledger;
use bx_protocol::Body;
use bx_state::{Sessions, StateDir};
use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK};
use crate::client::Conn;
use crate::term;

/// `bx session …`
#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Print a session's taint (its state file's, joined with what the audit log shows),
    /// where it came from, and the owner's scoped answers in force.
    Show {
        /// The session id.
        id: String,
    },
    /// Recompute a session's taint from the audit log alone (the join of its results'
    /// labels), write it and record the rebuild. Through the daemon when one runs.
    Rebuild {
        /// The session id.
        id: String,
    },
    /// Revoke the owner's scoped answers in a session: the one given for approval
    /// ANSWER, or all of them. Recorded on the audit log; the next call they covered asks.
    Revoke {
        /// The session id.
        id: String,
        /// The approval id the scoped answer was given for (`bx session show` lists
        /// them); all of them when left out.
        answer: Option<String>,
    },
    /// End a session: its scoped answers end with it (its taint and transcript stay).
    /// `bx chat` does this when you leave it.
    End {
        /// The session id.
        id: String,
    },
}

pub(crate) fn run(state: &StateDir, command: SessionCommand) -> anyhow::Result<u8> {
    let config = bx_daemon::load_config(state)?;
    let audit_dir = state.audit_dir(&config);
    match command {
        SessionCommand::Show { id } => {
            let ledger = Ledger::open(Sessions::open(&state.sessions_dir())?, &audit_dir)?;
            let (taint, damage) = ledger.peek(&id)?;
            outln!("{}: {taint}", term::one_line(&id));
            // A session made without one (by `bx tool run`, or before workspaces) has none.
            if let Some(w) = ledger.workspace_of(&id) {
                outln!("  workspace {}", term::one_line(&w.display().to_string()));
            }
            if let Some(d) = damage {
                outln!("  {} (see docs/runbook.md#session-state-damaged)", term::one_line(&d));
            }
            // Each line bounded: a path a scope or a rise names can be as long as a call
            // made it (a record holds up to 256 KiB).
            let shown = |text: &str| term::one_line(&bx_audit::bounded(text, 1 << 10));
            for from in ledger.taint_from(&id) {
                outln!("  taint from {}", shown(&from));
            }
            let scopes = ledger.scopes(&id);
            if scopes.is_empty() {
                outln!("  no scoped answers");
            }
            for s in scopes {
                // An approving one covers nothing once the taint rose past its own.
                let state = if s.approve && !taint.flows_to(s.taint) {
                    format!("void: given at taint {}, the session's is now {taint}", s.taint)
                } else {
                    format!("given at taint {}", s.taint)
                };
                outln!(
                    "  scoped answer {}: {} ({state}; `bx session revoke {} {}` ends it)",
                    shown(&s.id),
                    shown(&s.describe()),
                    term::one_line(&id),
                    term::one_line(&s.id)
                );
            }
        }
        SessionCommand::Revoke { id, answer } => {
            let body = Body::RevokeScopes { session: id.clone(), answer: answer.clone() };
            let Some(count) = end_scopes(state, &id, body)? else {
                return Ok(EXIT_ERROR);
            };
            match (count, &answer) {
                (0, Some(a)) => {
                    errln!(
                        "bx: session {} holds no scoped answer {}; `bx session show {}` lists them",
                        term::one_line(&id),
                        term::one_line(a),
                        term::one_line(&id)
                    );
                    return Ok(EXIT_ERROR);
                }
                (n, _) => outln!("{}: {n} scoped answer(s) revoked", term::one_line(&id)),
            }
        }
        SessionCommand::End { id } => {
            let body = Body::EndSession { session: id.clone() };
            let Some(count) = end_scopes(state, &id, body)? else {
                return Ok(EXIT_ERROR);
            };
            outln!("{}: ended; {count} scoped answer(s) ended with it", term::one_line(&id));
        }
        SessionCommand::Rebuild { id } => {
            let report = bx_audit::verify(&audit_dir)?;
            if !report.is_clean() {
                anyhow::bail!(
                    "the audit log does not verify; rebuild refused (run `bx audit verify`, see docs/runbook.md#audit-broken)"
                );
            }
            let (taint, results) = match Conn::connect(state) {
                Ok(mut conn) => match conn.request(Body::RebuildSession { session: id.clone() })? {
                    Body::Rebuilt { taint, results, .. } => (taint, results),
                    Body::Error { message, runbook, .. } => {
                        errln!(
                            "bx: {}\n    runbook: {}",
                            term::shown(&message),
                            term::one_line(&runbook)
                        );
                        return Ok(EXIT_ERROR);
                    }
                    other => anyhow::bail!("unexpected reply: {}", other.type_name()),
                },
                Err(_) => {
                    let config = bx_daemon::load_config(state)?;
                    let log =
                        Arc::new(bx_daemon::open_audit(state, &config, Duration::from_secs(60))?);
                    let ledger =
                        Ledger::open_writing(Sessions::open(&state.sessions_dir())?, &log)?;
                    let (taint, results) = ledger.rebuild(&log, &audit_dir, &id)?;
                    log.checkpoint()?;
                    (taint.to_string(), results)
                }
            };
            outln!("{}: {taint} (from {results} results)", term::one_line(&id));
        }
    }
    Ok(EXIT_OK)
}

/// Ends scoped answers of session `id` as `body` says (`revoke_scopes` or
/// `end_session`): through the daemon when one runs (it holds them), else on the log
/// here. How many ended; `None` when the daemon said why not (printed).
pub(crate) fn end_scopes(state: &StateDir, id: &str, body: Body) -> anyhow::Result<Option<u64>> {
    match Conn::connect(state) {
        Ok(mut conn) => match conn.request(body)? {
            Body::ScopesEnded { count, .. } => Ok(Some(count)),
            Body::Error { message, runbook, .. } => {
                errln!("bx: {}\n    runbook: {}", term::shown(&message), term::one_line(&runbook));
                Ok(None)
            }
            other => anyhow::bail!("unexpected reply: {}", other.type_name()),
        },
        Err(_) => {
            anyhow::ensure!(
                bx_state::valid_session_id(id),
                "not a session id: {}",
                term::one_line(id)
            );
            let config = bx_daemon::load_config(state)?;
            let log = Arc::new(bx_daemon::open_audit(state, &config, Duration::from_secs(60))?);
            let ledger = Ledger::open_writing(Sessions::open(&state.sessions_dir())?, &log)?;
            let (answer, ended) = match body {
                Body::RevokeScopes { answer, .. } => (answer, false),
                _ => (None, true),
            };
            let count = ledger.end_scopes(&log, id, answer.as_deref(), ended)?;
            log.checkpoint()?;
            Ok(Some(count as u64))
        }
    }
}
