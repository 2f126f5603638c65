//! Standard WASI components (issue 25), built from source with real toolchains by `make
//! components` (Rust with wit-bindgen, Python with componentize-py, JavaScript with
//! jco), installed by digest, and run through every driver: `bx tool run`, the loop with
//! a scripted model, and `bx mcp` with the official Python SDK. Every call is on the
//! log and verify is clean.

use std::sync::Arc;

use bx_eval::model::{Call, Reply, Request, ScriptedModel};
use serde_json::{Value, json};

use super::*;

/// A standard component's path; fails (never skips) when `make components` has not run.
pub(super) fn standard(name: &str) -> PathBuf {
    let path = repo().join(format!("tools/target/components/{name}.wasm"));
    assert!(path.exists(), "{} is missing; run `make components` first", path.display());
    path
}

/// Installs standard component `name` by its digest, with `manifest` (TOML) beside it
/// and `extra` arguments; returns the run.
fn install_standard(s: &Path, name: &str, manifest: Option<&str>, extra: &[&str]) -> Run {
    let path = standard(name);
    let digest = digest_file(&path);
    let dir = tempfile::tempdir().unwrap();
    let manifest_path = dir.path().join(format!("{name}.toml"));
    let mut args = vec!["tool", "install", path.to_str().unwrap(), "--digest", &digest];
    if let Some(text) = manifest {
        std::fs::write(&manifest_path, text).unwrap();
        args.extend(["--manifest", manifest_path.to_str().unwrap()]);
    }
    args.extend(extra);
    bx(s, &args)
}

const FILES_MANIFEST: &str = "[functions.list-directory]\nread = [\"path\"]\n\n\
    [functions.read-file]\nread = [\"path\"]\n\n\
    [functions.search-file]\nread = [\"path\"]\n\n\
    [functions.write-file]\nwrite = [\"path\"]\n\n\
    [functions.fetch]\nfetch = [\"url\"]\n";

/// A workspace with notes.txt, by its real path.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    std::fs::write(ws.join("notes.txt"), "milk\neggs\nbread\n").unwrap();
    (tmp, ws)
}

/// `bx audit verify` finds the log clean.
pub(super) fn verify_clean(s: &Path) {
    let r = bx(s, &["audit", "verify", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

#[test]
fn components_in_three_languages_install_list_and_run_by_hand() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (_tmp, ws) = workspace();
    let w = ws.to_str().unwrap();

    // Rust (wit-bindgen): one tool per function, named from its package.
    let r = install_standard(s, "wasi-files", Some(FILES_MANIFEST), &[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for tool in ["files.read-file", "files.search-file", "files.extra.describe-number"] {
        assert!(r.stdout.contains(tool), "{}", r.stdout);
    }
    let listed: Value = serde_json::from_str(&bx(s, &["tool", "list", "--json"]).stdout).unwrap();
    let read = &listed["tools"]["files.read-file"];
    assert_eq!(read["function"]["export"], "read-file", "{listed}");
    assert_eq!(read["function"]["params"]["read"], json!(["path"]), "{listed}");
    let table = bx(s, &["tool", "list"]).stdout;
    assert!(table.contains("files.search-file") && table.contains("wasi"), "{table}");
    let inspected = bx(s, &["tool", "inspect", "files.search-file"]);
    assert_eq!(inspected.code, 0, "{}", inspected.stderr);
    for shown in
        ["function: search-file", "\"insensitive\"", "max-matches", "wasi:filesystem/types"]
    {
        assert!(inspected.stdout.contains(shown), "{shown}: {}", inspected.stdout);
    }

    let notes = ws.join("notes.txt");
    let args = json!({"path": notes}).to_string();
    let r = bx(s, &["tool", "run", "files.read-file", "--allow-read", w, "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    // A string result is shown as itself, not as a JSON string.
    assert!(r.stdout.contains("milk\neggs"), "{}", r.stdout);
    let args = json!({"path": notes, "needle": "EGGS", "options": {"case": "insensitive"}});
    let r = bx(
        s,
        &["tool", "run", "files.search-file", "--allow-read", w, "--args", &args.to_string()],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("\"line\": 2"), "{}", r.stdout);
    // Arguments that do not fit the function's types are refused before the broker,
    // saying where.
    let args = json!({"path": notes, "needle": 7}).to_string();
    let r = bx(s, &["tool", "run", "files.search-file", "--allow-read", w, "--args", &args]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("/needle"), "{}", r.stderr);
    let out = ws.join("out.txt");
    let args = json!({"path": out, "content": "written by a component"}).to_string();
    let r = bx(s, &["tool", "run", "files.write-file", "--allow-write", w, "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "written by a component");

    // Python (componentize-py): open() through the checked wasi:filesystem.
    let manifest =
        "[functions.read-file]\nread = [\"path\"]\n\n[functions.line-count]\nread = [\"path\"]\n";
    let r = install_standard(s, "py-files", Some(manifest), &["--name", "pyfiles"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let listed = bx(s, &["tool", "list", "--json"]).stdout;
    assert!(!listed.contains("pyfiles.exports"), "componentize-py's init is no tool: {listed}");
    let args = json!({"path": notes}).to_string();
    let r = bx(s, &["tool", "run", "pyfiles.line-count", "--allow-read", w, "--args", &args]);
    assert_eq!((r.code, r.stdout.trim()), (0, "3"), "{}", r.stderr);

    // JavaScript (jco / componentize-js): fetch() through the checked wasi:http.
    let manifest = "[functions.fetch-text]\nfetch = [\"url\"]\n";
    let r = install_standard(s, "js-fetch", Some(manifest), &["--name", "jsfetch"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let port = page_server("hello from a page");
    let host = format!("127.0.0.1:{port}");
    let args = json!({"url": format!("http://{host}/")}).to_string();
    let r = bx(s, &["tool", "run", "jsfetch.fetch-text", "--allow-host", &host, "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("hello from a page"), "{}", r.stdout);
    let r = bx(s, &["tool", "run", "jsfetch.shout", "--args", "{\"text\": \"quiet\"}"]);
    assert_eq!((r.code, r.stdout.trim()), (0, "QUIET"), "{}", r.stderr);

    let records = audit_records(s);
    let results = records.iter().filter(|r| r["kind"] == "result").count();
    assert!(results >= 6, "{records:?}");
    verify_clean(s);
}

/// Results near a frame's limit, many at once on `bx mcp`'s one connection to the
/// daemon, are each answered whole, the string itself: the daemon waits for room in its
/// queue to `bx mcp` instead of dropping the connection as too far behind (it dropped
/// it, and three to five of eight calls failed "mid-call").
#[test]
fn large_results_at_once_through_bx_mcp_are_each_answered_whole() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let r = install_standard(s, "wasi-files", Some(FILES_MANIFEST), &["--name", "files"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let (_tmp, ws) = workspace();
    // Under the 4 MiB frame, with characters that JSON escapes.
    let big = "a \"quoted\" line\n".repeat(4_000_000 / 17);
    std::fs::write(ws.join("big.txt"), &big).unwrap();
    let _daemon = Daemon::start(s);
    let mut raw = super::mcp::Raw::start(s, &ws);
    let ids = 2..10;
    for id in ids.clone() {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"files.read-file","arguments":{{"path":"big.txt"}}}}}}"#
        ));
    }
    let mut answered = BTreeMap::new();
    for _ in ids.clone() {
        let reply = raw.replies.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
        let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_default();
        let what = if text == big { "whole".to_owned() } else { bounded_text(text) };
        answered.insert(reply["id"].as_u64().unwrap(), (reply["result"]["isError"].clone(), what));
    }
    for id in ids {
        assert_eq!(answered.get(&id), Some(&(json!(false), "whole".to_owned())), "{answered:?}");
    }
    raw.kill();
}

/// The start of `text`, for a failure message.
fn bounded_text(text: &str) -> String {
    text.chars().take(200).collect()
}

#[test]
fn install_refuses_a_foreign_import_and_a_manifest_the_policy_refuses() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let r = install_standard(s, "wasi-foreign", None, &["--name", "foreign"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("bx-test:foreign/clock"), "{}", r.stderr);
    assert!(r.stderr.contains("#install-refused"), "{}", r.stderr);
    // The default policy refuses reading the owner's ssh keys whatever the tool.
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let manifest = format!("[reach]\nread = [\"{home}/.ssh\"]\n");
    let r = install_standard(s, "wasi-files", Some(&manifest), &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(".ssh") && r.stderr.contains("policy refuses"), "{}", r.stderr);
    assert!(r.stderr.contains("#manifest-refused"), "{}", r.stderr);
    // A manifest naming a parameter the function does not have says so.
    let r =
        install_standard(s, "wasi-files", Some("[functions.read-file]\nread = [\"file\"]\n"), &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("\"file\" does not exist"), "{}", r.stderr);
    // Nothing was installed by any of them.
    let listed: Value = serde_json::from_str(&bx(s, &["tool", "list", "--json"]).stdout).unwrap();
    assert_eq!(listed["tools"], json!({}), "{listed}");
}

#[test]
fn a_secret_file_read_by_a_component_taints_the_session() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (_tmp, ws) = workspace();
    std::fs::create_dir(ws.join("vault")).unwrap();
    std::fs::write(ws.join("vault/key.txt"), "sk-123").unwrap();
    let r = install_standard(s, "wasi-files", Some(FILES_MANIFEST), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    write_policy(
        s,
        &format!(
            "[[grant]]\ntool = \"*\"\npath = \"{ws}\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
             [[grant]]\ntool = \"*\"\npath = \"{ws}/vault\"\nmode = \"read\"\nlabel = \"secret/trusted\"\n\n\
             [[grant]]\ntool = \"files.fetch\"\nhost = \"example.com\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\nwhen_tainted = \"deny\"\n",
            ws = ws.display()
        ),
    );
    // The component reads the directory through wasi:filesystem; the secret file it
    // read is what labels the result.
    let args = json!({"path": ws.join("vault/key.txt")}).to_string();
    let r = bx(s, &["tool", "run", "files.read-file", "--session", "t", "--args", &args]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(session_taint(s, "t"), "t: secret/trusted\n");
    let args = json!({"url": "https://example.com/"}).to_string();
    let r = bx(s, &["tool", "run", "files.fetch", "--session", "t", "--args", &args]);
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    verify_clean(s);
}

#[test]
fn the_loop_and_an_mcp_client_call_a_component_function() {
    let model = ScriptedModel::start(Arc::new(|r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        if r.results_this_turn().is_empty() {
            Reply::Calls(vec![Call::new("files.read-file", json!({"path": "notes.txt"}))])
        } else {
            Reply::Text("read it".into())
        }
    }))
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let (_tmp, ws) = workspace();
    let w = ws.to_str().unwrap();
    let r = install_standard(s, "wasi-files", Some(FILES_MANIFEST), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);

    // The loop offers the function to the model, which calls it.
    let daemon = Daemon::start(s);
    let (code, events) = say(s, "reader", "read my notes", &["--workspace", w]);
    assert_eq!(code, 0, "{events:?}");
    let result = of_type(&events, "tool_result");
    assert_eq!(result.len(), 1, "{events:?}");
    assert_eq!(result[0]["status"], "ok", "{events:?}");
    let messages = transcript(s, "reader");
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(tool["content"].as_str().unwrap().contains("milk"), "{messages:?}");

    // The official Python SDK lists it with its schema and calls it.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_call.py");
    let python = repo().join(".venv/bin/python");
    let out = std::process::Command::new(python)
        .arg(script)
        .args([env!("CARGO_BIN_EXE_bx"), s.to_str().unwrap(), w, "files.search-file"])
        .arg(json!({"path": "notes.txt", "needle": "bread"}).to_string())
        .env_remove("BX_HOME")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let steps: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let listed = steps.iter().find(|s| s["step"] == "listed").unwrap();
    assert_eq!(listed["schema"]["properties"]["options"]["anyOf"][1]["type"], "null", "{listed}");
    let called = steps.iter().find(|s| s["step"] == "called").unwrap();
    assert_eq!(called["error"], false, "{called}");
    assert!(called["text"].as_str().unwrap().contains("bread"), "{called}");
    drop(daemon);
    verify_clean(s);
}

#[test]
fn what_a_hostile_component_was_refused_is_on_the_log() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let (_tmp, ws) = workspace();
    std::fs::write(ws.join(".env"), "TOKEN=sk-1").unwrap();
    std::os::unix::fs::symlink(".env", ws.join("settings")).unwrap();
    // It reaches the session's workspace whatever its arguments; the default policy
    // reads the workspace without asking and refuses `.env` wherever it is.
    let r = install_standard(
        s,
        "wasi-hostile",
        Some("[reach]\nread = [\".\"]\n"),
        &["--name", "hostile"],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let w = ws.to_str().unwrap();
    let ok = json!({"path": ws.join("notes.txt")}).to_string();
    let r = bx(s, &["tool", "run", "hostile.read-path", "--workspace", w, "--args", &ok]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for name in [".env", "settings"] {
        let args = json!({"path": ws.join(name)}).to_string();
        let r = bx(s, &["tool", "run", "hostile.read-path", "--workspace", w, "--args", &args]);
        assert_ne!(r.code, 0, "{name}: {}", r.stdout);
        assert!(!r.stdout.contains("sk-1") && !r.stderr.contains("sk-1"), "{name}");
        assert!(r.stderr.contains("the host refused"), "{name}: {}", r.stderr);
    }
    let refused: Vec<Value> = audit_records(s)
        .into_iter()
        .filter(|r| {
            r["kind"] == "result"
                && r["fields"]["error"].as_str().is_some_and(|e| e.contains("the host refused"))
        })
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    for r in &refused {
        let said = r["fields"]["refused"].as_array().cloned().unwrap_or_default();
        assert!(said.iter().any(|x| x.as_str().is_some_and(|x| x.contains(".env"))), "{r}");
    }
    verify_clean(s);
}

/// Installs the component at `path` by its digest, with `extra` arguments.
fn install_file(s: &Path, path: &Path, extra: &[&str]) -> Run {
    let digest = digest_file(path);
    let mut args = vec!["tool", "install", path.to_str().unwrap(), "--digest", &digest];
    args.extend(extra);
    bx(s, &args)
}

/// `bytes` (a component) with a top-level `component-name` section naming it `name`, as
/// `wasm-tools metadata add --name` writes one.
fn with_own_name(bytes: &[u8], name: &str) -> Vec<u8> {
    let own = [&[name.len() as u8][..], name.as_bytes()].concat();
    let subsection = [&[0, own.len() as u8][..], &own].concat();
    let payload = [&[14][..], b"component-name", &subsection].concat();
    assert!(payload.len() < 128, "one-byte LEB128 sizes");
    [bytes, &[0, payload.len() as u8], &payload].concat()
}

/// A standard component that carries no package name (componentize-py writes its world
/// as `root:component`, and no world name survives in the bytes) is installed under the
/// name of its file, said; `--name` still wins; a name it carries itself comes before the
/// file's; and a file name with nothing a tool name can use is refused, saying what to
/// pass (issue 40).
#[test]
fn a_component_without_a_package_name_is_named_after_what_it_carries_or_its_file() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (_tmp, ws) = workspace();

    // componentize-py's output, without --name: its tools are named from its file.
    let r =
        install_standard(s, "py-files", Some("[functions.line-count]\nread = [\"path\"]\n"), &[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("installed py-files sha256:"), "{}", r.stdout);
    assert_eq!(
        lines[1..3],
        [
            "named py-files after its file name: it carries no name of its own (--name NAME chooses another)",
            "tools: py-files.read-file, py-files.line-count",
        ],
        "{}",
        r.stdout
    );
    let args = json!({"path": ws.join("notes.txt")}).to_string();
    let w = ws.to_str().unwrap();
    let r = bx(s, &["tool", "run", "py-files.line-count", "--allow-read", w, "--args", &args]);
    assert_eq!((r.code, r.stdout.trim()), (0, "3"), "{}", r.stderr);

    // A file name that is not a tool name is made one; --name still wins.
    let scratch = tempfile::tempdir().unwrap();
    let other = std::fs::read(component("test_other_world")).unwrap();
    let renamed = scratch.path().join("Other World.v2.wasm");
    std::fs::write(&renamed, &other).unwrap();
    let r = install_file(s, &renamed, &["--name", "chosen"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("installed chosen sha256:"), "{}", r.stdout);
    assert!(!r.stdout.contains("named "), "{}", r.stdout);
    let r = install_file(s, &renamed, &[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("installed other-world-v2 sha256:"), "{}", r.stdout);
    assert!(r.stdout.contains("tools: other-world-v2.greet"), "{}", r.stdout);

    // The name it carries comes before its file's.
    let carried = scratch.path().join("anything.wasm");
    std::fs::write(&carried, with_own_name(&other, "Weather")).unwrap();
    let r = install_file(s, &carried, &[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("installed weather sha256:"), "{}", r.stdout);
    assert!(r.stdout.contains("named weather after the name it carries"), "{}", r.stdout);

    // Nothing of the file's name can name a tool: refused, saying what to pass.
    let before = bx(s, &["tool", "list", "--json"]).stdout;
    let unnamed = scratch.path().join("★.wasm");
    std::fs::write(&unnamed, &other).unwrap();
    let r = install_file(s, &unnamed, &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(
            "the component carries no name, and the file name \"★\" gives none that a tool name can use: pass --name NAME"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("#install-refused"), "{}", r.stderr);
    assert_eq!(bx(s, &["tool", "list", "--json"]).stdout, before);
    verify_clean(s);
}

/// A refused component's message names its cause once: the store's "refused component"
/// wraps the runtime's reason, and the chain printed whole repeated it (issue 40).
#[test]
fn a_refused_component_names_its_cause_once() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let r = install_standard(s, "wasi-foreign", None, &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.matches("not a component bx can run").count(), 1, "{}", r.stderr);
    assert_eq!(r.stderr.matches("bx-test:foreign/clock").count(), 1, "{}", r.stderr);
    let core = repo().join("fixtures/components/core-module.wasm");
    let r = install_file(s, &core, &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.matches("not a valid component").count(), 1, "{}", r.stderr);
    assert_eq!(r.stderr.matches("refused component").count(), 1, "{}", r.stderr);
}

/// Regression (an attack on the in-call flow): a standard component that opens its
/// output for writing before it reads (a check made only when a path is opened for
/// writing passes then) and writes what it read through a hard link to a secret file to
/// the descriptor it already holds. The read is held to the write the call opened; the
/// neighbour, a file of the workspace's own label copied the same way, runs.
#[test]
fn a_read_after_an_output_was_opened_is_held_to_that_output() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    let manifest = "[functions.copy-open-first]\nread = [\"source\"]\nwrite = [\"target\"]\n";
    let r = install_standard(s, "wasi-hostile", Some(manifest), &["--name", "hostile"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let (_tmp, ws) = workspace();
    std::fs::create_dir_all(ws.join("vault")).unwrap();
    std::fs::create_dir(ws.join("pub")).unwrap();
    std::fs::write(ws.join("vault/key.txt"), "vault-key-4711\n").unwrap();
    std::fs::hard_link(ws.join("vault/key.txt"), ws.join("linked.txt")).unwrap();
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    let extra = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n\
         [[grant]]\ntool = \"hostile.copy-open-first\"\npath = \"{}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"ask\"\n",
        ws.join("vault").display(),
        ws.join("pub").display()
    );
    write_policy(s, &format!("{policy}\n{extra}"));
    let copy = |source: &str, session: &str| {
        let args = json!({"source": source, "target": "pub/out.txt"}).to_string();
        let w = ws.to_str().unwrap();
        bx(
            s,
            &[
                "tool",
                "run",
                "hostile.copy-open-first",
                "--workspace",
                w,
                "--session",
                session,
                "--args",
                &args,
            ],
        )
    };
    let r = copy("linked.txt", "link");
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("#read-above-decided"), "{}", r.stderr);
    let out = std::fs::read_to_string(ws.join("pub/out.txt")).unwrap_or_default();
    assert!(!out.contains("vault-key-4711"), "the secret reached the output: {out}");
    let r = copy("notes.txt", "plain");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.join("pub/out.txt")).unwrap(),
        std::fs::read_to_string(ws.join("notes.txt")).unwrap()
    );
}
