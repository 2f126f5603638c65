//! `bx tool`: install by digest, list, inspect, remove, and run a tool by hand.

use anyhow::bail;
use bx_runtime::{Limits, Runtime};
use bx_state::StateDir;
use bx_store::{Digest, InstallSource, Store};
use clap::{Args, Subcommand};

use super::EXIT_OK;
use crate::term;

/// `bx tool …`
#[derive(Debug, Subcommand)]
pub(crate) enum ToolCommand {
    /// Install a tool from a file, an https URL, or its digest alone (local store, then
    /// the mirrors in config.toml). The bytes must hash to --digest.
    Install(InstallArgs),
    /// List installed tools.
    List(ListArgs),
    /// Show what a tool says about itself and what it imports.
    Inspect {
        /// The tool's name.
        name: String,
    },
    /// Remove a tool from the installed set (its bytes stay in the store).
    Remove {
        /// The tool's name.
        name: String,
    },
    /// Run a tool once by hand: the policy (plus any --allow flags) decides, the call and
    /// its result go on the audit log, and the session's taint rises.
    Run(super::run::RunArgs),
}

/// `bx tool install`
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// A file path, an https:// URL, or sha256:HEX.
    source: String,
    /// The expected digest, sha256:HEX. Required unless SOURCE is the digest.
    #[arg(long)]
    digest: Option<String>,
    /// Replace a tool of the same name that has another digest.
    #[arg(long)]
    replace: bool,
}

/// `bx tool list`
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(state: &StateDir, command: ToolCommand) -> anyhow::Result<u8> {
    if let ToolCommand::Run(args) = &command {
        return super::run::run(state, args);
    }
    let config = bx_daemon::load_config(state)?;
    let store = Store::open(state, &config)?;
    match command {
        ToolCommand::Install(args) => install(&store, args),
        ToolCommand::List(args) => list(&store, &args),
        ToolCommand::Inspect { name } => inspect(&store, &name),
        ToolCommand::Remove { name } => {
            let removed = store.remove(&name)?;
            outln!("removed {name} ({})", removed.digest);
            Ok(EXIT_OK)
        }
        ToolCommand::Run(args) => super::run::run(state, &args),
    }
}

fn runtime() -> anyhow::Result<Runtime> {
    Ok(Runtime::new(Limits::default())?)
}

fn install(store: &Store, args: InstallArgs) -> anyhow::Result<u8> {
    let source = InstallSource::parse(&args.source);
    let digest_text = match (&source, &args.digest) {
        (InstallSource::Digest, None) => args.source.clone(),
        (InstallSource::Digest, Some(d)) if *d != args.source => {
            bail!("--digest {d} differs from the digest given as the source {}", args.source)
        }
        (_, Some(d)) => d.clone(),
        (_, None) => {
            bail!("--digest sha256:HEX is required: bx installs only what you can name by hash")
        }
    };
    let digest = Digest::parse(&digest_text)?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bytes}/{total_bytes} {wide_bar} {bytes_per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut progress = |done: u64, total: Option<u64>| {
        if let Some(total) = total {
            bar.set_length(total);
        }
        bar.set_position(done);
    };
    let runtime = runtime()?;
    let outcome = store.install(&runtime, &source, &digest, args.replace, &mut progress);
    bar.finish_and_clear();
    let outcome = outcome?;
    match (&outcome.replaced, outcome.changed) {
        (_, false) => outln!("{} is already installed as {}", outcome.name, outcome.digest),
        (Some(old), true) => {
            outln!(
                "replaced {} {old} with {} (tool epoch {})",
                outcome.name,
                outcome.digest,
                outcome.epoch
            )
        }
        (None, true) => {
            outln!("installed {} {} (tool epoch {})", outcome.name, outcome.digest, outcome.epoch)
        }
    }
    Ok(EXIT_OK)
}

fn list(store: &Store, args: &ListArgs) -> anyhow::Result<u8> {
    let installed = store.installed()?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&installed)?);
        return Ok(EXIT_OK);
    }
    if installed.tools.is_empty() {
        errln!("no tools installed (tool epoch {})", installed.epoch);
        return Ok(EXIT_OK);
    }
    outln!("{:<16} {:<14} {:>9}  RESOURCES", "NAME", "DIGEST", "SIZE");
    for (name, tool) in &installed.tools {
        let short = Digest::parse(&tool.digest).map(|d| d.short()).unwrap_or_else(|_| "?".into());
        let resources =
            if tool.resources.is_empty() { "-".to_owned() } else { tool.resources.join(",") };
        outln!("{name:<16} {short:<14} {:>9}  {resources}", tool.size);
    }
    Ok(EXIT_OK)
}

fn inspect(store: &Store, name: &str) -> anyhow::Result<u8> {
    let runtime = runtime()?;
    let (tool, cache) = store.open_tool(&runtime, name)?;
    if let bx_runtime::CacheOutcome::Replaced(why) = cache {
        errln!(
            "bx: warning: its precompiled code was refused and compiled again: {} (see docs/runbook.md#precompiled-cache)",
            term::one_line(&why)
        );
    }
    // What a tool says about itself is the tool's text: escaped like any.
    let d = tool.description();
    outln!("name:     {}", term::one_line(&d.name));
    outln!("digest:   {}", tool.digest());
    outln!("summary:  {}", term::one_line(&d.summary));
    outln!("resources:");
    for r in &d.resources {
        outln!("  {} ({})", term::one_line(&r.arg), bx_runtime::resource_kind_name(r.kind));
    }
    let schema: serde_json::Value = serde_json::from_str(&d.args_schema)
        .unwrap_or(serde_json::Value::String(d.args_schema.clone()));
    outln!("arguments schema:\n{}", term::json_pretty(&schema)?);
    outln!("imports:");
    for i in &tool.world().imports {
        outln!("  {}", term::one_line(i));
    }
    outln!("exports:");
    for e in &tool.world().exports {
        outln!("  {}", term::one_line(e));
    }
    Ok(EXIT_OK)
}
