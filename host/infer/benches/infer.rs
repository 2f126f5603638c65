//! `make bench` for the inference client: SSE parsing throughput on a recorded stream
//! (against parsing the same JSON payloads alone), and tokens per second through the
//! client against the same llama-server read with plain reqwest, in the same run.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bx_infer::{ChatRequest, Client, InferConfig, Message, parse_sse_bytes};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The recorded reply with its content events repeated until the stream is ~8 MB.
fn big_stream() -> Vec<u8> {
    let recorded = std::fs::read_to_string(repo().join("fixtures/sse/recorded-reply.sse")).unwrap();
    let events: Vec<&str> = recorded.split("\n\n").filter(|e| !e.is_empty()).collect();
    let (body, tail) = events.split_at(events.len() - 3); // finish chunk, usage, [DONE]
    let mut out = String::new();
    while out.len() < 8 << 20 {
        for e in body {
            out.push_str(e);
            out.push_str("\n\n");
        }
    }
    for e in tail {
        out.push_str(e);
        out.push_str("\n\n");
    }
    out.into_bytes()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn main() {
    let stream = big_stream();
    let mb = stream.len() as f64 / 1e6;
    let parse: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            parse_sse_bytes(&stream).unwrap();
            mb / t.elapsed().as_secs_f64()
        })
        .collect();
    let payloads: Vec<&[u8]> = stream
        .split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data: "))
        .filter(|l| l.first() == Some(&b'{'))
        .collect();
    let json_only: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for p in &payloads {
                std::hint::black_box(serde_json::from_slice::<serde_json::Value>(p).unwrap());
            }
            mb / t.elapsed().as_secs_f64()
        })
        .collect();
    println!("bx inference benchmark\n");
    println!("| case | median | baseline | baseline median | ratio |");
    println!("| --- | --- | --- | --- | --- |");
    let (p, j) = (median(parse), median(json_only));
    println!(
        "| SSE parse + assemble, {mb:.1} MB recorded stream | {p:.0} MB/s | JSON parse of the payloads alone | {j:.0} MB/s | {:.2}× |",
        p / j
    );

    let python = repo().join(".venv/bin/python");
    if !python.exists() {
        println!("\n(no .venv: run `make setup` for the tokens-per-second row)");
        return;
    }
    let port = free_port();
    let mut server = Command::new(python)
        .arg(repo().join("host/infer/llama_server.py"))
        .arg(port.to_string())
        .args(["--parallel", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let (through, direct) = rt.block_on(async {
        let client = Client::connect(InferConfig::new(&url)).await.unwrap();
        let req = ChatRequest {
            messages: vec![Message::User {
                content: "Write a short story about a lighthouse.".into(),
            }],
            max_tokens: Some(128),
            temperature: Some(0.0),
            seed: Some(1),
            ..ChatRequest::default()
        };
        let body = req.to_body(0);
        // No pooled connections: llama-server closes idle ones, and a stale one fails the
        // baseline (bx-infer retries that case; plain reqwest would not).
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        let (mut via, mut raw) = (Vec::new(), Vec::new());
        for round in 0..6 {
            // Alternate the order so neither side always runs on a warmer cache.
            for side in [round % 2, 1 - round % 2] {
                let t = Instant::now();
                let tokens = if side == 0 {
                    let c = client.chat("bench", &req, |_| {}).await.unwrap();
                    c.usage.map_or(0, |u| u.completion_tokens)
                } else {
                    let text = http
                        .post(format!("{url}/v1/chat/completions"))
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                        .unwrap()
                        .text()
                        .await
                        .unwrap();
                    let usage = text
                        .lines()
                        .filter_map(|l| l.strip_prefix("data: "))
                        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                        .find_map(|v| v.get("usage")?.get("completion_tokens")?.as_u64());
                    usage.unwrap_or(0)
                };
                let rate = tokens as f64 / t.elapsed().as_secs_f64();
                if round > 0 {
                    if side == 0 { via.push(rate) } else { raw.push(rate) }
                }
            }
        }
        (median(via), median(raw))
    });
    let _ = server.kill();
    let _ = server.wait();
    println!(
        "| tokens/s through bx-infer (128 tokens, SmolLM2-135M) | {through:.1} tok/s | plain reqwest, same server | {direct:.1} tok/s | {:.3}× |",
        through / direct
    );
    println!("\ntargets: SSE parsing >= 100 MB/s; through the client >= 0.98× direct");
    std::thread::sleep(Duration::from_millis(10));
}
