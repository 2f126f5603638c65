//! `bx audit`: verify the log, accept a break, read it.

use std::path::Path;

use bx_audit::{Record, accept_break, verify};
use bx_state::StateDir;
use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK};
use crate::term;

/// `bx audit …`
#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Walk every record: files, records, head, sessions, calls with no result, breaks,
    /// recovered regions. Exits non-zero on a problem not accepted.
    Verify {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// After verifying, append a break record accepting exactly the problems found,
        /// with this reason. Later runs check the break record against the log.
        #[arg(long, value_name = "REASON")]
        accept_break: Option<String>,
    },
    /// Print the last records.
    Tail {
        /// How many.
        #[arg(short, long, default_value_t = 20)]
        n: usize,
    },
    /// Print every record of one session.
    Show {
        /// The session id.
        #[arg(long)]
        session: String,
    },
}

/// Every line of every day file, oldest first.
pub(crate) fn all_records(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for f in bx_audit::day_files(dir)? {
        let text = std::fs::read_to_string(&f)?;
        lines.extend(text.lines().map(str::to_owned));
    }
    Ok(lines)
}

pub(crate) fn run(state: &StateDir, command: AuditCommand) -> anyhow::Result<u8> {
    let dir = state.audit_dir(&bx_daemon::load_config(state)?);
    match command {
        AuditCommand::Verify { json, accept_break: reason } => {
            let report = match &reason {
                Some(reason) => {
                    let (report, seq) = accept_break(&dir, reason)?;
                    eprintln!(
                        "accepted {} problem(s) in break record {seq}",
                        report.problems.len()
                    );
                    verify(&dir)?
                }
                None => verify(&dir)?,
            };
            if json {
                println!("{}", term::json_pretty(&report)?);
            } else {
                println!("files:     {}", report.files.len());
                println!("records:   {}", report.records);
                match &report.head {
                    Some((seq, hash)) => println!("head:      seq {seq} {hash}"),
                    None => println!("head:      (empty log)"),
                }
                let sessions: Vec<String> =
                    report.sessions.iter().map(|s| term::one_line(s)).collect();
                println!("sessions:  {}", sessions.join(", "));
                println!("calls denied: {}", report.calls_denied);
                println!("calls allowed with no result: {}", report.calls_without_result.len());
                for c in &report.calls_without_result {
                    println!("  {}", term::one_line(c));
                }
                println!("accepted breaks: {}", report.breaks.len());
                println!("recovered regions: {}", report.recovered.len());
                for r in &report.recovered {
                    println!(
                        "  {} at byte {}: {} bytes, moved to {}",
                        term::one_line(&r.file),
                        r.offset,
                        r.bytes,
                        term::one_line(&r.moved_to)
                    );
                }
                if report.is_clean() {
                    println!("ok: the chain is intact");
                } else {
                    println!("PROBLEMS: {}", report.problems.len() as u64 + report.problems_more);
                    for p in &report.problems {
                        let where_ = term::one_line(&p.file);
                        println!(
                            "  {where_}:{}: {}: {}",
                            p.line,
                            p.kind,
                            term::one_line(&p.detail)
                        );
                    }
                    if report.problems_more > 0 {
                        println!("  … and {} more", report.problems_more);
                    }
                    println!("see docs/runbook.md#audit-broken");
                }
            }
            Ok(if report.is_clean() { EXIT_OK } else { EXIT_ERROR })
        }
        AuditCommand::Tail { n } => {
            let lines = all_records(&dir)?;
            for line in &lines[lines.len().saturating_sub(n)..] {
                println!("{}", bx_broker::escape_untrusted(line, false));
            }
            Ok(EXIT_OK)
        }
        AuditCommand::Show { session } => {
            for line in all_records(&dir)? {
                let ours = Record::parse(&line).ok().is_some_and(|r| {
                    r.fields.get("session").and_then(|s| s.as_str()) == Some(session.as_str())
                });
                if ours {
                    println!("{}", bx_broker::escape_untrusted(&line, false));
                }
            }
            Ok(EXIT_OK)
        }
    }
}
