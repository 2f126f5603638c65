//! `bx session`: show a session's taint, rebuild it from the audit log.

use std::path::Path;

use bx_audit::{Kind, Record};
use bx_broker::{Label, parse_label};
use bx_store::Sessions;
use clap::Subcommand;

use super::EXIT_OK;

/// `bx session …`
#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Print a session's taint.
    Show {
        /// The session id.
        id: String,
    },
    /// Recompute a session's taint from the audit log (the join of its results' labels)
    /// and write it.
    Rebuild {
        /// The session id.
        id: String,
    },
}

pub(crate) fn run(state_dir: &Path, command: SessionCommand) -> anyhow::Result<u8> {
    let sessions = Sessions::open(state_dir)?;
    match command {
        SessionCommand::Show { id } => {
            let (taint, damage) = sessions.taint(&id)?;
            println!("{id}: {taint}");
            if let Some(d) = damage {
                println!("  {d} (see docs/runbook.md#session-state-damaged)");
            }
        }
        SessionCommand::Rebuild { id } => {
            let audit_dir = crate::state_dir::audit_dir(state_dir)?;
            let report = bx_audit::verify(&audit_dir)?;
            if !report.is_clean() {
                anyhow::bail!(
                    "the audit log does not verify; rebuild refused (run `bx audit verify`, see docs/runbook.md#audit-broken)"
                );
            }
            let mut taint = Label::CLEAN;
            let mut results = 0;
            for line in super::audit::all_records(&audit_dir)? {
                let Ok(r) = Record::parse(&line) else { continue };
                if r.kind != Kind::Result
                    || r.fields.get("session").and_then(|s| s.as_str()) != Some(id.as_str())
                {
                    continue;
                }
                // A result whose label cannot be read counts as the top label.
                let label = r
                    .fields
                    .get("label")
                    .and_then(|l| l.as_str())
                    .and_then(|l| parse_label(l).ok())
                    .unwrap_or(Label::TOP);
                taint = taint.join(label);
                results += 1;
            }
            sessions.write(&id, taint)?;
            println!("{id}: {taint} (from {results} results)");
        }
    }
    Ok(EXIT_OK)
}
