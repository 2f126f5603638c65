//! `bx policy`: write the example, check a file, explain a decision.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use bx_broker::{Decision, Policy};
use bx_runtime::{Limits, Runtime};
use bx_state::StateDir;
use bx_store::Store;
use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK};
use crate::term;

/// `bx policy …`
#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Write the commented example policy to the state directory's policy.toml.
    Init {
        /// Overwrite an existing policy.toml.
        #[arg(long)]
        force: bool,
    },
    /// Check a policy file (default: the state directory's policy.toml) and its
    /// examples, and warn about any grant over bx's own state.
    Check {
        /// The file to check.
        file: Option<PathBuf>,
    },
    /// Show how the policy decides a call: which grants match, the labels, the decision.
    Explain {
        /// The installed tool.
        #[arg(long)]
        tool: String,
        /// The call's arguments, a JSON object.
        #[arg(long, value_name = "JSON")]
        args: String,
        /// The session whose taint applies.
        #[arg(long, default_value = "cli", value_name = "ID")]
        session: String,
    },
}

pub(crate) fn run(state: &StateDir, command: PolicyCommand) -> anyhow::Result<u8> {
    let default = state.policy_file();
    match command {
        PolicyCommand::Init { force } => {
            if default.exists() && !force {
                bail!("{} exists; pass --force to replace it", default.display());
            }
            std::fs::write(&default, bx_broker::EXAMPLE_POLICY)
                .with_context(|| format!("writing {}", default.display()))?;
            outln!("wrote {}", default.display());
            Ok(EXIT_OK)
        }
        PolicyCommand::Check { file } => {
            let path = file.unwrap_or(default);
            let bytes = bx_state::read_own(&path, bx_state::MAX_POLICY_BYTES)?
                .with_context(|| format!("{} does not exist", path.display()))?;
            let text = String::from_utf8(bytes)
                .with_context(|| format!("{} is not UTF-8", path.display()))?;
            match Policy::parse(&path.display().to_string(), &text) {
                Ok(p) => {
                    let config = bx_daemon::load_config(state).unwrap_or_default();
                    let p = p.protect_own(state.own_paths(&config))?;
                    outln!(
                        "{}: ok: {} grants, {} deny rules, {} examples hold",
                        path.display(),
                        p.grants().len(),
                        p.denies().len(),
                        p.examples().len()
                    );
                    for line in bx_daemon::own_state_lines(&p) {
                        outln!("{}", term::shown(&line));
                    }
                    Ok(EXIT_OK)
                }
                Err(errors) => {
                    errln!(
                        "{}\n    runbook: {}",
                        term::shown(&errors.to_string()),
                        errors.runbook()
                    );
                    Ok(EXIT_ERROR)
                }
            }
        }
        PolicyCommand::Explain { tool, args, session } => explain(state, &tool, &args, &session),
    }
}

fn explain(state: &StateDir, tool_name: &str, args: &str, session: &str) -> anyhow::Result<u8> {
    let config = bx_daemon::load_config(state)?;
    let policy = super::run::policy_in_force(state, &config)?;
    let call_args: serde_json::Value =
        serde_json::from_str(args).context("--args is not valid JSON")?;
    let store = Store::open(state, &config)?;
    let runtime = Runtime::new(Limits::default())?;
    let (tool, _) = store.open_tool(&runtime, tool_name)?;
    let files = bx_state::Sessions::open(&state.sessions_dir())?;
    let ledger = bx_agent::Ledger::open(files, &state.audit_dir(&config))?;
    let (taint, damage) = ledger.peek(session)?;
    let workspace = ledger.workspace_of(session);
    let (resources, decision) =
        bx_agent::call::explain(&policy, taint, &tool, &call_args, workspace.as_deref())?;
    outln!("tool:     {} {}", term::one_line(tool_name), tool.digest());
    outln!(
        "session:  {}, taint {taint}{}",
        term::one_line(session),
        damage.map(|d| format!(" ({})", term::one_line(&d))).unwrap_or_default()
    );
    let in_workspace = policy.for_workspace(workspace.as_deref());
    match &workspace {
        Some(w) => {
            outln!("workspace: {}", term::one_line(&w.display().to_string()));
            // What each `{workspace}` rule stands for in this session.
            let grants = policy.grants().iter().zip(in_workspace.grants());
            let grants =
                grants.map(|(r, a)| (format!("grant[{}]", r.index), &r.resource, &a.resource));
            let denies = policy.denies().iter().zip(in_workspace.denies());
            let denies =
                denies.map(|(r, a)| (format!("deny[{}]", r.index), &r.resource, &a.resource));
            for (name, rule, applied) in grants.chain(denies) {
                if rule != applied {
                    outln!("  {name} {rule} = {}", term::one_line(&applied.to_string()));
                }
            }
        }
        None if policy.grants().len() != in_workspace.grants().len()
            || policy.denies().len() != in_workspace.denies().len() =>
        {
            outln!("workspace: none, so the {{workspace}} rules apply to nothing");
        }
        None => {}
    }
    outln!("resources:");
    for r in &resources {
        outln!("  {}", term::one_line(&r.to_string()));
    }
    match decision {
        Decision::Allow(grant) => {
            outln!("decision: allow");
            for (root, kind) in grant.roots() {
                let label = grant.root_label(root).map(|l| l.to_string()).unwrap_or_default();
                outln!("  reaches {} ({kind:?}), label {label}", root.display());
            }
            for host in grant.hosts() {
                let label =
                    grant.host_label(&host.to_string()).map(|l| l.to_string()).unwrap_or_default();
                outln!("  reaches {host}, label {label}");
            }
            for denied in grant.denied() {
                outln!("  never reaches {}", denied.display());
            }
        }
        Decision::Ask(ask) => {
            outln!("decision: ask");
            for m in &ask.matched {
                outln!(
                    "  {} -> {}, label {}, {}",
                    term::one_line(&m.resource.to_string()),
                    m.grant,
                    m.label,
                    if m.clean { "clean" } else { "tainted" }
                );
            }
            for r in &ask.reasons {
                outln!("  why: {}", term::one_line(r));
            }
        }
        Decision::Deny(reason) => {
            outln!("decision: deny\n  why: {}", term::one_line(&reason.message))
        }
    }
    Ok(EXIT_OK)
}
