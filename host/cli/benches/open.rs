//! `make bench`: what opening the state costs as the audit log grows. For a generated
//! log of 0, 10,000, 100,000 and 1,000,000 records (calls of 100 sessions: a request and
//! its result each, as `bx tool run` writes them), two rows each:
//! - the session ledger's open, from its checkpoint (`audit/ledger.json`) and, in the
//!   same run, with the checkpoint removed (the whole log replayed, as every open did
//!   before checkpoints);
//! - a whole `bx tool run fs.read` process with no daemon (open the log, the ledger, the
//!   store, run the call, record it), the same two ways.
//!
//! The log is written straight to its day file (hashing the chain, not syncing every
//! line: that would measure the disk), then opened once by `bx` so that its
//! `checkpoint.json` holds the tree.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bx_audit::{CallStatus, Entry, Outcome, Request};

#[path = "../../bench/measure.rs"]
mod measure;
use measure::{Stats, fmt, measure};

const SESSIONS: u64 = 100;

/// Record `i` of the generated history: a call's request, then its result.
fn entry(i: u64, file: &str) -> Entry {
    let session = format!("s{}", (i / 2) % SESSIONS);
    let call = format!("c{}", i / 2);
    if i.is_multiple_of(2) {
        let args = format!("{{\"path\":{file:?}}}");
        Entry::Request(Request::new(
            &session,
            &call,
            "fs.read",
            "sha256:00",
            &args,
            vec![format!("read {file}")],
        ))
    } else {
        Entry::Result(Outcome {
            session,
            call,
            status: CallStatus::Ok,
            label: "private/trusted".into(),
            touched: vec![format!("read {file} (private/trusted)")],
            touched_more: 0,
            output_sha256: Some("0".repeat(64)),
            output_bytes: Some(12),
            error: None,
            refused: vec![],
            secrets: vec![],
            leaks: vec![],
        })
    }
}

/// Writes `n` records to the log in `audit`, chained, into one day file; its size.
fn generate(audit: &Path, n: u64, file: &str) -> u64 {
    use std::io::Write as _;
    std::fs::create_dir_all(audit).unwrap();
    let path = audit.join("2026-11-29.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut prev = bx_audit::GENESIS.to_owned();
    for i in 1..=n {
        let entry = entry(i - 1, file);
        let record = bx_audit::Record {
            seq: i,
            time: "2026-11-29T12:00:00.000Z".into(),
            prev,
            kind: entry.kind(),
            fields: entry.fields(),
        };
        let line = record.to_line();
        prev = bx_audit::line_hash(line.as_bytes());
        out.write_all(line.as_bytes()).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
    std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
}

fn bx(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bx"));
    c.arg("--state-dir").arg(state).env_remove("BX_HOME");
    c
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let wasm = repo.join("tools/target/wasm32-wasip2/release/bx_tool_fs_read.wasm");
    let bytes = std::fs::read(&wasm).expect("run `make tools` first");
    let digest = format!("sha256:{}", bx_audit::sha256_hex(&bytes));
    println!("bx open cost by log size (median and p90 of 5 runs; same binary, same files)\n");
    println!(
        "| records | log | ledger open, from checkpoint | ledger open, whole log | bx tool run, from checkpoint | bx tool run, whole log |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut at_zero = None;
    for n in [0u64, 10_000, 100_000, 1_000_000] {
        let root = tempfile::tempdir_in(".").unwrap();
        let state = root.path().join("state");
        let data = root.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let file = data.join("n.txt");
        std::fs::write(&file, "a note, 12b\n").unwrap();
        let file = file.to_str().unwrap().to_owned();
        let audit = state.join("audit");
        let size = generate(&audit, n, &file);
        let ok = bx(&state)
            .args(["tool", "install"])
            .arg(&wasm)
            .args(["--digest", &digest])
            .output()
            .unwrap();
        assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
        std::fs::write(
            state.join("policy.toml"),
            format!(
                "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\n",
                data.display()
            ),
        )
        .unwrap();
        let args = format!("{{\"path\":{file:?}}}");
        let run = || {
            let out = bx(&state)
                .args(["tool", "run", "fs.read", "--session", "s1", "--args", &args])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        // One run writes both checkpoints (the tree's and the ledger's).
        run();
        let ledger = audit.join("ledger.json");
        let files = || bx_state::Sessions::open(&state.join("sessions")).unwrap();
        let open = || drop(bx_agent::Ledger::open(files(), &audit).unwrap());
        let from_checkpoint = measure(5, open);
        let saved = std::fs::read(&ledger).unwrap();
        let whole = measure(5, || {
            let _ = std::fs::remove_file(&ledger);
            open();
        });
        std::fs::write(&ledger, &saved).unwrap();
        let run_checkpoint = measure(5, run);
        let run_whole = measure(5, || {
            let _ = std::fs::remove_file(&ledger);
            run();
        });
        let row = |s: Stats| format!("{} (p90 {})", fmt(s.median), fmt(s.p90));
        println!(
            "| {n} | {:.0} MB | {} | {} | {} | {} |",
            size as f64 / 1e6,
            row(from_checkpoint),
            row(whole),
            row(run_checkpoint),
            row(run_whole)
        );
        let zero = *at_zero.get_or_insert(run_checkpoint.median);
        if n == 1_000_000 {
            let ratio = |d: Duration| d.as_secs_f64() / zero.as_secs_f64();
            println!(
                "\nbx tool run at 1,000,000 records against 0: {:.2}x from the checkpoint, {:.2}x replaying the whole log (target: within 1.5x)",
                ratio(run_checkpoint.median),
                ratio(run_whole.median)
            );
        }
    }
}
