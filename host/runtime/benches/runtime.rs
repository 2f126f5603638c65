//! `make bench`: what a tool call costs. Prints a table of medians and p90s, each next to
//! a baseline measured in the same run; quote the ratios, since this machine is shared.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::path::{Path, PathBuf};

use bx_broker::{AllowList, CallRequest, Decision, Grant, Label};
use bx_runtime::{ComponentCache, Limits, LoadedTool, Output, Runtime};
use sha2::Digest as _;

#[path = "../../bench/measure.rs"]
mod measure;
use measure::{Stats, fmt, measure};

const FIRST_PARTY: &[&str] =
    &["fs_read", "fs_write", "fs_list", "fs_search", "fs_edit", "http_fetch"];

fn components() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/target/wasm32-wasip2/release")
}

fn bytes(name: &str) -> Vec<u8> {
    let path = components().join(format!("bx_tool_{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make tools`", path.display()))
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn load(rt: &Runtime, name: &str) -> LoadedTool {
    let b = bytes(name);
    rt.load_blocking(&rt.compile(&b).unwrap(), &digest(&b)).unwrap()
}

/// Calls run on one single-threaded tokio runtime, as on one of the daemon's workers.
fn executor() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn grant(tool: &LoadedTool, allow: AllowList) -> Grant {
    let call = CallRequest {
        tool: tool.description().name.clone(),
        digest: tool.digest().into(),
        resources: allow.resources(),
    };
    match bx_broker::decide(allow.policy(), Label::CLEAN, &call) {
        Decision::Allow(g) => g,
        other => panic!("the allow-list refused its own resources: {other:?}"),
    }
}

fn row(case: &str, s: &Stats, baseline: &str, b: &Stats) {
    let ratio = s.median.as_secs_f64() / b.median.as_secs_f64();
    println!(
        "| {case} | {} | {} | {baseline} | {} | {} | {ratio:.2}× |",
        fmt(s.median),
        fmt(s.p90),
        fmt(b.median),
        fmt(b.p90)
    );
}

/// `BX_BENCH=read` (or `call`, `install`) runs one case alone, for profiling.
fn wanted(case: &str) -> bool {
    std::env::var("BX_BENCH").map_or(true, |w| w == case)
}

fn main() {
    let rt = Runtime::new(Limits::default()).unwrap();
    println!("bx runtime benchmark (wasmtime 48, pooling allocator, epoch interruption)\n");
    println!("| case | median | p90 | baseline | baseline median | baseline p90 | ratio |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");

    // 1. A fresh instance plus a trivial call, against the fresh instance alone.
    if wanted("call") {
        bench_call(&rt);
    }
    if wanted("read") {
        bench_read(&rt);
    }
    if wanted("install") {
        bench_install(&rt);
    }
    if wanted("wasi") {
        bench_standard(&rt);
    }
    if wanted("secrets") {
        bench_secrets(&rt);
    }
    if wanted("py") {
        bench_py(&rt);
    }
    println!(
        "\ntargets: fresh instance + trivial call <= 30 µs median; fs.read 1 MiB <= 3× std::fs::read; py.run instance from the cache < 20 ms"
    );
    println!(
        "standard WASI components (`make components`): their rows compare the same work through a bx:tool component"
    );
}

fn bench_call(rt: &Runtime) {
    let hostile = load(rt, "test_hostile");
    let args = r#"{"mode":"echo","text":"hi"}"#;
    let exec = executor();
    let call = measure(5000, || {
        let r = exec.block_on(rt.call(&hostile, grant(&hostile, AllowList::new()), args)).unwrap();
        assert!(matches!(r.result, Ok(Output::Text(_))));
    });
    let bare = measure(5000, || exec.block_on(rt.instantiate_only(&hostile)).unwrap());
    row("fresh instance + trivial call", &call, "instance alone", &bare);
}

fn bench_read(rt: &Runtime) {
    // 2. fs.read of 1 MiB through the component, against std::fs::read; and of 1 KiB, so
    //    that what grows with the size (the bytes copied into the guest and back, each
    //    checked as UTF-8) is told apart from what every call pays.
    let dir = tempfile::tempdir().unwrap();
    let line = "the quick brown fox jumps over the lazy dog 0123456789\n";
    let fs_read = load(rt, "fs_read");
    let allow = AllowList::new().read(dir.path().to_str().unwrap()).unwrap();
    let exec = executor();
    let mut by_size = Vec::new();
    for (size, label) in [(1usize << 20, "1 MiB"), (1 << 10, "1 KiB")] {
        let file = dir.path().join(format!("{size}.txt"));
        std::fs::write(&file, &line.repeat(size / line.len() + 1)[..size]).unwrap();
        let read_args = serde_json::json!({"path": file, "limit": size}).to_string();
        let via = measure(300, || {
            let r = exec
                .block_on(rt.call(&fs_read, grant(&fs_read, allow.clone()), &read_args))
                .unwrap();
            match r.result {
                Ok(Output::Text(t)) => assert_eq!(t.len(), size),
                other => panic!("{other:?}"),
            }
        });
        let native = measure(300, || assert_eq!(std::fs::read(&file).unwrap().len(), size));
        row(&format!("fs.read {label} via component"), &via, "std::fs::read", &native);
        by_size.push((via.median, native.median));
    }
    if let [(big, big_native), (small, small_native)] = by_size[..] {
        let grows = big.saturating_sub(small);
        let floor = big_native.saturating_sub(small_native);
        println!(
            "| fs.read: what grows from 1 KiB to 1 MiB | {} | | std::fs::read, the same | {} | | {:.2}× |",
            fmt(grows),
            fmt(floor),
            grows.as_secs_f64() / floor.as_secs_f64()
        );
    }
}

fn bench_install(rt: &Runtime) {
    // 3. Install cost per first-party tool: verify the digest, compile, write the
    //    precompiled artifact, describe; against loading it back from the cache.
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ComponentCache::new(cache_dir.path()).unwrap();
    for name in FIRST_PARTY {
        let b = bytes(name);
        let d = digest(&b);
        let hex = d.trim_start_matches("sha256:").to_owned();
        let install = measure(5, || {
            assert_eq!(digest(&b), d);
            let c = cache.compile(rt, &hex, &b).unwrap();
            rt.load_blocking(&c, &d).unwrap();
        });
        let cached = measure(20, || {
            let (c, _) = cache.load(rt, &hex, || unreachable!("cache miss")).unwrap();
            rt.load_blocking(&c, &d).unwrap();
        });
        row(
            &format!("install {name} ({} KiB)", b.len() / 1024),
            &install,
            "load from cache",
            &cached,
        );
    }
}

/// Function `export` of standard component `name` (built by `make components`), as a
/// tool whose parameter `path` (when `reads`) names a path it reads.
fn load_function(rt: &Runtime, name: &str, export: &str, reads: bool) -> LoadedTool {
    let path = components().join(format!("../../components/{name}.wasm"));
    let b = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make components`", path.display()));
    let resources = if reads {
        vec![bx_runtime::ResourceArg {
            arg: "path".into(),
            kind: bx_runtime::ResourceKind::PathRead,
        }]
    } else {
        Vec::new()
    };
    let spec = bx_runtime::FunctionSpec {
        export: export.into(),
        name: format!("{name}.{export}"),
        summary: String::new(),
        resources,
        statics: Vec::new(),
    };
    rt.load_function(&rt.compile(&b).unwrap(), &digest(&b), spec).unwrap()
}

fn bench_standard(rt: &Runtime) {
    // 4. A standard WASI component's trivial call (typed arguments converted from JSON,
    //    the result rendered back), against a bx:tool component's trivial call.
    let exec = executor();
    let describe =
        load_function(rt, "wasi-files", "bx-test:files/extra@0.1.0#describe-number", false);
    let args = r#"{"n": 7}"#;
    let standard = measure(5000, || {
        let r = exec.block_on(rt.call(&describe, grant(&describe, AllowList::new()), args));
        assert!(matches!(r.unwrap().result, Ok(Output::Json(_))));
    });
    let hostile = load(rt, "test_hostile");
    let echo = r#"{"mode":"echo","text":"hi"}"#;
    let own = measure(5000, || {
        let r = exec.block_on(rt.call(&hostile, grant(&hostile, AllowList::new()), echo));
        assert!(matches!(r.unwrap().result, Ok(Output::Text(_))));
    });
    row("WASI component, trivial call", &standard, "bx:tool trivial call", &own);

    // 5. 1 MiB read through wasi:filesystem (std::fs in the guest), through bx:host/fs
    //    (fs.read) and through std::fs::read in the host.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one-mib.txt");
    let line = "the quick brown fox jumps over the lazy dog 0123456789\n";
    std::fs::write(&file, &line.repeat((1 << 20) / line.len() + 1)[..1 << 20]).unwrap();
    let allow = AllowList::new().read(dir.path().to_str().unwrap()).unwrap();
    let read_file = load_function(rt, "wasi-files", "read-file", true);
    let args = serde_json::json!({"path": file}).to_string();
    let wasi = measure(300, || {
        let r = exec.block_on(rt.call(&read_file, grant(&read_file, allow.clone()), &args));
        assert!(matches!(r.unwrap().result, Ok(Output::Text(t)) if t.len() == 1 << 20));
    });
    let fs_read = load(rt, "fs_read");
    let read_args = serde_json::json!({"path": file, "limit": 1 << 20}).to_string();
    let host_fs = measure(300, || {
        let r = exec.block_on(rt.call(&fs_read, grant(&fs_read, allow.clone()), &read_args));
        assert!(matches!(r.unwrap().result, Ok(Output::Text(t)) if t.len() == 1 << 20));
    });
    let native = measure(300, || assert_eq!(std::fs::read(&file).unwrap().len(), 1 << 20));
    row("1 MiB via wasi:filesystem", &wasi, "via bx:host/fs (fs.read)", &host_fs);
    row("1 MiB via wasi:filesystem", &wasi, "std::fs::read", &native);
}

/// A loopback server that answers every request with a short 200, for as long as the
/// bench runs.
fn tiny_server() -> u16 {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 2 {
                line.clear();
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    port
}

fn bench_secrets(rt: &Runtime) {
    // 6. A granted fetch to a loopback server with one secret bound (the header put in,
    //    the request and the response scanned), against the same fetch with none.
    use bx_broker::{Policy, Resource};
    use bx_runtime::Secrets;
    let exec = executor();
    let port = tiny_server();
    let hostile = load(rt, "test_hostile");
    let grant_of = |binding: &str| {
        let text = format!(
            "[[grant]]\ntool = \"test.hostile\"\nhost = \"127.0.0.1:{port}\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\n{binding}"
        );
        let call = CallRequest {
            tool: "test.hostile".into(),
            digest: hostile.digest().into(),
            resources: vec![Resource::Url(format!("http://127.0.0.1:{port}/"))],
        };
        match bx_broker::decide(&Policy::parse("p.toml", &text).unwrap(), Label::CLEAN, &call) {
            Decision::Allow(g) => g,
            other => panic!("{other:?}"),
        }
    };
    let bound = grant_of(&format!(
        "[[secret]]\nname = \"gh\"\ntool = \"test.hostile\"\nhost = \"127.0.0.1:{port}\"\nheader.authorization = \"Bearer {{secret:gh}}\"\n"
    ));
    let plain = grant_of("");
    let value = "ghp_0123456789abcdefABCDEF0123456789abcd";
    let secrets = Secrets::new([("gh".to_owned(), value.to_owned())]).unwrap();
    let args = format!(r#"{{"mode":"send","url":"http://127.0.0.1:{port}/"}}"#);
    let with = measure(300, || {
        let (r, used) = exec.block_on(rt.call_with(&hostile, bound.clone(), &args, &secrets));
        assert!(matches!(r.unwrap().result, Ok(Output::Json(_))));
        assert_eq!(used.used.len(), 1);
    });
    let without = measure(300, || {
        let (r, _) = exec.block_on(rt.call_with(&hostile, plain.clone(), &args, &Secrets::none()));
        assert!(matches!(r.unwrap().result, Ok(Output::Json(_))));
    });
    row("fetch, one secret bound", &with, "fetch, no secret", &without);

    // 7. The leak guard on one body, each way (scan a request, redact a response),
    //    against copying the body.
    for (size, label, n) in [(1 << 10, "1 KiB", 20_000), (1 << 20, "1 MiB", 100)] {
        let line = "the quick brown fox jumps over the lazy dog 0123456789\n";
        let body = line.repeat(size / line.len() + 1)[..size].to_owned();
        let scan = measure(n, || assert!(secrets.find(body.as_bytes()).is_empty()));
        let redact = measure(n, || assert_eq!(secrets.redact_text(&body).0.len(), size));
        let copy =
            measure(n, || assert_eq!(std::hint::black_box(body.as_bytes().to_vec()).len(), size));
        row(&format!("leak guard, scan a {label} request"), &scan, "copy the body", &copy);
        row(&format!("leak guard, redact a {label} response"), &redact, "copy the body", &copy);
    }
}

fn bench_py(rt: &Runtime) {
    // 8. py.run (`make tools`): `print(1)` on a loaded tool (a fresh instance of CPython's
    //    snapshot per call), the instance alone, and cold (the precompiled cache loaded,
    //    then the call), beside a bx:tool component's trivial call.
    let path = components().join("../../py/py_run.wasm");
    let b = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make tools`", path.display()));
    let d = digest(&b);
    let spec = || bx_runtime::FunctionSpec {
        export: "run".into(),
        name: "py.run".into(),
        summary: String::new(),
        resources: Vec::new(),
        statics: Vec::new(),
    };
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ComponentCache::new(cache_dir.path()).unwrap();
    let hex = d.trim_start_matches("sha256:").to_owned();
    let compiled = std::time::Instant::now();
    let component = cache.compile(rt, &hex, &b).unwrap();
    let compile = compiled.elapsed();
    let py = rt.load_function(&component, &d, spec()).unwrap();
    let exec = executor();
    let args = r#"{"code": "print(1)"}"#;
    let warm = measure(100, || {
        let r = exec.block_on(rt.call(&py, grant(&py, AllowList::new()), args)).unwrap();
        assert!(matches!(r.result, Ok(Output::Text(t)) if t == "1\n"));
    });
    let instance = measure(100, || exec.block_on(rt.instantiate_only(&py)).unwrap());
    let cold = measure(10, || {
        let (c, _) = cache.load(rt, &hex, || unreachable!("cache miss")).unwrap();
        let py = rt.load_function(&c, &d, spec()).unwrap();
        let r = exec.block_on(rt.call(&py, grant(&py, AllowList::new()), args)).unwrap();
        assert!(matches!(r.result, Ok(Output::Text(_))));
    });
    let hostile = load(rt, "test_hostile");
    let echo = r#"{"mode":"echo","text":"hi"}"#;
    let own = measure(1000, || {
        let r = exec.block_on(rt.call(&hostile, grant(&hostile, AllowList::new()), echo));
        assert!(matches!(r.unwrap().result, Ok(Output::Text(_))));
    });
    row("py.run print(1)", &warm, "bx:tool trivial call", &own);
    row("py.run instance alone", &instance, "bx:tool trivial call", &own);
    row("py.run cold (cache load + call)", &cold, "py.run print(1)", &warm);
    println!(
        "| py.run compile ({} MiB, once per digest) | {:.2} s | | | | | |",
        b.len() >> 20,
        compile.as_secs_f64()
    );
}
