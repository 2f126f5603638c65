//! Standard WASI components (issue 25): components built from source with ordinary
//! toolchains (`tools/testing/wasi-*`, built by `make components`), their exported
//! functions called as tools, every file reached through standard `wasi:filesystem` and
//! every request through `wasi:http`, under the same per-operation checks as `bx:host`.

use std::os::unix::fs::symlink;

use bx_broker::AllowList;
use bx_runtime::{FunctionSpec, Limit, ResourceArg, ResourceKind, Shape};
use serde_json::{Value, json};

use super::*;

/// A standard component's path; fails (never skips) when `make components` has not run.
fn standard_bytes(name: &str) -> Vec<u8> {
    let path = components_dir().join(format!("../../components/{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make components` first", path.display()))
}

/// Function `export` of standard component `name`, loaded as a tool: its parameters in
/// `read` name paths it reads, and it reaches `statics` whatever its arguments.
fn function(
    name: &str,
    export: &str,
    read: &[&str],
    statics: &[(ResourceKind, String)],
) -> LoadedTool {
    let bytes = standard_bytes(name);
    let rt = runtime();
    let component = rt.compile(&bytes).unwrap();
    let spec = FunctionSpec {
        export: export.to_owned(),
        name: format!("{name}.{export}"),
        summary: String::new(),
        resources: read
            .iter()
            .map(|p| ResourceArg { arg: (*p).to_owned(), kind: ResourceKind::PathRead })
            .collect(),
        statics: statics.to_vec(),
    };
    rt.load_function(&component, &digest_of(&bytes), spec).unwrap()
}

/// What a function returned, as JSON: a string result, given as itself, as that string.
/// Panics on a failure.
fn ok_json(report: Result<CallReport, RunError>) -> Value {
    match report.unwrap().result {
        Ok(Output::Text(text)) => Value::String(text),
        Ok(Output::Json(text)) => serde_json::from_str(&text).unwrap(),
        other => panic!("expected a result, got {other:?}"),
    }
}

/// The call's failure text; panics when it succeeded.
fn failure(report: Result<CallReport, RunError>) -> String {
    match report.unwrap().result {
        Err(CallError::Failed(m) | CallError::Denied(m) | CallError::InvalidArgs(m)) => m,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_component_of_plain_functions_is_not_a_bx_tool_and_lists_its_functions() {
    let rt = runtime();
    let component = rt.compile(&standard_bytes("wasi-files")).unwrap();
    let Shape::Functions(functions) = rt.shape(&component).unwrap() else {
        panic!("a standard component read as bx:tool");
    };
    let exports: Vec<&str> = functions.iter().map(|f| f.export.as_str()).collect();
    for f in ["list-directory", "read-file", "search-file", "write-file", "fetch"] {
        assert!(exports.contains(&f), "{exports:?}");
    }
    let extra = functions.iter().find(|f| f.export.ends_with("#describe-number")).unwrap();
    assert_eq!(extra.tool_suffix, "extra.describe-number");
    let search = functions.iter().find(|f| f.export == "search-file").unwrap();
    let schema: Value = serde_json::from_str(search.schema.as_ref().unwrap()).unwrap();
    assert_eq!(schema["required"], json!(["path", "needle"]), "{schema}");
    assert_eq!(search.string_params, ["path", "needle"]);
    // bx's own tools stay what they were.
    let own = rt.compile(&component_bytes("fs_read")).unwrap();
    assert_eq!(rt.shape(&own).unwrap(), Shape::BxTool);
}

#[test]
fn std_fs_reads_a_granted_file_through_the_checked_filesystem() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    std::fs::write(ws.join("notes.txt"), "milk\nEggs\neggs again\n").unwrap();
    let read = function("wasi-files", "read-file", &["path"], &[]);
    let path = s(&ws.join("notes.txt"));
    let allow = || AllowList::new().read(&path).unwrap();
    let report = call(&read, allow(), json!({"path": path})).unwrap();
    match &report.result {
        // A string, given as itself: not a JSON string of it.
        Ok(Output::Text(text)) => assert_eq!(text, "milk\nEggs\neggs again\n"),
        other => panic!("{other:?}"),
    }
    assert!(
        report
            .touched
            .iter()
            .any(|t| matches!(t, Touched::Path { path: p, .. } if *p == ws.join("notes.txt"))),
        "{:?}",
        report.touched
    );
    // Typed arguments: a record with an enum and an option, converted from JSON.
    let search = function("wasi-files", "search-file", &["path"], &[]);
    let args = json!({"path": path, "needle": "eggs", "options": {"case": "insensitive", "max-matches": 1}});
    assert_eq!(ok_json(call(&search, allow(), args)), json!([{"line": 2, "text": "Eggs"}]));
    let args = json!({"path": path, "needle": "eggs"});
    assert_eq!(ok_json(call(&search, allow(), args)), json!([{"line": 3, "text": "eggs again"}]));
    // Arguments that do not fit the types never reach the guest.
    let args = json!({"path": path, "needle": "eggs", "options": {"case": "sideways"}});
    let why = failure(call(&search, allow(), args));
    assert!(why.contains("/options/case"), "{why}");
    // A function of an exported interface, with no resources at all.
    let describe = function("wasi-files", "bx-test:files/extra@0.1.0#describe-number", &[], &[]);
    let got = ok_json(call(&describe, AllowList::new(), json!({"n": -3})));
    assert!(got.as_array().is_some_and(|a| a.len() == 2 && a[1] == json!(false)), "{got}");
    // A function's `err` is the call's failure, with the tool's own text.
    let missing = s(&ws.join("missing.txt"));
    let why =
        failure(call(&read, AllowList::new().read(&s(&ws)).unwrap(), json!({"path": missing})));
    assert!(!why.is_empty());
}

/// What a hostile component reaches through standard WASI, given a workspace whatever
/// its arguments: nothing outside it, nothing denied, no FIFO, no second names.
#[test]
fn a_hostile_component_reaches_nothing_the_grant_does_not_name() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(root.join("outside.txt"), "OUTSIDE").unwrap();
    std::fs::write(ws.join("ok.txt"), "fine").unwrap();
    std::fs::write(ws.join(".env"), "TOKEN=1").unwrap();
    std::fs::write(ws.join("sub/.env"), "TOKEN=2").unwrap();
    symlink(root.join("outside.txt"), ws.join("link-out")).unwrap();
    symlink(".env", ws.join("env-link")).unwrap();
    let fifo = ws.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let statics = [(ResourceKind::PathWrite, s(&ws))];
    let policy =
        bx_broker::Policy::parse("p.toml", "[[deny]]\ntool = \"*\"\nname = \".env\"\n").unwrap();
    let allow = || AllowList::on_top_of(policy.clone()).write(&s(&ws)).unwrap();
    let read = function("wasi-hostile", "read-path", &[], &statics);
    assert_eq!(
        ok_json(call(&read, allow(), json!({"path": s(&ws.join("ok.txt"))}))),
        json!("fine")
    );
    for path in [
        format!("{}/sub/../../outside.txt", s(&ws)),
        s(&root.join("outside.txt")),
        s(&ws.join("link-out")),
        s(&ws.join(".env")),
        s(&ws.join("sub/.env")),
        s(&ws.join("env-link")),
        s(&fifo),
    ] {
        let report = call(&read, allow(), json!({"path": path}));
        let report = report.unwrap();
        let text = format!("{:?}", report.result);
        assert!(report.result.is_err(), "{path}: {text}");
        assert!(!text.contains("OUTSIDE") && !text.contains("TOKEN"), "{path}: {text}");
    }
    // The owner and the log hear why; the guest heard only an error code.
    let why = failure(call(&read, allow(), json!({"path": s(&ws.join(".env"))})));
    assert!(why.contains("the host refused") && why.contains(".env"), "{why}");
    // A listing never names a denied entry.
    let list = function("wasi-hostile", "list-path", &[], &statics);
    let names = ok_json(call(&list, allow(), json!({"path": s(&ws)})));
    assert!(names.as_array().unwrap().contains(&json!("ok.txt")), "{names}");
    assert!(!names.as_array().unwrap().contains(&json!(".env")), "{names}");
    // No second name outlives the decision.
    let links = function("wasi-hostile", "make-links", &[], &statics);
    let args = json!({"target": s(&ws.join("ok.txt")), "link": s(&ws.join("second"))});
    let report = call(&links, allow(), args).unwrap();
    // The report keeps what was refused, whatever the guest made of it.
    assert!(report.refused.iter().any(|r| r.contains("hard link")), "{:?}", report.refused);
    for made in ["second", "second.sym"] {
        assert!(std::fs::symlink_metadata(ws.join(made)).is_err(), "{made} was made");
    }
    // Writes land inside and nowhere else.
    let write = function("wasi-hostile", "write-path", &[], &statics);
    let args = json!({"path": s(&ws.join("new.txt")), "content": "made"});
    ok_text(call(&write, allow(), args));
    assert_eq!(std::fs::read_to_string(ws.join("new.txt")).unwrap(), "made");
    let args = json!({"path": s(&ws.join("link-out")), "content": "OVERWRITTEN"});
    assert!(call(&write, allow(), args).unwrap().result.is_err());
    assert_eq!(std::fs::read_to_string(root.join("outside.txt")).unwrap(), "OUTSIDE");
    // bx's own state under a grant of the home it lives in: out of reach by any name.
    let home = root.join("home");
    let state = home.join(".local/state/bx");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("policy.toml"), "# the owner's policy\n").unwrap();
    symlink(".local/state/bx", home.join("innocent")).unwrap();
    let over_home = [(ResourceKind::PathWrite, s(&home))];
    let in_home =
        || AllowList::new().write(&s(&home)).unwrap().protect_own([state.clone()]).unwrap();
    let read_home = function("wasi-hostile", "read-path", &[], &over_home);
    let write_home = function("wasi-hostile", "write-path", &[], &over_home);
    for path in [state.join("policy.toml"), home.join("innocent/policy.toml")] {
        let why = failure(call(&read_home, in_home(), json!({"path": s(&path)})));
        assert!(why.contains("the host refused"), "{}: {why}", path.display());
        let args = json!({"path": s(&path), "content": "[[grant]]"});
        assert!(call(&write_home, in_home(), args).unwrap().result.is_err());
    }
    assert_eq!(
        std::fs::read_to_string(state.join("policy.toml")).unwrap(),
        "# the owner's policy\n"
    );
    // A path longer than the kernel resolves is refused before it is copied or routed.
    let long = format!("{}/{}", s(&ws), "x/".repeat(4096));
    assert!(call(&read, allow(), json!({"path": long})).unwrap().result.is_err());
    // With no reach at all, not even the workspace.
    let bare = function("wasi-hostile", "read-path", &[], &[]);
    let report = call(&bare, AllowList::new(), json!({"path": s(&ws.join("ok.txt"))})).unwrap();
    assert!(report.result.is_err(), "{:?}", report.result);
}

#[test]
fn a_hostile_component_hits_every_limit() {
    let spin = function("wasi-hostile", "spin", &[], &[]);
    let hog = function("wasi-hostile", "hog", &[], &[]);
    let flood = function("wasi-hostile", "flood", &[], &[]);
    let nap = function("wasi-hostile", "nap", &[], &[]);
    let limit = |r: Result<CallReport, RunError>| match r {
        Err(RunError::Limit { limit, .. }) => limit,
        other => panic!("expected a limit, got {other:?}"),
    };
    assert_eq!(limit(call(&spin, AllowList::new(), json!({}))), Limit::Deadline);
    assert_eq!(limit(call(&hog, AllowList::new(), json!({}))), Limit::Memory);
    assert_eq!(limit(call(&flood, AllowList::new(), json!({}))), Limit::Stdio);
    // A sleep is a wait inside a WASI host call: the deadline still ends it.
    assert_eq!(limit(call(&nap, AllowList::new(), json!({"ms": 60_000}))), Limit::Deadline);
}

#[test]
fn wasi_http_goes_through_the_checked_fetch() {
    let ok = TinyServer::start(|_| http_ok("hello over wasi:http"));
    let fetch = function("wasi-hostile", "fetch", &[], &[]);
    // The owner wrote this address down: it is reachable as granted.
    let granted = format!("127.0.0.1:{}", ok.port);
    let allow = || AllowList::new().host(&granted).unwrap();
    let url = format!("http://127.0.0.1:{}/page", ok.port);
    assert_eq!(ok_json(call(&fetch, allow(), json!({"url": url}))), json!("hello over wasi:http"));
    let hits = ok.hits();
    // Loopback on another port, a private address, an IP literal, a name not granted:
    // refused before anything is sent.
    let other = TinyServer::start(|_| http_ok("SECRET"));
    for url in [
        format!("http://127.0.0.1:{}/", other.port),
        "http://10.0.0.1/".to_owned(),
        "http://93.184.216.34/".to_owned(),
        "https://example.com/".to_owned(),
    ] {
        let report = call(&fetch, allow(), json!({"url": url})).unwrap();
        let text = format!("{:?}", report.result);
        assert!(report.result.is_err() && !text.contains("SECRET"), "{url}: {text}");
    }
    assert_eq!(other.hits(), 0);
    // A redirect to a host the grant does not name is refused at the hop.
    let target = other.port;
    let redirect = TinyServer::start(move |_| {
        format!(
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{target}/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    });
    let granted = format!("127.0.0.1:{}", redirect.port);
    let allow = AllowList::new().host(&granted).unwrap();
    let url = format!("http://127.0.0.1:{}/", redirect.port);
    let why = failure(call(&fetch, allow, json!({"url": url})));
    assert!(why.contains("redirect"), "{why}");
    assert_eq!(other.hits(), 0);
    assert_eq!(ok.hits(), hits);
    // wasi:http requests are not bx's host calls: they are counted against the same cap,
    // and what was refused is kept bounded, however many the guest sends.
    // (A runtime of its own, with a cap a loaded machine reaches well inside the deadline.)
    let cap = 50;
    let rt = Runtime::new(Limits { host_calls: cap, ..Limits::default() }).unwrap();
    let bytes = standard_bytes("wasi-hostile");
    let spec = FunctionSpec {
        export: "fetch-many".into(),
        name: "hostile.fetch-many".into(),
        summary: String::new(),
        resources: Vec::new(),
        statics: Vec::new(),
    };
    let many = rt.load_function(&rt.compile(&bytes).unwrap(), &digest_of(&bytes), spec).unwrap();
    let allow = AllowList::new().host(&granted).unwrap();
    let args = json!({"url": "http://10.0.0.1/", "times": cap + 500}).to_string();
    let report = rt.call_blocking(&many, grant(&many, allow), &args).unwrap();
    assert!(matches!(&report.result, Ok(Output::Json(n)) if n == "0"), "{:?}", report.result);
    assert!(report.refused.len() <= 18, "{}", report.refused.len());
    let over = format!("more than {cap} requests in one call");
    assert!(report.refused.contains(&over), "{:?}", report.refused);
    // The granted server, asked past the cap, is not reached again.
    let args = json!({"url": format!("http://127.0.0.1:{}/", redirect.port), "times": 3});
    let before = redirect.hits();
    let allow = AllowList::new().host(&granted).unwrap();
    ok_text(rt.call_blocking(&many, grant(&many, allow), &args.to_string()));
    assert_eq!(redirect.hits(), before + 3, "a fresh call starts its count afresh");
}

/// Regression (a probe of the built binary): a rename or removal by name through
/// standard WASI could move a directory above bx's state aside (and a forged state in
/// its place), move `.git` aside to read `.git/config` as `g/config`, or move a file out
/// from under a secret grant into a public one.
#[test]
fn renames_and_removals_take_nothing_past_the_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().canonicalize().unwrap().join("home");
    let state = home.join(".local/state/bx");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("policy.toml"), "# the owner's policy\n").unwrap();
    std::fs::create_dir_all(home.join("proj/.git")).unwrap();
    std::fs::write(home.join("proj/.git/config"), "url = https://tok@host/").unwrap();
    std::fs::create_dir_all(home.join("proj/sec")).unwrap();
    std::fs::write(home.join("proj/sec/key.txt"), "sk-1").unwrap();
    std::fs::write(home.join("proj/a.txt"), "a").unwrap();
    symlink(".local", home.join("dot-local")).unwrap();
    let policy = bx_broker::Policy::parse(
        "p.toml",
        &format!(
            "[[grant]]\ntool = \"*\"\npath = \"{h}\"\nmode = \"write\"\nlabel = \"public/trusted\"\nwhen_tainted = \"allow\"\n\n\
             [[grant]]\ntool = \"*\"\npath = \"{h}/proj/sec\"\nmode = \"write\"\nlabel = \"secret/trusted\"\nwhen_tainted = \"allow\"\n\n\
             [[deny]]\ntool = \"*\"\nname = \".git/config\"\n",
            h = home.display()
        ),
    )
    .unwrap();
    // bx knows its state by the name it was given, through the symlink.
    let state_by_link = home.join("dot-local/state/bx");
    let allow = || {
        AllowList::on_top_of(policy.clone())
            .write(&s(&home))
            .unwrap()
            .protect_own([state_by_link.clone()])
            .unwrap()
    };
    let statics = [(ResourceKind::PathWrite, s(&home))];
    let rename = function("wasi-hostile", "rename-path", &[], &statics);
    let remove = function("wasi-hostile", "remove-path", &[], &statics);
    let moved = |a: &str, b: &str| {
        let args = json!({"source": s(&home.join(a)), "target": s(&home.join(b))});
        call(&rename, allow(), args).unwrap().result
    };
    // Directories above the state directory, where they lie and by the symlink's name.
    for (a, b) in [(".local", "moved"), (".local/state", "proj/old"), ("dot-local", "moved")] {
        assert!(moved(a, b).is_err(), "{a} -> {b}");
    }
    let args = json!({"path": s(&home.join("dot-local"))});
    assert!(call(&remove, allow(), args).unwrap().result.is_err());
    assert_eq!(
        std::fs::read_to_string(state.join("policy.toml")).unwrap(),
        "# the owner's policy\n"
    );
    // A directory moves nowhere: `.git` aside would expose `.git/config` as `g/config`.
    assert!(moved("proj/.git", "proj/g").is_err());
    assert!(home.join("proj/.git/config").exists() && !home.join("proj/g").exists());
    // A file never moves from under a secret grant to where it is labelled public.
    assert!(moved("proj/sec/key.txt", "proj/key.txt").is_err());
    assert!(home.join("proj/sec/key.txt").exists());
    // What the rules allow still works: a public file renamed, and into the secret
    // directory (upwards), then removed.
    assert!(moved("proj/a.txt", "proj/b.txt").is_ok());
    assert!(moved("proj/b.txt", "proj/sec/b.txt").is_ok());
    let args = json!({"path": s(&home.join("proj/sec/b.txt"))});
    assert!(call(&remove, allow(), args).unwrap().result.is_ok());
    assert!(!home.join("proj/sec/b.txt").exists());
}
