//! `make bench`: what one tool call costs inside the loop, beyond the call itself: the
//! request and decision on the audit log, the broker's decision, a fresh instance and the
//! call, the result record and the taint update, each stage on a blocking worker as the
//! agent runs it. Measured with the audit log on disk (fsync) and on tmpfs (/dev/shm,
//! where fsync costs nothing), next to the bare runtime call in the same run.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::Path;
use std::sync::Arc;

use bx_agent::call;
use bx_audit::AuditLog;
use bx_broker::{AllowList, CallRequest, Decision, Label};
use bx_runtime::{Limits, LoadedTool, Runtime};
use bx_store::Sessions;
use sha2::Digest as _;

#[path = "../../bench/measure.rs"]
mod measure;
use measure::{Stats, fmt, measure};

fn load(rt: &Runtime) -> LoadedTool {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/target/wasm32-wasip2/release/bx_tool_fs_read.wasm");
    let b = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make tools`", path.display()));
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&b)));
    rt.load(&rt.compile(&b).unwrap(), &digest).unwrap()
}

struct Setup {
    rt: Arc<Runtime>,
    tool: Arc<LoadedTool>,
    policy: Arc<bx_broker::Policy>,
    args: serde_json::Value,
}

/// One call the way the agent makes it: two blocking stages around the decision.
fn one_call(
    s: &Setup,
    log: &Arc<AuditLog>,
    sessions: &Arc<Sessions>,
    tokio: &tokio::runtime::Runtime,
) {
    tokio.block_on(async {
        let (log1, tool1, policy, args1, sessions1) = (
            Arc::clone(log),
            Arc::clone(&s.tool),
            Arc::clone(&s.policy),
            s.args.clone(),
            Arc::clone(sessions),
        );
        // The same stages, in the same order, as the agent's request_and_decide.
        let decision = tokio::task::spawn_blocking(move || {
            let resources = call::resources(&tool1, &args1).unwrap();
            let text = args1.to_string();
            call::record_request(&log1, "bench", "c", "fs.read", tool1.digest(), &text, &resources)
                .unwrap();
            let (taint, _) = call::session_taint(&log1, &sessions1, "bench", "c").unwrap();
            let req =
                CallRequest { tool: "fs.read".into(), digest: tool1.digest().into(), resources };
            let d = bx_broker::decide(&policy, taint, &req);
            call::record_decision(&log1, "bench", "c", &d, taint).unwrap();
            d
        })
        .await
        .unwrap();
        let Decision::Allow(grant) = decision else { panic!("not allowed") };
        let (log2, tool2, rt, args2, sessions2) = (
            Arc::clone(log),
            Arc::clone(&s.tool),
            Arc::clone(&s.rt),
            s.args.to_string(),
            Arc::clone(sessions),
        );
        tokio::task::spawn_blocking(move || {
            let f = call::run_and_record(&log2, &rt, &tool2, grant, &args2, "bench", "c").unwrap();
            assert_eq!(f.status, "ok");
            sessions2.observe("bench", f.label).unwrap();
        })
        .await
        .unwrap();
    });
}

fn main() {
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("note.txt");
    std::fs::write(&file, "a short note\n").unwrap();
    let root = data.path().to_str().unwrap().to_owned();
    let rt = Arc::new(Runtime::new(Limits::default()).unwrap());
    let tool = Arc::new(load(&rt));
    let allow = AllowList::new().read(&root).unwrap();
    let policy = Arc::new(allow.policy().clone());
    let args = serde_json::json!({"path": file.to_str().unwrap()});
    let s = Setup { rt, tool, policy, args };
    let tokio =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let samples = 400;

    // Baseline: the bare call under the same grant, no log, no decision, no hops.
    let req = CallRequest {
        tool: "fs.read".into(),
        digest: s.tool.digest().into(),
        resources: call::resources(&s.tool, &s.args).unwrap(),
    };
    let text = s.args.to_string();
    let bare = measure(samples, || {
        let Decision::Allow(g) = bx_broker::decide(&s.policy, Label::CLEAN, &req) else { panic!() };
        let r = s.rt.call(&s.tool, g, &text).unwrap();
        assert!(r.result.is_ok());
    });

    let state_disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let disk_log = Arc::new(AuditLog::open(&state_disk.path().join("audit")).unwrap());
    let disk_sessions = Arc::new(Sessions::open(state_disk.path()).unwrap());
    let on_disk = measure(samples, || one_call(&s, &disk_log, &disk_sessions, &tokio));

    let shm = Path::new("/dev/shm");
    let on_tmpfs = shm.is_dir().then(|| {
        let state = tempfile::tempdir_in(shm).unwrap();
        let log = Arc::new(AuditLog::open(&state.path().join("audit")).unwrap());
        let sessions = Arc::new(Sessions::open(state.path()).unwrap());
        measure(samples, || one_call(&s, &log, &sessions, &tokio))
    });

    println!("one tool call inside the loop (fs.read of 13 bytes), {samples} samples each");
    println!("{:<44} {:>10} {:>10} {:>14}", "path", "median", "p90", "overhead");
    println!(
        "{:<44} {:>10} {:>10} {:>14}",
        "bare runtime call (baseline)",
        fmt(bare.median),
        fmt(bare.p90),
        "-"
    );
    let row = |name: &str, m: Stats, target: &str| {
        let over = m.median.saturating_sub(bare.median);
        println!(
            "{:<44} {:>10} {:>10} {:>14}   target {target}",
            name,
            fmt(m.median),
            fmt(m.p90),
            fmt(over)
        );
    };
    row("loop call, audit on disk (fsync)", on_disk, "< 1 ms median");
    match on_tmpfs {
        Some(m) => row("loop call, audit on tmpfs (no fsync cost)", m, "< 100 µs median"),
        None => println!("loop call, audit on tmpfs: /dev/shm missing, not measured"),
    }
}
