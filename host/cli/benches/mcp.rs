//! `make bench`: `bx mcp` over stdio, measured by one client (rmcp's, the official Rust
//! SDK) in the same run against the floor: a stdio echo server built on the same SDK
//! (this binary, run with `BX_MCP_ECHO=1`), whose one tool returns its argument. Rows:
//! - a small call's round trip (fs.read of a 12-byte file, through the daemon, its
//!   broker, a fresh component instance and the audit log with fsync), next to the echo;
//! - a 1 MiB read;
//! - the time from starting `bx mcp` to the first tool result;
//! - the echo server itself behind bx as an upstream (`bx mcp add`): the same call
//!   through bx's gateway (decision, records, the upstream's round trip) against the
//!   same call made to it directly.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, InitializeResult, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use sha2::Digest as _;

#[path = "../../bench/measure.rs"]
mod measure;
use measure::{Stats, fmt};

/// The floor: one tool, `echo`, that returns its `text` argument.
#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema: JsonObject =
            serde_json::from_value(serde_json::json!({"type": "object"})).unwrap();
        Ok(ListToolsResult::with_all_items(vec![Tool::new("echo", "echo", Arc::new(schema))]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        // `text` comes back as it is; `bytes: N` asks for N bytes of text (the floor of a
        // large result).
        let arguments = request.arguments.unwrap_or_default();
        let text = match arguments.get("bytes").and_then(serde_json::Value::as_u64) {
            Some(n) => "0123456789abcde\n".repeat(usize::try_from(n / 16).unwrap_or(0)),
            None => arguments.get("text").and_then(|t| t.as_str()).unwrap_or_default().to_owned(),
        };
        Ok(rmcp::model::CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

fn args(v: serde_json::Value) -> JsonObject {
    serde_json::from_value(v).unwrap()
}

/// A state directory with fs.read installed by digest and the default policy (reading
/// the workspace is allowed); a workspace with a small file and a 1 MiB one.
fn setup(bx: &Path, root: &Path) -> (PathBuf, PathBuf) {
    let state = root.join("state");
    let ws = root.join("ws");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("small.txt"), "milk, eggs\n\n").unwrap();
    std::fs::write(ws.join("big.txt"), "0123456789abcde\n".repeat(65536)).unwrap();
    let run = |a: &[&str]| {
        let out = Command::new(bx).arg("--state-dir").arg(&state).args(a).output().unwrap();
        assert!(out.status.success(), "bx {a:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["policy", "init"]);
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/target/wasm32-wasip2/release/bx_tool_fs_read.wasm");
    let bytes = std::fs::read(&wasm)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make tools`", wasm.display()));
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
    run(&["tool", "install", wasm.to_str().unwrap(), "--digest", &digest]);
    // The echo server as an upstream, labelled and granted.
    let manifest = root.join("echo.toml");
    std::fs::write(&manifest, "[tools.echo]\nresult = \"public/trusted\"\n").unwrap();
    let exe = std::env::current_exe().unwrap();
    run(&[
        "mcp",
        "add",
        "echo",
        "--manifest",
        manifest.to_str().unwrap(),
        "--env",
        "BX_MCP_ECHO=1",
        "--",
        exe.to_str().unwrap(),
    ]);
    let policy = std::fs::read_to_string(state.join("policy.toml")).unwrap();
    std::fs::write(
        state.join("policy.toml"),
        format!("{policy}\n[[grant]]\ntool = \"echo.echo\"\nmode = \"call\"\n"),
    )
    .unwrap();
    (state, ws)
}

fn bx_mcp(bx: &Path, state: &Path, ws: &Path) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(bx);
    c.arg("--state-dir").arg(state).args(["mcp", "--workspace"]).arg(ws).stderr(Stdio::null());
    c
}

/// This binary as the echo server.
fn echo_server() -> tokio::process::Command {
    let mut c = tokio::process::Command::new(std::env::current_exe().unwrap());
    c.env("BX_MCP_ECHO", "1");
    c
}

fn time_calls(
    rt: &tokio::runtime::Runtime,
    samples: usize,
    call: impl Fn() -> CallToolRequestParams,
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
) -> Stats {
    measure::measure(samples, || {
        let r = rt.block_on(client.call_tool(call())).unwrap();
        assert_ne!(r.is_error, Some(true), "{r:?}");
    })
}

fn main() {
    if std::env::var_os("BX_MCP_ECHO").is_some() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let service = Echo.serve(rmcp::transport::stdio()).await.unwrap();
            let _ = service.waiting().await;
        });
        return;
    }
    let bx = PathBuf::from(env!("CARGO_BIN_EXE_bx"));
    let root = tempfile::tempdir().unwrap();
    let (state, ws) = setup(&bx, root.path());
    let _daemon = bx_eval::run::Daemon::start(&bx, &state).unwrap();
    // The same, with the state directory (and so the audit log) on tmpfs, where fsync
    // costs nothing: what the log's durability costs per call.
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let (shm_state, shm_ws) = setup(&bx, shm.path());
    let _shm_daemon = bx_eval::run::Daemon::start(&bx, &shm_state).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();

    // The child processes are spawned inside the runtime (tokio's process reactor).
    let connect = |cmd: tokio::process::Command| {
        rt.block_on(async { ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap() })
    };
    let echo = connect(echo_server());
    let ours = connect(bx_mcp(&bx, &state, &ws));
    let ours_shm = connect(bx_mcp(&bx, &shm_state, &shm_ws));

    let floor = time_calls(
        &rt,
        300,
        || {
            CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"text": "milk, eggs\n\n"})))
        },
        &echo,
    );
    let small = time_calls(
        &rt,
        300,
        || {
            CallToolRequestParams::new("fs.read")
                .with_arguments(args(serde_json::json!({"path": "small.txt"})))
        },
        &ours,
    );
    let small_shm = time_calls(
        &rt,
        300,
        || {
            CallToolRequestParams::new("fs.read")
                .with_arguments(args(serde_json::json!({"path": "small.txt"})))
        },
        &ours_shm,
    );
    let big = time_calls(
        &rt,
        40,
        || {
            CallToolRequestParams::new("fs.read")
                .with_arguments(args(serde_json::json!({"path": "big.txt"})))
        },
        &ours,
    );
    let upstream = time_calls(
        &rt,
        300,
        || {
            CallToolRequestParams::new("echo.echo")
                .with_arguments(args(serde_json::json!({"text": "milk, eggs\n\n"})))
        },
        &ours,
    );
    let big_floor = time_calls(
        &rt,
        40,
        || {
            CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"bytes": 1 << 20})))
        },
        &echo,
    );
    rt.block_on(async {
        let _ = echo.cancel().await;
        let _ = ours.cancel().await;
        let _ = ours_shm.cancel().await;
    });
    // From starting the process to the first result, handshake included.
    let start = |cmd: tokio::process::Command, call: CallToolRequestParams| -> Duration {
        let began = Instant::now();
        rt.block_on(async {
            let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
            client.call_tool(call).await.unwrap();
            let took = began.elapsed();
            let _ = client.cancel().await;
            took
        })
    };
    let mut first: Vec<Duration> = (0..10)
        .map(|_| {
            start(
                bx_mcp(&bx, &state, &ws),
                CallToolRequestParams::new("fs.read")
                    .with_arguments(args(serde_json::json!({"path": "small.txt"}))),
            )
        })
        .collect();
    let mut first_floor: Vec<Duration> = (0..10)
        .map(|_| {
            let text = args(serde_json::json!({"text": "x"}));
            start(echo_server(), CallToolRequestParams::new("echo").with_arguments(text))
        })
        .collect();
    first.sort();
    first_floor.sort();
    let stats = |v: &[Duration]| Stats { median: v[v.len() / 2], p90: v[v.len() * 9 / 10] };

    println!(
        "\n## bx mcp over stdio (client: rmcp; floor: an rmcp stdio echo server, same client, same run)\n"
    );
    println!("| | bx mcp median | p90 | floor median | p90 | bx / floor |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, ours: Stats, floor: Stats| {
        println!(
            "| {name} | {} | {} | {} | {} | {:.1}x |",
            fmt(ours.median),
            fmt(ours.p90),
            fmt(floor.median),
            fmt(floor.p90),
            ours.median.as_secs_f64() / floor.median.as_secs_f64()
        );
    };
    row("small call (12 bytes; fsync on)", small, floor);
    row("small call, state on tmpfs (no fsync cost)", small_shm, floor);
    row("1 MiB read (echo: a 1 MiB result)", big, big_floor);
    row("start to first result", stats(&first), stats(&first_floor));
    row("the echo server behind bx (bx mcp add), same call", upstream, floor);
    println!(
        "\nsmall call median {} (target: under 1 ms over stdio): {}",
        fmt(small.median),
        if small.median < Duration::from_millis(1) { "met" } else { "not met" }
    );
}
