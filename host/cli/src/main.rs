//! `bx`: the owner's command line.
#![forbid(unsafe_code)]

#[macro_use]
mod term;
mod client;
mod cmd;
mod serving;
mod token;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// bx runs tools as WebAssembly components under grants you decide.
#[derive(Debug, Parser)]
#[command(name = "bx", version, about)]
struct Cli {
    /// State directory (tools, configuration). Default: $XDG_STATE_HOME/bx or
    /// ~/.local/state/bx.
    #[arg(long, env = "BX_HOME", global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install, list, inspect, remove and run tools.
    #[command(subcommand)]
    Tool(cmd::tool::ToolCommand),
    /// Write, check and explain the policy.
    #[command(subcommand)]
    Policy(cmd::policy::PolicyCommand),
    /// Verify and read the audit log.
    #[command(subcommand)]
    Audit(cmd::audit::AuditCommand),
    /// Set, list and remove the secrets the host puts into tools' requests.
    #[command(subcommand)]
    Secret(cmd::secret::SecretCommand),
    /// Show and rebuild session state.
    #[command(subcommand)]
    Session(cmd::session::SessionCommand),
    /// Run the daemon (agent loop, broker, audit, runtime) in the foreground.
    Serve(cmd::serve::ServeArgs),
    /// Talk to the agent: interactive, or one turn with --say.
    Chat(cmd::chat::ChatArgs),
    /// List the approvals waiting for an answer, each with its whole block.
    Approvals(cmd::approvals::ListArgs),
    /// Approve a waiting call by its id.
    Approve(cmd::approvals::ApproveArgs),
    /// Refuse a waiting call by its id, with a reason the model reads.
    Refuse(cmd::approvals::RefuseArgs),
    /// Check the inference server, the policy, the audit log and the installed tools.
    Doctor(cmd::doctor::DoctorArgs),
    /// Serve the installed tools to another agent over MCP (stdio), under the policy;
    /// add, list, accept and remove the owner's other MCP servers behind it.
    Mcp(cmd::mcp::McpArgs),
    /// How bx starts an upstream MCP server: confined, then the server (not for use by
    /// hand).
    #[command(hide = true)]
    Confine(cmd::confine::ConfineArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        // An upstream's start reads no state (its environment is empty): confined, it
        // becomes the server.
        Command::Confine(args) => cmd::confine::run(&args),
        command => match bx_state::StateDir::resolve(cli.state_dir) {
            Ok(state_dir) => run(&state_dir, command),
            Err(e) => {
                errln!("bx: {}", term::shown(&e.to_string()));
                return ExitCode::from(cmd::EXIT_ERROR);
            }
        },
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // An error can carry what a tool or a server said.
            errln!("bx: {}", term::shown(&format!("{e:#}")));
            if let Some(entry) = runbook_of(&e) {
                errln!("    runbook: {entry}");
            }
            ExitCode::from(cmd::EXIT_ERROR)
        }
    }
}

/// Runs `command` against the state directory.
fn run(state_dir: &bx_state::StateDir, command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Tool(command) => cmd::tool::run(state_dir, command),
        Command::Policy(command) => cmd::policy::run(state_dir, command),
        Command::Audit(command) => cmd::audit::run(state_dir, command),
        Command::Session(command) => cmd::session::run(state_dir, command),
        Command::Secret(command) => cmd::secret::run(state_dir, command),
        Command::Serve(args) => cmd::serve::run(state_dir, &args),
        Command::Chat(args) => cmd::chat::run(state_dir, &args),
        Command::Approvals(args) => cmd::approvals::list(state_dir, &args),
        Command::Approve(args) => cmd::approvals::approve(state_dir, &args),
        Command::Refuse(args) => cmd::approvals::refuse(state_dir, &args),
        Command::Doctor(args) => cmd::doctor::run(state_dir, &args),
        Command::Mcp(args) => cmd::mcp::run(state_dir, &args),
        Command::Confine(args) => cmd::confine::run(&args),
    }
}

/// The runbook entry of the first error in `e`'s chain that has one: the errors name
/// their entry through their `runbook()`, and this edge prints it.
fn runbook_of(e: &anyhow::Error) -> Option<&'static str> {
    e.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<bx_agent::AgentError>() {
            return Some(e.runbook());
        }
        if let Some(e) = cause.downcast_ref::<bx_audit::AuditError>() {
            return e.runbook();
        }
        if let Some(e) = cause.downcast_ref::<bx_state::StateError>() {
            return e.runbook();
        }
        if let Some(e) = cause.downcast_ref::<bx_store::StoreError>() {
            return e.runbook();
        }
        if let Some(e) = cause.downcast_ref::<bx_runtime::RunError>() {
            return e.runbook();
        }
        if let Some(e) = cause.downcast_ref::<bx_gateway::GatewayError>() {
            return e.runbook();
        }
        cause.downcast_ref::<bx_infer::InferError>().and_then(bx_infer::InferError::runbook)
    })
}
