//! `make bench`: what bx's trust costs a call, against a bare host running the same
//! component for the same client in the same run. The component is a standard WASI 0.2
//! one (`tools/testing/wasi-files`, built by `make components`), whose `read-file` and
//! `list-directory` reach files through `wasi:filesystem`. The bare host is this binary
//! run with `BX_BARE_HOST`: an rmcp stdio server that runs the component with wasmtime,
//! a fresh instance per call (from an `InstancePre`), with the directory preopened and
//! nothing else: no policy, no audit, no daemon. bx runs it through `bx mcp`, its daemon,
//! the broker and the audit log on this disk. A third server is the bare host again with
//! `BX_BARE_LOG`: it appends a line with the result's SHA-256 to a file on the same disk
//! and syncs it before it answers, the floor of a host that keeps a durable record of
//! every result. One rmcp client drives all three.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use sha2::Digest as _;
use wasmtime::component::{Component, InstancePre, Linker, ResourceTable, Val};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

#[path = "../../bench/measure.rs"]
mod measure;
use measure::{Stats, fmt};

struct Ctx {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: NoHttp,
    table: ResourceTable,
}

impl WasiView for Ctx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for Ctx {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

/// The component's `fetch` imports wasi:http; this host sends nothing (no call here
/// fetches).
struct NoHttp;

type Sent = Box<
    dyn std::future::Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for NoHttp {
    fn send_request(
        &mut self,
        _request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>,
    ) -> Sent {
        Box::new(async { Err(HttpError::HttpRequestDenied) })
    }
}

/// The bare host: the component, instantiated afresh for each call; with `log`, one line
/// per call appended to that file and synced (`fdatasync`) before the call is answered:
/// the least any host that keeps a durable record of each result pays, bx's rule for a
/// read (`docs/audit.md#durability`), with nothing else of bx's.
#[derive(Clone)]
struct Bare {
    engine: Engine,
    pre: InstancePre<Ctx>,
    dir: PathBuf,
    log: Option<Arc<std::sync::Mutex<std::fs::File>>>,
}

impl Bare {
    fn new(component: &Path, dir: PathBuf, log: Option<PathBuf>) -> Bare {
        let engine = Engine::new(&wasmtime::Config::new()).unwrap();
        let component = Component::from_file(&engine, component).unwrap();
        let mut linker = Linker::<Ctx>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).unwrap();
        let pre = linker.instantiate_pre(&component).unwrap();
        let log = log.map(|path| {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
            Arc::new(std::sync::Mutex::new(file))
        });
        Bare { engine, pre, dir, log }
    }

    /// Appends a record of the call's result to the log and syncs it.
    fn record(&self, text: &str) {
        use std::io::Write as _;
        if let Some(log) = &self.log {
            let digest = hex::encode(sha2::Sha256::digest(text.as_bytes()));
            let mut file = log.lock().unwrap();
            writeln!(file, "{{\"output_sha256\":\"{digest}\",\"bytes\":{}}}", text.len()).unwrap();
            file.sync_data().unwrap();
        }
    }

    /// Calls export `name` with the string `path`; its `result<T, string>` as JSON text.
    async fn call(&self, name: &str, path: &str) -> anyhow::Result<String> {
        let mut wasi = WasiCtx::builder();
        wasi.preopened_dir(&self.dir, self.dir.to_str().unwrap(), FsPerms::ReadOnly).unwrap();
        let wasi = wasi.build();
        let ctx =
            Ctx { wasi, http: WasiHttpCtx::new(), hooks: NoHttp, table: ResourceTable::new() };
        let mut store = Store::new(&self.engine, ctx);
        // wasmtime's error is not a std one: carried as its text, causes included.
        let wasmtime = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");
        let instance = self.pre.instantiate_async(&mut store).await.map_err(wasmtime)?;
        let func =
            instance.get_func(&mut store, name).ok_or_else(|| anyhow::anyhow!("no such export"))?;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut store, &[Val::String(path.to_owned())], &mut results)
            .await
            .map_err(wasmtime)?;
        let json = |v: &Val| match v {
            Val::String(s) => serde_json::Value::String(s.clone()),
            Val::List(items) => serde_json::Value::Array(
                items
                    .iter()
                    .map(|i| match i {
                        Val::String(s) => serde_json::Value::String(s.clone()),
                        _ => serde_json::Value::Null,
                    })
                    .collect(),
            ),
            _ => serde_json::Value::Null,
        };
        match &results[0] {
            Val::Result(Ok(Some(v))) => Ok(match json(v) {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            }),
            // The component's own error, as the client reads it.
            Val::Result(Err(Some(v))) => Err(anyhow::anyhow!("{}", json(v))),
            other => Err(anyhow::anyhow!("unexpected result {other:?}")),
        }
    }
}

impl ServerHandler for Bare {
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
        let schema = Arc::new(schema);
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("read-file", "read a file", Arc::clone(&schema)),
            Tool::new("list-directory", "list a directory", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let path = args.get("path").and_then(|p| p.as_str()).unwrap_or_default();
        let result = match self.call(&request.name, path).await {
            Ok(text) => {
                self.record(&text);
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("{e:#}"))]),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

fn component() -> PathBuf {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/target/components/wasi-files.wasm");
    assert!(path.exists(), "{}: run `make components`", path.display());
    path
}

/// A state directory with the component installed as `files` (its manifest: read-file
/// and list-directory read their `path`), a policy that lets the workspace be read, and
/// the workspace: a 12-byte file and a 1 MiB one.
fn setup(bx: &Path, root: &Path) -> (PathBuf, PathBuf) {
    let state = root.join("state");
    let ws = root.join("ws");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    std::fs::write(ws.join("small.txt"), "milk, eggs\n\n").unwrap();
    std::fs::write(ws.join("big.txt"), "0123456789abcde\n".repeat(65536)).unwrap();
    let run = |a: &[&str]| {
        let out = Command::new(bx).arg("--state-dir").arg(&state).args(a).output().unwrap();
        assert!(out.status.success(), "bx {a:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let wasm = component();
    let digest =
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(std::fs::read(&wasm).unwrap())));
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/manifests/files.toml");
    run(&[
        "tool",
        "install",
        wasm.to_str().unwrap(),
        "--digest",
        &digest,
        "--manifest",
        manifest.to_str().unwrap(),
        "--name",
        "files",
    ]);
    std::fs::write(
        state.join("policy.toml"),
        format!(
            "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\n",
            ws.display()
        ),
    )
    .unwrap();
    (state, ws)
}

fn args(path: &Path) -> JsonObject {
    serde_json::from_value(serde_json::json!({"path": path})).unwrap()
}

fn main() {
    if let Some(dir) = std::env::var_os("BX_BARE_HOST") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let log = std::env::var_os("BX_BARE_LOG").map(PathBuf::from);
            let bare = Bare::new(&component(), PathBuf::from(dir), log);
            let service = bare.serve(rmcp::transport::stdio()).await.unwrap();
            let _ = service.waiting().await;
        });
        return;
    }
    // BX_BENCH_BX=PATH times another build of bx (a before-and-after), with this client
    // and this bare host.
    let bx = std::env::var_os("BX_BENCH_BX")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bx")), PathBuf::from);
    let root = tempfile::tempdir_in(
        std::env::var_os("BX_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from),
    )
    .unwrap();
    let (state, ws) = setup(&bx, root.path());
    let _daemon = bx_eval::run::Daemon::start(&bx, &state).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let connect = |cmd: tokio::process::Command| {
        rt.block_on(async { ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap() })
    };
    let mut bare_cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    bare_cmd.env("BX_BARE_HOST", &ws).stderr(Stdio::null());
    let mut bx_cmd = tokio::process::Command::new(&bx);
    bx_cmd
        .arg("--state-dir")
        .arg(&state)
        .args(["mcp", "--workspace"])
        .arg(&ws)
        .stderr(Stdio::null());
    // The same bare host, keeping a synced record of each result on the disk bx's log is on.
    let mut synced_cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    synced_cmd
        .env("BX_BARE_HOST", &ws)
        .env("BX_BARE_LOG", root.path().join("bare.log"))
        .stderr(Stdio::null());
    let bare = connect(bare_cmd);
    let synced = connect(synced_cmd);
    let ours = connect(bx_cmd);
    let time = |client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
                tool: &'static str,
                path: PathBuf,
                samples: usize| {
        measure::measure(samples, || {
            let call = CallToolRequestParams::new(tool).with_arguments(args(&path));
            let r = rt.block_on(client.call_tool(call)).unwrap();
            assert_ne!(r.is_error, Some(true), "{tool}: {r:?}");
        })
    };
    // Interleaved: each row's two sides are measured one after the other, twice.
    let rows: [(&str, &str, PathBuf, usize); 3] = [
        ("read-file, 12 bytes", "read-file", ws.join("small.txt"), 300),
        ("list-directory", "list-directory", ws.clone(), 300),
        ("read-file, 1 MiB", "read-file", ws.join("big.txt"), 40),
    ];
    println!(
        "\n## The same component (wasi-files), the same client (rmcp): bx mcp (policy, audit log on disk) against a bare wasmtime host (fresh instance per call, no policy, no audit), and the same bare host syncing one record per call on the same disk\n"
    );
    println!(
        "| call | bx median | p90 | bare median | p90 | bare + sync median | p90 | bx / bare | bx / bare + sync |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, tool, path, samples) in rows {
        let named: &'static str = format!("files.{tool}").leak();
        // Each side's best of two runs, the three interleaved.
        let mut best: [Option<Stats>; 3] = [None, None, None];
        for _ in 0..2 {
            let runs = [
                time(&ours, named, path.clone(), samples),
                time(&bare, tool, path.clone(), samples),
                time(&synced, tool, path.clone(), samples),
            ];
            for (kept, run) in best.iter_mut().zip(runs) {
                *kept = Some(match kept.take() {
                    Some(k) => k.min_by_median(run),
                    None => run,
                });
            }
        }
        let [Some(o), Some(b), Some(y)] = best else { unreachable!() };
        let ratio = |a: &Stats, b: &Stats| a.median.as_secs_f64() / b.median.as_secs_f64();
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {:.2}x | {:.2}x |",
            fmt(o.median),
            fmt(o.p90),
            fmt(b.median),
            fmt(b.p90),
            fmt(y.median),
            fmt(y.p90),
            ratio(&o, &b),
            ratio(&o, &y)
        );
    }
    rt.block_on(async {
        let _ = bare.cancel().await;
        let _ = synced.cancel().await;
        let _ = ours.cancel().await;
    });
}

trait MinByMedian {
    fn min_by_median(self, other: Self) -> Self;
}

impl MinByMedian for Stats {
    fn min_by_median(self, other: Stats) -> Stats {
        if other.median < self.median { other } else { self }
    }
}
