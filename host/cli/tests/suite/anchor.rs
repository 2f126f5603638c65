//! The anchored audit log through `bx`: a key made outside the state directory and an
//! export directory are out of every tool's reach whatever the grants say; verify says
//! "anchored" and names a cut once checkpoints are exported; a proof checks with only the
//! verifier key; a failed export does not stop calls and `bx doctor` reports it.

use serde_json::json;

use super::*;

struct Owner {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
    usb: PathBuf,
    key: PathBuf,
    vkey: String,
}

/// A state directory whose key and export directory sit beside it, under a grant of
/// write on everything around them (a careless owner).
fn owner(export: &str, set_up: bool) -> Owner {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let state = root.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let key = root.join("keys/audit.key");
    let r = bx(
        &state,
        &["audit", "key", "init", "--out", key.to_str().unwrap(), "--origin", "bx.test/cli"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("[audit]") && r.stderr.contains("key = "), "{}", r.stderr);
    let vkey = r.stdout.trim().to_owned();
    let usb = root.join(export);
    std::fs::write(
        state.join("config.toml"),
        format!(
            "[audit]\nkey = {:?}\nexport = [{:?}]\n",
            key.display().to_string(),
            usb.display().to_string()
        ),
    )
    .unwrap();
    // The owner sets the export directory up once; the writer never makes one.
    if set_up {
        std::fs::create_dir(&usb).unwrap();
        let r = bx(&state, &["audit", "checkpoint"]);
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        assert!(usb.join("bx.test_cli").is_dir(), "{}", r.stdout);
    }
    for t in ["fs_read", "fs_write"] {
        install(&state, t);
    }
    let policy = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{r}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n\n\
         [[grant]]\ntool = \"*\"\npath = \"{r}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n",
        r = root.display()
    );
    std::fs::write(state.join("policy.toml"), policy).unwrap();
    std::fs::write(root.join("notes.txt"), "my notes\n").unwrap();
    Owner { _tmp: tmp, root, state, usb, key, vkey }
}

fn run(o: &Owner, tool: &str, args: serde_json::Value) -> Run {
    bx(&o.state, &["tool", "run", tool, "--args", &args.to_string()])
}

#[test]
fn the_key_and_the_exports_are_out_of_reach_and_verify_names_a_cut() {
    let o = owner("usb", true);
    let notes = run(&o, "fs.read", json!({"path": o.root.join("notes.txt")}));
    assert_eq!((notes.code, notes.stdout.as_str()), (0, "my notes\n"), "{}", notes.stderr);
    let exported = o.usb.join("bx.test_cli");
    assert!(exported.join("leaves").is_file(), "the close exported a checkpoint");

    // The private key, its verifier key and the exports, by name, under a grant of all.
    let before = snapshot(&o.root.join("keys"));
    for (tool, args) in [
        ("fs.read", json!({"path": o.key})),
        ("fs.write", json!({"path": o.key, "content": "PRIVATE+KEY+x", "mode": "overwrite"})),
        (
            "fs.write",
            json!({"path": format!("{}.pub", o.key.display()), "content": "x", "mode": "overwrite"}),
        ),
        ("fs.write", json!({"path": exported.join("leaves"), "content": "", "mode": "overwrite"})),
        (
            "fs.write",
            json!({"path": exported.join("999.checkpoint"), "content": "forged", "mode": "create"}),
        ),
    ] {
        let r = run(&o, tool, args.clone());
        assert_eq!(r.code, 3, "{tool} {args}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("bx's own state"), "{tool} {args}: {}", r.stderr);
    }
    assert_eq!(snapshot(&o.root.join("keys")), before);
    assert!(!exported.join("999.checkpoint").exists());

    let r = bx(&o.state, &["audit", "verify", "--key", &o.vkey]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("ok: the chain is intact and anchored"), "{}", r.stdout);

    // A proof of the first record checks with only the verifier key.
    let proof = o.root.join("first.tlog-proof");
    let r = bx(&o.state, &["audit", "prove", "1", "--out", proof.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = bx(&o.state, &["audit", "check-proof", proof.to_str().unwrap(), "--key", &o.vkey]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("ok: record 1 of the "), "{}", r.stdout);

    // The tail cut and the checkpoint deleted: the chain alone is fine, the anchor is not.
    let day = audit_day_file(&o.state);
    let text = std::fs::read_to_string(&day).unwrap();
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&day, kept[..kept.len() - 2].join("\n") + "\n").unwrap();
    std::fs::remove_file(o.state.join("audit/checkpoint.json")).unwrap();
    let r = bx(&o.state, &["audit", "verify", "--key", &o.vkey, "--json"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report["anchor"]["state"], "broken");
    assert_eq!(report["problems"][0]["kind"], "anchor-truncated", "{}", r.stdout);
    let r = bx(&o.state, &["doctor"]);
    assert!(r.stdout.contains("FAIL audit:"), "{}", r.stdout);
}

#[test]
fn a_failed_export_does_not_stop_calls_and_doctor_reports_it() {
    let o = owner("not-a-dir", false);
    std::fs::write(&o.usb, "a file where the export directory should be").unwrap();
    let r = run(&o, "fs.read", json!({"path": o.root.join("notes.txt")}));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let failed: Vec<serde_json::Value> =
        audit_records(&o.state).into_iter().filter(|r| r["kind"] == "export-failed").collect();
    assert!(!failed.is_empty(), "the failed export is on the log");
    assert_eq!(failed[0]["fields"]["dir"], o.usb.display().to_string());
    let r = bx(&o.state, &["doctor"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("FAIL audit export to"), "{}", r.stdout);
    assert!(r.stdout.contains("#audit-export-failed"), "{}", r.stdout);
    // Verify cannot check against what is not a directory, and says so.
    let r = bx(&o.state, &["audit", "verify"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("anchor-unreadable"), "{}", r.stdout);
}

#[test]
fn an_unusable_key_refuses_calls_rather_than_run_them_unanchored() {
    let o = owner("usb", true);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&o.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = run(&o, "fs.read", json!({"path": o.root.join("notes.txt")}));
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("chmod 600") && r.stderr.contains("#audit-key"), "{}", r.stderr);
}

fn audit_day_file(state: &Path) -> PathBuf {
    bx_audit::day_files(&state.join("audit")).unwrap().pop().unwrap()
}

/// Regression (found probing): config.toml is in the state directory, so an attacker
/// who rewrote the log could point `[audit] export` elsewhere (bx then signed the
/// rewritten log there) or remove it, and `verify --key` said ok. Verify against the
/// export directory the owner knows, and with `--key` finding nothing signed fails.
#[test]
fn verify_against_the_directory_you_know_sees_through_an_edited_config() {
    let o = owner("usb", true);
    let r = run(&o, "fs.read", json!({"path": o.root.join("notes.txt")}));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let day = audit_day_file(&o.state);
    let text = std::fs::read_to_string(&day).unwrap();
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&day, kept[..kept.len() - 1].join("\n") + "\n").unwrap();
    std::fs::remove_file(o.state.join("audit/checkpoint.json")).unwrap();

    // The config no longer names the export: `--key` alone finds nothing it signed.
    let config = format!("[audit]\nkey = {:?}\n", o.key.display().to_string());
    std::fs::write(o.state.join("config.toml"), config).unwrap();
    let r = bx(&o.state, &["audit", "verify", "--key", &o.vkey]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("anchor-missing"), "{}", r.stdout);
    // Named by the owner, the real export directory shows the cut.
    let r =
        bx(&o.state, &["audit", "verify", "--key", &o.vkey, "--against", o.usb.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("anchor-truncated"), "{}", r.stdout);

    // A damaged export status is reported, not read as "no failures".
    std::fs::write(o.state.join("audit/export.json"), "not json").unwrap();
    let config = format!(
        "[audit]\nkey = {:?}\nexport = [{:?}]\n",
        o.key.display().to_string(),
        o.usb.display().to_string()
    );
    std::fs::write(o.state.join("config.toml"), config).unwrap();
    let r = bx(&o.state, &["doctor"]);
    assert!(r.stdout.contains("FAIL audit export status"), "{}", r.stdout);
}

/// Regression (found probing): a record appended by hand after the last export, with a
/// correct `prev`, left `verify --key --against` saying "ok … anchored".
#[test]
fn a_record_added_after_the_last_export_is_named_unanchored() {
    let o = owner("usb", true);
    let r = run(&o, "fs.read", json!({"path": o.root.join("notes.txt")}));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let day = audit_day_file(&o.state);
    let text = std::fs::read_to_string(&day).unwrap();
    let last = text.lines().last().unwrap();
    let mut forged: serde_json::Value = serde_json::from_str(last).unwrap();
    forged["seq"] = json!(forged["seq"].as_u64().unwrap() + 1);
    // Another call's result (a second result of the same call is an order problem).
    forged["fields"]["call"] = json!("forged");
    forged["prev"] = json!(bx_audit::line_hash(last.as_bytes()));
    std::fs::write(&day, format!("{text}{}\n", serde_json::to_string(&forged).unwrap())).unwrap();
    let r =
        bx(&o.state, &["audit", "verify", "--key", &o.vkey, "--against", o.usb.to_str().unwrap()]);
    assert!(!r.stdout.contains("ok: the chain is intact and anchored"), "{}", r.stdout);
    assert!(r.stdout.contains("and the last 1 (records"), "{}", r.stdout);
}
