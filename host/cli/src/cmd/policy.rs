//! `bx policy`: write the example, check a file, explain a decision.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use bx_broker::{CallRequest, Decision, Policy};
use bx_runtime::{Limits, Runtime};
use bx_store::{Sessions, Store};
use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK};

/// `bx policy …`
#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Write the commented example policy to the state directory's policy.toml.
    Init {
        /// Overwrite an existing policy.toml.
        #[arg(long)]
        force: bool,
    },
    /// Check a policy file (default: the state directory's policy.toml) and its examples.
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

pub(crate) fn run(state_dir: &Path, command: PolicyCommand) -> anyhow::Result<u8> {
    let default = state_dir.join("policy.toml");
    match command {
        PolicyCommand::Init { force } => {
            if default.exists() && !force {
                bail!("{} exists; pass --force to replace it", default.display());
            }
            std::fs::write(&default, bx_broker::EXAMPLE_POLICY)
                .with_context(|| format!("writing {}", default.display()))?;
            println!("wrote {}", default.display());
            Ok(EXIT_OK)
        }
        PolicyCommand::Check { file } => {
            let path = file.unwrap_or(default);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            match Policy::parse(&path.display().to_string(), &text) {
                Ok(p) => {
                    println!(
                        "{}: ok: {} grants, {} deny rules, {} examples hold",
                        path.display(),
                        p.grants().len(),
                        p.denies().len(),
                        p.examples().len()
                    );
                    Ok(EXIT_OK)
                }
                Err(errors) => {
                    eprintln!("{errors}");
                    Ok(EXIT_ERROR)
                }
            }
        }
        PolicyCommand::Explain { tool, args, session } => {
            explain(state_dir, &tool, &args, &session)
        }
    }
}

fn explain(state_dir: &Path, tool_name: &str, args: &str, session: &str) -> anyhow::Result<u8> {
    let policy = super::run::policy_in_force(state_dir)?;
    let call_args: serde_json::Value =
        serde_json::from_str(args).context("--args is not valid JSON")?;
    let store = Store::open(state_dir)?;
    let runtime = Runtime::new(Limits::default())?;
    let tool = store.open_tool(&runtime, tool_name)?;
    let call = CallRequest {
        tool: tool_name.to_owned(),
        digest: tool.digest().to_owned(),
        resources: bx_agent::call::resources(&tool, &call_args).map_err(anyhow::Error::msg)?,
    };
    let (taint, damage) = Sessions::open(state_dir)?.taint(session)?;
    println!("tool:     {tool_name} {}", tool.digest());
    println!(
        "session:  {session}, taint {taint}{}",
        damage.map(|d| format!(" ({d})")).unwrap_or_default()
    );
    println!("resources:");
    for r in &call.resources {
        println!("  {}", bx_broker::escape_untrusted(&r.to_string(), false));
    }
    match bx_broker::decide(&policy, taint, &call) {
        Decision::Allow(grant) => {
            println!("decision: allow");
            for (root, kind) in grant.roots() {
                let label = grant.root_label(root).map(|l| l.to_string()).unwrap_or_default();
                println!("  reaches {} ({kind:?}), label {label}", root.display());
            }
            for host in grant.hosts() {
                let label =
                    grant.host_label(&host.to_string()).map(|l| l.to_string()).unwrap_or_default();
                println!("  reaches {host}, label {label}");
            }
        }
        Decision::Ask(ask) => {
            println!("decision: ask");
            for m in &ask.matched {
                println!(
                    "  {} -> {}, label {}, {}",
                    m.resource,
                    m.grant,
                    m.label,
                    if m.clean { "clean" } else { "tainted" }
                );
            }
            for r in &ask.reasons {
                println!("  why: {r}");
            }
        }
        Decision::Deny(reason) => println!("decision: deny\n  why: {reason}"),
    }
    Ok(EXIT_OK)
}
