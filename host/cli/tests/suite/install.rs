//! `bx tool install` and friends: verified before kept, refused installs change nothing.

use super::*;

/// Appends a custom section to a component: same code and name, another digest.
fn with_custom_section(bytes: &[u8], note: &str) -> Vec<u8> {
    let name = b"bx-test-note";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(note.as_bytes());
    assert!(payload.len() < 128, "one-byte LEB128 size");
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push(payload.len() as u8);
    out.extend_from_slice(&payload);
    out
}

#[test]
fn install_list_inspect_remove_and_reinstall_by_digest() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let digest = install(st, "fs_read");

    let r = bx(st, &["tool", "list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let short = &digest["sha256:".len().."sha256:".len() + 12];
    let size = std::fs::metadata(component("fs_read")).unwrap().len();
    assert_eq!(
        r.stdout,
        format!(
            "NAME                     KIND    DIGEST              SIZE  RESOURCES\nfs.read                  bx:tool {short:<14} {size:>9}  path-read\n"
        )
    );

    let r = bx(st, &["tool", "list", "--json"]);
    let mut listed: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    // The capability lock: its resource argument, and its schema's hash.
    let declared = listed["tools"]["fs.read"]["declared"].take();
    assert_eq!(declared["args"], serde_json::json!({"path": "path-read"}), "{declared}");
    assert_eq!(declared["statics"], serde_json::json!([]), "{declared}");
    assert!(declared["schema"].as_str().unwrap().starts_with("sha256:"), "{declared}");
    assert_eq!(
        listed,
        serde_json::json!({"epoch": 1, "tools": {"fs.read": {"digest": digest, "size": size, "resources": ["path-read"], "declared": null}}})
    );

    let r = bx(st, &["tool", "inspect", "fs.read"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with(&format!("name:     fs.read\ndigest:   {digest}\n")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("  path (path-read)\n"), "{}", r.stdout);
    assert!(r.stdout.contains("  bx:host/fs@0.1.0\n"), "{}", r.stdout);
    assert!(!r.stdout.contains("wasi:sockets"), "{}", r.stdout);

    // Installing the same digest again changes nothing.
    let again =
        bx(st, &["tool", "install", component("fs_read").to_str().unwrap(), "--digest", &digest]);
    assert_eq!(again.stdout, format!("fs.read is already installed as {digest}\n"));

    let r = bx(st, &["tool", "remove", "fs.read"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, format!("removed fs.read ({digest})\n").as_str()));
    let r = bx(st, &["tool", "remove", "fs.read"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no tool named fs.read is installed"), "{}", r.stderr);

    // The bytes stayed in the store: the digest alone reinstalls it, offline.
    let r = bx(st, &["tool", "install", &digest]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!(
            "installed fs.read {digest} (tool epoch 3)\nwhat it declares:\n  + fs.read: argument \"path\" is path-read\n"
        )
    );
}

#[test]
fn installs_by_digest_from_a_directory_mirror() {
    let mirror = tempfile::tempdir().unwrap();
    let digest = digest_file(&component("fs_list"));
    let hexd = digest.trim_start_matches("sha256:");
    std::fs::create_dir_all(mirror.path().join("sha256")).unwrap();
    std::fs::copy(component("fs_list"), mirror.path().join(format!("sha256/{hexd}.wasm"))).unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(repo().join("fixtures/config/mirrors.toml")).unwrap();
    std::fs::write(
        state.path().join("config.toml"),
        config.replace("@MIRROR@", mirror.path().to_str().unwrap()),
    )
    .unwrap();
    let r = bx(state.path(), &["tool", "install", &digest]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!(
            "installed fs.list {digest} (tool epoch 1)\nwhat it declares:\n  + fs.list: argument \"path\" is path-read\n"
        )
    );

    // A digest nobody has is refused, naming every place tried.
    let missing = format!("sha256:{}", "0".repeat(64));
    let r = bx(state.path(), &["tool", "install", &missing]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not in the local store or any mirror"), "{}", r.stderr);
    assert!(r.stderr.contains(mirror.path().to_str().unwrap()), "{}", r.stderr);
}

#[test]
fn refuses_config_with_unknown_key() {
    let state = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("fixtures/config/unknown-key.toml"),
        state.path().join("config.toml"),
    )
    .unwrap();
    let r = bx(state.path(), &["tool", "list"]);
    assert_eq!(r.code, 1);
    let shown = format!(
        "{}:3:1: unknown field `mirror_timeout`",
        state.path().join("config.toml").display()
    );
    assert!(r.stderr.contains(&shown), "{}", r.stderr);
    assert!(r.stderr.contains("docs/runbook.md#config-invalid"), "{}", r.stderr);
}

#[test]
fn refused_installs_leave_the_store_unchanged() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let installed = install(st, "fs_read");
    let before = snapshot(st);
    let scratch = tempfile::tempdir().unwrap();
    let write_path = component("fs_write");
    let write_digest = digest_file(&write_path);

    // Digest mismatch: both digests printed.
    let r = bx(st, &["tool", "install", write_path.to_str().unwrap(), "--digest", &installed]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(&format!("expected {installed}, got {write_digest}")),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("docs/runbook.md#install-refused"), "{}", r.stderr);

    // A truncated file (its own digest given, so only validation can refuse it).
    let bytes = std::fs::read(&write_path).unwrap();
    let truncated = scratch.path().join("truncated.wasm");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let r = bx(
        st,
        &["tool", "install", truncated.to_str().unwrap(), "--digest", &digest_file(&truncated)],
    );
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not a valid component"), "{}", r.stderr);

    // A core module instead of a component.
    let core = repo().join("fixtures/components/core-module.wasm");
    let r = bx(st, &["tool", "install", core.to_str().unwrap(), "--digest", &digest_file(&core)]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not a valid component"), "{}", r.stderr);

    // A component of another world that exports only a function does not carry its
    // package's name: it is named after its file, and refused when nothing of the file's
    // name can name a tool.
    let other = scratch.path().join("★.wasm");
    std::fs::copy(component("test_other_world"), &other).unwrap();
    let r = bx(st, &["tool", "install", other.to_str().unwrap(), "--digest", &digest_file(&other)]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("pass --name NAME"), "{}", r.stderr);

    // An unreachable URL, and a plain-http one.
    let r =
        bx(st, &["tool", "install", "https://127.0.0.1:9/tool.wasm", "--digest", &write_digest]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("cannot fetch https://127.0.0.1:9/tool.wasm"), "{}", r.stderr);
    let r = bx(st, &["tool", "install", "http://127.0.0.1:9/tool.wasm", "--digest", &write_digest]);
    assert!(r.stderr.contains("only https:// URLs are fetched"), "{}", r.stderr);

    // No digest, a malformed digest.
    let r = bx(st, &["tool", "install", write_path.to_str().unwrap()]);
    assert!(r.code == 1 && r.stderr.contains("--digest sha256:HEX is required"), "{}", r.stderr);
    let r = bx(st, &["tool", "install", write_path.to_str().unwrap(), "--digest", "sha256:abc"]);
    assert!(r.code == 1 && r.stderr.contains("must have 64 hex digits"), "{}", r.stderr);

    // Same name, another digest: refused without --replace.
    let variant = scratch.path().join("fs_read_variant.wasm");
    std::fs::write(
        &variant,
        with_custom_section(&std::fs::read(component("fs_read")).unwrap(), "v2"),
    )
    .unwrap();
    let variant_digest = digest_file(&variant);
    let r = bx(st, &["tool", "install", variant.to_str().unwrap(), "--digest", &variant_digest]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(&format!("a tool named fs.read is already installed as {installed}")),
        "{}",
        r.stderr
    );

    assert_eq!(snapshot(st), before, "a refused install changed the store");

    // With --replace it goes through, and the epoch rises.
    let r = bx(
        st,
        &["tool", "install", variant.to_str().unwrap(), "--digest", &variant_digest, "--replace"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("replaced fs.read {installed} with {variant_digest} (tool epoch 2)\n")
    );
}
