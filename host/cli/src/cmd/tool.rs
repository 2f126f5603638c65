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
    /// Install a tool from a file, an https URL, a registry (oci://REGISTRY/REPO:TAG or
    /// @sha256:MANIFEST), or its digest alone (local store, then the mirrors in
    /// config.toml). The component's bytes must hash to --digest.
    Install(InstallArgs),
    /// Publish a component to a registry as a Wasm OCI artifact (oci://REGISTRY/REPO:TAG).
    Publish(PublishArgs),
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
    /// For a standard WASI component: the name its tools start with (NAME.FUNCTION).
    /// Default: the WIT package of an interface it exports, else the name it carries,
    /// else the name of its file, URL or repository made fit for a tool name
    /// (docs/store.md#names).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// For a standard WASI component: what its functions may reach, bx's TOML or
    /// Wassette's policy.yaml (docs/policy.md#manifests). Without one, its functions
    /// reach no file and no host.
    #[arg(long, value_name = "FILE")]
    manifest: Option<std::path::PathBuf>,
    /// Install a version that declares more than the one it replaces: a new resource
    /// argument, a new kind, a new static path or host (docs/store.md#capability-lock).
    #[arg(long)]
    accept_widening: bool,
    /// Reach the registry over plain http although it is not this machine.
    #[arg(long)]
    plain_http: bool,
}

/// `bx tool publish`
#[derive(Debug, Args)]
pub(crate) struct PublishArgs {
    /// The component file.
    file: std::path::PathBuf,
    /// Where to: oci://REGISTRY/REPO:TAG.
    reference: String,
    /// Reach the registry over plain http although it is not this machine.
    #[arg(long)]
    plain_http: bool,
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
        ToolCommand::Install(args) => install(state, &config, &store, args),
        ToolCommand::Publish(args) => publish(&args),
        ToolCommand::List(args) => list(&store, &args),
        ToolCommand::Inspect { name } => inspect(&store, &name),
        ToolCommand::Remove { name } => {
            let recorder = Recorder::new(state, &config, &store, false);
            let record = |change: &bx_store::Change<'_>| recorder.record(change);
            let removed = store.remove(&name, Some(&record))?;
            recorder.finish()?;
            outln!("removed {name} ({})", removed.digest);
            Ok(EXIT_OK)
        }
        ToolCommand::Run(args) => super::run::run(state, &args),
    }
}

fn runtime() -> anyhow::Result<Runtime> {
    Ok(Runtime::new(Limits::default())?)
}

fn install(
    state: &StateDir,
    config: &bx_state::Config,
    store: &Store,
    args: InstallArgs,
) -> anyhow::Result<u8> {
    let source = InstallSource::parse(&args.source)?;
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
    let manifest = match &args.manifest {
        Some(path) => Some(bx_store::Manifest::read(path)?),
        None => None,
    };
    for note in manifest.iter().flat_map(|m| &m.notes) {
        errln!("bx: manifest: {}", term::one_line(note));
    }
    // What a manifest asks for whatever the arguments is decided now against the
    // owner's policy: a refusal refuses the install (a call would be refused anyway).
    let policy = match &manifest {
        Some(m) if !m.manifest.reach.is_empty() => {
            Some(super::run::policy_in_force(state, config)?)
        }
        _ => None,
    };
    let check = |tool: &str, statics: &[(bx_runtime::ResourceKind, String)]| match &policy {
        Some(policy) => check_statics(policy, tool, &digest.to_string(), statics),
        None => Ok(()),
    };
    let recorder = Recorder::new(state, config, store, args.accept_widening);
    let record = |change: &bx_store::Change<'_>| recorder.record(change);
    let options = bx_store::InstallOptions {
        replace: args.replace,
        name: args.name.clone(),
        manifest: manifest.map(|m| m.manifest),
        manifest_path: args.manifest.as_ref().map(|p| p.display().to_string()),
        check: Some(&check),
        accept_widening: args.accept_widening,
        plain_http: args.plain_http,
        record: Some(&record),
    };
    let outcome = store.install(&runtime, &source, &digest, &options, &mut progress);
    bar.finish_and_clear();
    let outcome = outcome?;
    recorder.finish()?;
    for why in &outcome.skipped {
        errln!("bx: not installed: {}", term::one_line(why));
    }
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
    // A name the owner did not give and the component does not declare is said, with
    // how to choose another.
    let named = match outcome.named_by {
        bx_store::NamedBy::Component => Some("the name it carries in its component-name section"),
        bx_store::NamedBy::File => Some("its file name: it carries no name of its own"),
        bx_store::NamedBy::Url => Some("its URL: it carries no name of its own"),
        bx_store::NamedBy::Repository => Some("its repository: it carries no name of its own"),
        bx_store::NamedBy::Describe | bx_store::NamedBy::Given | bx_store::NamedBy::Package => None,
    };
    if let Some(after) = named.filter(|_| outcome.changed) {
        outln!("named {} after {after} (--name NAME chooses another)", outcome.name);
    }
    if outcome.tools.len() > 1 || outcome.tools.first() != Some(&outcome.name) {
        outln!("tools: {}", outcome.tools.join(", "));
    }
    if let Some(source) = &outcome.source {
        outln!("from {source}");
    }
    if let Some(signer) = &outcome.signer {
        outln!("signed by {}", term::one_line(signer));
    }
    if !outcome.difference.is_empty() {
        if outcome.replaced.is_some() {
            outln!("what it declares, against what it replaced:");
        } else {
            outln!("what it declares:");
        }
        for line in &outcome.difference {
            outln!("  {}", term::one_line(line));
        }
    }
    Ok(EXIT_OK)
}

/// Makes the record of a change of the installed set, for the store's journal, and puts
/// the journal on the audit log once the change is made. The log is opened (its lock
/// taken, as a one-shot `bx tool run` does) when the first record is asked for: a log
/// that cannot be written refuses the change before anything is; while a running
/// `bx serve` holds it, the daemon writes the journal before its tools change.
pub(crate) struct Recorder<'a> {
    state: &'a StateDir,
    config: &'a bx_state::Config,
    store: &'a Store,
    widening_accepted: bool,
    /// The log once opened; `None` inside when the daemon holds it.
    log: std::cell::OnceCell<Option<bx_audit::AuditLog>>,
}

impl<'a> Recorder<'a> {
    pub(crate) fn new(
        state: &'a StateDir,
        config: &'a bx_state::Config,
        store: &'a Store,
        widening_accepted: bool,
    ) -> Recorder<'a> {
        Recorder { state, config, store, widening_accepted, log: std::cell::OnceCell::new() }
    }

    pub(crate) fn record(
        &self,
        change: &bx_store::Change<'_>,
    ) -> Result<String, bx_store::StoreError> {
        use bx_audit::{MAX_ITEM_BYTES, ToolChange, bounded};
        if self.log.get().is_none() {
            let log = match bx_daemon::open_audit(self.state, self.config, LOG_LOCK_WAIT) {
                Ok(log) => Some(log),
                Err(bx_audit::AuditError::Locked(_)) => None,
                Err(e) => return Err(bx_store::StoreError::Unrecorded(e.to_string())),
            };
            let _ = self.log.set(log);
        }
        let item = |s: &String| bounded(s, MAX_ITEM_BYTES);
        let entry = match change {
            bx_store::Change::Install(o) => ToolChange {
                action: if o.replaced.is_some() { "replace" } else { "install" }.to_owned(),
                name: o.name.clone(),
                tools: o.tools.clone(),
                digest: o.digest.to_string(),
                previous: o.replaced.clone().unwrap_or_default(),
                source: o.source.clone().unwrap_or_default(),
                signer: o.signer.clone().unwrap_or_default(),
                difference: bounded_lines(&o.difference, item),
                widening_accepted: self.widening_accepted
                    && o.replaced.is_some()
                    && o.difference.iter().any(|l| l.starts_with('+')),
                epoch: o.epoch,
            },
            bx_store::Change::Remove(name, tool, epoch) => ToolChange {
                action: "remove".to_owned(),
                name: (*name).to_owned(),
                tools: vec![(*name).to_owned()],
                digest: String::new(),
                previous: tool.digest.clone(),
                source: tool.source.clone().unwrap_or_default(),
                signer: tool.signer.clone().unwrap_or_default(),
                difference: Vec::new(),
                widening_accepted: false,
                epoch: *epoch,
            },
            bx_store::Change::Upstream { action, name, upstream, previous, epoch } => {
                let digest = |u: &bx_gateway::Upstream| {
                    serde_json::to_vec(u)
                        .map(|bytes| format!("sha256:{}", bx_audit::sha256_hex(&bytes)))
                        .unwrap_or_default()
                };
                let pinned = |u: Option<&bx_gateway::Upstream>| -> Vec<String> {
                    u.map(|u| u.tools.keys().map(|t| format!("{name}.{t}")).collect())
                        .unwrap_or_default()
                };
                let removing = *action == bx_store::UpstreamAction::Remove;
                let now = if removing { None } else { *upstream };
                let (before, after) = (pinned(*previous), pinned(now));
                let difference: Vec<String> = (after.iter().filter(|t| !before.contains(t)))
                    .map(|t| format!("+ {t}"))
                    .chain(before.iter().filter(|t| !after.contains(t)).map(|t| format!("- {t}")))
                    .collect();
                ToolChange {
                    action: action.as_str().to_owned(),
                    name: (*name).to_owned(),
                    tools: if removing { before } else { after },
                    digest: now.map(digest).unwrap_or_default(),
                    previous: previous.map(digest).unwrap_or_default(),
                    source: upstream.map(|u| item(&u.transport.to_string())).unwrap_or_default(),
                    signer: String::new(),
                    difference: bounded_lines(&difference, item),
                    widening_accepted: false,
                    epoch: *epoch,
                }
            }
        };
        serde_json::to_string(&entry).map_err(|e| bx_store::StoreError::Unrecorded(e.to_string()))
    }

    /// After the change: the journal onto the log, or a word that the daemon will.
    pub(crate) fn finish(&self) -> anyhow::Result<()> {
        match self.log.get() {
            Some(Some(log)) => {
                bx_agent::record_pending(self.store, log)?;
                log.checkpoint()?;
            }
            Some(None) => errln!(
                "bx: the audit log is held by a running bx serve; it records this change before its next call"
            ),
            None => {}
        }
        Ok(())
    }
}

/// At most 256 lines of a difference, each cut at `item`, and a last line saying how many
/// more there were.
fn bounded_lines(lines: &[String], item: impl Fn(&String) -> String) -> Vec<String> {
    const MAX_LINES: usize = 256;
    let mut out: Vec<String> = lines.iter().take(MAX_LINES).map(item).collect();
    if lines.len() > MAX_LINES {
        out.push(format!("… and {} more lines ({} in all)", lines.len() - MAX_LINES, lines.len()));
    }
    out
}

/// How long a tool change waits for the audit log's lock (another command's call) before
/// it leaves its record for the daemon that holds it.
const LOG_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn publish(args: &PublishArgs) -> anyhow::Result<u8> {
    let reference = bx_store::oci::Reference::parse(&args.reference)?;
    let bytes =
        std::fs::read(&args.file).map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    if bytes.len() as u64 > bx_store::MAX_COMPONENT_BYTES {
        bail!("{} is over {} bytes", args.file.display(), bx_store::MAX_COMPONENT_BYTES);
    }
    // Only a component is published: its world is read (not compiled) first, and named
    // in the artifact's config.
    let world = bx_runtime::world_of(&bytes)?;
    let registry = bx_store::oci::Registry::connect_to_publish(&reference, args.plain_http)?;
    let published = registry.publish(&bytes, &world.imports, &world.exports)?;
    let pinned = bx_store::oci::Reference { tag: None, ..reference.at(&published.manifest) };
    outln!("published {pinned}");
    outln!("component {}", published.component);
    outln!(
        "install with: bx tool install {reference}@{} --digest {}",
        published.manifest,
        published.component
    );
    Ok(EXIT_OK)
}

/// Decides a standard component's static resources (absolute paths and hosts; relative
/// paths wait for a session's workspace) against the policy at a clean taint; a refusal
/// is the install's.
fn check_statics(
    policy: &bx_broker::Policy,
    tool: &str,
    digest: &str,
    statics: &[(bx_runtime::ResourceKind, String)],
) -> Result<(), bx_store::StaticRefused> {
    use bx_broker::{CallRequest, Decision, Label, Resource};
    use bx_runtime::ResourceKind as K;
    let resources: Vec<Resource> = statics
        .iter()
        .filter_map(|(kind, text)| match kind {
            K::PathRead if text.starts_with('/') => Some(Resource::PathRead(text.clone())),
            K::PathWrite if text.starts_with('/') => Some(Resource::PathWrite(text.clone())),
            K::UrlFetch => Some(Resource::Url(text.clone())),
            _ => None,
        })
        .collect();
    for resource in resources {
        let call = CallRequest {
            tool: tool.to_owned(),
            digest: digest.to_owned(),
            resources: vec![resource.clone()],
        };
        if let Decision::Deny(reason) = bx_broker::decide(policy, Label::CLEAN, &call) {
            return Err(bx_store::StaticRefused { tool: tool.to_owned(), resource, reason });
        }
    }
    Ok(())
}

fn list(store: &Store, args: &ListArgs) -> anyhow::Result<u8> {
    let installed = store.installed()?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&installed)?);
        return Ok(EXIT_OK);
    }
    if installed.tools.is_empty() && installed.upstreams.is_empty() {
        errln!("no tools installed (tool epoch {})", installed.epoch);
        return Ok(EXIT_OK);
    }
    outln!("{:<24} {:<7} {:<14} {:>9}  RESOURCES", "NAME", "KIND", "DIGEST", "SIZE");
    for (name, tool) in &installed.tools {
        let short = Digest::parse(&tool.digest).map(|d| d.short()).unwrap_or_else(|_| "?".into());
        let resources =
            if tool.resources.is_empty() { "-".to_owned() } else { tool.resources.join(",") };
        let kind = if tool.function.is_some() { "wasi" } else { "bx:tool" };
        outln!("{name:<24} {kind:<7} {short:<14} {:>9}  {resources}", tool.size);
    }
    // The upstreams' tools (docs/gateway.md): the pin's digest, and the manifest's labels
    // (or that there are none).
    for (server, up) in &installed.upstreams {
        for (tool, pin) in &up.tools {
            let name = term::one_line(&format!("{server}.{tool}"));
            let short =
                Digest::parse(&pin.digest).map(|d| d.short()).unwrap_or_else(|_| "?".into());
            let labels = upstream_labels(up, tool);
            outln!("{name:<24} {:<7} {short:<14} {:>9}  {}", "mcp", "-", term::one_line(&labels));
        }
    }
    Ok(EXIT_OK)
}

/// An upstream tool's labels as its manifest gives them, in words: `bx tool list` and the
/// owner's page show them.
pub(crate) fn upstream_labels(up: &bx_gateway::Upstream, tool: &str) -> String {
    match up.labels.get(tool) {
        _ if up.guard.is_some() => "labelled item by item by its guard".to_owned(),
        Some(l) => match &l.sink {
            Some(sink) => format!("result {}, sink {}", l.result, sink),
            None => format!("result {}", l.result),
        },
        None => "unlabelled: asks before every use".to_owned(),
    }
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
    let installed = store.installed()?;
    if let Some(entry) = installed.tools.get(name) {
        if let Some(source) = &entry.source {
            outln!("source:   {}", term::one_line(source));
        }
        let signer = entry.signer.as_deref().unwrap_or("(no signature was required)");
        outln!("signed:   {}", term::one_line(signer));
        outln!("declared: {}", entry.declared.schema);
        for line in entry.declared.lines(name) {
            outln!("  {}", term::one_line(&line));
        }
    }
    if let Some(export) = tool.export() {
        outln!("function: {} (a standard WASI component)", term::one_line(&export));
    }
    outln!("resources:");
    for r in &d.resources {
        outln!("  {} ({})", term::one_line(&r.arg), bx_runtime::resource_kind_name(r.kind));
    }
    if !tool.statics().is_empty() {
        outln!("reaches whatever its arguments (from its manifest):");
        for (kind, what) in tool.statics() {
            outln!("  {} ({})", term::one_line(what), bx_runtime::resource_kind_name(*kind));
        }
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
