//! `test.hostile`: a misbehaving tool for the runtime's tests and benchmarks. Each mode
//! breaks one limit on purpose, or calls a host function directly with whatever it is
//! given, declaring no resources, so the host's own per-operation checks are what stand
//! in its way. `echo` is the trivial call the benchmark times.

use std::io::Write as _;

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error, http, json_output};

struct Hostile;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, tag = "mode", rename_all = "kebab-case")]
enum Args {
    /// Returns its argument.
    Echo { text: String },
    /// Loops forever.
    Spin,
    /// Sleeps `ms` milliseconds in WASI (a host call the guest waits in), then returns.
    Sleep { ms: u64 },
    /// Fails with an error text of `bytes` bytes.
    BigError { bytes: usize },
    /// Allocates 1 MiB blocks and keeps them, without end.
    Alloc,
    /// Writes `bytes` to stdout in 64 KiB chunks.
    Stdout { bytes: u64 },
    /// Returns an output of `bytes` bytes.
    BigOutput { bytes: usize },
    /// Makes `count` host calls (stat of a path outside any grant).
    HostCalls { count: u64 },
    /// Reads a whole file (up to 4 MiB) through the host, no questions asked.
    Read { path: String },
    /// Writes `content` (overwrite) through the host.
    Write { path: String, content: String },
    /// Lists a directory through the host.
    List { path: String },
    /// Stats a path through the host.
    Stat { path: String },
    /// Makes a directory through the host.
    Mkdir { path: String },
    /// Sends a GET through the host.
    Get { url: String },
    /// Sends a request through the host, and returns the request as the tool built it
    /// and the response as the tool received it.
    Send {
        url: String,
        #[serde(default)]
        method: Option<String>,
        #[serde(default)]
        headers: Vec<(String, String)>,
        #[serde(default)]
        body: Option<String>,
    },
    /// The value of an environment variable, or null.
    Env { name: String },
    /// Reports the ambient authority std can find: environment, arguments, and what
    /// plain `std::fs` reaches at `path`.
    Ambient { path: String },
}

fn kind(k: fs::EntryKind) -> &'static str {
    match k {
        fs::EntryKind::File => "file",
        fs::EntryKind::Directory => "dir",
        fs::EntryKind::Symlink => "symlink",
        fs::EntryKind::Other => "other",
    }
}

impl Tool for Hostile {
    const NAME: &'static str = "test.hostile";
    const SUMMARY: &'static str = "Test-only: breaks runtime limits and calls the host directly.";
    const SCHEMA: &'static str =
        r#"{"type":"object","properties":{"mode":{"type":"string"}},"required":["mode"]}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[];

    fn run(args: &str) -> Result<Output, CallError> {
        match bx_tool_sdk::parse_args(args)? {
            Args::Echo { text } => Ok(Output::Text(text)),
            Args::Spin => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Args::Sleep { ms } => {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(Output::Text(format!("slept {ms} ms")))
            }
            Args::BigError { bytes } => Err(CallError::Failed("e".repeat(bytes))),
            Args::Alloc => {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                loop {
                    kept.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&kept);
                }
            }
            Args::Stdout { bytes } => {
                let chunk = vec![b'x'; 64 << 10];
                let mut out = std::io::stdout().lock();
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    out.write_all(&chunk[..n]).map_err(|e| CallError::Failed(e.to_string()))?;
                    left -= n as u64;
                }
                Ok(Output::Text(format!("wrote {bytes} bytes")))
            }
            Args::BigOutput { bytes } => Ok(Output::Text("y".repeat(bytes))),
            Args::HostCalls { count } => {
                for _ in 0..count {
                    let _ = std::hint::black_box(fs::stat("/nowhere"));
                }
                Ok(Output::Text(format!("made {count} host calls")))
            }
            Args::Read { path } => {
                let data = fs::read(&path, 0, 4 << 20).map_err(|e| host_error(&path, e))?;
                Ok(Output::Text(String::from_utf8_lossy(&data).into_owned()))
            }
            Args::Write { path, content } => {
                let n = fs::write(&path, content.as_bytes(), fs::WriteMode::Overwrite)
                    .map_err(|e| host_error(&path, e))?;
                Ok(Output::Text(format!("wrote {n}")))
            }
            Args::List { path } => {
                let entries = fs::list_dir(&path).map_err(|e| host_error(&path, e))?;
                let names: Vec<String> =
                    entries.into_iter().map(|e| format!("{} {}", kind(e.kind), e.name)).collect();
                json_output(&names)
            }
            Args::Stat { path } => {
                let m = fs::stat(&path).map_err(|e| host_error(&path, e))?;
                Ok(Output::Text(format!("{} {}", kind(m.kind), m.size)))
            }
            Args::Mkdir { path } => {
                fs::mkdir(&path).map_err(|e| host_error(&path, e))?;
                Ok(Output::Text("made".into()))
            }
            Args::Ambient { path } => {
                let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
                let args: Vec<String> = std::env::args().collect();
                let fs = match std::fs::read(&path) {
                    Ok(data) => format!("read {} bytes", data.len()),
                    Err(e) => format!("error: {e}"),
                };
                let dir = match std::fs::read_dir("/") {
                    Ok(entries) => format!("{} entries", entries.count()),
                    Err(e) => format!("error: {e}"),
                };
                json_output(&serde_json::json!({"env": env, "args": args, "fs": fs, "root": dir}))
            }
            Args::Send { url, method, headers, body } => {
                let req = http::Request {
                    method: method.unwrap_or_else(|| "GET".into()),
                    url: url.clone(),
                    headers: headers
                        .iter()
                        .map(|(name, value)| http::Header {
                            name: name.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    body: body.clone().map(String::into_bytes),
                };
                let resp = http::send(&req).map_err(|e| host_error(&url, e))?;
                let seen: Vec<(String, String)> =
                    resp.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect();
                json_output(&serde_json::json!({
                    "sent": {"url": url, "headers": headers, "body": body},
                    "status": resp.status,
                    "url": resp.url,
                    "headers": seen,
                    "body": String::from_utf8_lossy(&resp.body),
                }))
            }
            Args::Env { name } => {
                json_output(&serde_json::json!({ "value": std::env::var(name).ok() }))
            }
            Args::Get { url } => {
                let req = http::Request {
                    method: "GET".into(),
                    url: url.clone(),
                    headers: vec![],
                    body: None,
                };
                let resp = http::send(&req).map_err(|e| host_error(&url, e))?;
                Ok(Output::Text(format!("{} {}", resp.status, String::from_utf8_lossy(&resp.body))))
            }
        }
    }
}

bx_tool_sdk::tool!(Hostile);
