//! The daemon behind `bx serve`: one per state directory (a lock), the agent, the audit
//! writer and the runtime in one process, behind a Unix socket of mode 0600 in the state
//! directory. A `select!` accept loop, one task per connection, admission bounded by
//! `[loop] max_connections` with the longest-idle connection evicted for a newcomer and
//! a little headroom kept for the owner's approvals; shutdown by signal: cancel the
//! turns, drain, write the audit checkpoint.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod admit;
mod conn;
mod frames;
mod launch;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bx_agent::{Agent, AgentParts};
use bx_audit::{Anchor, AuditError, AuditLog};
use bx_infer::{Client, EndThinking, InferConfig, RetryPolicy, ToolMode};
use bx_runtime::{Limits, Runtime};
use bx_state::{Config, EndThinkingName, StateDir, ToolModeName};
use bx_store::Store;
use tokio::net::UnixListener;
use tokio::sync::watch;

pub use conn::{FRAME_SECS, IDLE_SECS, MAX_QUEUED_BYTES};

/// How long shutdown waits for cancelled turns to record their ends.
const DRAIN: Duration = Duration::from_secs(10);
/// How long the daemon waits for the audit log's lock at start: a one-shot command that
/// was writing when the daemon started finishes first.
const AUDIT_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Another `bx serve` holds the state directory's `serve.lock`. `bx serve` exits with
/// its own status for it, so a client that started one knows it lost the race without
/// reading its output.
#[derive(Debug, thiserror::Error)]
#[error("another bx serve is running for {root} (see docs/runbook.md#daemon-running)")]
pub struct AlreadyRunning {
    /// The state directory.
    pub root: String,
}

/// Takes `serve.lock`, held for as long as the returned file is open (the kernel drops
/// the lock when the file closes, however the process ends): one daemon per state
/// directory.
fn take_lock(state: &StateDir) -> anyhow::Result<std::fs::File> {
    let path = state.serve_lock();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(AlreadyRunning { root: state.root().display().to_string() }.into())
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

fn tool_mode(name: ToolModeName) -> ToolMode {
    match name {
        ToolModeName::Auto => ToolMode::Auto,
        ToolModeName::Native => ToolMode::Native,
        ToolModeName::Constrained => ToolMode::Constrained,
    }
}

/// The anchor of `state`'s log: its signing key and export directories, when the owner
/// made a key. A key that is configured but cannot be used is an error: the owner asked
/// for an anchored log, and bx does not quietly write an unanchored one.
pub fn audit_anchor(state: &StateDir, config: &Config) -> Result<Option<Anchor>, AuditError> {
    match state.audit_key(config) {
        Some(key) => Anchor::load(&key, config.audit.export.clone()).map(Some),
        None if !config.audit.export.is_empty() => Err(AuditError::Key(
            "[audit] export names directories but there is no signing key; run `bx audit key init`"
                .into(),
        )),
        None => Ok(None),
    }
}

/// Opens `state`'s audit log as its one writer, waiting up to `wait` for another to
/// close, and anchored when the owner made a key.
pub fn open_audit(
    state: &StateDir,
    config: &Config,
    wait: Duration,
) -> Result<AuditLog, AuditError> {
    let anchor = audit_anchor(state, config)?;
    let log = AuditLog::open_waiting(&state.audit_dir(config), wait)?;
    Ok(match anchor {
        Some(anchor) => log.with_anchor(anchor),
        None => log,
    })
}

/// Loads `config.toml`; an invalid file stops the daemon with file:line:column.
pub fn load_config(state: &StateDir) -> anyhow::Result<Config> {
    state.config().map_err(|e| anyhow::anyhow!("{e}\n(see docs/runbook.md#config-invalid)"))
}

/// Writes `text` to stderr with every character that could steer a terminal escaped:
/// the daemon's log carries what the inference server and the tools said.
fn say(text: &str) {
    eprintln!("{}", bx_broker::escape_untrusted(text, true));
}

/// Connects to the model server at `url` with the `[inference]` settings.
async fn connect(config: &Config, url: &str) -> anyhow::Result<Client> {
    let mut infer = InferConfig::new(url);
    infer.mode = tool_mode(config.inference.tool_mode);
    infer.end_thinking = match config.inference.end_thinking {
        EndThinkingName::Control => EndThinking::Control,
        EndThinkingName::Reissue => EndThinking::Reissue,
    };
    infer.retry = RetryPolicy {
        window: Duration::from_secs(config.inference.retry_secs),
        // The windows bound the waiting; attempts are not the limit here.
        attempts: u32::MAX,
        ..RetryPolicy::default()
    };
    infer.connect_window = Duration::from_secs(config.inference.connect_secs);
    infer.queue_bound = config.inference.queue_bound.get();
    say(&format!("bx serve: connecting to {url}"));
    Client::connect(infer).await.map_err(|e| anyhow::anyhow!("{e}"))
}

/// Runs the daemon for `state` until SIGTERM or SIGINT.
pub async fn serve(state: StateDir) -> anyhow::Result<()> {
    serve_ready(state, None).await
}

/// [`serve`], telling `ready` once the socket listens (what `bx serve --web` waits for
/// before it says where its page is).
pub async fn serve_ready(
    state: StateDir,
    ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(state.root(), std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", state.root().display()))?;
    let _lock = take_lock(&state)?;
    let config = load_config(&state)?;
    // The owner's tracing tools, when `[telemetry]` or `OTEL_EXPORTER_OTLP_*` names a
    // collector (docs/telemetry.md). A view, never a condition: one that cannot start
    // is said, and the daemon goes on without it. Dropped at the end, after the drain,
    // so the last spans go out (within the export's deadline).
    let telemetry =
        match bx_telemetry::init(&config.telemetry, "daemon", Some(state.telemetry_status())) {
            Ok(t) => t,
            Err(e) => {
                say(&format!("bx serve: {e}"));
                bx_telemetry::Telemetry::default()
            }
        };
    if telemetry.stats().is_some() {
        say("bx serve: exporting traces and metrics over OTLP/HTTP (docs/telemetry.md)");
    }
    let audit =
        Arc::new(open_audit(&state, &config, AUDIT_LOCK_WAIT).map_err(|e| anyhow::anyhow!("{e}"))?);

    // The model server: launched from the configuration, reached at its URL, or none.
    let mut server = None;
    let url = if config.inference.launch.is_empty() {
        config.inference.url.clone()
    } else {
        let launched =
            launch::Launched::start(&config.inference.launch, &state.model_server_log())?;
        let url = launched.url();
        server = Some(launched);
        Some(url)
    };
    let client = match &url {
        Some(url) => Some(connect(&config, url).await?),
        None => {
            say(
                "bx serve: no model is configured ([inference] url or launch); tools work, chat turns are refused (see docs/runbook.md#no-model)",
            );
            None
        }
    };
    let runtime = Runtime::new(Limits::default())?;
    let store = Store::open(&state, &config)?;
    let agent = Arc::new(Agent::new(AgentParts {
        state: state.clone(),
        config: config.clone(),
        audit: Arc::clone(&audit),
        store,
        runtime,
        client,
        limits: config.turn.clone(),
        temperature: config.inference.temperature,
        seed: config.inference.seed,
    })?);

    for problem in agent.toolset()?.problems() {
        say(&format!("bx serve: tool: {problem}"));
    }
    for warning in own_state_warnings(&agent) {
        say(&format!("bx serve: {warning}"));
    }

    // The self-test runs after the agent put known sessions back on their slots, so
    // its short completion lands on the least-loaded slot, not on a warm session's.
    let report = match agent.client() {
        Some(client) => {
            let report = client.self_test().await;
            say(&format!("bx serve: inference self-test\n{report}"));
            Some(report)
        }
        None => None,
    };
    let status = serde_json::json!({
        "pid": std::process::id(),
        "url": url,
        "self_test": report,
    });
    let status_file = state.status_file();
    // Whole or not at all: `bx doctor` may read it while it is written.
    bx_state::write_atomically(&status_file, format!("{status:#}\n").as_bytes())?;

    // No process of the same user reads the daemon's memory, environment or descriptors
    // through /proc (an upstream it starts, confined from bx's files, among them).
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        eprintln!("bx serve: could not make the daemon undumpable: {e}");
    }
    let socket = state.socket();
    // Made before the socket is bound, so a client that reaches it can read it.
    let token: Arc<str> = state.new_socket_token()?.into();
    // We hold the lock, so a socket file left here is from a daemon that died.
    let _ = std::fs::remove_file(&socket);
    let listener =
        UnixListener::bind(&socket).with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", socket.display()))?;
    eprintln!("bx serve: listening on {}", socket.display());
    if let Some(ready) = ready {
        let _ = ready.send(());
    }

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let conns = Arc::new(admit::Conns::default());
    let max = config.turn.max_connections.get();
    let mut tasks = tokio::task::JoinSet::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    eprintln!("bx serve: accept: {e}");
                    continue;
                }
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        };
        let (ticket, control_only) = match conns.admit(max) {
            admit::Admission::Full(t) => (t, false),
            admit::Admission::ControlOnly(t) => (t, true),
            admit::Admission::Refused => {
                tasks.spawn(refuse_busy(stream, max));
                continue;
            }
        };
        let (agent, shutdown) = (Arc::clone(&agent), shutdown_rx.clone());
        let token = Arc::clone(&token);
        tasks.spawn(conn::handle(agent, stream, ticket, control_only, shutdown, token));
        // Reap finished connections so the set does not grow with every client.
        while tasks.try_join_next().is_some() {}
    }

    eprintln!("bx serve: shutting down");
    let _ = std::fs::remove_file(&socket);
    let _ = shutdown_tx.send(true);
    agent.cancel_all();
    let drained = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} });
    if drained.await.is_err() {
        eprintln!("bx serve: connections still open after {DRAIN:?}; closing them");
        tasks.abort_all();
    }
    if let Err(e) = audit.checkpoint() {
        eprintln!("bx serve: {e}");
    }
    let _ = std::fs::remove_file(&status_file);
    drop(server);
    Ok(())
}

/// Tells a connection past every bound that the daemon is busy, then closes it.
async fn refuse_busy(mut stream: tokio::net::UnixStream, max: usize) {
    use tokio::io::AsyncWriteExt as _;
    let msg = bx_protocol::Body::Error {
        code: bx_protocol::ErrorCode::DaemonBusy,
        message: format!(
            "the daemon is serving {max} busy connections and its control headroom; try again"
        ),
        runbook: "docs/runbook.md#daemon-busy".into(),
    };
    if let Ok(frame) =
        bx_protocol::encode(&bx_protocol::Envelope { v: bx_protocol::VERSION, id: 0, msg })
    {
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&frame)).await;
    }
}

/// A warning for each grant of the policy in force that covers bx's own state.
pub fn own_state_warnings(agent: &Agent) -> Vec<String> {
    match agent.policy() {
        Ok(policy) => own_state_lines(&policy),
        Err(_) => Vec::new(),
    }
}

/// One line per grant that covers or lies inside bx's own state: it never reaches it.
pub fn own_state_lines(policy: &bx_broker::Policy) -> Vec<String> {
    policy
        .grants_over_own()
        .into_iter()
        .map(|(g, own)| {
            format!(
                "warning: {} covers bx's own state {}; no tool reaches it whatever the grant says (see docs/runbook.md#own-state)",
                g,
                own.display()
            )
        })
        .collect()
}

pub use admit::CONTROL_HEADROOM;
