//! Audit log benchmark: appends with fdatasync at 1, 4, 16 and 64 concurrent writers (group
//! commit), plain and anchored (the Merkle tree, a signed checkpoint exported every 1,000
//! records); verify throughput, on its own and against the exported checkpoints, against
//! hashing the same bytes (the raw floor); and inclusion proofs in a tree of a million
//! records: size, prove and check time.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bx_audit::{Against, Anchor, AuditLog, Entry, FullTree, Request, leaf_hash, verify};
use sha2::Digest as _;

#[path = "../../bench/daylog.rs"]
mod daylog;
use daylog::{PER_DAY, write_days};

fn fields(i: u64) -> Entry {
    let args = r#"{"path":"/home/owner/notes.txt"}"#;
    Entry::Request(Request::new("bench", &format!("c{i}"), "fs.read", "sha256:00", args, vec![]))
}

/// What holds appends: the writer's own work per record without a sync (serialise, hash,
/// tree, write under the lock), and one fdatasync. With one record in flight per writer,
/// N writers can at best share one sync among N records.
fn floor() {
    let dir = tempfile::tempdir_in(".").unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    let n = 20_000u64;
    let start = Instant::now();
    for i in 0..n {
        log.append_deferred(&fields(i)).unwrap();
    }
    let per_record = start.elapsed() / n as u32;
    let syncs = 500u64;
    let start = Instant::now();
    for i in 0..syncs {
        log.append(&fields(n + i)).unwrap();
    }
    let per_sync = start.elapsed() / syncs as u32;
    println!("| floor | per record |\n| --- | --- |");
    println!(
        "| the writer's work, no sync (append_deferred) | {} ({:.0} records/s) |",
        fmt(per_record),
        1.0 / per_record.as_secs_f64()
    );
    println!("| one append with its fdatasync, 1 writer | {} |", fmt(per_sync));
    for writers in [16u32, 64] {
        println!(
            "| best case at {writers} writers, one sync shared by all | {:.0} records/s |",
            f64::from(writers) / per_sync.as_secs_f64()
        );
    }
    println!();
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn fmt(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A signing key and an export directory in `dir`.
fn anchor(dir: &std::path::Path) -> (Anchor, Against) {
    let key = dir.join("bench.key");
    let vkey = bx_audit::init_key(&key, "bx.bench/audit").unwrap();
    let export = dir.join("export");
    std::fs::create_dir(&export).unwrap();
    bx_audit::prepare_export(&export, "bx.bench/audit").unwrap();
    let against =
        Against { verifier: Some(vkey), exports: vec![export.clone()], ..Against::default() };
    (Anchor::load(&key, vec![export]).unwrap(), against)
}

fn open(dir: &std::path::Path, anchored: bool) -> AuditLog {
    let log = AuditLog::open(&dir.join("audit")).unwrap();
    if anchored { log.with_anchor(anchor(dir).0) } else { log }
}

fn main() {
    // `cargo bench -p bx-audit --bench audit -- open` runs only the open table.
    if std::env::args().any(|a| a == "open") {
        open_cost();
        return;
    }
    // `-- appends` runs only the append tables.
    let appends_only = std::env::args().any(|a| a == "appends");
    floor();
    println!("bx audit benchmark (fdatasync on every append; group commit across writers)\n");
    println!("| writers | log | records | records/s | p50 latency | p99 latency |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (writers, anchored) in [
        (1u64, false),
        (1, true),
        (4, false),
        (4, true),
        (16, false),
        (16, true),
        (64, false),
        (64, true),
    ] {
        let dir = tempfile::tempdir_in(".").unwrap();
        let log = Arc::new(open(dir.path(), anchored));
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
            "| {writers} | {} | {} | {:.0} | {} | {} |",
            if anchored { "anchored" } else { "plain" },
            lat.len(),
            n / elapsed.as_secs_f64(),
            fmt(pct(&lat, 0.5)),
            fmt(pct(&lat, 0.99))
        );
    }

    if appends_only {
        return;
    }
    // Verify throughput over a log of ~20 MB, anchored.
    let root = tempfile::tempdir_in(".").unwrap();
    let (key, against) = anchor(root.path());
    let dir = root.path().join("audit");
    let dir = &dir;
    {
        let log = Arc::new(AuditLog::open(dir).unwrap().with_anchor(key));
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
        bx_audit::day_files(dir).unwrap().iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
    let time = |f: &dyn Fn()| five_runs(f);
    let runs = time(&|| assert!(verify(dir).unwrap().is_clean()));
    let anchored = time(&|| {
        let r = bx_audit::verify_against(dir, &against).unwrap();
        assert!(r.is_clean() && r.anchor.state == "anchored", "{:?}", r.problems);
    });
    let files: Vec<Vec<u8>> = std::fs::read_dir(dir)
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
    println!("\n| verify | log size | median | p90 | MB/s | raw hash-only MB/s | ratio |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (what, runs) in
        [("walk + parse + chain", &runs), ("… + against the exported checkpoints", &anchored)]
    {
        println!(
            "| {what} | {mb:.1} MB | {:.0} ms | {:.0} ms | {:.0} | {:.0} | {:.2}× |",
            runs[2].as_secs_f64() * 1e3,
            runs[4].as_secs_f64() * 1e3,
            mb / runs[2].as_secs_f64(),
            mb / raw[2].as_secs_f64(),
            runs[2].as_secs_f64() / raw[2].as_secs_f64()
        );
    }
    proofs();
    open_cost();
    println!("\ntargets: >= 20,000 records/s at 16 writers; verify >= 100 MB/s");
}

/// What opening a log of N records costs: plain (the tree from `checkpoint.json` and the
/// lines after it), and anchored with a checkpoint in the export directory, where the
/// writer checks the records against the signed root before it signs anything: reading
/// every record, and after an open that recorded what it checked (`checked.json`). The
/// log is generated (`daylog.rs`: request records of about 380 bytes).
fn open_cost() {
    println!(
        "\n| open, N records ({PER_DAY} a day) | log size | plain open | anchored open, reading every record | anchored open after one that recorded what it checked (records read) | ratio |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for n in [10_000u64, 100_000, 1_000_000] {
        let root = tempfile::tempdir_in(".").unwrap();
        let dir = root.path().join("audit");
        let bytes = write_days(&dir, n, fields);
        // Export a signed checkpoint of all of it (this first open rehashes every line).
        let (key, _) = anchor(root.path());
        let log = AuditLog::open(&dir).unwrap().with_anchor(key);
        log.close().unwrap();
        let key = root.path().join("bench.key");
        let export = root.path().join("export");
        let median = |f: &dyn Fn()| five_runs(f)[2];
        let plain = median(&|| drop(AuditLog::open(&dir).unwrap()));
        let anchored = || {
            let anchor = Anchor::load(&key, vec![export.clone()]).unwrap();
            let log = AuditLog::open(&dir).unwrap().with_anchor(anchor);
            assert_eq!(log.failure(), None);
            log.records_read_at_open().unwrap_or_default()
        };
        let checked = dir.join("checked.json");
        let every = median(&|| {
            let _ = std::fs::remove_file(&checked);
            assert_eq!(anchored(), n);
        });
        // The day files are recorded once they are older than a write's clock tick can
        // hide (checked.rs: two seconds), which a real log's earlier days always are.
        std::thread::sleep(Duration::from_secs(3));
        let _ = std::fs::remove_file(&checked);
        assert_eq!(anchored(), n);
        let read = anchored();
        let after = median(&|| assert_eq!(anchored(), read));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "| {n} | {:.0} MB | {:.1} ms | {:.0} ms | {:.1} ms ({read}) | {:.0}x |",
            bytes as f64 / 1e6,
            ms(plain),
            ms(every),
            ms(after),
            every.as_secs_f64() / after.as_secs_f64()
        );
    }
}

/// Inclusion proofs in a tree of a million records of a typical size, built in memory
/// with the tree bx uses (writing a million records with fdatasync would measure the disk).
fn proofs() {
    const N: u64 = 1_000_000;
    let line = String::from_utf8(vec![b'x'; 400]).unwrap();
    let t = Instant::now();
    let mut tree = FullTree::default();
    for i in 0..N {
        tree.push(leaf_hash(format!("{i}{line}").as_bytes()));
    }
    let build = t.elapsed();
    let root = tree.root_at(N).unwrap();
    let mut x = 12345u64;
    let mut prove = Vec::new();
    let mut check = Vec::new();
    let mut floor = Vec::new();
    let mut hashes = 0;
    for _ in 0..1000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let i = (x >> 11) % N;
        let leaf = leaf_hash(format!("{i}{line}").as_bytes());
        let t = Instant::now();
        let proof = tree.prove(N, i).unwrap();
        prove.push(t.elapsed());
        let t = Instant::now();
        assert!(bx_audit::check_inclusion(&proof, N, root, i, leaf));
        check.push(t.elapsed());
        // The floor: the hashing a check cannot avoid, one node hash per proof line.
        let t = Instant::now();
        let mut h = leaf.0;
        for p in &proof {
            h = sha2::Sha256::new()
                .chain_update([1])
                .chain_update(h)
                .chain_update(p.0)
                .finalize()
                .into();
        }
        std::hint::black_box(h);
        floor.push(t.elapsed());
        hashes = proof.len();
    }
    for v in [&mut prove, &mut check, &mut floor] {
        v.sort();
    }
    // Each proof line is a base64 hash and a newline; the signed checkpoint adds ~150 B.
    let bytes = hashes * 45;
    println!("\n| inclusion proof, {N} records | median | p90 |");
    println!("| --- | --- | --- |");
    println!(
        "| prove (stored hashes in memory) | {} | {} |",
        fmt(pct(&prove, 0.5)),
        fmt(pct(&prove, 0.9))
    );
    println!("| check | {} | {} |", fmt(pct(&check, 0.5)), fmt(pct(&check, 0.9)));
    println!(
        "| raw floor: {hashes} node hashes | {} | {} |",
        fmt(pct(&floor, 0.5)),
        fmt(pct(&floor, 0.9))
    );
    println!(
        "\nproof: {hashes} hashes, {bytes} bytes of proof lines (plus the record and the signed checkpoint); tree of {N} built in {:.1} s",
        build.as_secs_f64()
    );
}

/// `f` timed five times, fastest first.
fn five_runs(f: &dyn Fn()) -> Vec<Duration> {
    let mut runs: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    runs.sort();
    runs
}
