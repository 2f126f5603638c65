//! `py.run` (issue 28): the model's own Python, built by componentize-py from
//! `tools/py-run/`, run as a standard WASI component whose grant is cut down to exactly
//! the paths and URLs its call lists. By hand, in the loop with a scripted model, and
//! through `bx mcp` with the official Python SDK; hostile code is refused or limited and
//! every attempt is on the log.

use std::io::{BufRead as _, BufReader, Write as _};
use std::sync::Arc;

use bx_eval::model::{Call, Reply, Request, ScriptedModel};
use serde_json::{Value, json};

use super::*;

/// The built py.run; fails (never skips) when `make tools` has not run.
fn py_run() -> PathBuf {
    let path = repo().join("tools/target/py/py_run.wasm");
    assert!(path.exists(), "{} is missing; run `make tools` first", path.display());
    path
}

/// Installs py.run into `s` with its manifest, as `py.run`.
fn install_py(s: &Path) {
    let manifest = repo().join("tools/py-run/manifest.toml");
    let r = install_with_manifest(s, &py_run(), &manifest, "py");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// A state directory with the default policy and py.run, and a workspace holding a CSV,
/// a secret note, a `.env`, a symlink out of it and a folder of its own.
fn setup() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
    let state = tempfile::tempdir().unwrap();
    assert_eq!(bx(state.path(), &["policy", "init"]).code, 0);
    install_py(state.path());
    let ws_dir = tempfile::tempdir().unwrap();
    let ws = ws_dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("sales.csv"), "region,amount\nnorth,12.5\nsouth,7\neast,30.25\n")
        .unwrap();
    std::fs::write(ws.join("other.txt"), "not named by the call\n").unwrap();
    std::fs::write(ws.join(".env"), "TOKEN=sk-live-1\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", ws.join("out-link")).unwrap();
    (state, ws_dir, ws)
}

fn run(s: &Path, ws: &Path, args: Value, extra: &[&str]) -> Run {
    let w = ws.to_str().unwrap();
    let text = args.to_string();
    let mut argv = vec!["tool", "run", "py.run", "--workspace", w, "--args", &text];
    argv.extend(extra);
    bx(s, &argv)
}

const SUM: &str = "import csv\nrows = list(csv.DictReader(open('sales.csv')))\nprint(len(rows), 'rows')\nsum(float(r['amount']) for r in rows)";

#[test]
fn py_run_computes_over_the_files_it_names_and_reaches_nothing_else() {
    let (state, _w, ws) = setup();
    let s = state.path();
    // The sum of a column: what it printed, then its last line's value.
    let r = run(s, &ws, json!({"code": SUM, "reads": ["sales.csv"]}), &[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    // A string result is shown as itself, not as a JSON string.
    assert_eq!(r.stdout.trim(), "3 rows\n49.75");
    // An exception is the call's failure, with the code's own traceback.
    let r = run(s, &ws, json!({"code": "def f():\n    return 1 / 0\nf()"}), &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("File \"<code>\", line 2, in f"), "{}", r.stderr);
    assert!(r.stderr.contains("ZeroDivisionError"), "{}", r.stderr);
    assert!(!r.stderr.contains("app.py"), "{}", r.stderr);
    // Writing a new file under `writes`: the default policy asks; approved by hand.
    let code = "open('report.txt', 'w').write('total 49.75\\n')";
    let args = json!({"code": code, "writes": ["report.txt"]}).to_string();
    let mut child = bx_command(s)
        .args(["tool", "run", "py.run", "--workspace", ws.to_str().unwrap(), "--args", &args])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut block = String::new();
    let id = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no approval block: {block}");
        block.push_str(&line);
        if let Some(rest) = line.trim().strip_prefix("approval needed: ") {
            break rest.trim().to_owned();
        }
    };
    let mut rest = String::new();
    while !rest.contains("expires in") {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "{block}{rest}");
        rest.push_str(&line);
    }
    // The block shows the code and the path it writes.
    assert!(rest.contains("report.txt") && rest.contains("total 49.75"), "{rest}");
    writeln!(child.stdin.take().unwrap(), "{id}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(std::fs::read_to_string(ws.join("report.txt")).unwrap(), "total 49.75\n");
    // Hostile code: each attempt refused or limited, and on the log.
    let attempts: Vec<(&str, Value, &str)> = vec![
        (
            "a file not named",
            json!({"code": "open('other.txt').read()", "reads": ["sales.csv"]}),
            "no read grant covers",
        ),
        (
            "a folder not named",
            json!({"code": "import os\nos.listdir('.')", "reads": ["sales.csv"]}),
            "no read grant covers",
        ),
        ("..", json!({"code": "open('../sales.csv').read()", "reads": ["sales.csv"]}), "Error"),
        (
            "a symlink out",
            json!({"code": "open('out-link').read()", "reads": ["out-link"]}),
            "refused",
        ),
        (".env", json!({"code": "open('.env').read()", "reads": [".env"]}), "refused"),
        (
            "bx's state",
            json!({"code": format!("open('{}/policy.toml').read()", s.display())}),
            "Errno",
        ),
        ("a socket", json!({"code": "import socket"}), "No module named 'socket'"),
        (
            "a subprocess",
            json!({"code": "import os\nos.system('id')"}),
            "has no attribute 'system'",
        ),
        ("an endless loop", json!({"code": "while True:\n    pass"}), "deadline"),
        ("4 GiB", json!({"code": "x = [bytearray(1 << 20) for _ in range(4096)]"}), "emory"),
        (
            "100 MB printed",
            json!({"code": "for _ in range(100_000):\n    print('x' * 1000)"}),
            "printed more than",
        ),
    ];
    for (what, args, expect) in &attempts {
        let r = run(s, &ws, args.clone(), &[]);
        assert_ne!(r.code, 0, "{what}: {}", r.stdout);
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(said.contains(expect), "{what}: {said}");
        assert!(!said.contains("sk-live-1") && !said.contains("[[grant]]"), "{what}: {said}");
    }
    let results: Vec<Value> =
        audit_records(s).into_iter().filter(|r| r["kind"] == "result").collect();
    // The three that ran well, then one record per attempt (refused ones by the broker
    // have a decision and no result).
    let failed = results.iter().filter(|r| r["fields"]["status"] != "ok").count();
    assert!(failed >= attempts.len() - 2, "{results:?}");
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

#[test]
fn a_result_that_read_a_secret_file_is_secret_and_a_fetch_after_it_asks() {
    let (state, _w, ws) = setup();
    let s = state.path();
    std::fs::write(ws.join("salaries.csv"), "name,pay\na,100\nb,200\n").unwrap();
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    let secret = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n",
        ws.join("salaries.csv").display()
    );
    write_policy(s, &format!("{policy}\n{secret}"));
    install(s, "http_fetch");
    let code = "import csv\nsum(int(r['pay']) for r in csv.DictReader(open('salaries.csv'))) + len(open('sales.csv').read())";
    let args = json!({"code": code, "reads": ["salaries.csv", "sales.csv"]});
    let r = run(s, &ws, args, &["--session", "pay"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let last = audit_records(s).into_iter().rev().find(|r| r["kind"] == "result").unwrap();
    assert_eq!(last["fields"]["label"], "secret/trusted", "{last}");
    // A fetch in that session now asks (the default policy's when_tainted), and with no
    // answer on stdin it is refused.
    let fetch = json!({"url": "https://example.com/"}).to_string();
    let r = bx_command(s)
        .args(["tool", "run", "http.fetch", "--session", "pay", "--args", &fetch])
        .args(["--approval-timeout", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stderr);
    assert!(said.contains("session taint secret/trusted does not flow"), "{said}");
    let decisions: Vec<Value> =
        audit_records(s).into_iter().filter(|r| r["kind"] == "decision").collect();
    assert_eq!(decisions.last().unwrap()["fields"]["decision"], "ask", "{decisions:?}");
}

/// What the scripted model sends py.run for each of the owner's prompts.
fn scripted_call(prompt: &str) -> Value {
    if prompt.contains("total") {
        json!({"code": SUM, "reads": ["sales.csv"]})
    } else if prompt.contains("write") {
        json!({"code": "open('report.txt', 'w').write('total 49.75\\n')", "writes": ["report.txt"]})
    } else if prompt.contains("print") {
        json!({"code": "print('hi')\n6 * 7"})
    } else {
        json!({"code": "def f():\n    return 1 / 0\nf()"})
    }
}

#[test]
fn the_loop_and_the_python_sdk_call_py_run() {
    let model = ScriptedModel::start(Arc::new(|r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        match r.results_this_turn().as_slice() {
            [] => Reply::Calls(vec![Call::new("py.run", scripted_call(r.last_user()))]),
            [result, ..] => Reply::Text(format!("py.run said: {result}")),
        }
    }))
    .unwrap();
    let (state, _w, ws) = setup();
    let s = state.path();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    let daemon = Daemon::start(s);
    let w = ws.to_str().unwrap();
    // Writes ask under the default policy: the owner approves from another terminal.
    let (done, stop) = std::sync::mpsc::channel();
    let approving = super::mcp::approver(s.to_path_buf(), stop);
    let mut said = Vec::new();
    for prompt in [
        "what is the total of sales.csv?",
        "write the report",
        "print a greeting",
        "divide by zero",
    ] {
        let (code, events) = say(s, "py", prompt, &["--workspace", w]);
        assert_eq!(code, 0, "{prompt}: {events:?}");
        let text: String =
            of_type(&events, "content_delta").iter().map(|e| e["text"].as_str().unwrap()).collect();
        let status = of_type(&events, "tool_result")[0]["status"].clone();
        said.push((status, text));
    }
    assert_eq!(said[0].0, "ok");
    assert!(said[0].1.contains("3 rows") && said[0].1.contains("49.75"), "{said:?}");
    assert_eq!(said[1].0, "ok", "{said:?}");
    assert_eq!(std::fs::read_to_string(ws.join("report.txt")).unwrap(), "total 49.75\n");
    assert!(said[2].1.contains("hi") && said[2].1.contains("42"), "{said:?}");
    assert_eq!(said[3].0, "error", "{said:?}");
    assert!(said[3].1.contains("ZeroDivisionError"), "{said:?}");
    drop(daemon);
    std::fs::remove_file(ws.join("report.txt")).unwrap();
    // The official Python SDK: the same four, each a call of its own.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_call.py");
    let sdk = |args: Value| -> (Value, Value) {
        let out = std::process::Command::new(repo().join(".venv/bin/python"))
            .arg(&script)
            .args([env!("CARGO_BIN_EXE_bx"), s.to_str().unwrap(), w, "py.run"])
            .arg(args.to_string())
            .env_remove("BX_HOME")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let steps: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let listed = steps.iter().find(|s| s["step"] == "listed").unwrap().clone();
        let called = steps.iter().find(|s| s["step"] == "called").unwrap().clone();
        (listed, called)
    };
    let (listed, called) = sdk(scripted_call("total"));
    assert!(listed["description"].as_str().unwrap().contains("compute"), "{listed}");
    assert!(called["text"].as_str().unwrap().contains("49.75"), "{called}");
    let (_, called) = sdk(scripted_call("write"));
    assert_eq!(called["error"], false, "{called}");
    assert_eq!(std::fs::read_to_string(ws.join("report.txt")).unwrap(), "total 49.75\n");
    let (_, called) = sdk(scripted_call("print"));
    assert!(called["text"].as_str().unwrap().contains("hi\n42"), "{called}");
    let (_, called) = sdk(scripted_call("fail"));
    assert_eq!(called["error"], true, "{called}");
    assert!(called["text"].as_str().unwrap().contains("ZeroDivisionError"), "{called}");
    done.send(()).unwrap();
    assert!(approving.join().unwrap() >= 2, "the two writes were approved");
    for pid in super::mcp::daemons_of(s) {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    std::fs::File::open(s.join("serve.lock")).unwrap().lock().unwrap();
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// Regression (an attack on the built binary): a listed read path that is a symlink to a
/// denied name (`envlink -> .env`, `awslink -> .aws`) was read, since the rules were
/// checked only below the root the call named; and one call could copy a secret file
/// into a file of a lower label, its write decided at the session's taint alone.
#[test]
fn a_symlink_listed_as_a_read_and_a_copy_within_one_call_are_refused() {
    let (state, _w, ws) = setup();
    let s = state.path();
    std::fs::create_dir(ws.join(".aws")).unwrap();
    std::fs::write(ws.join(".aws/credentials"), "aws_secret=XYZ\n").unwrap();
    std::os::unix::fs::symlink(".env", ws.join("envlink")).unwrap();
    std::os::unix::fs::symlink(".aws", ws.join("awslink")).unwrap();
    for (code, reads) in
        [("open('envlink').read()", "envlink"), ("open('awslink/credentials').read()", "awslink")]
    {
        let r = run(s, &ws, json!({"code": code, "reads": [reads]}), &[]);
        assert_ne!(r.code, 0, "{code}: {}", r.stdout);
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(!said.contains("sk-live-1") && !said.contains("XYZ"), "{said}");
        // Decided where it leads, before anything runs.
        assert!(said.contains("refused") && said.contains("name ."), "{said}");
    }
    // The neighbour: a symlink to a file the policy lets it read runs, and the request
    // records where it leads as well as how it was named.
    std::os::unix::fs::symlink("sales.csv", ws.join("alias.csv")).unwrap();
    let r =
        run(s, &ws, json!({"code": "len(open('alias.csv').read())", "reads": ["alias.csv"]}), &[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let request = audit_records(s).into_iter().rev().find(|r| r["kind"] == "request").unwrap();
    let listed = request["fields"]["resources"].to_string();
    assert!(listed.contains("alias.csv") && listed.contains("sales.csv"), "{request}");
    // A secret file read and a private one written in one call: the write is decided
    // at the taint the call reaches, so the default policy's write grant asks (and with
    // no answer, refuses), where before it ran at the session's clean taint.
    std::fs::write(ws.join("salaries.csv"), "a,100\n").unwrap();
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    let secret = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n\
         [[grant]]\ntool = \"py.run\"\npath = \"{}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"deny\"\n",
        ws.join("salaries.csv").display(),
        ws.join("pub").display()
    );
    write_policy(s, &format!("{policy}\n{secret}"));
    std::fs::create_dir(ws.join("pub")).unwrap();
    let code = "open('pub/out.txt', 'w').write(open('salaries.csv').read())";
    let r = run(
        s,
        &ws,
        json!({"code": code, "reads": ["salaries.csv"], "writes": ["pub/out.txt"]}),
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("does not flow to"), "{}", r.stderr);
    assert!(!ws.join("pub/out.txt").exists());
}

/// Regression: a call that named a folder among its reads was decided, and shown to the
/// owner, at the label of the grant covering the folder, while the files it then read sat
/// under a nested `secret` grant, or were a hard link to one: code in the same call wrote
/// them out at the lower label with no prompt. A folder read is now decided at the
/// highest label under it (shown in the block), and a write after a read that rose past
/// the decided label (a hard link) is refused as it happens.
#[test]
fn a_folder_read_is_decided_at_what_it_holds_and_a_write_after_a_higher_read_is_refused() {
    let (state, _w, ws) = setup();
    let s = state.path();
    std::fs::create_dir_all(ws.join("vault")).unwrap();
    std::fs::write(ws.join("vault/key.txt"), "vault-key-4711\n").unwrap();
    std::fs::create_dir(ws.join("pub")).unwrap();
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    let extra = format!(
        "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n\
         [[grant]]\ntool = \"py.run\"\npath = \"{}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"ask\"\n",
        ws.join("vault").display(),
        ws.join("pub").display()
    );
    write_policy(s, &format!("{policy}\n{extra}"));
    let copy = |from: &str| format!("open('pub/out.txt', 'w').write(open('{from}').read())");
    // The folder: asked about at the nested grant's label, and with no answer refused.
    let args = json!({"code": copy("vault/key.txt"), "reads": ["."], "writes": ["pub/out.txt"]});
    let r = run(s, &ws, args, &["--approval-timeout", "1", "--session", "folder"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("raises it to secret/trusted"), "{}", r.stderr);
    assert!(r.stderr.contains("does not flow to"), "{}", r.stderr);
    assert!(!ws.join("pub/out.txt").exists());
    // A hard link to the vault's file, named as a plain file: decided at the workspace's
    // label, and the write after the read is refused as it happens.
    std::fs::hard_link(ws.join("vault/key.txt"), ws.join("notes.txt")).unwrap();
    let args =
        json!({"code": copy("notes.txt"), "reads": ["notes.txt"], "writes": ["pub/out.txt"]});
    let r = run(s, &ws, args, &["--session", "link"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("#read-above-decided"), "{}", r.stderr);
    assert!(!ws.join("pub/out.txt").exists());
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(!said.contains("vault-key-4711"), "{said}");
    // The output opened before the read: a descriptor open for writing takes what is
    // written to it with no further check, so the read through the link is what is held.
    let code =
        "out = open('pub/out.txt', 'w')\nd = open('notes.txt').read()\nout.write(d)\nout.close()";
    let args = json!({"code": code, "reads": ["notes.txt"], "writes": ["pub/out.txt"]});
    let r = run(s, &ws, args, &["--session", "open-first"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("#read-above-decided"), "{}", r.stderr);
    let out = std::fs::read_to_string(ws.join("pub/out.txt")).unwrap_or_default();
    assert!(!out.contains("vault-key-4711"), "{out}");
    // A file named only as a write, opened to read as well ('r+'): what it reads holds
    // the call's later writes as any read does.
    let extra = format!(
        "[[grant]]\ntool = \"py.run\"\npath = \"{}\"\nmode = \"write\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n",
        ws.join("vault").display()
    );
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    write_policy(s, &format!("{policy}\n{extra}"));
    let code = "d = open('vault/key.txt', 'r+').read()\nopen('pub/out.txt', 'w').write(d)";
    let args = json!({"code": code, "writes": ["vault/key.txt", "pub/out.txt"]});
    let r = run(s, &ws, args, &["--session", "both-ways"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("#read-above-decided"), "{}", r.stderr);
    assert!(!ws.join("pub/out.txt").exists());
    // The neighbour: a file under the workspace's own label copied the same way runs.
    // (In a session of its own: the read through the link tainted the last one.)
    let args =
        json!({"code": copy("sales.csv"), "reads": ["sales.csv"], "writes": ["pub/out.txt"]});
    let r = run(s, &ws, args, &["--session", "plain"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(std::fs::read_to_string(ws.join("pub/out.txt")).unwrap().starts_with("region,"));
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}

/// The code's network is `fetch(url)`, through bx's checked HTTP, to the hosts and ports
/// its call lists in `urls` and nowhere else.
#[test]
fn fetch_reaches_the_listed_urls_only() {
    let (state, _w, ws) = setup();
    let s = state.path();
    let listed = page_server("north,1\nsouth,2\n");
    let other = page_server("never read\n");
    let url = format!("http://127.0.0.1:{listed}/data.csv");
    let allow = format!("127.0.0.1:{listed}");
    let code = format!("len(fetch('{url}').splitlines())");
    let r = run(s, &ws, json!({"code": code, "urls": [url]}), &["--allow-host", &allow]);
    assert_eq!((r.code, r.stdout.trim()), (0, "2"), "{}", r.stderr);
    // Granted by hand too, but not listed by the call: refused by the host.
    let elsewhere = format!("http://127.0.0.1:{other}/");
    let code = format!("fetch('{elsewhere}')");
    let allow_other = format!("127.0.0.1:{other}");
    let args = json!({"code": code, "urls": [url]});
    let r = run(s, &ws, args, &["--allow-host", &allow, "--allow-host", &allow_other]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("HttpRequestDenied"), "{}", r.stderr);
    assert!(!r.stderr.contains("never read"), "{}", r.stderr);
}

/// A fetch reads: its answer comes into the call at its host's label. Code that fetched
/// from a host labelled `secret` and wrote what it got to a `private` file in the same
/// call ran with no prompt, decided at the workspace's label alone (found by probing the
/// built binary). It is now decided at the join with the host's label, shown in the block.
#[test]
fn a_fetch_within_a_call_counts_as_a_read_of_its_host() {
    let (state, _w, ws) = setup();
    let s = state.path();
    std::fs::create_dir(ws.join("pub")).unwrap();
    let vault = page_server("vault-key-4711\n");
    let open = page_server("weather: fine\n");
    let policy = std::fs::read_to_string(s.join("policy.toml")).unwrap();
    let extra = format!(
        "[[grant]]\ntool = \"py.run\"\nhost = \"127.0.0.1:{vault}\"\nmode = \"fetch\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n\
         [[grant]]\ntool = \"py.run\"\nhost = \"127.0.0.1:{open}\"\nmode = \"fetch\"\nlabel = \"public/trusted\"\nwhen_tainted = \"allow\"\n\
         [[grant]]\ntool = \"py.run\"\npath = \"{}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"ask\"\n",
        ws.join("pub").display()
    );
    write_policy(s, &format!("{policy}\n{extra}"));
    let copy = |port: u16| {
        let url = format!("http://127.0.0.1:{port}/");
        let code = format!("open('pub/out.txt', 'w').write(fetch('{url}'))");
        json!({"code": code, "urls": [url], "writes": ["pub/out.txt"]})
    };
    // From the secret host: asked about at its label, and with no answer refused.
    let r = run(s, &ws, copy(vault), &["--approval-timeout", "1", "--session", "vault"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("raises it to secret/trusted"), "{}", r.stderr);
    assert!(!ws.join("pub/out.txt").exists());
    // The neighbour: from a public host, the same copy runs with no prompt.
    let r = run(s, &ws, copy(open), &["--session", "open"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(std::fs::read_to_string(ws.join("pub/out.txt")).unwrap(), "weather: fine\n");
    assert_eq!(bx(s, &["audit", "verify"]).code, 0);
}
