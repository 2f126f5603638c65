//! Audit log benchmark: appends with fdatasync at 1, 4 and 16 concurrent writers (group
//! commit), against one writer syncing every record alone; and verify throughput against
//! hashing the same bytes (the raw floor).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bx_audit::{AuditLog, Entry, Request, verify};
use sha2::Digest as _;

fn fields(i: u64) -> Entry {
    let args = r#"{"path":"/home/owner/notes.txt"}"#;
    Entry::Request(Request::new("bench", &format!("c{i}"), "fs.read", "sha256:00", args, vec![]))
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn fmt(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    println!("bx audit benchmark (fdatasync on every append; group commit across writers)\n");
    println!("| writers | records | records/s | p50 latency | p99 latency |");
    println!("| --- | --- | --- | --- | --- |");
    for writers in [1u64, 4, 16] {
        let dir = tempfile::tempdir_in(".").unwrap();
        let log = Arc::new(AuditLog::open(dir.path()).unwrap());
        let per_writer = 4000 / writers;
        let start = Instant::now();
        let mut lat: Vec<Duration> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let log = Arc::clone(&log);
                    s.spawn(move || {
                        (0..per_writer)
                            .map(|i| {
                                let t = Instant::now();
                                log.append(&fields(w * per_writer + i)).unwrap();
                                t.elapsed()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let elapsed = start.elapsed();
        lat.sort();
        let n = lat.len() as f64;
        println!(
            "| {writers} | {} | {:.0} | {} | {} |",
            lat.len(),
            n / elapsed.as_secs_f64(),
            fmt(pct(&lat, 0.5)),
            fmt(pct(&lat, 0.99))
        );
    }

    // Verify throughput over a log of ~20 MB.
    let dir = tempfile::tempdir_in(".").unwrap();
    {
        let log = Arc::new(AuditLog::open(dir.path()).unwrap());
        std::thread::scope(|s| {
            for w in 0..16u64 {
                let log = Arc::clone(&log);
                s.spawn(move || {
                    for i in 0..6000 {
                        log.append(&fields(w * 6000 + i)).unwrap();
                    }
                });
            }
        });
        Arc::try_unwrap(log).unwrap().close().unwrap();
    }
    let bytes: u64 =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let mut runs: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            assert!(verify(dir.path()).unwrap().is_clean());
            t.elapsed()
        })
        .collect();
    runs.sort();
    let files: Vec<Vec<u8>> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    let mut raw: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for f in &files {
                for line in f.split(|b| *b == b'\n') {
                    std::hint::black_box(sha2::Sha256::digest(line));
                }
            }
            t.elapsed()
        })
        .collect();
    raw.sort();
    let mb = bytes as f64 / 1e6;
    println!("\n| verify | log size | median | MB/s | raw hash-only MB/s | ratio |");
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "| walk + parse + chain | {mb:.1} MB | {:.0} ms | {:.0} | {:.0} | {:.2}× |",
        runs[2].as_secs_f64() * 1e3,
        mb / runs[2].as_secs_f64(),
        mb / raw[2].as_secs_f64(),
        runs[2].as_secs_f64() / raw[2].as_secs_f64()
    );
    println!("\ntargets: >= 20,000 records/s at 16 writers; verify >= 100 MB/s");
}
