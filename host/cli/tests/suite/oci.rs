//! Tools from OCI registries (issue 26), against a real registry started by each test:
//! Debian's `docker-registry` (the CNCF distribution registry) on 127.0.0.1. A third-party
//! client (`oras`, PyPI) pushes and pulls beside bx. Signatures are cosign's layout in
//! the registry, written there by skopeo 1.9 (`host/cli/tests/oci_peer.py`): Debian's
//! skopeo has sigstore signing cut out ("Debian-local change: sigstore disabled"), so
//! the ECDSA signature itself is made with Python's `cryptography` over the payload
//! containers/image builds, and skopeo stores it as its own attachment (a skopeo with
//! sigstore signs by itself; the script tries that first). Every refusal leaves the state
//! directory byte for byte as it was.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use sha2::Digest as _;

use super::components::{standard, verify_clean};
use super::*;

/// A registry on 127.0.0.1 in a temporary directory, killed on drop.
struct Registry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: info}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp: {{addr: \"127.0.0.1:{port}\", secret: bx-test}}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker-registry is missing: run `make setup`");
        // Ready once it says it listens (read from its log, not guessed with a sleep).
        let lines = forward_lines(child.stderr.take().unwrap(), |line| line);
        let mut said = Vec::new();
        loop {
            match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.contains("listening on") => break,
                Ok(line) => said.push(line),
                Err(_) => panic!("docker-registry never listened; it said:\n{}", said.join("\n")),
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Registry { child, port, _dir: dir }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// bx's own client on `repo` (for what a third party would do by hand: move a tag,
    /// copy a signature).
    fn client(&self, repo_and_tag: &str) -> bx_store::oci::Registry {
        let reference =
            bx_store::oci::Reference::parse(&format!("oci://{}/{repo_and_tag}", self.host()))
                .unwrap();
        bx_store::oci::Registry::connect(&reference, false).unwrap()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `oci_peer.py` (oras from PyPI, skopeo from Debian): its one JSON line.
fn peer(args: &[&str]) -> Value {
    let python = repo().join(".venv/bin/python");
    let out = Command::new(&python)
        .arg(repo().join("host/cli/tests/oci_peer.py"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; run `make setup`", python.display()));
    assert!(
        out.status.success(),
        "oci_peer.py {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `bx tool publish`: the manifest digest it printed.
fn publish(s: &Path, file: &Path, reference: &str) -> String {
    let r = bx(s, &["tool", "publish", file.to_str().unwrap(), reference]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let line = r.stdout.lines().next().unwrap();
    line.rsplit_once('@').unwrap().1.to_owned()
}

/// A state directory that already holds one tool and a log, so a refusal that wrote
/// anything would show.
fn used_state() -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    install(state.path(), "fs_read");
    state
}

fn refused_leaving_state_as_it_was(s: &Path, args: &[&str], expect: &[&str]) -> Run {
    let before = snapshot(s);
    let r = bx(s, args);
    assert_eq!(r.code, 1, "{args:?}: {}{}", r.stdout, r.stderr);
    for e in expect {
        assert!(r.stderr.contains(e), "{args:?}: wanted {e:?} in: {}", r.stderr);
    }
    assert_eq!(snapshot(s), before, "{args:?} changed the state directory");
    r
}

#[test]
fn publish_then_install_by_manifest_digest_and_by_tag_with_oras_on_either_side() {
    let registry = Registry::start();
    let host = registry.host();
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let files = standard("wasi-files");
    let files_digest = digest_file(&files);
    let manifest = publish(s, &files, &format!("oci://{host}/bx/files:1.0"));

    // By manifest digest.
    let by_digest = format!("oci://{host}/bx/files@{manifest}");
    let r = bx(s, &["tool", "install", &by_digest, "--digest", &files_digest]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&format!("from {by_digest}")), "{}", r.stdout);
    // By tag, into another state directory; the installed set records the manifest.
    let other = tempfile::tempdir().unwrap();
    let r = bx(
        other.path(),
        &["tool", "install", &format!("oci://{host}/bx/files:1.0"), "--digest", &files_digest],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let listed: Value =
        serde_json::from_str(&bx(other.path(), &["tool", "list", "--json"]).stdout).unwrap();
    assert_eq!(listed["tools"]["files.read-file"]["source"], by_digest.as_str(), "{listed}");
    let r = bx(other.path(), &["tool", "inspect", "files.read-file"]);
    assert!(r.stdout.contains(&format!("source:   {by_digest}")), "{}", r.stdout);

    // What bx published, oras pulls with the same digests.
    let out = tempfile::tempdir().unwrap();
    let pulled = out.path().join("pulled.wasm");
    let got = peer(&["oras-pull", &format!("{host}/bx/files:1.0"), pulled.to_str().unwrap()]);
    assert_eq!(got["manifest_digest"], manifest.as_str(), "{got}");
    assert_eq!(got["layer_digest"], files_digest.as_str(), "{got}");
    assert_eq!(std::fs::read(&pulled).unwrap(), std::fs::read(&files).unwrap());

    // What oras pushed, bx installs.
    let notes = component("test_notes_v1");
    let pushed = peer(&["oras-push", &format!("{host}/peer/notes:v1"), notes.to_str().unwrap()]);
    let layer = pushed["layer_digest"].as_str().unwrap();
    assert_eq!(layer, digest_file(&notes));
    let r = bx(s, &["tool", "install", &format!("oci://{host}/peer/notes:v1"), "--digest", layer]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("installed test.notes"), "{}", r.stdout);

    // Each install is on the log with its source, and the log verifies.
    let installs: Vec<Value> =
        audit_records(s).into_iter().filter(|r| r["kind"] == "tool").collect();
    assert_eq!(installs.len(), 2, "{installs:?}");
    assert_eq!(installs[0]["fields"]["action"], "install");
    assert_eq!(installs[0]["fields"]["source"], by_digest.as_str());
    assert_eq!(installs[1]["fields"]["digest"], layer);
    verify_clean(s);
}

#[test]
fn a_moved_tag_and_a_wrong_digest_are_refused_naming_both_and_change_nothing() {
    let registry = Registry::start();
    let host = registry.host();
    let state = used_state();
    let s = state.path();
    let v1 = component("test_notes_v1");
    let v2 = component("test_notes_v2");
    let (d1, d2) = (digest_file(&v1), digest_file(&v2));
    let first = publish(s, &v1, &format!("oci://{host}/bx/notes:stable"));
    // The tag moves to other bytes; the owner still names the first.
    let moved = publish(s, &v2, &format!("oci://{host}/bx/notes:stable"));
    assert_ne!(first, moved);
    let tag = format!("oci://{host}/bx/notes:stable");
    refused_leaving_state_as_it_was(
        s,
        &["tool", "install", &tag, "--digest", &d1],
        &[&moved, &d1, &d2, "docs/runbook.md#tag-moved"],
    );
    // Pinned by manifest digest, a wrong --digest names both digests.
    let pinned = format!("oci://{host}/bx/notes@{first}");
    refused_leaving_state_as_it_was(
        s,
        &["tool", "install", &pinned, "--digest", &d2],
        &[&d1, &d2, "docs/runbook.md#install-refused"],
    );
    // A manifest digest the registry does not hold, and a registry nobody runs.
    let nothing = format!("sha256:{}", hex::encode(sha2::Sha256::digest(b"no such manifest")));
    let absent = format!("oci://{host}/bx/notes@{nothing}");
    refused_leaving_state_as_it_was(
        s,
        &["tool", "install", &absent, "--digest", &d2],
        &["has no manifest"],
    );
    let nobody = format!("oci://127.0.0.1:{}/bx/notes:stable", free_port());
    refused_leaving_state_as_it_was(
        s,
        &["tool", "install", &nobody, "--digest", &d1],
        &["docs/runbook.md#registry-failed"],
    );
    // Pinned right, it installs.
    let r = bx(s, &["tool", "install", &pinned, "--digest", &d1]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// Forwards one registry's connections, and kills the registry (SIGKILL) once `after`
/// bytes of one response have passed: a registry that dies in the middle of a pull.
fn killing_proxy(registry: &Registry, after: usize) -> (u16, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (upstream, pid) = (registry.port, registry.child.id());
    let (killed_tx, killed) = mpsc::channel();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let mut server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
            });
            let killed_tx = killed_tx.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 << 10];
                let mut passed = 0;
                while let Ok(n) = server.read(&mut buf) {
                    if n == 0 || client.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    passed += n;
                    if passed > after {
                        let pid = pid.to_string();
                        let _ = Command::new("kill").args(["-KILL", &pid]).status();
                        let _ = client.shutdown(std::net::Shutdown::Both);
                        let _ = killed_tx.send(());
                        break;
                    }
                }
            });
        }
    });
    (port, killed)
}

#[test]
fn a_registry_killed_mid_pull_is_a_clear_error_and_changes_nothing() {
    let registry = Registry::start();
    let host = registry.host();
    let state = used_state();
    let s = state.path();
    // The component's layer (150 KB) is the only response that passes 64 KiB: the
    // registry dies with part of it sent.
    let big = standard("wasi-files");
    let digest = digest_file(&big);
    let manifest = publish(s, &big, &format!("oci://{host}/bx/big:1"));
    let (port, killed) = killing_proxy(&registry, 64 << 10);
    let reference = format!("oci://127.0.0.1:{port}/bx/big@{manifest}");
    let r = refused_leaving_state_as_it_was(
        s,
        &["tool", "install", &reference, "--digest", &digest],
        &["blob", &digest, "docs/runbook.md#registry-failed", "nothing was installed"],
    );
    assert!(killed.try_recv().is_ok(), "the registry was not killed mid-pull: {}", r.stderr);
    let size = std::fs::metadata(&big).unwrap().len().to_string();
    assert!(r.stderr.contains(&size), "says how far it got of {size} bytes: {}", r.stderr);
}

#[test]
fn signatures_by_a_pinned_key_install_and_every_other_case_is_refused_by_name() {
    let registry = Registry::start();
    let host = registry.host();
    let keys = tempfile::tempdir().unwrap();
    let (pinned, other) = (keys.path().join("pinned"), keys.path().join("other"));
    peer(&["keygen", pinned.to_str().unwrap()]);
    peer(&["keygen", other.to_str().unwrap()]);
    let state = used_state();
    let s = state.path();
    std::fs::write(
        s.join("config.toml"),
        format!(
            "[[tools.trusted_keys]]\nname = \"acme\"\nkey = \"{}\"\nscopes = [\"{host}/acme\"]\n",
            pinned.join("cosign.pub").display()
        ),
    )
    .unwrap();
    let (v1, v2) = (component("test_notes_v1"), component("test_notes_v2"));
    let (d1, d2) = (digest_file(&v1), digest_file(&v2));
    let m1 = publish(s, &v1, &format!("oci://{host}/acme/notes:1"));
    let m2 = publish(s, &v2, &format!("oci://{host}/acme/notes:2"));
    let install1 = ["tool", "install", &format!("oci://{host}/acme/notes@{m1}"), "--digest", &d1];
    let install2 = ["tool", "install", &format!("oci://{host}/acme/notes@{m2}"), "--digest", &d2];
    let runbook = "docs/runbook.md#signature-refused";

    // Unsigned, by whichever name the registry is reached.
    refused_leaving_state_as_it_was(s, &install1, &["unsigned", "acme (sha256:", runbook]);
    let port = registry.port;
    let by_name = format!("oci://localhost:{port}/acme/notes@{m1}");
    let r = refused_leaving_state_as_it_was(
        s,
        &["tool", "install", &by_name, "--digest", &d1],
        &["unsigned", runbook],
    );
    assert_eq!(r.stdout, "", "{}", r.stdout);
    // Signed by a key nobody pinned here.
    peer(&["sign", &format!("{host}/acme/notes@{m1}"), other.to_str().unwrap()]);
    refused_leaving_state_as_it_was(s, &install1, &["not pinned for it", runbook]);

    // The pinned key's signature of manifest 1, copied to manifest 2: a signature of
    // another manifest.
    peer(&["sign", &format!("{host}/acme/notes@{m1}"), pinned.to_str().unwrap()]);
    let client = registry.client("acme/notes:1");
    let sig1 = format!("sha256-{}.sig", m1.trim_start_matches("sha256:"));
    let sig2 = format!("sha256-{}.sig", m2.trim_start_matches("sha256:"));
    let (bytes, _) = client.manifest(&sig1).unwrap().unwrap();
    client.push_manifest(&sig2, bx_store::oci::OCI_MANIFEST_TYPE, &bytes).unwrap();
    refused_leaving_state_as_it_was(
        s,
        &install2,
        &["a signature of another manifest", &m1, runbook],
    );

    // The pinned key's signature, altered: one byte of the signature itself changed.
    let mut altered: Value = serde_json::from_slice(&bytes).unwrap();
    let layers = altered["layers"].as_array_mut().unwrap();
    for layer in layers.iter_mut() {
        let sig = layer["annotations"][bx_store::signature::SIGNATURE_ANNOTATION]
            .as_str()
            .unwrap()
            .to_owned();
        let mut raw = base64_decode(&sig);
        let last = raw.len() - 1;
        raw[last] ^= 1;
        layer["annotations"][bx_store::signature::SIGNATURE_ANNOTATION] =
            Value::String(base64_encode(&raw));
    }
    let altered = serde_json::to_vec(&altered).unwrap();
    client.push_manifest(&sig1, bx_store::oci::OCI_MANIFEST_TYPE, &altered).unwrap();
    refused_leaving_state_as_it_was(s, &install1, &["altered after signing", runbook]);

    // Put back, the pinned key's signature installs, and inspect shows who signed.
    client.push_manifest(&sig1, bx_store::oci::OCI_MANIFEST_TYPE, &bytes).unwrap();
    let r = bx(s, &install1);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("signed by acme (sha256:"), "{}", r.stdout);
    let inspected = bx(s, &["tool", "inspect", "test.notes"]).stdout;
    assert!(inspected.contains("signed:   acme (sha256:"), "{inspected}");
    let record = audit_records(s).into_iter().rfind(|r| r["kind"] == "tool").unwrap();
    assert!(record["fields"]["signer"].as_str().unwrap().starts_with("acme (sha256:"), "{record}");

    // The same bytes from an unsigned copy keep the signature they were installed with.
    let copy = publish(s, &v1, &format!("oci://{host}/free/notes:1"));
    let r =
        bx(s, &["tool", "install", &format!("oci://{host}/free/notes@{copy}"), "--digest", &d1]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("already installed"), "{}", r.stdout);
    let inspected = bx(s, &["tool", "inspect", "test.notes"]).stdout;
    assert!(inspected.contains("signed:   acme (sha256:"), "{inspected}");

    // A scope that cannot be read refuses every registry install rather than match
    // nothing.
    let config = std::fs::read_to_string(s.join("config.toml")).unwrap();
    for bad in [format!("{host}/ACME"), format!("oci://{host}/acme"), format!("{host}/acme/*")] {
        std::fs::write(s.join("config.toml"), config.replace(&format!("{host}/acme"), &bad))
            .unwrap();
        refused_leaving_state_as_it_was(s, &install2, &["trusted key 1", "scope", runbook]);
    }
    std::fs::write(s.join("config.toml"), &config).unwrap();

    // Outside the key's scope no signature is asked for.
    let elsewhere = publish(s, &v1, &format!("oci://{host}/acme-other/notes:1"));
    let fresh = tempfile::tempdir().unwrap();
    std::fs::copy(s.join("config.toml"), fresh.path().join("config.toml")).unwrap();
    let r = bx(
        fresh.path(),
        &[
            "tool",
            "install",
            &format!("oci://{host}/acme-other/notes@{elsewhere}"),
            "--digest",
            &d1,
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("signed by"), "{}", r.stdout);
}

fn base64_decode(text: &str) -> Vec<u8> {
    let out = Command::new("base64").arg("-d").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn();
    let mut child = out.unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    child.wait_with_output().unwrap().stdout
}

fn base64_encode(bytes: &[u8]) -> String {
    let mut child = Command::new("base64")
        .arg("-w0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
}

#[test]
fn a_replacement_that_adds_a_url_argument_is_refused_without_the_flag() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let d1 = install(s, "test_notes_v1");
    let v2 = component("test_notes_v2");
    let d2 = digest_file(&v2);
    let replace = ["tool", "install", v2.to_str().unwrap(), "--digest", &d2, "--replace"];
    let r = refused_leaving_state_as_it_was(
        s,
        &replace,
        &[
            "declares more than the installed one",
            "+ test.notes: argument \"source\" is url-fetch",
            "--accept-widening",
            "docs/runbook.md#capabilities-widened",
        ],
    );
    assert!(!r.stderr.contains("+ test.notes: argument \"path\""), "{}", r.stderr);
    let mut with_flag = replace.to_vec();
    with_flag.push("--accept-widening");
    let r = bx(s, &with_flag);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("+ test.notes: argument \"source\" is url-fetch"), "{}", r.stdout);
    // Narrowing back needs no flag.
    let v1 = component("test_notes_v1");
    let r = bx(s, &["tool", "install", v1.to_str().unwrap(), "--digest", &d1, "--replace"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("- test.notes: argument \"source\" is url-fetch"), "{}", r.stdout);
    assert_eq!(bx(s, &["tool", "remove", "test.notes"]).code, 0);

    // Install, replace (widening accepted), replace (narrowing), remove: on the log with
    // both digests and the difference; verify is clean.
    let changes: Vec<Value> = audit_records(s)
        .into_iter()
        .filter(|r| r["kind"] == "tool")
        .map(|r| r["fields"].clone())
        .collect();
    let actions: Vec<&str> = changes.iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["install", "replace", "replace", "remove"], "{changes:?}");
    // A first install records all it declares.
    let declared = changes[0]["difference"].to_string();
    assert!(declared.contains("+ test.notes: argument \\\"path\\\" is path-read"), "{declared}");
    assert_eq!(
        (changes[1]["previous"].as_str(), changes[1]["digest"].as_str()),
        (Some(d1.as_str()), Some(d2.as_str()))
    );
    assert_eq!(changes[1]["widening_accepted"], true);
    assert!(changes[1]["difference"].to_string().contains("url-fetch"), "{changes:?}");
    assert_eq!(changes[2]["widening_accepted"], false);
    assert_eq!(changes[3]["previous"], d1.as_str());
    verify_clean(s);
}

#[test]
fn a_manifest_that_adds_a_static_host_to_the_same_digest_is_widening() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let files = standard("wasi-files");
    let digest = digest_file(&files);
    let dir = tempfile::tempdir().unwrap();
    let narrow = dir.path().join("narrow.toml");
    let wide = dir.path().join("wide.toml");
    std::fs::write(&narrow, "[functions.read-file]\nread = [\"path\"]\n").unwrap();
    std::fs::write(
        &wide,
        "[reach]\nhosts = [\"api.example.com\"]\n\n[functions.read-file]\nread = [\"path\"]\n",
    )
    .unwrap();
    write_policy(
        s,
        "[[grant]]\ntool = \"*\"\nhost = \"api.example.com\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\n",
    );
    let install = |m: &Path, extra: &[&str]| {
        let mut args = vec!["tool", "install", files.to_str().unwrap(), "--digest", &digest];
        args.extend(["--manifest", m.to_str().unwrap()]);
        args.extend(extra);
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let first = install(&narrow, &[]);
    let r = bx(s, &first.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let wider = install(&wide, &[]);
    refused_leaving_state_as_it_was(
        s,
        &wider.iter().map(String::as_str).collect::<Vec<_>>(),
        &["+ files.read-file: whatever its arguments, url-fetch https://api.example.com/"],
    );
    let accepted = install(&wide, &["--accept-widening"]);
    let r = bx(s, &accepted.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_change_made_while_the_daemon_holds_the_log_is_on_it_before_its_next_call() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let daemon = Daemon::start(s);
    let d1 = install(s, "test_notes_v1");
    assert!(s.join("tools/pending.jsonl").exists(), "the change waits for the daemon");
    // A call through the daemon: the change is on its log first.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("n.txt"), "note").unwrap();
    let args = format!("{{\"path\": \"{}\"}}", dir.path().join("n.txt").display());
    let allow = dir.path().to_str().unwrap();
    let r = bx(s, &["tool", "run", "test.notes", "--allow-read", allow, "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    daemon.stop();
    let records = audit_records(s);
    let change = records.iter().position(|r| r["kind"] == "tool").expect("the install record");
    let request = records.iter().position(|r| r["kind"] == "request").expect("the call");
    assert!(change < request, "{records:?}");
    assert_eq!(records[change]["fields"]["digest"], d1.as_str());
    assert!(!s.join("tools/pending.jsonl").exists());
    verify_clean(s);
}

/// A hostile registry, which no real one can play: it answers every request with
/// `head` and then `body` repeated until the client hangs up (or `body` once when
/// `endless` is false).
fn hostile_registry(head: &'static str, body: &'static [u8], endless: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    request.push(byte[0]);
                }
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                while stream.write_all(body).is_ok() && endless {}
            });
        }
    });
    port
}

#[test]
fn a_hostile_registry_is_bounded_and_its_words_are_escaped() {
    let state = used_state();
    let s = state.path();
    let d = digest_file(&component("test_notes_v1"));
    let install = |port: u16| {
        let reference = format!("oci://127.0.0.1:{port}/bx/notes:1");
        ["tool".to_owned(), "install".to_owned(), reference, "--digest".to_owned(), d.clone()]
    };
    let run = |port: u16, expect: &[&str]| {
        let args = install(port);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused_leaving_state_as_it_was(s, &args, expect)
    };
    // An endless manifest stops at 4 MiB (no Content-Length: read until it is too much).
    let endless = hostile_registry(
        "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nConnection: close\r\n\r\n",
        &[b'{'; 64 << 10],
        true,
    );
    run(endless, &["more than 4194304 bytes", "docs/runbook.md#registry-failed"]);
    // A manifest that says it is 10 GB is refused before a byte of it is read.
    let huge = hostile_registry(
        "HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\nConnection: close\r\n\r\n",
        b"{",
        false,
    );
    run(huge, &["says 10000000000 bytes"]);
    // What a registry says in its error is cut, and escaped before the terminal.
    let loud = hostile_registry(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        b"{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\",\"message\":\"\\u001b]0;pwned\\u0007\\u001b[2J gone\"}]}",
        false,
    );
    let r = run(loud, &["MANIFEST_UNKNOWN"]);
    assert!(!r.stderr.contains('\x1b') && !r.stderr.contains('\x07'), "{:?}", r.stderr);
    // Nor can it start a line of its own, to forge bx's words.
    let forger = hostile_registry(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        b"{\"errors\":[{\"code\":\"DENIED\",\"message\":\"no\\ninstalled test.notes (tool epoch 9)\\nsigned by acme\"}]}",
        false,
    );
    let r = run(forger, &["DENIED"]);
    assert!(!r.stderr.lines().any(|l| l.starts_with("installed")), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 2, "the error and its runbook line: {}", r.stderr);
}

#[test]
fn a_refusal_writes_nothing_even_to_a_fresh_state_directory_or_a_broken_log() {
    // Refused on a state directory that does not exist yet: it is not made.
    let parent = tempfile::tempdir().unwrap();
    let fresh = parent.path().join("state");
    let d1 = digest_file(&component("test_notes_v1"));
    for source in ["oci://bad..registry/x:1", "oci://127.0.0.1:1/x:1"] {
        let r = bx(&fresh, &["tool", "install", source, "--digest", &d1]);
        assert_eq!(r.code, 1, "{}", r.stderr);
    }
    assert_eq!(bx(&fresh, &["tool", "list"]).code, 0);
    let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
    assert!(left.is_empty() || snapshot(&fresh).is_empty(), "{:?}", snapshot(&fresh));

    // A log that cannot take the record: nothing is written, blob and native code included.
    let state = used_state();
    let s = state.path();
    let day = std::fs::read_dir(s.join("audit"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let mut text = std::fs::read_to_string(&day).unwrap();
    text.push_str("{\"garbage\n");
    std::fs::write(&day, text).unwrap();
    let v1 = component("test_notes_v1");
    refused_leaving_state_as_it_was(
        s,
        &["tool", "install", v1.to_str().unwrap(), "--digest", &d1],
        &["could not be recorded", "docs/runbook.md#audit-unavailable"],
    );
}

#[test]
fn the_journal_drops_a_change_that_never_completed_and_a_torn_line() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let d1 = install(s, "test_notes_v1");
    install(s, "fs_read");
    // What a process killed between its record and its change leaves (the epoch it
    // would have made is past the installed set's), then a torn line.
    let never = serde_json::json!({
        "action": "install", "name": "ghost", "tools": ["ghost"], "digest": d1,
        "epoch": 99,
    });
    std::fs::write(s.join("tools/pending.jsonl"), format!("{never}\n{{\"action\":\"ins")).unwrap();
    let r = bx(s, &["tool", "remove", "fs.read"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let changes: Vec<Value> = audit_records(s)
        .into_iter()
        .filter(|r| r["kind"] == "tool")
        .map(|r| r["fields"].clone())
        .collect();
    let names: Vec<&str> = changes.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["test.notes", "fs.read", "fs.read"], "{changes:?}");
    assert_eq!(changes[2]["action"], "remove");
    assert_eq!(changes[2]["epoch"], 3);
    assert!(!s.join("tools/pending.jsonl").exists());
    let rejected = std::fs::read_to_string(s.join("tools/pending.rejected")).unwrap();
    assert!(rejected.starts_with("{\"action\":\"ins"), "{rejected}");
    // Calls go on.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("n.txt"), "note").unwrap();
    let args = format!("{{\"path\": \"{}\"}}", dir.path().join("n.txt").display());
    let allow = dir.path().to_str().unwrap();
    let r = bx(s, &["tool", "run", "test.notes", "--allow-read", allow, "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    verify_clean(s);
}

#[test]
fn a_token_realm_off_this_machine_over_plain_http_is_refused() {
    let state = used_state();
    let s = state.path();
    let d = digest_file(&component("test_notes_v1"));
    let challenger = hostile_registry(
        "HTTP/1.1 401 Unauthorized\r\nWww-Authenticate: Bearer realm=\"http://192.0.2.1:9/token\",service=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        b"",
        false,
    );
    let reference = format!("oci://127.0.0.1:{challenger}/bx/notes:1");
    refused_leaving_state_as_it_was(
        s,
        &["tool", "install", &reference, "--digest", &d],
        &["plain http off this machine", "--plain-http"],
    );
}

#[test]
fn a_full_journal_refuses_the_next_change_and_writes_nothing() {
    let state = used_state();
    let s = state.path();
    // 64 waiting records of 64 KiB: the next record would pass the journal's
    // 4 MiB bound (what a daemon that never takes them would let pile up).
    let record = |name: &str| {
        format!(
            "{{\"action\":\"install\",\"name\":\"{name}\",\"tools\":[],\"digest\":\"\",\"epoch\":1}}"
        )
    };
    let pad = "x".repeat(65_535 - record("").len());
    let line = format!("{}\n", record(&pad));
    assert_eq!(line.len(), 65_536);
    std::fs::write(s.join("tools/pending.jsonl"), line.repeat(64)).unwrap();
    let v1 = component("test_notes_v1");
    let d1 = digest_file(&v1);
    refused_leaving_state_as_it_was(
        s,
        &["tool", "install", v1.to_str().unwrap(), "--digest", &d1],
        &[
            "64 earlier tool changes wait in tools/pending.jsonl",
            "docs/runbook.md#audit-unavailable",
        ],
    );
}
