//! `bx session`: show a session's taint, rebuild it from the audit log.

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
    /// Print a session's taint: its state file's, joined with what the audit log shows.
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
                    let ledger = Ledger::open(Sessions::open(&state.sessions_dir())?, &audit_dir)?;
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
