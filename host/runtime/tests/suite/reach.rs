//! What a call reaches, through any spelling or symlink: never bx's own state, never a
//! denied symlink's target in any mode, never a FIFO it would hang on; and what it read,
//! labelled by the most specific grant covering each file.

use std::os::unix::fs::symlink;

use bx_broker::{AllowList, parse_label};
use serde_json::json;

use super::*;

fn hostile(allow: AllowList, args: serde_json::Value) -> Result<CallReport, RunError> {
    call(tool("test_hostile"), allow, args)
}

/// A home directory granted for writing, with bx's state directory inside it.
struct Home {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    state: PathBuf,
}

fn home() -> Home {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let state = home.join(".local/state/bx");
    std::fs::create_dir_all(state.join("sessions")).unwrap();
    std::fs::write(state.join("policy.toml"), "# the owner's policy\n").unwrap();
    std::fs::write(home.join("notes.txt"), "notes").unwrap();
    Home { _tmp: tmp, home, state }
}

fn over_home(h: &Home) -> AllowList {
    AllowList::new().write(&s(&h.home)).unwrap().protect_own([h.state.clone()]).unwrap()
}

/// Regression: a grant covering the state directory let a tool rewrite policy.toml,
/// create core.md and reset session state. bx's own state is out of reach in every mode,
/// by name and through a symlink the tool's grant covers.
#[test]
fn own_state_is_out_of_reach_whatever_the_grant() {
    let h = home();
    symlink(".local/state/bx", h.home.join("innocent")).unwrap();
    let policy = s(&h.state.join("policy.toml"));
    let via_link = s(&h.home.join("innocent/policy.toml"));
    for path in [&policy, &via_link] {
        let why = denied(hostile(over_home(&h), json!({"mode": "read", "path": path})));
        assert!(why.contains("bx's own state") && why.contains("#own-state"), "{path}: {why}");
        let why = denied(hostile(
            over_home(&h),
            json!({"mode": "write", "path": path, "content": "[[grant]]"}),
        ));
        // A write never passes through the symlink at all.
        let through_link = *path == via_link && why.contains("innocent is a symlink");
        assert!(why.contains("bx's own state") || through_link, "{path}: {why}");
    }
    for (mode, path) in [
        ("write", s(&h.state.join("core.md"))),
        ("write", s(&h.home.join("innocent/core.md"))),
        ("mkdir", s(&h.home.join("innocent/tools"))),
        ("list", s(&h.home.join("innocent/sessions"))),
        ("stat", s(&h.home.join("innocent/policy.toml"))),
    ] {
        let args = json!({"mode": mode, "path": path, "content": "x"});
        let args = if mode == "write" { args } else { json!({"mode": mode, "path": path}) };
        let why = denied(hostile(over_home(&h), args));
        let through_link =
            mode != "list" && mode != "stat" && why.contains("innocent is a symlink");
        assert!(why.contains("bx's own state") || through_link, "{mode} {path}: {why}");
    }
    assert_eq!(
        std::fs::read_to_string(h.state.join("policy.toml")).unwrap(),
        "# the owner's policy\n"
    );
    assert!(!h.state.join("core.md").exists() && !h.state.join("tools").exists());
    // The rest of the home directory is reachable as granted, and a listing of the
    // directory above the state directory does not name it.
    assert_eq!(
        ok_text(hostile(
            over_home(&h),
            json!({"mode": "read", "path": s(&h.home.join("notes.txt"))})
        )),
        "notes"
    );
    let listed = ok_text(hostile(
        over_home(&h),
        json!({"mode": "list", "path": s(&h.home.join(".local/state"))}),
    ));
    assert_eq!(listed, "[]");
}

/// Regression: a deny rule naming a symlink refused reads of its target but allowed
/// writes to it. Deny holds for every mode, a dangling symlink's future target too.
#[test]
fn deny_on_a_symlink_holds_for_writes_to_its_target() {
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("w");
    std::fs::create_dir(&w).unwrap();
    std::fs::write(w.join("target.txt"), "keep").unwrap();
    symlink("target.txt", w.join("link")).unwrap();
    symlink("future.txt", w.join("dangling")).unwrap();
    let allow = || {
        AllowList::new()
            .write(&s(&w))
            .unwrap()
            .deny(&s(&w.join("link")))
            .unwrap()
            .deny(&s(&w.join("dangling")))
            .unwrap()
    };
    let target = s(&w.join("target.txt"));
    assert!(
        denied(hostile(allow(), json!({"mode": "read", "path": target}))).contains("denied path")
    );
    for path in [target.clone(), s(&w.join("future.txt"))] {
        let why =
            denied(hostile(allow(), json!({"mode": "write", "path": path, "content": "pwned"})));
        assert!(why.contains("denied path"), "{path}: {why}");
    }
    assert_eq!(std::fs::read_to_string(w.join("target.txt")).unwrap(), "keep");
    assert!(!w.join("future.txt").exists(), "a write created the denied symlink's target");
}

/// A FIFO under a grant is refused at once, for reading and for writing, instead of
/// holding the call until a writer or reader appears; it is never opened for writing.
#[test]
fn fifo_under_a_grant_is_refused_not_waited_on() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let allow = || AllowList::new().write(&s(tmp.path())).unwrap();
    let r = hostile(allow(), json!({"mode": "read", "path": s(&fifo)}));
    match r.unwrap().result {
        Err(CallError::Failed(m)) => assert!(m.contains("not a regular file"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let r = hostile(allow(), json!({"mode": "write", "path": s(&fifo), "content": "x"}));
    match r.unwrap().result {
        // Refused before the open, not by the open failing for want of a reader.
        Err(CallError::Failed(m)) => assert!(m.contains("not a regular file"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Regression: nested grants lost their label. A search of W read W/secret's lines
/// labelled as W. Each file touched is labelled by the most specific grant covering
/// it, through the parent and through a relative symlink.
#[test]
fn each_file_is_labelled_by_its_most_specific_grant() {
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("w");
    std::fs::create_dir_all(w.join("secret")).unwrap();
    std::fs::write(w.join("plain.txt"), "plain words").unwrap();
    std::fs::write(w.join("secret/secret.txt"), "the secret words").unwrap();
    symlink("secret", w.join("link")).unwrap();
    let policy = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{w}\"\nmode = \"read\"\nlabel = \"public/trusted\"\nwhen_tainted = \"allow\"\n\
         [[grant]]\ntool = \"*\"\npath = \"{w}/secret\"\nmode = \"read\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n",
        w = w.display()
    );
    let policy = bx_broker::Policy::parse("p.toml", &policy).unwrap();
    let run = |name: &'static str, args: serde_json::Value| {
        let t = tool(name);
        let call = CallRequest {
            tool: t.description().name.clone(),
            digest: t.digest().into(),
            resources: vec![bx_broker::Resource::PathRead(s(&w))],
        };
        let Decision::Allow(g) = bx_broker::decide(&policy, Label::CLEAN, &call) else {
            panic!("reading {} is allowed", w.display());
        };
        runtime().call_blocking(t, g, &args.to_string()).unwrap()
    };
    let public = parse_label("public/trusted").unwrap();
    let secret = parse_label("secret/trusted").unwrap();
    let searched = run("fs_search", json!({"path": s(&w), "pattern": "words"}));
    assert!(matches!(&searched.result, Ok(Output::Text(t)) if t.contains("the secret words")));
    assert_eq!(searched.label, secret, "touched: {:?}", searched.touched);
    let via_link =
        run("test_hostile", json!({"mode": "read", "path": s(&w.join("link/secret.txt"))}));
    assert_eq!(via_link.label, secret);
    assert!(
        via_link.touched.iter().any(
            |t| matches!(t, Touched::Path { path, .. } if path.ends_with("secret/secret.txt"))
        ),
        "{:?}",
        via_link.touched
    );
    let listed = run("test_hostile", json!({"mode": "list", "path": s(&w.join("link"))}));
    assert_eq!(listed.label, secret);
    let plain = run("test_hostile", json!({"mode": "read", "path": s(&w.join("plain.txt"))}));
    assert_eq!(plain.label, public);
}

/// Regression (found probing): a hard link to policy.toml in a granted directory let a
/// tool rewrite the policy; the path checks saw only the link's name.
#[test]
fn a_hard_link_to_own_state_is_refused() {
    let h = home();
    let work = h.home.join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::hard_link(h.state.join("policy.toml"), work.join("policy-backup.toml")).unwrap();
    let path = s(&work.join("policy-backup.toml"));
    let why =
        denied(hostile(over_home(&h), json!({"mode": "write", "path": path, "content": "x"})));
    assert!(why.contains("bx's own state by another name"), "{why}");
    let why = denied(hostile(over_home(&h), json!({"mode": "read", "path": path})));
    assert!(why.contains("bx's own state by another name"), "{why}");
    assert_eq!(
        std::fs::read_to_string(h.state.join("policy.toml")).unwrap(),
        "# the owner's policy\n"
    );
}

/// Regression (found probing): a secret grant named by a symlink (`vault -> .vault-real`)
/// labelled its files secret only when reached by that name; read by their real path, or
/// found by a search of the parent, they were labelled as the public parent.
#[test]
fn a_grant_named_by_a_symlink_labels_what_it_leads_to() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".vault-real")).unwrap();
    std::fs::write(home.join(".vault-real/token.txt"), "TOKEN").unwrap();
    symlink(".vault-real", home.join("vault")).unwrap();
    let policy = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{h}\"\nmode = \"read\"\nlabel = \"public/trusted\"\nwhen_tainted = \"allow\"\n\
         [[grant]]\ntool = \"*\"\npath = \"{h}/vault\"\nmode = \"read\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n",
        h = home.display()
    );
    let policy = bx_broker::Policy::parse("p.toml", &policy).unwrap();
    let secret = parse_label("secret/trusted").unwrap();
    for (name, args) in [
        ("test_hostile", json!({"mode": "read", "path": s(&home.join(".vault-real/token.txt"))})),
        ("fs_search", json!({"path": s(&home), "pattern": "TOKEN"})),
    ] {
        let t = tool(name);
        let call = CallRequest {
            tool: t.description().name.clone(),
            digest: t.digest().into(),
            resources: vec![bx_broker::Resource::PathRead(s(&home))],
        };
        let Decision::Allow(g) = bx_broker::decide(&policy, Label::CLEAN, &call) else { panic!() };
        let r = runtime().call_blocking(t, g, &args.to_string()).unwrap();
        assert_eq!(r.label, secret, "{name}: {:?}", r.touched);
    }
}
