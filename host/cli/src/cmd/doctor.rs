//! `bx doctor`: the daemon and its inference self-test, the policy, the audit log and the
//! installed tools, each with ok or what is wrong.

use std::path::Path;

use bx_protocol::Body;
use bx_store::{PolicyFile, PolicyStatus, Store};
use clap::Args;

use super::{EXIT_ERROR, EXIT_OK};
use crate::client::Conn;

/// `bx doctor`
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {}

pub(crate) fn run(state_dir: &Path, _args: &DoctorArgs) -> anyhow::Result<u8> {
    let mut healthy = true;
    let mut check = |ok: bool, line: String| {
        healthy &= ok;
        println!("{} {line}", if ok { "ok  " } else { "FAIL" });
    };

    let config = crate::daemon::load_config(state_dir);
    match &config {
        Ok(_) => check(true, "config.toml".into()),
        Err(e) => check(false, format!("config.toml: {e:#}")),
    }

    let answering = Conn::connect(state_dir)
        .ok()
        .and_then(|mut c| c.request(Body::ListSessions {}).ok())
        .is_some();
    let status = std::fs::read_to_string(state_dir.join(crate::daemon::STATUS))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    match (answering, status) {
        (true, Some(s)) => {
            check(true, format!("daemon: pid {} serving {}", s["pid"], s["url"]));
            match serde_json::from_value::<bx_infer::SelfTest>(s["self_test"].clone()) {
                Ok(report) => {
                    let ok = report.completion_ok && report.problems.is_empty();
                    check(ok, "inference self-test (at daemon start):".into());
                    for line in report.to_string().lines() {
                        println!("       {line}");
                    }
                }
                Err(e) => {
                    check(false, format!("inference self-test: unreadable in daemon.json: {e}"))
                }
            }
        }
        (true, None) => check(true, "daemon: answering (no status file)".into()),
        (false, _) => println!("-    daemon: not running (`bx chat` or `bx serve` starts one)"),
    }

    let policy = PolicyFile::open(&state_dir.join("policy.toml"));
    match policy.status() {
        PolicyStatus::Valid => check(true, "policy: valid".into()),
        PolicyStatus::Missing => check(
            true,
            "policy: none yet (every call is refused; `bx policy init` writes one)".into(),
        ),
        other => check(false, format!("policy: {other:?} (see docs/runbook.md#policy-invalid)")),
    }

    // With an invalid config, the default place is still worth checking.
    let audit_dir = config.unwrap_or_default().audit_dir(state_dir);
    match bx_audit::verify(&audit_dir) {
        Ok(r) if r.is_clean() => check(
            true,
            format!("audit: {} records in {} files, chain intact", r.records, r.files.len()),
        ),
        Ok(r) => check(
            false,
            format!(
                "audit: {} problems (run `bx audit verify`; see docs/runbook.md#audit-broken)",
                r.problems.len()
            ),
        ),
        Err(e) => check(false, format!("audit: {e}")),
    }

    let store = Store::open(state_dir)?;
    let installed = store.installed()?;
    check(true, format!("tools: {} installed, epoch {}", installed.tools.len(), installed.epoch));
    for (name, tool) in &installed.tools {
        println!("       {name} {}", tool.digest);
    }
    Ok(if healthy { EXIT_OK } else { EXIT_ERROR })
}
