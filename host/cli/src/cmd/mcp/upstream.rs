//! `bx mcp add`, `list`, `accept` and `remove`: the owner's other MCP servers, whose
//! tools become bx tools named `NAME.TOOL`. Adding starts the server, lists its tools
//! and pins them (name, description, input schema) in the installed set, on the audit
//! log like a tool install; a later list that differs keeps the changed tools off until
//! `bx mcp accept` shows the difference and pins them again. See `docs/gateway.md`.

use std::collections::BTreeMap;

use anyhow::Context as _;
use bx_gateway::{Changes, Connection, Limits, ListedTool, Transport, Upstream};
use bx_state::StateDir;
use bx_store::{Store, UpstreamAction};
use clap::Args;

use super::super::EXIT_OK;
use crate::cmd::tool::Recorder;
use crate::term;

/// `bx mcp add NAME [--env K=V]... [--cwd DIR] -- COMMAND [ARGS...]`, or
/// `bx mcp add NAME --url URL [--allow-private]`
#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// Its name: its tools are `NAME.TOOL` (a-z, 0-9, `_`, `-`; starting with a letter).
    name: String,
    /// A variable its process gets (repeatable): nothing else of bx's environment is
    /// passed on.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// A variable its process gets set to a secret's value from bx's store, when it
    /// starts (repeatable): the record keeps the name, never the value.
    #[arg(long = "secret-env", value_name = "VAR=SECRET")]
    secret_env: Vec<String>,
    /// A header sent with every request to an HTTP upstream's origin (repeatable): its
    /// value a template naming secrets of bx's store (`Authorization=Bearer
    /// {secret:github}`), filled in at each connection.
    #[arg(long = "secret-header", value_name = "NAME=TEMPLATE", requires = "url")]
    secret_header: Vec<String>,
    /// Its working directory (default: `upstreams/NAME/` in the state directory); it may
    /// write there.
    #[arg(long, value_name = "DIR")]
    cwd: Option<std::path::PathBuf>,
    /// A directory it may write in (repeatable), besides its own and the temporary ones:
    /// it writes nowhere else, and never in bx's own files.
    #[arg(long = "write", value_name = "DIR")]
    write: Vec<std::path::PathBuf>,
    /// Its manifest: the labels of each tool's results and, for a tool that acts on the
    /// world, of where its data goes (docs/gateway.md#labels).
    #[arg(long, value_name = "FILE")]
    manifest: Option<std::path::PathBuf>,
    /// How long one call may take, in seconds (1 to 600; default 60): a call past it is
    /// stopped with the server, which starts again at the next call.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=600))]
    timeout: Option<u64>,
    /// Its guard: a component that labels each result and sink item by item
    /// (`wit/guard/guard.wit`, docs/gateway.md#guards), installed by its digest.
    #[arg(long, value_name = "FILE", requires = "guard_digest")]
    guard: Option<std::path::PathBuf>,
    /// The guard's digest, `sha256:` and 64 hex digits: its bytes must match.
    #[arg(long, value_name = "DIGEST", requires = "guard")]
    guard_digest: Option<String>,
    /// A remote server over streamable HTTP, at this URL (`https`, or `http` to
    /// loopback), instead of a command.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["command", "env", "cwd", "write", "secret_env"]
    )]
    url: Option<String>,
    /// The URL's host may be a private address (loopback, a LAN): bx refuses those
    /// otherwise.
    #[arg(long, requires = "url")]
    allow_private: bool,
    /// The command that starts it, and its arguments (after `--`).
    #[arg(last = true, required_unless_present = "url", value_name = "COMMAND")]
    command: Vec<String>,
}

/// Starts `upstream` and lists its tools, within the client's deadlines, in a runtime of
/// its own (the CLI has none).
fn listed(
    state: &StateDir,
    name: &str,
    upstream: &Upstream,
) -> anyhow::Result<(String, Vec<ListedTool>, Vec<String>)> {
    let dir = state.upstreams_dir();
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let home = dir.join(name);
    let log = dir.join(format!("{name}.log"));
    let confine = bx_gateway::Confine::for_state(state, &state.config()?)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let listed = runtime.block_on(async {
        let secrets = bx_gateway::store_secrets(state.secrets());
        let connection =
            Connection::start(name, upstream, &home, &log, Limits::default(), &confine, &secrets)
                .await?;
        let (tools, problems) = connection.list().await?;
        anyhow::Ok((connection.server(), tools, problems))
    });
    // What a server said when it failed can echo a secret bound to it (a header): the
    // leak guard redacts it before the terminal, as in a call's result.
    listed.map_err(|e| {
        let guard = bx_agent::SecretSource::new(state.secrets());
        anyhow::anyhow!("{}", guard.redact_text(&format!("{e:#}")))
    })
}

fn open(state: &StateDir) -> anyhow::Result<(bx_state::Config, Store)> {
    let config = state.config()?;
    let store = Store::open(state, &config)?;
    Ok((config, store))
}

/// One tool as the owner is shown it: its bx name and its description's first line.
fn shown_tool(name: &str, tool: &str, description: &str) -> String {
    let first = description.lines().next().unwrap_or_default();
    term::one_line(&format!("  {name}.{tool}  {}", bx_audit::bounded(first, 160)))
}

pub(crate) fn add(state: &StateDir, args: &AddArgs) -> anyhow::Result<u8> {
    let name = args.name.as_str();
    anyhow::ensure!(bx_gateway::valid_name(name), bx_gateway::GatewayError::BadName(name.into()));
    let mut env = BTreeMap::new();
    for pair in &args.env {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("--env {}: use KEY=VALUE", term::one_line(pair)))?;
        anyhow::ensure!(!key.is_empty(), "--env {}: the key is empty", term::one_line(pair));
        env.insert(key.to_owned(), value.to_owned());
    }
    let cwd = args
        .cwd
        .as_deref()
        .map(|d| d.canonicalize().with_context(|| format!("--cwd {}", d.display())))
        .transpose()?;
    let writes: Vec<std::path::PathBuf> = args
        .write
        .iter()
        .map(|d| d.canonicalize().with_context(|| format!("--write {}", d.display())))
        .collect::<anyhow::Result<_>>()?;
    let pairs = |flag: &str, list: &[String]| -> anyhow::Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for pair in list {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("--{flag} {}: use NAME=VALUE", term::one_line(pair)))?;
            anyhow::ensure!(
                !key.is_empty(),
                "--{flag} {}: the name is empty",
                term::one_line(pair)
            );
            out.insert(key.to_owned(), value.to_owned());
        }
        Ok(out)
    };
    let secret_env = pairs("secret-env", &args.secret_env)?;
    let secret_headers = pairs("secret-header", &args.secret_header)?;
    // Headers that frame the request or carry the MCP session are bx's and the client's.
    const RESERVED: [&str; 11] = [
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
    ];
    for header in secret_headers.keys() {
        anyhow::ensure!(
            !RESERVED.contains(&header.to_ascii_lowercase().as_str()),
            "--secret-header {}: a header bx or its client sets; bind the secret to another",
            term::one_line(header)
        );
    }
    for secret in secret_env
        .values()
        .cloned()
        .chain(secret_headers.values().flat_map(|t| bx_gateway::secrets_named(t)))
    {
        anyhow::ensure!(
            bx_broker::valid_secret_name(&secret),
            "{}: not a secret name (1 to 64 of a-z, 0-9, _ and -)",
            term::one_line(&secret)
        );
    }
    let transport = match &args.url {
        Some(url) => {
            bx_gateway::check_url(name, url, args.allow_private)?;
            Transport::Http { url: url.clone(), allow_private: args.allow_private, secret_headers }
        }
        None => {
            let (command, rest) =
                args.command.split_first().context("no command was given after --")?;
            Transport::Stdio {
                command: command.clone(),
                args: rest.to_vec(),
                cwd: cwd.as_ref().map(|d| d.display().to_string()),
                env,
                writes: writes.iter().map(|d| d.display().to_string()).collect(),
                secret_env,
            }
        }
    };
    let mut upstream = Upstream {
        transport,
        manifest: None,
        server: String::new(),
        tools: BTreeMap::new(),
        labels: BTreeMap::new(),
        timeout_secs: args.timeout,
        guard: None,
    };
    if let Some(path) = &args.manifest {
        let path = path.canonicalize().with_context(|| format!("--manifest {}", path.display()))?;
        upstream.labels = read_labels(&path)?;
        upstream.manifest = Some(path.display().to_string());
    }
    let (config, store) = open(state)?;
    let own = state.own_paths(&config);
    for dir in writes.iter().chain(&cwd) {
        if let Some(o) = own.iter().find(|o| dir.starts_with(o)) {
            anyhow::bail!(
                "{}: it lies in bx's own files ({}), which no upstream reaches",
                dir.display(),
                o.display()
            );
        }
    }
    if store.installed()?.upstreams.contains_key(name) {
        anyhow::bail!(bx_gateway::GatewayError::Exists(name.into()));
    }
    if let (Some(file), Some(digest)) = (&args.guard, &args.guard_digest) {
        upstream.guard = Some(install_guard(state, file, digest)?);
    }
    let (server, tools, problems) = listed(state, name, &upstream)?;
    upstream.server = server;
    upstream.tools = tools.iter().map(|t| (t.name.clone(), t.pin())).collect();
    let recorder = Recorder::new(state, &config, &store, false);
    let record = |change: &bx_store::Change<'_>| recorder.record(change);
    store.set_upstream(name, Some(upstream.clone()), UpstreamAction::Add, Some(&record))?;
    recorder.finish()?;
    outln!(
        "added {name} ({}): {} tools, pinned",
        term::one_line(&upstream.server),
        upstream.tools.len()
    );
    for (tool, pin) in &upstream.tools {
        outln!("{}", shown_tool(name, tool, &pin.description));
    }
    for why in &problems {
        errln!("bx: left out: {}", term::reason(why));
    }
    for tool in upstream.labels.keys().filter(|t| !upstream.tools.contains_key(*t)) {
        errln!("bx: the manifest labels {}, which {name} does not list", term::one_line(tool));
    }
    let unlabelled = upstream.tools.keys().filter(|t| !upstream.labels.contains_key(*t)).count();
    if unlabelled > 0 {
        errln!(
            "bx: {unlabelled} of {name}'s tools have no manifest entry: each is taken as an untrusted source and a sink that asks before every use (docs/gateway.md#labels)"
        );
    }
    Ok(EXIT_OK)
}

/// Checks the guard in `file` against `digest` and that it is a guard (both functions,
/// their types), and keeps its bytes where the daemon loads it from; returns the digest.
fn install_guard(state: &StateDir, file: &std::path::Path, digest: &str) -> anyhow::Result<String> {
    let wasm = std::fs::read(file).with_context(|| format!("--guard {}", file.display()))?;
    let runtime = bx_runtime::Runtime::new(bx_runtime::Limits::default())?;
    bx_agent::Guard::load(&runtime, &wasm, digest)
        .map_err(|why| anyhow::anyhow!("--guard {}: {why}", file.display()))?;
    let path = bx_gateway::guard_file(&state.upstreams_dir(), digest);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    }
    bx_state::write_atomically(&path, &wasm)?;
    Ok(digest.to_owned())
}

/// The labels of an upstream's manifest, each checked with the broker's label parser.
fn read_labels(path: &std::path::Path) -> anyhow::Result<BTreeMap<String, bx_gateway::ToolLabels>> {
    let manifest = bx_gateway::UpstreamManifest::read(path)?;
    for (tool, labels) in &manifest.tools {
        let at =
            |field: &str| format!("{}: tools.{}.{field}", path.display(), term::one_line(tool));
        bx_broker::parse_label(&labels.result).with_context(|| at("result"))?;
        if let Some(sink) = &labels.sink {
            bx_broker::parse_label(sink).with_context(|| at("sink"))?;
        }
    }
    Ok(manifest.tools)
}

pub(crate) fn list(state: &StateDir) -> anyhow::Result<u8> {
    let (_, store) = open(state)?;
    let installed = store.installed()?;
    if installed.upstreams.is_empty() {
        outln!("no upstream MCP servers are added (bx mcp add NAME -- COMMAND ...)");
    }
    for (name, upstream) in &installed.upstreams {
        outln!(
            "{name}  {}  {} tools",
            term::one_line(&upstream.transport.to_string()),
            upstream.tools.len()
        );
        // Connected now, to say whether it answers and whether its tools still match.
        match listed(state, name, upstream) {
            Err(e) => outln!("  not answering: {}", term::reason(&format!("{e:#}"))),
            Ok((_, tools, _)) => {
                let changes = Changes::between(upstream, &tools);
                if changes.is_empty() {
                    outln!("  answering; its tools match their pins");
                } else {
                    outln!(
                        "  answering; {} changed, {} new, {} gone: off until `bx mcp accept {name}`",
                        changes.changed.len(),
                        changes.new.len(),
                        changes.gone.len()
                    );
                }
            }
        }
    }
    Ok(EXIT_OK)
}

pub(crate) fn remove(state: &StateDir, name: &str) -> anyhow::Result<u8> {
    let (config, store) = open(state)?;
    let recorder = Recorder::new(state, &config, &store, false);
    let record = |change: &bx_store::Change<'_>| recorder.record(change);
    store.set_upstream(name, None, UpstreamAction::Remove, Some(&record))?;
    recorder.finish()?;
    outln!("removed {}", term::one_line(name));
    Ok(EXIT_OK)
}

pub(crate) fn accept(state: &StateDir, name: &str) -> anyhow::Result<u8> {
    let (config, store) = open(state)?;
    let Some(mut upstream) = store.installed()?.upstreams.get(name).cloned() else {
        anyhow::bail!(bx_gateway::GatewayError::Unknown(name.into()));
    };
    let (server, tools, problems) = listed(state, name, &upstream)?;
    let changes = Changes::between(&upstream, &tools);
    if changes.is_empty() {
        outln!("{name}: its tools match their pins; nothing to accept");
        return Ok(EXIT_OK);
    }
    for tool in &changes.changed {
        let (was, now) = (&upstream.tools[tool], tools.iter().find(|t| &t.name == tool));
        outln!("~ {}", term::one_line(&format!("{name}.{tool}")));
        if let Some(now) = now {
            let now = now.pin();
            if was.description != now.description {
                outln!("    description was: {}", term::one_line(&was.description));
                outln!("    description now: {}", term::one_line(&now.description));
            }
            if was.schema != now.schema {
                outln!("    schema was: {}", term::one_line(&was.schema.to_string()));
                outln!("    schema now: {}", term::one_line(&now.schema.to_string()));
            }
        }
    }
    for tool in &changes.new {
        let description = tools.iter().find(|t| &t.name == tool).map(|t| t.description.as_str());
        outln!("+ {}", shown_tool(name, tool, description.unwrap_or_default()).trim_start());
    }
    for tool in &changes.gone {
        outln!("- {}", term::one_line(&format!("{name}.{tool}")));
    }
    upstream.server = server;
    upstream.tools = tools.iter().map(|t| (t.name.clone(), t.pin())).collect();
    let recorder = Recorder::new(state, &config, &store, false);
    let record = |change: &bx_store::Change<'_>| recorder.record(change);
    store.set_upstream(name, Some(upstream), UpstreamAction::Accept, Some(&record))?;
    recorder.finish()?;
    outln!("{name}: pinned again");
    for why in &problems {
        errln!("bx: left out: {}", term::reason(why));
    }
    Ok(EXIT_OK)
}
