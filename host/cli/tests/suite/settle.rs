//! The one driver of the trust path, `Trust::settle`, driven directly with an owner that
//! answers at once, leaves the same records on the log as the daemon does when its
//! owner answers the same way at the terminal of `bx tool run`.

use std::process::Stdio;
use std::sync::Arc;

use bx_agent::call::{Asking, Overlay};
use bx_agent::{Ledger, Owner, Proposal, Trust};
use bx_broker::Answer;
use bx_runtime::{Limits, Runtime};
use bx_state::StateDir;
use bx_store::Store;
use serde_json::Value;

use super::*;

/// An owner who answers every approval with `answer`, at once.
struct Stub(Answer);

impl Owner for Stub {
    async fn answer(&mut self, _asking: &Asking<'_>) -> Answer {
        self.0.clone()
    }
}

/// A state directory with fs.read installed and a policy that asks before every read
/// under `data`, at every taint.
fn asking_state(data: &Path) -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    install(state.path(), "fs_read");
    let policy = format!(
        "[[grant]]\ntool = \"fs.read\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\nwhen_tainted = \"ask\"\n",
        data.display()
    );
    std::fs::write(state.path().join("policy.toml"), policy).unwrap();
    // The daemon's approvals wait one second (the expiry case waits that long).
    std::fs::write(state.path().join("config.toml"), "[loop]\napproval_secs = 1\n").unwrap();
    state
}

/// The call straight through `Trust::settle` in this process, `owner` answering.
fn settle_directly(state: &Path, args: &Value, owner: &mut Stub) {
    let state = StateDir::at(state);
    let config = state.config().unwrap();
    let audit = state.audit_dir(&config);
    let log = Arc::new(bx_audit::AuditLog::open(&audit).unwrap());
    let ledger =
        Ledger::open(bx_state::Sessions::open(&state.sessions_dir()).unwrap(), &audit).unwrap();
    let trust = Trust::new(Arc::clone(&log), ledger, state.watch_policy(&config), state.secrets());
    let runtime = Runtime::new(Limits::default()).unwrap();
    let store = Store::open(&state, &config).unwrap();
    let (tool, _) = store.open_tool(&runtime, "fs.read").unwrap();
    // As every driver does: the session's workspace first (none here).
    let workspace = trust.workspace("s", None).unwrap();
    let proposal = Proposal {
        session: "s",
        call: "c1",
        name: "fs.read",
        tool: Some(bx_agent::Tool::Component(&tool)),
        args,
        workspace: workspace.as_deref(),
    };
    let executor = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let overlay = Overlay::default();
    // Refused or run, the records are what the test compares.
    let _settled = executor
        .block_on(trust.settle(proposal, &overlay, None, owner, &runtime))
        .expect("the log records");
    log.checkpoint().unwrap();
}

/// The call through the daemon, its owner at the terminal of `bx tool run` typing
/// `typed` (the approval id stands for `{id}`), or typing nothing while the daemon's
/// approval expires.
fn through_the_daemon(state: &Path, args: &Value, typed: Option<&str>) {
    let daemon = Daemon::start(state);
    let mut child = bx_command(state)
        .args(["tool", "run", "fs.read", "--session", "s", "--approval-timeout", "60"])
        .args(["--args", &args.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (_, id) = super::trust::until_prompt(&mut child.stderr.take().unwrap());
    if let Some(typed) = typed {
        use std::io::Write as _;
        writeln!(stdin, "{}", typed.replace("{id}", &id)).unwrap();
    }
    // Standard input stays open until the call ends: no answer is not end of input.
    let status = child.wait().unwrap();
    drop(stdin);
    assert!(status.code().is_some(), "bx tool run was killed");
    drop(daemon);
}

/// The session's records with what differs from run to run taken out: ids, times,
/// hashes and positions.
fn records(state: &Path) -> Vec<Value> {
    let r = bx(state, &["audit", "show", "--session", "s"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let mut fields = v["fields"].clone();
            let o = fields.as_object_mut().unwrap();
            // (`detail` names the state directory.)
            for key in ["call", "id", "approval", "detail"] {
                o.remove(key);
            }
            serde_json::json!({"kind": v["kind"], "fields": fields})
        })
        .collect()
}

#[test]
fn the_driver_leaves_the_records_the_daemon_leaves_for_each_answer() {
    let data = tempfile::tempdir().unwrap();
    let file = std::fs::canonicalize(data.path()).unwrap().join("n.txt");
    std::fs::write(&file, "note").unwrap();
    let args = serde_json::json!({"path": file});
    let answers = [
        (Answer::Approve, Some("{id}"), "approve"),
        (Answer::Refuse("not now".into()), Some("not now"), "refuse"),
        (Answer::Expired, None, "expired"),
    ];
    for (answer, typed, name) in answers {
        let direct = asking_state(data.path());
        settle_directly(direct.path(), &args, &mut Stub(answer));
        let daemon = asking_state(data.path());
        through_the_daemon(daemon.path(), &args, typed);
        let (direct, daemon) = (records(direct.path()), records(daemon.path()));
        // (No `session` record: a new session's first call, waiting for the owner, has
        // no state file to miss.)
        let kinds: Vec<_> = direct.iter().map(|r| r["kind"].as_str().unwrap_or("")).collect();
        let expected = if name == "approve" {
            vec!["request", "decision", "approval", "result"]
        } else {
            vec!["request", "decision", "approval"]
        };
        assert_eq!(kinds, expected, "{name}: {direct:#?}");
        let approval = direct.iter().find(|r| r["kind"] == "approval").unwrap();
        assert_eq!(approval["fields"]["answer"], name, "{direct:#?}");
        assert_eq!(direct, daemon, "{name}: the driver's records differ from the daemon's");
    }
}
