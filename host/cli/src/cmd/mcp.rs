//! `bx mcp`: bx's tools for another agent (Claude Code, Codex, Cursor, …) over the Model
//! Context Protocol on stdio, under the owner's policy. It is a bridge into the daemon:
//! every `tools/call` is a `run_tool` request there, so it passes the same trust path as
//! a call from bx's own loop (the request, decision, approval and result on the one
//! audit log, the policy re-read when it changes, the session's taint raised and
//! persisted), and an approval waits for the owner's `bx approve` or `bx refuse`, never
//! for the client. The protocol (JSON-RPC, the handshake, the methods) is rmcp's, the
//! official Rust SDK; on stdio the framing, and the answer to a line that is not a
//! message, are bx's own (`lines`), and the daemon is reached over one shared
//! connection (`link`). See `docs/mcp.md`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bx_protocol::{Body, Overlay, ToolSummary};
use bx_state::{StateDir, valid_session_id};
use clap::Args;
use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};

use self::schema::Schemas;
use self::traced::RequestSpan;
use super::{EXIT_OK, outcome};
use crate::client::Conn;

mod http;
mod lines;
mod link;
mod schema;
mod traced;
mod upstream;

/// How often the installed tools are compared with the last list the client saw.
const TOOLS_POLL: Duration = Duration::from_secs(1);
/// How often a call that waits for the owner tells a client that asked for progress
/// that it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// The most characters of the workspace's directory name in a session name.
const MAX_DIR_NAME: usize = 40;
/// Calls one `bx mcp` process has running in the daemon at once; more wait here. They
/// share one connection now, but each that waits for the owner holds an approval and
/// a task there: a client that sent 20 such calls, each on its own connection then,
/// took all 16 of the daemon's and locked out the owner's chat.
const MAX_CALLS_IN_FLIGHT: usize = 4;

/// `bx mcp`: serve (the default), or manage the owner's other MCP servers.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct McpArgs {
    /// What to do; without one, serve bx's tools on stdio.
    #[command(subcommand)]
    action: Option<McpAction>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// `bx mcp …`
#[derive(Debug, clap::Subcommand)]
enum McpAction {
    /// Serve bx's tools (and its upstreams') to another agent over MCP (the default).
    Serve(ServeArgs),
    /// Add one of the owner's other MCP servers: its tools become bx tools, `NAME.TOOL`.
    Add(upstream::AddArgs),
    /// List the added servers, and what changed in their tools since they were pinned.
    List,
    /// Remove an added server.
    Remove {
        /// Its name.
        name: String,
    },
    /// Pin a server's tool set again as it lists it now, after showing what changed.
    Accept {
        /// Its name.
        name: String,
    },
}

/// `bx mcp serve`
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The session every call is made in (its taint and workspace). Default: one named
    /// after the workspace (`mcp-NAME-HASH`), never after anything the client says.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// The directory the session works in, for a session this creates: relative paths
    /// in the calls resolve against it. Default: the current directory (where the client
    /// started `bx mcp`).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Serve Streamable HTTP at ADDR (`127.0.0.1:7010`) instead of stdio, each request
    /// with the bearer token of `mcp.token` in the state directory.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// With --http: accept an address that is not loopback (other machines can then
    /// reach it; the token and the Host check still apply).
    #[arg(long, requires = "http")]
    allow_remote: bool,
    /// With --http: another name the Host header may carry (repeatable; loopback names
    /// are always accepted).
    #[arg(long = "allow-host", value_name = "NAME", requires = "http")]
    allow_hosts: Vec<String>,
}

/// The MCP server of one connection.
#[derive(Clone)]
struct Bridge {
    /// The daemon, over one connection shared by every call of this process.
    daemon: Arc<link::Daemon>,
    workspace: String,
    /// The session: the owner's `--session`, else the workspace's.
    session: String,
    /// The tools as last listed, to find a call to one that is not installed and to
    /// notice when the set changes.
    tools: Arc<Mutex<Vec<ToolSummary>>>,
    /// Calls in flight to the daemon, at most [`MAX_CALLS_IN_FLIGHT`] for all of this
    /// process's clients.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Each tool's argument schema, compiled once, by its text.
    compiled: Arc<Schemas>,
    /// `pipe` (stdio) or `tcp` (`--http`), for the request spans.
    transport: &'static str,
}

/// The session a workspace gives when the owner named none: `mcp-`, the directory's
/// name (letters, digits, `.`, `_` and `-`; anything else becomes `-`) cut to a bound,
/// and 8 hex digits of the SHA-256 of its whole path. Never from the client: a session
/// named after the client's `initialize` let a client shed its taint by reconnecting
/// under another name (found by a probe).
fn session_for(workspace: &str) -> String {
    use sha2::Digest as _;
    let base = std::path::Path::new(workspace)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = base
        .chars()
        .take(MAX_DIR_NAME)
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' })
        .collect();
    let name = name.trim_matches(|c| c == '-' || c == '.');
    let hash = hex::encode(&sha2::Sha256::digest(workspace.as_bytes())[..4]);
    if name.is_empty() { format!("mcp-{hash}") } else { format!("mcp-{name}-{hash}") }
}

/// The installed tools, from the daemon.
async fn list(daemon: &link::Daemon, start: link::Start) -> Result<Vec<ToolSummary>, ErrorData> {
    let listed = daemon
        .request(Body::ListTools {}, start)
        .await
        .map_err(|e| ErrorData::internal_error(format!("bx: {e:#}"), None))?;
    match listed {
        Body::Tools { items } => Ok(items),
        Body::Error { message, runbook, .. } => {
            Err(ErrorData::internal_error(format!("bx: {message} (see {runbook})"), None))
        }
        other => Err(ErrorData::internal_error(
            format!("bx: the daemon answered {}", other.type_name()),
            None,
        )),
    }
}

fn tool_of(t: &ToolSummary) -> Tool {
    let schema: JsonObject = serde_json::from_str(&t.parameters).unwrap_or_default();
    Tool::new(t.name.clone(), t.description.clone(), Arc::new(schema))
}

/// The text of a refusal or failure, with the runbook entry the client should read.
fn refusal(text: &str, runbook: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("{text} (see {runbook})"))])
}

/// A call's end as its client reads it ([`outcome::meaning`]).
fn result_of(outcome: Body) -> CallToolResult {
    match outcome {
        Body::ToolOutput { outcome, text, stderr, .. } => {
            let meaning = outcome::meaning(outcome);
            if meaning.ok() {
                return CallToolResult::success(vec![ContentBlock::text(text)]);
            }
            let more = if stderr.is_empty() { String::new() } else { format!("\n{stderr}") };
            CallToolResult::error(vec![ContentBlock::text(format!(
                "{}{more}",
                meaning.line(&text)
            ))])
        }
        Body::Error { message, runbook, .. } => refusal(&message, &runbook),
        other => CallToolResult::error(vec![ContentBlock::text(format!(
            "bx: the daemon answered {}",
            other.type_name()
        ))]),
    }
}

impl Bridge {
    fn session(&self) -> String {
        self.session.clone()
    }

    /// Refuses `approval`, this bridge's own call's, as its client cancelled the call.
    async fn withdraw(&self, approval: &str) {
        let answer = bx_protocol::Answer::Refuse {
            reason: "the MCP client cancelled the call".into(),
            scope: None,
        };
        let _ = self
            .daemon
            .request(
                Body::AnswerApproval { approval: approval.to_owned(), answer },
                link::Start::No,
            )
            .await;
    }

    /// Runs one call through the daemon, telling `peer` of the wait for the owner when
    /// the client asked for progress.
    async fn call(
        &self,
        name: String,
        args: String,
        peer: &Peer<RoleServer>,
        progress: Option<rmcp::model::ProgressToken>,
        cancelled: &tokio_util::sync::CancellationToken,
        traceparent: Option<String>,
    ) -> CallToolResult {
        // A call the client cancels before it has a place never starts.
        let permit = tokio::select! {
            p = Arc::clone(&self.in_flight).acquire_owned() => p,
            () = cancelled.cancelled() => {
                return CallToolResult::error(vec![ContentBlock::text(
                    "bx: the client cancelled the call before it ran",
                )]);
            }
        };
        let Ok(_permit) = permit else {
            return refusal("bx: the bridge is shutting down", "docs/runbook.md#internal-error");
        };
        let sent = self
            .daemon
            .open(
                Body::RunTool {
                    session: self.session(),
                    tool: name,
                    args,
                    overlay: Overlay::default(),
                    workspace: Some(self.workspace.clone()),
                    quiet: true,
                    traceparent,
                },
                link::Start::IfGone,
            )
            .await;
        let mut replies = match sent {
            Ok(r) => r,
            Err(e) => return refusal(&format!("bx: {e:#}"), "docs/runbook.md#internal-error"),
        };
        let mut waiting: Option<String> = None;
        // Set once the client cancels: an approval the call waits for (or comes to wait
        // for) is then refused on its behalf, so the call ends and frees its place.
        // Refusing its own call is all a client can do to an approval.
        let mut withdrawn = false;
        let mut step = 0.0;
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        loop {
            let heard = tokio::select! {
                heard = replies.next() => heard,
                () = cancelled.cancelled(), if !withdrawn => {
                    withdrawn = true;
                    if let Some(approval) = &waiting {
                        self.withdraw(approval).await;
                    }
                    continue;
                }
                _ = tick.tick(), if waiting.is_some() => {
                    step += 1.0;
                    if let (Some(token), Some(approval)) = (&progress, &waiting) {
                        let _ = peer.notify_progress(wait_note(token, step, approval)).await;
                    }
                    continue;
                }
            };
            match heard {
                Some(Body::ApprovalNeeded { approval, .. }) if withdrawn => {
                    self.withdraw(&approval).await;
                }
                Some(Body::ApprovalNeeded { approval, .. }) => {
                    step += 1.0;
                    if let Some(token) = &progress {
                        let _ = peer.notify_progress(wait_note(token, step, &approval)).await;
                    }
                    waiting = Some(approval);
                }
                Some(done @ (Body::ToolOutput { .. } | Body::Error { .. })) => {
                    return result_of(done);
                }
                Some(_) => {}
                None => {
                    return refusal(
                        "bx: the daemon closed the connection mid-call; the call may have run (`bx audit show` has its records)",
                        "docs/runbook.md#internal-error",
                    );
                }
            }
        }
    }
}

fn wait_note(
    token: &rmcp::model::ProgressToken,
    step: f64,
    approval: &str,
) -> ProgressNotificationParam {
    ProgressNotificationParam::new(token.clone(), step).with_message(format!(
        "waiting for the owner to answer approval {approval} (`bx approve {approval}` or `bx refuse {approval}`)"
    ))
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(
            ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build(),
        )
        .with_server_info(Implementation::new("bx", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "bx runs these tools as WebAssembly components under its owner's policy. A call \
             the policy refuses comes back as an error result naming the reason; a call that \
             needs the owner's approval waits for it (the owner answers with `bx approve`). \
             Relative paths are resolved against the session's workspace.",
        )
    }

    /// Each connection (stdio, or an HTTP session) hears of installs and removals from
    /// its own watcher, which ends when the connection does.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tokio::spawn(watch_tools(self.clone(), context.peer));
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let span = RequestSpan::start("initialize", None, &context, &self.session, self.transport);
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request);
        span.end(result.is_err());
        result
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let span = RequestSpan::start("tools/list", None, &context, &self.session, self.transport);
        let listed = list(&self.daemon, link::Start::No).await;
        span.end(listed.is_err());
        let items = listed?;
        let tools = items.iter().map(tool_of).collect();
        *self.tools.lock() = items;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let span =
            RequestSpan::start("tools/call", Some(&name), &context, &self.session, self.transport);
        let answered = self.call_tool_traced(name, request, &context, &span).await;
        span.end(
            !matches!(&answered, Ok(CallToolResponse::Complete(r)) if r.is_error != Some(true)),
        );
        answered
    }
}

impl Bridge {
    /// [`ServerHandler::call_tool`]'s work, whose daemon call continues `span`.
    async fn call_tool_traced(
        &self,
        name: String,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        span: &RequestSpan,
    ) -> Result<CallToolResponse, ErrorData> {
        let find = |tools: &[ToolSummary]| tools.iter().find(|t| t.name == name).cloned();
        let mut tool = find(&self.tools.lock());
        if tool.is_none() {
            // The look-up is part of the call: it starts a daemon that has gone away.
            let items = list(&self.daemon, link::Start::IfGone).await?;
            tool = find(&items);
            *self.tools.lock() = items;
        }
        let Some(tool) = tool else {
            return Err(ErrorData::invalid_params(
                format!("no tool named {} is installed", bx_audit::bounded(&name, 200)),
                None,
            ));
        };
        let progress = context.meta.get_progress_token();
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        schema::fits(&tool, &arguments, &self.compiled)?;
        let traceparent = span.traceparent();
        let result = self
            .call(name, arguments.to_string(), &context.peer, progress, &context.ct, traceparent)
            .await;
        Ok(CallToolResponse::Complete(result))
    }
}

/// Ends telemetry as `bx mcp` ends, and says what was lost, if anything: this process
/// has no status file (the daemon's is `telemetry.json`).
struct Said(bx_telemetry::Telemetry);

impl Drop for Said {
    fn drop(&mut self) {
        let Some(stats) = self.0.stats() else { return };
        let t = std::mem::take(&mut self.0);
        drop(t);
        let lost = stats_lost(&stats);
        if lost > 0 {
            errln!(
                "bx mcp: {lost} span(s) were not exported (see docs/runbook.md#telemetry-dropped)"
            );
        }
    }
}

fn stats_lost(stats: &bx_telemetry::Stats) -> u64 {
    use std::sync::atomic::Ordering;
    stats.dropped.load(Ordering::Relaxed) + stats.failed.load(Ordering::Relaxed)
}

/// Sends `notifications/tools/list_changed` whenever the installed set differs from the
/// one the client last listed (an install, a removal, a new version).
async fn watch_tools(bridge: Bridge, peer: Peer<RoleServer>) {
    let key = |items: &[ToolSummary]| -> Vec<(String, String)> {
        let mut k: Vec<_> = items.iter().map(|t| (t.name.clone(), t.digest.clone())).collect();
        k.sort();
        k
    };
    // What is installed when the connection starts is what its first listing shows.
    let mut seen = match list(&bridge.daemon, link::Start::No).await {
        Ok(items) => key(&items),
        Err(_) => key(&bridge.tools.lock()),
    };
    let mut tick = tokio::time::interval(TOOLS_POLL);
    loop {
        tick.tick().await;
        // An HTTP session that has ended leaves its watcher with nobody to tell; without
        // this it would list every second until the installed set next changed.
        if peer.is_transport_closed() {
            return;
        }
        let Ok(items) = list(&bridge.daemon, link::Start::No).await else { continue };
        let now = key(&items);
        if now != seen {
            seen = now;
            *bridge.tools.lock() = items;
            if peer.notify_tool_list_changed().await.is_err() {
                return;
            }
        }
    }
}

/// Serves MCP on stdin and stdout (or over HTTP with `--http`) until the client closes
/// them.
pub(crate) fn run(state: &StateDir, args: &McpArgs) -> anyhow::Result<u8> {
    match &args.action {
        None => serve(state, &args.serve),
        Some(McpAction::Serve(serve_args)) => serve(state, serve_args),
        Some(McpAction::Add(add)) => upstream::add(state, add),
        Some(McpAction::List) => upstream::list(state),
        Some(McpAction::Remove { name }) => upstream::remove(state, name),
        Some(McpAction::Accept { name }) => upstream::accept(state, name),
    }
}

fn serve(state: &StateDir, args: &ServeArgs) -> anyhow::Result<u8> {
    if let Some(s) = &args.session {
        anyhow::ensure!(
            valid_session_id(s),
            "--session {}: letters, digits, `.`, `_` and `-` only",
            crate::term::one_line(s)
        );
    }
    let workspace = super::chat::workspace(args.workspace.as_deref())?;
    // The daemon runs the calls; start it as `bx chat` would when none answers. What
    // it says goes to stderr: stdout is the protocol's.
    Conn::connect_or_start(state)?;
    let session = args.session.clone().unwrap_or_else(|| session_for(&workspace));
    errln!("bx mcp: session {session}, working in {}", crate::term::one_line(&workspace));
    let bridge = Bridge {
        daemon: Arc::new(link::Daemon::new(state)),
        workspace,
        session,
        tools: Arc::new(Mutex::new(Vec::new())),
        in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_CALLS_IN_FLIGHT)),
        compiled: Arc::default(),
        transport: if args.http.is_some() { "tcp" } else { "pipe" },
    };
    // The owner's tracing tools, as the daemon's (docs/telemetry.md). A view: one that
    // cannot start is said, and the bridge goes on without it.
    let config = bx_daemon::load_config(state)?;
    let telemetry = bx_telemetry::init(&config.telemetry, "mcp", None).unwrap_or_else(|e| {
        errln!("bx mcp: {e}");
        bx_telemetry::Telemetry::default()
    });
    let _said = Said(telemetry);
    if let Some(addr) = args.http {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        anyhow::ensure!(
            addr.ip().is_loopback() || args.allow_remote,
            "--http {addr} is not a loopback address; add --allow-remote to serve other machines (see docs/mcp.md#http)"
        );
        let token = crate::token::token(state, crate::token::Service::Mcp)?;
        return runtime.block_on(http::serve(bridge, args, addr, token)).map(|()| EXIT_OK);
    }
    // One client on stdio: one thread does all the work (the bridge only waits on the
    // daemon and the client), and nothing wakes another to hand a message over.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(async move {
        let (transport, written) = lines::Lines::stdio().context("opening stdin and stdout")?;
        let served = match bridge.clone().serve(transport).await {
            Ok(service) => {
                service.waiting().await.map(|_| ()).map_err(|e| anyhow::anyhow!("MCP: {e}"))
            }
            Err(e) => Err(anyhow::anyhow!("MCP handshake: {e}")),
        };
        // What was answered before the end is written out, unless stdout is stuck.
        let _ = tokio::time::timeout(Duration::from_secs(5), written).await;
        served
    });
    served.map(|()| EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_names_a_valid_session_of_its_own() {
        let a = session_for("/home/o/src/project");
        assert!(a.starts_with("mcp-project-") && a.len() == "mcp-project-".len() + 8, "{a}");
        assert_eq!(a, session_for("/home/o/src/project"), "the same workspace, the same session");
        assert_ne!(a, session_for("/home/o/old/project"), "another path, another session");
        assert!(session_for("/").starts_with("mcp-") && session_for("/").len() == 12);
        let long = "/x/".repeat(400);
        for ws in ["/tmp/My Client\u{202e}\n", "/tmp/..", "/tmp/-", "/x/\u{1f600}", long.as_str()] {
            let s = session_for(ws);
            assert!(valid_session_id(&s) && s.len() <= 4 + MAX_DIR_NAME + 9, "{ws:?}: {s}");
        }
    }
}
