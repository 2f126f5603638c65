//! The daemon behind `bx serve`: one per state directory (a lock), the agent, the audit
//! writer and the runtime in one process, behind a Unix socket of mode 0600 in the state
//! directory. A `select!` accept loop, one task per connection under a semaphore cap,
//! shutdown by signal: cancel the turns, drain, write the audit checkpoint.

mod conn;
mod launch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bx_agent::{Agent, AgentParts};
use bx_audit::AuditLog;
use bx_infer::{Client, EndThinking, InferConfig, RetryPolicy, ToolMode};
use bx_runtime::{Limits, Runtime};
use bx_store::{Config, EndThinkingName, Store, ToolModeName};
use tokio::net::UnixListener;
use tokio::sync::{Semaphore, watch};

/// The socket's file name in the state directory.
pub(crate) const SOCKET: &str = "bx.sock";
/// What the daemon tells `bx doctor` about itself, in the state directory.
pub(crate) const STATUS: &str = "daemon.json";
/// How long shutdown waits for cancelled turns to record their ends.
const DRAIN: Duration = Duration::from_secs(10);

/// Takes `serve.lock`, held for as long as the returned file is open (the kernel drops
/// the lock when the file closes, however the process ends): a second daemon on the same
/// state directory would interleave two writers on one audit chain.
fn take_lock(state_dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = state_dir.join("serve.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "another bx serve is running for {} (see docs/runbook.md#daemon-running)",
            state_dir.display()
        ),
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

/// Loads `config.toml`; an invalid file stops the daemon with file:line:column.
pub(crate) fn load_config(state_dir: &Path) -> anyhow::Result<Config> {
    Config::load(&state_dir.join("config.toml"))
        .map_err(|e| anyhow::anyhow!("{e}\n(see docs/runbook.md#config-invalid)"))
}

/// Runs the daemon until SIGTERM or SIGINT.
pub(crate) async fn serve(state_dir: PathBuf) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", state_dir.display()))?;
    let _lock = take_lock(&state_dir)?;
    let config = load_config(&state_dir)?;
    let audit_dir = config.audit_dir(&state_dir);
    let audit = Arc::new(AuditLog::open(&audit_dir).map_err(|e| anyhow::anyhow!("{e}"))?);

    // The model server: launched from the configuration, or reached at its URL.
    let mut server = None;
    let url = if config.inference.launch.is_empty() {
        config.inference.url.clone()
    } else {
        let launched = launch::Launched::start(&config.inference.launch, &state_dir)?;
        let url = launched.url();
        server = Some(launched);
        url
    };
    let mut infer = InferConfig::new(&url);
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
    eprintln!("bx serve: connecting to {url}");
    let client = Client::connect(infer).await.map_err(|e| anyhow::anyhow!("{e}"))?;

    let runtime = Runtime::new(Limits::default())?;
    let store = Store::open(&state_dir)?;
    let agent = Arc::new(Agent::new(AgentParts {
        state_dir: state_dir.clone(),
        audit: Arc::clone(&audit),
        store,
        runtime,
        client,
        limits: config.turn.clone(),
        temperature: config.inference.temperature,
        seed: config.inference.seed,
    })?);

    for problem in agent.toolset()?.problems() {
        eprintln!("bx serve: tool left out of the model's tools: {problem}");
    }

    // The self-test runs after the agent put known sessions back on their slots, so
    // its short completion lands on the least-loaded slot, not on a warm session's.
    let report = agent.client().self_test().await;
    eprint!("bx serve: inference self-test\n{report}");
    let status = serde_json::json!({
        "pid": std::process::id(),
        "url": url,
        "self_test": report,
    });
    std::fs::write(state_dir.join(STATUS), format!("{status:#}\n"))
        .with_context(|| format!("writing {STATUS}"))?;

    let socket = state_dir.join(SOCKET);
    // We hold the lock, so a socket file left here is from a daemon that died.
    let _ = std::fs::remove_file(&socket);
    let listener =
        UnixListener::bind(&socket).with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", socket.display()))?;
    eprintln!("bx serve: listening on {}", socket.display());

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let limit = Arc::new(Semaphore::new(config.turn.max_connections.get()));
    let mut tasks = tokio::task::JoinSet::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        // A permit first: past the cap, connections wait in the kernel's backlog.
        let permit = tokio::select! {
            p = Arc::clone(&limit).acquire_owned() => p?,
            _ = term.recv() => break,
            _ = int.recv() => break,
        };
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
        let (agent, shutdown) = (Arc::clone(&agent), shutdown_rx.clone());
        tasks.spawn(async move {
            conn::handle(agent, stream, shutdown).await;
            drop(permit);
        });
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
    let _ = std::fs::remove_file(state_dir.join(STATUS));
    drop(server);
    Ok(())
}
