//! `make bench`: what opening the state costs as the audit log grows. For a generated
//! log of 0, 10,000, 100,000 and 1,000,000 records (calls of 100 sessions: a request and
//! its result each, as `bx tool run` writes them), two rows each:
//! - the session ledger's open, from its checkpoint (`audit/ledger.json`) and, in the
//!   same run, with the checkpoint removed (the whole log replayed, as every open did
//!   before checkpoints);
//! - a whole `bx tool run fs.read` process with no daemon (open the log, the ledger, the
//!   store, run the call, record it), the same two ways;
//! - the same process with the log anchored (a signing key and an export directory), so
//!   that every open checks the log against the exported checkpoint: after an open that
//!   recorded what it checked (`audit/checked.json`) and, in the same run, without it.
//!
//! The log is written straight to day files of 10,000 records (hashing the chain, not
//! syncing every line: that would measure the disk), then opened once by `bx` so that its
//! `checkpoint.json` holds the tree.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bx_audit::{CallStatus, Entry, Outcome, Request};

#[path = "../../bench/measure.rs"]
mod measure;
use measure::{Stats, fmt, measure};

#[path = "../../bench/daylog.rs"]
mod daylog;
use daylog::write_days;

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

/// Anchors the log of `state`: a key beside it, an export directory, and a first signed
/// checkpoint exported (`bx audit checkpoint`).
fn anchor(state: &Path, root: &Path) {
    let key = root.join("keys/audit.key");
    let init =
        ["audit", "key", "init", "--out", key.to_str().unwrap(), "--origin", "bx.bench/open"];
    let out = bx(state).args(init).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let usb = root.join("usb");
    std::fs::create_dir(&usb).unwrap();
    let config = format!("[audit]\nkey = {:?}\nexport = [{:?}]\n", key.display(), usb.display());
    std::fs::write(state.join("config.toml"), config).unwrap();
    let out = bx(state).args(["audit", "checkpoint"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
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
        "| records | log | ledger open, from checkpoint | ledger open, whole log | bx tool run, from checkpoint | bx tool run, whole log | bx tool run, anchored | bx tool run, anchored, reading every record |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
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
        let size = write_days(&audit, n, |i| entry(i - 1, &file));
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
        // Anchored: every open checks the log against the export. After one open that
        // recorded what it checked (audit/checked.json, once the generated days are two
        // seconds old, as a real log's earlier days always are), against every record.
        anchor(&state, root.path());
        std::thread::sleep(Duration::from_secs(3));
        run();
        let checked = audit.join("checked.json");
        let saved_checked = std::fs::read(&checked).ok();
        let run_anchored = measure(5, run);
        let run_every = measure(5, || {
            let _ = std::fs::remove_file(&checked);
            run();
        });
        if let Some(saved) = saved_checked {
            std::fs::write(&checked, saved).unwrap();
        }
        let row = |s: Stats| format!("{} (p90 {})", fmt(s.median), fmt(s.p90));
        println!(
            "| {n} | {:.0} MB | {} | {} | {} | {} | {} | {} |",
            size as f64 / 1e6,
            row(from_checkpoint),
            row(whole),
            row(run_checkpoint),
            row(run_whole),
            row(run_anchored),
            row(run_every)
        );
        let zero = *at_zero.get_or_insert((run_checkpoint.median, run_anchored.median));
        if n == 1_000_000 {
            let ratio = |d: Duration, at: Duration| d.as_secs_f64() / at.as_secs_f64();
            println!(
                "\nbx tool run at 1,000,000 records against 0: {:.2}x from the checkpoint, {:.2}x replaying the whole log; anchored {:.2}x, {:.2}x reading every record (target: within 1.5x)",
                ratio(run_checkpoint.median, zero.0),
                ratio(run_whole.median, zero.0),
                ratio(run_anchored.median, zero.1),
                ratio(run_every.median, zero.1)
            );
        }
    }
}
