//! `make bench`: what one tool call costs inside the loop, beyond the call itself: the
//! request and decision on the audit log, the policy re-read and the broker's decision,
//! a fresh instance and the call, the result record and the taint update, through the
//! same trust path ([`bx_agent::Trust`]) the agent drives, on a multi-threaded runtime as
//! the daemon runs it. Measured with the audit log on disk (fsync) and on tmpfs (/dev/shm,
//! where fsync costs nothing), next to the bare runtime call in the same run.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::Path;
use std::sync::Arc;

use bx_agent::call::Overlay;
use bx_agent::{Ledger, NoOwner, Proposal, Trust, call};
use bx_audit::AuditLog;
use bx_broker::{CallRequest, Decision, Label, Policy};
use bx_runtime::{Limits, LoadedTool, Runtime};
use bx_state::{PolicyFile, Sessions};
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
    rt.load_blocking(&rt.compile(&b).unwrap(), &digest).unwrap()
}

struct Setup {
    rt: Arc<Runtime>,
    tool: Arc<LoadedTool>,
    policy: String,
    args: serde_json::Value,
}

/// A state directory's trust path: a log, a ledger, the policy file.
fn trust(s: &Setup, state: &Path) -> Trust {
    std::fs::write(state.join("policy.toml"), &s.policy).unwrap();
    let audit = state.join("audit");
    let log = Arc::new(AuditLog::open(&audit).unwrap());
    let ledger = Ledger::open(Sessions::open(&state.join("sessions")).unwrap(), &audit).unwrap();
    let secrets = bx_state::SecretStore::at(state.join("secrets"));
    Trust::new(log, ledger, PolicyFile::open(&state.join("policy.toml"), vec![]), secrets)
}

/// One call the way the agent makes it.
fn one_call(s: &Setup, trust: &Trust, tokio: &tokio::runtime::Runtime) {
    tokio.block_on(async {
        let proposal = Proposal {
            session: "bench",
            call: "c",
            name: "fs.read",
            tool: Some(bx_agent::Tool::Component(&s.tool)),
            args: &s.args,
            workspace: None,
        };
        let overlay = Overlay::default();
        let settled = trust.settle(proposal, &overlay, None, &mut NoOwner, &s.rt).await;
        let f = settled.unwrap().expect("allowed");
        assert_eq!(f.status, bx_audit::CallStatus::Ok);
    });
}

fn main() {
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("note.txt");
    std::fs::write(&file, "a short note\n").unwrap();
    let root = data.path().to_str().unwrap().to_owned();
    let rt = Arc::new(Runtime::new(Limits::default()).unwrap());
    let tool = Arc::new(load(&rt));
    let policy = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{root}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n"
    );
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
    let in_memory = Policy::parse("p.toml", &s.policy).unwrap();
    let bare = measure(samples, || {
        let Decision::Allow(g) = bx_broker::decide(&in_memory, Label::CLEAN, &req) else {
            panic!()
        };
        let r = tokio.block_on(s.rt.call(&s.tool, g, &text)).unwrap();
        assert!(r.result.is_ok());
    });

    let state_disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let disk = trust(&s, state_disk.path());
    let on_disk = measure(samples, || one_call(&s, &disk, &tokio));

    let shm = Path::new("/dev/shm");
    let on_tmpfs = shm.is_dir().then(|| {
        let state = tempfile::tempdir_in(shm).unwrap();
        let t = trust(&s, state.path());
        measure(samples, || one_call(&s, &t, &tokio))
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
