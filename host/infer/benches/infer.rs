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

/// Median and p90 of durations, in seconds.
fn median_p90(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let p90 = ((v.len() * 9).div_ceil(10)).saturating_sub(1);
    (v[v.len() / 2], v[p90])
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn main() {
    let stream = big_stream();
    let mb = stream.len() as f64 / 1e6;
    let payloads: Vec<&[u8]> = stream
        .split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data: "))
        .filter(|l| l.first() == Some(&b'{'))
        .collect();
    // Seconds per pass, the two sides alternated so both see the same load on a shared
    // machine; rates are worked out from the median and p90 times (the p90 rate is the
    // slow tail).
    let (mut parse, mut json_only) = (Vec::new(), Vec::new());
    for _ in 0..11 {
        let t = Instant::now();
        parse_sse_bytes(&stream).unwrap();
        parse.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for p in &payloads {
            std::hint::black_box(serde_json::from_slice::<serde_json::Value>(p).unwrap());
        }
        json_only.push(t.elapsed().as_secs_f64());
    }
    println!("bx inference benchmark\n");
    println!(
        "| case | median | p90 | baseline | baseline median | baseline p90 | ratio of medians |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let ((p, p90), (j, j90)) = (median_p90(parse), median_p90(json_only));
    println!(
        "| SSE parse + assemble, {mb:.1} MB recorded stream | {:.0} MB/s | {:.0} MB/s | JSON parse of the payloads alone | {:.0} MB/s | {:.0} MB/s | {:.2}× |",
        mb / p,
        mb / p90,
        mb / j,
        mb / j90,
        j / p
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
        for round in 0..11 {
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
                // Seconds per token, so the p90 is the slow tail.
                let per_token = t.elapsed().as_secs_f64() / tokens.max(1) as f64;
                if round > 0 {
                    if side == 0 { via.push(per_token) } else { raw.push(per_token) }
                }
            }
        }
        (median_p90(via), median_p90(raw))
    });
    let _ = server.kill();
    let _ = server.wait();
    let ((v, v90), (r, r90)) = (through, direct);
    println!(
        "| tokens/s through bx-infer (128 tokens, SmolLM2-135M) | {:.1} tok/s | {:.1} tok/s | plain reqwest, same server | {:.1} tok/s | {:.1} tok/s | {:.3}× |",
        1.0 / v,
        1.0 / v90,
        1.0 / r,
        1.0 / r90,
        r / v
    );
    println!("\ntargets: SSE parsing >= 100 MB/s; through the client >= 0.98× direct");
    std::thread::sleep(Duration::from_millis(10));
}
