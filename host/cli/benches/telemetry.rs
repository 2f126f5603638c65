//! `make bench`: what telemetry costs a call. The same small call (fs.read of a 12-byte
//! file through `bx mcp`, its daemon, the broker and the audit log) with telemetry off,
//! on and exporting to a live OTLP/HTTP receiver, on with the receiver stopped (nothing
//! listens: every export is refused), and on with a receiver that accepts and never
//! answers (every export waits out its deadline). Each is its own state directory and
//! daemon; the four are timed in interleaved rounds, so that the machine's noise falls
//! on all of them alike.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::transport::TokioChildProcess;
use sha2::Digest as _;

#[path = "../../bench/measure.rs"]
#[allow(dead_code, reason = "this bench times its interleaved rounds itself")]
mod measure;
use measure::{Stats, fmt};

/// Rounds, and calls per configuration in each: one call of each in turn, so that what
/// the machine does meanwhile falls on all four alike.
const ROUNDS: usize = 600;
const PER_ROUND: usize = 1;
/// Rounds first, not counted.
const WARMUP: usize = 30;

/// A receiver that takes every request and answers 200, or (`answer` false) reads it
/// and never answers.
fn receiver(answer: bool) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    if !answer {
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                    let _ = out.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                }
            });
        }
    });
    port
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A state directory with fs.read, the default policy and `telemetry` as its
/// `[telemetry]` table; a workspace with a small file.
fn setup(bx: &Path, root: &Path, telemetry: &str) -> (PathBuf, PathBuf) {
    let state = root.join("state");
    let ws = root.join("ws");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("small.txt"), "milk, eggs\n\n").unwrap();
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
    std::fs::write(state.join("config.toml"), telemetry).unwrap();
    (state, ws)
}

fn main() {
    let bx = PathBuf::from(env!("CARGO_BIN_EXE_bx"));
    let live = receiver(true);
    let silent = receiver(false);
    let configs = [
        ("off", String::new()),
        ("on, live receiver", format!("[telemetry]\nendpoint = \"http://127.0.0.1:{live}\"\n")),
        (
            "on, receiver stopped",
            format!("[telemetry]\nendpoint = \"http://127.0.0.1:{}\"\n", closed_port()),
        ),
        (
            "on, receiver never answers (2 s deadline)",
            format!("[telemetry]\nendpoint = \"http://127.0.0.1:{silent}\"\ntimeout_secs = 2\n"),
        ),
    ];
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut runs = Vec::new();
    for (i, (_, telemetry)) in configs.iter().enumerate() {
        let (state, ws) = setup(&bx, &root.path().join(i.to_string()), telemetry);
        let daemon = bx_eval::run::Daemon::start(&bx, &state).unwrap();
        let mut cmd = tokio::process::Command::new(&bx);
        cmd.arg("--state-dir").arg(&state).args(["mcp", "--workspace"]).arg(&ws);
        cmd.stderr(Stdio::null());
        let client =
            rt.block_on(async { ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap() });
        runs.push((daemon, client));
    }
    let call = || {
        let args: JsonObject =
            serde_json::from_value(serde_json::json!({"path": "small.txt"})).unwrap();
        CallToolRequestParams::new("fs.read").with_arguments(args)
    };
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); configs.len()];
    for round in 0..ROUNDS + WARMUP {
        for (i, (_, client)) in runs.iter().enumerate() {
            for _ in 0..PER_ROUND {
                let began = Instant::now();
                let r = rt.block_on(client.call_tool(call())).unwrap();
                assert_ne!(r.is_error, Some(true), "{r:?}");
                if round >= WARMUP {
                    times[i].push(began.elapsed());
                }
            }
        }
    }
    for (_, client) in runs.drain(..) {
        rt.block_on(async {
            let _ = client.cancel().await;
        });
    }
    let stats = |v: &mut Vec<Duration>| {
        v.sort();
        Stats { median: v[v.len() / 2], p90: v[v.len() * 9 / 10] }
    };
    let all: Vec<Stats> = times.iter_mut().map(stats).collect();
    println!(
        "\n## Telemetry's cost per call (fs.read, 12 bytes, through bx mcp; {} calls each, interleaved)\n",
        ROUNDS * PER_ROUND
    );
    println!("| telemetry | median | p90 | median / off |");
    println!("|---|---|---|---|");
    for ((name, _), s) in configs.iter().zip(&all) {
        println!(
            "| {name} | {} | {} | {:.3} |",
            fmt(s.median),
            fmt(s.p90),
            s.median.as_secs_f64() / all[0].median.as_secs_f64()
        );
    }
}
