//! `bx doctor`: the daemon and its inference self-test, the policy (and any grant over
//! bx's own state, and any credential store under the home it would read), the audit log
//! and the installed tools, each with ok or what is wrong.

use bx_protocol::Body;
use bx_state::{PolicyStatus, StateDir};
use bx_store::Store;
use clap::Args;

use super::{EXIT_ERROR, EXIT_OK};

/// Credential stores a warning names one by one; the rest are counted.
const MAX_GAPS_SHOWN: usize = 5;
use crate::client::Conn;
use crate::term;

/// `bx doctor`
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {}

pub(crate) fn run(state: &StateDir, _args: &DoctorArgs) -> anyhow::Result<u8> {
    let mut healthy = true;
    let mut check = |ok: bool, line: String| {
        healthy &= ok;
        outln!("{} {}", if ok { "ok  " } else { "FAIL" }, term::shown(&line));
    };

    let config = bx_daemon::load_config(state);
    match &config {
        Ok(_) => check(true, "config.toml".into()),
        Err(e) => check(false, format!("config.toml: {e:#}")),
    }

    let answering = Conn::connect(state)
        .ok()
        .and_then(|mut c| c.request(Body::ListSessions {}).ok())
        .is_some_and(|reply| matches!(reply, Body::Sessions { .. }));
    let status = bx_state::read_own(&state.status_file(), bx_state::MAX_OWN_FILE_BYTES)
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok());
    match (answering, status) {
        (true, Some(s)) if s["url"].is_null() => {
            check(
                true,
                format!(
                    "daemon: pid {}, no model configured (tools only; see docs/runbook.md#no-model)",
                    s["pid"]
                ),
            );
        }
        (true, Some(s)) => {
            check(true, format!("daemon: pid {} serving {}", s["pid"], s["url"]));
            match serde_json::from_value::<bx_infer::SelfTest>(s["self_test"].clone()) {
                Ok(report) => {
                    let ok = report.completion_ok && report.problems.is_empty();
                    check(ok, "inference self-test (at daemon start):".into());
                    for line in report.to_string().lines() {
                        outln!("       {}", term::one_line(line));
                    }
                }
                Err(e) => {
                    check(false, format!("inference self-test: unreadable in daemon.json: {e}"))
                }
            }
        }
        (true, None) => check(true, "daemon: answering (no status file)".into()),
        (false, _) => outln!("-    daemon: not running (`bx chat` or `bx serve` starts one)"),
    }
    telemetry(state, answering);

    // With an invalid config, the default places are still worth checking.
    let config = config.unwrap_or_default();
    let policy = state.watch_policy(&config);
    match policy.status() {
        PolicyStatus::Valid => check(true, "policy: valid".into()),
        PolicyStatus::Missing => check(
            true,
            "policy: none yet (every call is refused; `bx policy init` writes one)".into(),
        ),
        other => check(false, format!("policy: {other:?} (see docs/runbook.md#policy-invalid)")),
    }
    if let Some(p) = policy.in_force() {
        for line in bx_daemon::own_state_lines(&p) {
            outln!("warn {}", term::shown(&line));
        }
        // A policy that reads a home without the default's credential-store denies: the
        // first few gaps by name, and how many in all.
        if let Some(home) = std::env::home_dir() {
            let gaps = p.missing_credential_denies(&home);
            for gap in gaps.iter().take(MAX_GAPS_SHOWN) {
                let how = match gap.decision {
                    bx_broker::Expect::Allow => "without asking",
                    bx_broker::Expect::Ask | bx_broker::Expect::Deny => "after asking",
                };
                outln!(
                    "warn policy: {} reads {} ({}) {how} when the workspace is your home; add it to a [[deny]] name list (see docs/policy.md#what-the-default-refuses-and-asks)",
                    term::one_line(&gap.tool),
                    term::one_line(&gap.path.display().to_string()),
                    gap.what
                );
            }
            if gaps.len() > MAX_GAPS_SHOWN {
                outln!(
                    "warn policy: {} more credential stores under your home are not refused",
                    gaps.len() - MAX_GAPS_SHOWN
                );
            }
        }
    }

    // The reviewer and the notice of `[approvals]`: a program that cannot run refuses
    // every call that asks (the reviewer) or tells nobody (the notice).
    for (key, argv) in
        [("reviewer", &config.approvals.reviewer), ("notify", &config.approvals.notify)]
    {
        let Some(program) = argv.first() else { continue };
        let shown = term::one_line(program);
        match runnable(std::path::Path::new(program)) {
            Ok(()) => check(true, format!("approvals: {key} {shown} is executable")),
            Err(why) => check(
                false,
                format!("approvals: {key} {shown}: {why} (see docs/runbook.md#reviewer-failed)"),
            ),
        }
    }

    // The secret store: readable by bx alone, and every bound secret set.
    match state.secrets().load() {
        Ok(loaded) => {
            if let Some(why) = &loaded.exposed {
                check(
                    false,
                    format!(
                        "secrets: {} (see docs/runbook.md#secrets-exposed)",
                        term::one_line(why)
                    ),
                );
            } else {
                check(true, format!("secrets: {} stored, mode 0600", loaded.secrets.len()));
            }
            for b in policy.in_force().iter().flat_map(|p| p.secrets().to_vec()) {
                if !loaded.secrets.contains_key(&b.name) {
                    outln!(
                        "warn secrets: {} binds {}, which is not set (bx secret set {}; see docs/runbook.md#secret-missing)",
                        term::one_line(&b.to_string()),
                        b.name,
                        b.name
                    );
                }
            }
        }
        Err(e) => check(
            false,
            format!(
                "secrets: {} (see docs/runbook.md#secrets-unreadable)",
                term::one_line(&e.to_string())
            ),
        ),
    }

    let anchor = bx_daemon::audit_anchor(state, &config);
    let against = bx_audit::Against {
        verifier: anchor.as_ref().ok().and_then(Option::as_ref).map(|a| a.verifier().to_owned()),
        exports: config.audit.export.clone(),
        files: Vec::new(),
        required: false,
    };
    let verified = bx_audit::verify_against(&state.audit_dir(&config), &against);
    let records = verified.as_ref().map_or(0, |r| r.records);
    match verified {
        Ok(r) if r.is_clean() => check(
            true,
            format!(
                "audit: {} records in {} files, chain intact, {}",
                r.records,
                r.files.len(),
                match r.anchor.state.as_str() {
                    "anchored" => format!(
                        "anchored by {} signed checkpoint(s) up to record {} ({} past it not yet)",
                        r.anchor.checkpoints, r.anchor.size, r.anchor.unanchored
                    ),
                    _ => "unanchored".to_owned(),
                }
            ),
        ),
        Ok(r) => check(
            false,
            format!(
                "audit: {} problems (run `bx audit verify`; see docs/runbook.md#audit-broken)",
                r.problems.len() as u64 + r.problems_more
            ),
        ),
        Err(e) => check(false, format!("audit: {e}")),
    }
    match &anchor {
        Ok(None) => outln!(
            "-    audit anchor: none; the log can only show it agrees with itself (`bx audit key init` and [audit] export; see docs/audit.md)"
        ),
        Ok(Some(a)) => {
            check(
                true,
                format!(
                    "audit anchor: key {} (origin {}), {} export director{}",
                    a.key().display(),
                    a.origin(),
                    a.exports().len(),
                    if a.exports().len() == 1 { "y" } else { "ies" }
                ),
            );
            if a.exports().is_empty() {
                outln!(
                    "warn no [audit] export directory: checkpoints are signed but kept only on this host"
                );
            }
            for dir in a.exports() {
                let shown = term::one_line(&dir.display().to_string());
                match bx_audit::newest_exported(dir, a.origin()) {
                    None if records > 0 => check(
                        false,
                        format!(
                            "audit export to {shown}: no checkpoint there yet (see docs/runbook.md#audit-export-failed)"
                        ),
                    ),
                    None => {}
                    Some(size) => outln!(
                        "-    audit export to {shown}: the newest checkpoint covers {size} of {records} records"
                    ),
                }
            }
            let status = bx_state::read_own(&state.audit_dir(&config).join("export.json"), 1 << 20)
                .map_err(|e| e.to_string())
                .and_then(|t| {
                    t.map(|t| serde_json::from_slice::<serde_json::Value>(&t))
                        .transpose()
                        .map_err(|e| e.to_string())
                });
            let status = match status {
                Ok(status) => status,
                Err(e) => {
                    check(
                        false,
                        format!(
                            "audit export status (audit/export.json) unreadable: {e}; the log's export-failed records say what failed"
                        ),
                    );
                    None
                }
            };
            if let Some(status) = status {
                for e in status["exports"].as_array().into_iter().flatten() {
                    if let Some(error) = e["error"].as_str() {
                        check(
                            false,
                            format!(
                                "audit export to {} failed at {} ({} records): {error} (see docs/runbook.md#audit-export-failed)",
                                e["dir"].as_str().unwrap_or("?"),
                                status["time"].as_str().unwrap_or("?"),
                                status["size"]
                            ),
                        );
                    }
                }
            }
        }
        Err(e) => check(false, format!("audit anchor: {e}")),
    }

    let store = Store::open(state, &config)?;
    let installed = store.installed()?;
    check(true, format!("tools: {} installed, epoch {}", installed.tools.len(), installed.epoch));
    for (name, tool) in &installed.tools {
        outln!("       {} {}", term::one_line(name), term::one_line(&tool.digest));
    }
    Ok(if healthy { EXIT_OK } else { EXIT_ERROR })
}

/// Whether `path` is a regular file with an execute bit, or why not.
/// What the running daemon's trace exporter sent and lost (`telemetry.json`, written by
/// the daemon alone). A warning, never a failure: telemetry is a view, and what it lost
/// the audit log still has.
fn telemetry(state: &StateDir, answering: bool) {
    let status = bx_state::read_own(&state.telemetry_status(), bx_state::MAX_OWN_FILE_BYTES)
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_slice::<bx_telemetry::Status>(&t).ok());
    let daemon_pid = bx_state::read_own(&state.status_file(), bx_state::MAX_OWN_FILE_BYTES)
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
        .and_then(|s| s["pid"].as_u64());
    match status {
        Some(s) => {
            // The running daemon's, or the counts the last one left as it ended.
            let whose = if answering && daemon_pid == Some(u64::from(s.pid)) {
                String::new()
            } else {
                format!(" (the daemon that ended, pid {})", s.pid)
            };
            let lost = s.dropped + s.failed;
            let line = format!(
                "telemetry{whose}: {} span(s) exported to {}, {} dropped (queue full or left at exit), {} lost in failed exports",
                s.exported, s.endpoint, s.dropped, s.failed
            );
            if lost == 0 {
                outln!("ok   {}", term::shown(&line));
            } else {
                outln!("warn {} (see docs/runbook.md#telemetry-dropped)", term::shown(&line));
                if !s.last_error.is_empty() {
                    outln!("       last error: {}", term::one_line(&s.last_error));
                }
            }
        }
        _ => outln!(
            "-    telemetry: off, or no export yet ([telemetry] in config.toml, docs/telemetry.md)"
        ),
    }
}

/// Why a program the config names cannot be run.
#[derive(Debug)]
enum NotRunnable {
    /// It cannot be looked at (missing, or a directory on the way is not readable).
    Unreadable(std::io::Error),
    /// It is a directory, a device, a socket.
    NotAFile,
    /// No execute bit is set.
    NotExecutable,
}

impl std::fmt::Display for NotRunnable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotRunnable::Unreadable(e) => write!(f, "{e}"),
            NotRunnable::NotAFile => f.write_str("not a regular file"),
            NotRunnable::NotExecutable => f.write_str("not executable"),
        }
    }
}

fn runnable(path: &std::path::Path) -> Result<(), NotRunnable> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).map_err(NotRunnable::Unreadable)?;
    if !meta.is_file() {
        return Err(NotRunnable::NotAFile);
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(NotRunnable::NotExecutable);
    }
    Ok(())
}
