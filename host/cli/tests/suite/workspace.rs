//! A session's workspace: relative paths resolve against it before the broker decides,
//! the policy's `{workspace}` names it, the system prompt says it, and a call refused
//! once in a turn ends the turn when the model proposes it again. The model is scripted
//! (`bx_eval::model`), so each test knows exactly what it proposes.

use std::sync::{Arc, Mutex};

use bx_eval::model::{Call, Reply, Request, ScriptedModel};
use serde_json::json;

use super::*;

/// A state directory with the default policy (`bx policy init`), fs.read, fs.list and
/// fs.write installed, talking to `model`; and a workspace with a few files.
fn setup(
    model: &ScriptedModel,
    max_tool_calls: u32,
) -> (tempfile::TempDir, tempfile::TempDir, String) {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    std::fs::write(
        s.join("config.toml"),
        format!(
            "[inference]\nurl = \"{}\"\n[loop]\nmax_tool_calls = {max_tool_calls}\n",
            model.url()
        ),
    )
    .unwrap();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    for tool in ["fs_read", "fs_list", "fs_write"] {
        install(s, tool);
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("notes")).unwrap();
    std::fs::write(ws.path().join("notes/a.md"), "alpha\n").unwrap();
    std::fs::write(ws.path().join("readme.txt"), "hello\n").unwrap();
    std::fs::write(ws.path().join(".env"), "TOKEN=s3cret\n").unwrap();
    let real = std::fs::canonicalize(ws.path()).unwrap().to_str().unwrap().to_owned();
    (state, ws, real)
}

#[test]
fn relative_paths_resolve_in_the_workspace_and_the_prompt_names_it() {
    let calls = vec![
        Call::new("fs.list", json!({"path": "."})),
        Call::new("fs.read", json!({"path": "notes/a.md"})),
        Call::new("fs.read", json!({"path": "../outside.txt"})),
        Call::new("fs.read", json!({"path": "~/.ssh/id_ed25519"})),
        Call::new("fs.read", json!({"path": "notes/../.env"})),
    ];
    let systems = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&systems);
    let script = Arc::new(move |r: &Request| {
        if let Some(system) = r.messages().first().and_then(|m| m["content"].as_str()) {
            seen.lock().unwrap().push(system.to_owned());
        }
        if r.is_self_test() || !r.results_this_turn().is_empty() {
            Reply::Text("done".into())
        } else {
            Reply::Calls(calls.clone())
        }
    });
    let model = ScriptedModel::start(script).unwrap();
    let (state, _ws, ws) = setup(&model, 8);
    let s = state.path();
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "proj", "look around", &["--workspace", &ws]);
    assert_eq!(code, 0, "{events:?}");
    // What the model was told of each call, in order.
    let told: Vec<String> = transcript(s, "proj")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(told.len(), 5, "{told:?}");
    assert!(told[0].contains("readme.txt") && told[0].contains("notes"), "{}", told[0]);
    assert!(!told[0].contains(".env"), "a denied name is left out of a listing: {}", told[0]);
    assert_eq!(told[1], "alpha\n");
    assert!(told[2].starts_with("refused:") && told[2].contains(".."), "{}", told[2]);
    assert!(
        told[3].starts_with("refused:") && told[3].contains("`~` is not expanded"),
        "{}",
        told[3]
    );
    assert!(told[4].starts_with("refused:"), "{}", told[4]);
    // The client saw the paths as decided.
    let proposed = of_type(&events, "tool_call_proposed");
    assert_eq!(proposed[1]["args"], json!({"path": format!("{ws}/notes/a.md")}).to_string());
    // The request record keeps both: the arguments as written, the resource as decided.
    let request = audit_records(s)
        .into_iter()
        .find(|r| r["kind"] == "request" && r["fields"]["tool"] == "fs.read")
        .unwrap();
    assert_eq!(request["fields"]["args"], r#"{"path":"notes/a.md"}"#, "{request}");
    assert_eq!(request["fields"]["resources"][0], format!("read {ws}/notes/a.md"));
    // The prompt says where the session works, and is byte for byte the same each time.
    let systems = systems.lock().unwrap().clone();
    let ours: Vec<&String> = systems.iter().filter(|t| t.contains("You work in")).collect();
    assert!(ours.len() >= 2, "{systems:?}");
    assert!(ours[0].contains(&format!("You work in the directory {ws}.")), "{}", ours[0]);
    assert!(ours.iter().all(|t| *t == ours[0]));
    // `bx session show` names it, and a `--workspace` elsewhere is refused for this session.
    let r = bx(s, &["session", "show", "proj"]);
    assert!(r.stdout.contains(&format!("  workspace {ws}\n")), "{}", r.stdout);
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, _) = say(s, "proj", "again", &["--workspace", elsewhere.path().to_str().unwrap()]);
    assert_eq!(code, 1);
    let r = bx(
        s,
        &[
            "chat",
            "--session",
            "proj",
            "--say",
            "x",
            "--workspace",
            elsewhere.path().to_str().unwrap(),
        ],
    );
    assert!(
        r.stderr.contains("fixed when it was created") && r.stderr.contains("#workspace"),
        "{}",
        r.stderr
    );
    let r = bx(s, &["audit", "verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

#[test]
fn a_call_proposed_again_after_its_refusal_ends_the_turn() {
    // The model asks for a write outside the workspace, is refused, and asks again with
    // the same arguments: the turn ends there, not at the tool-call limit.
    // The second reply repeats it and adds a listing: the listing is still recorded, and
    // refused, as the turn ends.
    let script = Arc::new(|r: &Request| {
        let motd = Call::new("fs.write", json!({"path": "/etc/motd", "content": "x"}));
        if r.is_self_test() {
            Reply::Text("ok".into())
        } else if r.results_this_turn().is_empty() {
            Reply::Calls(vec![motd])
        } else {
            Reply::Calls(vec![motd, Call::new("fs.list", json!({"path": "."}))])
        }
    });
    let model = ScriptedModel::start(script).unwrap();
    let (state, _ws, ws) = setup(&model, 8);
    let s = state.path();
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "loop", "write the motd", &["--workspace", &ws]);
    assert_eq!(code, 6, "{events:?}");
    assert_eq!(of_type(&events, "tool_call_proposed").len(), 3, "{events:?}");
    assert!(of_type(&events, "tool_result").is_empty(), "{events:?}");
    let error = of_type(&events, "error");
    assert_eq!(error.len(), 1, "{events:?}");
    assert_eq!(error[0]["code"], "repeated_refusal");
    assert_eq!(error[0]["runbook"], "docs/runbook.md#repeated-refusal");
    let decisions: Vec<String> = audit_records(s)
        .iter()
        .filter(|r| r["kind"] == "decision" && r["fields"]["session"] == "loop")
        .map(|r| format!("{} {}", r["fields"]["decision"], r["fields"]["why"]))
        .collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert!(
        decisions[0].starts_with("\"deny\" \"no grant covers write /etc/motd"),
        "{decisions:?}"
    );
    assert!(decisions[1].contains("refused earlier in this turn"), "{decisions:?}");
    assert!(decisions[2].contains("not run: the turn ends"), "{decisions:?}");
    // Every call the model proposed has its request record.
    let requests = audit_records(s).iter().filter(|r| r["kind"] == "request").count();
    assert_eq!(model.proposed().len(), 3);
    assert_eq!(requests, 3);
}
