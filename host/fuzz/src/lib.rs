//! Mutation fuzzing of bx's parsers on stable Rust: every input bx reads from a file, a
//! socket or a server goes through one of the [targets](TARGETS), seeded from
//! `fixtures/` and mutated by [`Mutator`]. A target fails when its parser panics, takes
//! longer than [`SLOW`] on one input, or (checked by the driver, `make fuzz`) runs the
//! process out of the memory it is given. See `docs/fuzzing.md`.
//!
//! Why not cargo-fuzz or AFL: both need nightly Rust or an instrumented toolchain, and
//! bx builds on stable. This fuzzer is blind (no coverage feedback); it makes up for
//! part of that with each format's tokens (a dictionary) and mutations that repeat,
//! splice and nest, the ones that found the earlier bugs (a byte-order mark in a stream,
//! deep dotted keys, millions of blank lines).

use std::io::Cursor;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod http;

/// One input taking more CPU time than this is a finding (a parser that is quadratic or
/// hangs).
pub const SLOW: Duration = Duration::from_secs(2);
/// The largest input made: above the parsers' own bounds where they have one (so those
/// bounds are exercised), small enough to keep a run fast.
pub const MAX_INPUT: usize = 1 << 20;

/// A parser under test.
pub struct Target {
    /// Its name on the command line.
    pub name: &'static str,
    /// Where its seeds are, relative to the repository's `fixtures/`, and which files
    /// (by how their names end).
    pub seeds: &'static [(&'static str, &'static str)],
    /// Tokens of its format, spliced in by the mutator.
    pub dictionary: &'static [&'static [u8]],
    /// Runs the parser on one input. Errors are expected; only a panic is a finding.
    pub run: fn(&[u8], &Scratch),
}

/// A scratch directory for targets that read files (audit day files, transcripts), and
/// what a target keeps between inputs: the servers of `mcp_http`, and the CPU time an
/// input cost outside this thread.
pub struct Scratch {
    /// Dropped first: the servers stop before their state directory goes.
    served: std::sync::OnceLock<anyhow::Result<http::Served>>,
    /// CPU time spent outside this thread on the current input, in nanoseconds.
    spent: std::sync::atomic::AtomicU64,
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A fresh scratch directory, on tmpfs when there is one.
    pub fn new() -> anyhow::Result<Scratch> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::tempdir_in(shm)? } else { tempfile::tempdir()? };
        Ok(Scratch { served: std::sync::OnceLock::new(), spent: 0.into(), dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Counts `cpu`, spent by another process on the current input, in its cost.
    pub fn spend(&self, cpu: Duration) {
        let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
        self.spent.fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
    }

    /// The servers of `mcp_http`, started on first use; a failure to start is a panic
    /// on every input (so the run stops on it, with the reason).
    fn served(&self) -> &http::Served {
        let served = self.served.get_or_init(|| http::Served::start(self.path()));
        match served {
            Ok(s) => s,
            Err(e) => panic!("mcp_http: the servers did not start: {e:#}"),
        }
    }
}

const OCI: &[&[u8]] = &[
    b"\"schemaVersion\": 2",
    b"\"mediaType\": \"application/vnd.oci.image.manifest.v1+json\"",
    b"\"mediaType\": \"application/vnd.oci.image.index.v1+json\"",
    b"\"mediaType\": \"application/vnd.wasm.config.v0+json\"",
    b"\"mediaType\": \"application/wasm\"",
    b"\"layers\": [",
    b"\"annotations\": {",
    b"\"size\": 18446744073709551615",
    b"\"digest\": \"sha256:",
    b"oci://127.0.0.1:5000/a/b:1@sha256:",
    b"[",
    b"{",
    b"\\u0000",
];

const MANIFEST: &[&[u8]] = &[
    b"[reach]\n",
    b"[functions.read-file]\n",
    b"read = [\"path\"]\n",
    b"hosts = [\"api.weather.gov:443\"]\n",
    b"permissions:\n",
    b"  storage:\n",
    b"    allow:\n",
    b"      - uri: fs:///srv/**\n",
    b"        access: [read, write]\n",
    b"  network:\n",
    b"      - host: example.com\n",
    b"      - cidr: 10.0.0.0/8\n",
    b"&a ",
    b"*a",
    b"!!binary ",
    b"- ",
    b": ",
];

const SCOPE: &[&[u8]] =
    &[b"path", b"path=", b"/home/owner", b"/..", b"args", b"host", b"call", b"\n", b" ", b"\x00"];

const TOML: &[&[u8]] = &[
    b"[[grant]]\n",
    b"[[deny]]\n",
    b"[[example]]\n",
    b"[inference]\n",
    b"[loop]\n",
    b"[audit]\n",
    b"[tools]\n",
    b"tool = \"fs.read\"\n",
    b"path = \"{workspace}\"\n",
    b"name = \".env\"\n",
    b"host = \"*\"\n",
    b"when_clean = \"ask\"\n",
    b"a.b.c.d.e.f.g.h = 1\n",
    b"= ",
    b"\"\"\"",
    b"'''",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\\u0000",
    b"\xef\xbb\xbf",
    b"\r\n",
    b"\n",
    b"#",
    b"1979-05-27T07:32:00Z",
    b"inf",
    b"nan",
    b"-0",
    b"0x7fffffffffffffff",
    b"18446744073709551616",
];

const JSON: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\\"",
    b"\\u0000",
    b"\\ud800",
    b"\\u202e",
    b":",
    b",",
    b"null",
    b"true",
    b"1e999",
    b"-0",
    b"18446744073709551616",
    b"\"type\":",
    b"\"msg\":",
    b"\"v\":1,",
    b"\"id\":",
    b"\"session\":\"",
    b"\"tool_calls\":[",
    b"\"arguments\":\"",
    b"\xef\xbb\xbf",
    b"\xff\xfe",
    b"\n",
];

const SSE: &[&[u8]] = &[
    b"data: ",
    b"data:",
    b"event: ",
    b"id: ",
    b"retry: ",
    b": comment\n",
    b"\n\n",
    b"\r\n",
    b"\r",
    b"[DONE]",
    b"{\"choices\":[{\"index\":0,\"delta\":{",
    b"\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"fs.read\",\"arguments\":\"",
    b"\"reasoning_content\":\"",
    b"\"content\":\"",
    b"\"finish_reason\":\"length\"",
    b"\"error\":{\"message\":\"",
    b"\"usage\":{",
    b"\"timings\":{",
    b"\xef\xbb\xbf",
    b"\xc3",
    b"\xf0\x9f",
];

const AUDIT: &[&[u8]] = &[
    b"\n",
    b"{\"seq\":",
    b"\"time\":\"2026-11-29T23:58:59.000Z\"",
    b"\"time\":\"2026-11-29T08:256:31Z\"",
    b"\"prev\":\"",
    b"0000000000000000000000000000000000000000000000000000000000000000",
    b"\"kind\":\"request\"",
    b"\"kind\":\"result\"",
    b"\"kind\":\"recovered\"",
    b"\"kind\":\"break\"",
    b"\"fields\":{",
    b"\"session\":\"s1\"",
    b"\"call\":\"c1\"",
    b"18446744073709551615",
    b"\xef\xbb\xbf",
    b"\"",
    b"}",
];

const LINES: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"\r",
    b"\n\n\n\n",
    b"{\"jsonrpc\":\"2.0\",",
    b"\"id\":",
    b"\"method\":\"tools/call\"",
    b"\"params\":{",
    b"\xef\xbb\xbf",
    b"\xff\xfe",
    b"\xc3",
    b"\xf0\x9f",
    b"\"",
    b"}",
];

/// The line limits `mcp_lines` runs under, one picked per input: small ones, so an input
/// of at most [`MAX_INPUT`] crosses them, and `bx mcp`'s own (8 MiB).
const LINE_LIMITS: &[usize] = &[0, 1, 16, 100, 4096, 8 << 20];

/// What `mcp_lines` expects of [`bx_protocol::lines::LineReader`], written out plainly:
/// a line ends at `\n`; one longer than `max` is one `TooLong` (the limit counts a `\r`
/// before the `\n`); else a `\r` before the `\n` is dropped and the rest must be UTF-8;
/// the input's last line may lack its `\n`, and is nothing when empty or a lone `\r`
/// within the limit.
fn expected_lines(input: &[u8], max: usize) -> Vec<Result<String, &'static str>> {
    let one = |line: &[u8]| {
        if line.len() > max {
            return Err("too long");
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        std::str::from_utf8(line).map(str::to_owned).map_err(|_| "not utf-8")
    };
    let mut pieces: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    let last = pieces.pop().unwrap_or_default();
    let mut out: Vec<_> = pieces.into_iter().map(one).collect();
    // The length is checked first: under a limit of 0 a lone `\r` is too long.
    if !last.is_empty() && (last != b"\r" || last.len() > max) {
        out.push(one(last));
    }
    out
}

/// A pipe as the line reader sees one: the input in reads of varying sizes (from one
/// byte to more than the reader asks for), some interrupted.
struct Pipe<'a> {
    rest: &'a [u8],
    n: usize,
}

impl std::io::Read for Pipe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.n += 1;
        if self.n.is_multiple_of(5) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let size = [1, 3, 4096, 1 << 20][self.n % 4].min(buf.len()).min(self.rest.len());
        let (now, rest) = self.rest.split_at(size);
        buf[..size].copy_from_slice(now);
        self.rest = rest;
        Ok(size)
    }
}

const HTTP: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b"POST /mcp HTTP/1.1\r\n",
    b"GET /mcp HTTP/1.1\r\n",
    b"DELETE /mcp HTTP/1.1\r\n",
    b"OPTIONS * HTTP/1.1\r\n",
    b"HTTP/1.0",
    b"HTTP/2.0",
    b"Host: {HOST}\r\n",
    b"Host: evil.example\r\n",
    b"Host: 127.0.0.1\r\n",
    b"Authorization: Bearer {TOKEN}\r\n",
    b"Authorization: Bearer \r\n",
    b"authorization: bearer {TOKEN}\r\n",
    b"Mcp-Session-Id: {SESSION}\r\n",
    b"Mcp-Protocol-Version: 2025-06-18\r\n",
    b"Origin: http://evil.example\r\n",
    b"Origin: null\r\n",
    b"Content-Type: application/json\r\n",
    b"Accept: application/json, text/event-stream\r\n",
    b"Accept: text/event-stream\r\n",
    b"Content-Length: 0\r\n",
    b"Content-Length: 99999999\r\n",
    b"Content-Length: -1\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Expect: 100-continue\r\n",
    b"Connection: close\r\n",
    b"Connection: keep-alive\r\n",
    b"Upgrade: h2c\r\n",
    b"0\r\n\r\n",
    b"ffffffffffffffff\r\n",
    b"{TOKEN}",
    b"{SESSION}",
    b"\"jsonrpc\":\"2.0\"",
    b"\"method\":\"tools/call\"",
    b"\"method\":\"tools/list\"",
    b"\"method\":\"initialize\"",
    b"\"method\":\"notifications/cancelled\"",
    b"\"method\":\"resources/list\"",
    b"\"id\":null",
    b"\"id\":1e999",
    b"\"params\":{\"name\":\"fs.read\",\"arguments\":{\"path\":\"/etc/passwd\"}}",
    b"[",
    b"]",
    b"\\u0000",
];

const INSTALLED: &[&[u8]] = &[
    b"{",
    b"}",
    b"\"epoch\":",
    b"\"tools\":{",
    b"\"fs.read\":{",
    b"\"digest\":\"sha256:",
    b"\"size\":",
    b"\"resources\":[\"path-read\"]",
    b"18446744073709551616",
    b"-1",
    b"1e999",
    b"\\u0000",
    b"\\ud800",
    b"\xef\xbb\xbf",
    b",",
    b"\n",
];

const NOTE: &[&[u8]] = &[
    b"\n",
    b"\n\n",
    b"\xe2\x80\x94 ",
    b"bx.test/fuzz",
    b"bx.test/fuzz ",
    b"ES0KY",
    b"18446744073709551615",
    b"18446744073709551616",
    b"0",
    b"=",
    b"+",
    b"/",
    b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    b"\r\n",
    b"\xef\xbb\xbf",
];

/// The log the `ledger` target's checkpoints are read beside (`bx tool run` three times,
/// in two sessions).
const LEDGER_LOG: &[u8] = include_bytes!("../../../fixtures/ledger/log.jsonl");

/// The verifier key of the signed checkpoints in `fixtures/anchor/`, so the parser gets
/// past the signature check on the seeds (and on mutations that leave the signed text
/// alone).
const NOTE_VERIFIER: &str = include_str!("../../../fixtures/anchor/verifier.pub");

/// The WIT-to-JSON conversions of the standard test components' functions (built by
/// `make tools`), made once per process.
fn wit_conversions() -> &'static [bx_runtime::Conversions] {
    static MADE: std::sync::OnceLock<Vec<bx_runtime::Conversions>> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        ["bx_tool_test_wasi_files", "bx_tool_test_wasi_hostile"]
            .iter()
            .map(|name| {
                let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("../../tools/target/wasm32-wasip2/release/{name}.wasm"));
                let wasm = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}; run `make tools`", path.display()));
                bx_runtime::Conversions::of_component(&wasm)
                    .unwrap_or_else(|e| panic!("{name}: {e}"))
            })
            .collect()
    })
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "wit_json",
        seeds: &[("wit-json", ".json")],
        dictionary: JSON,
        // A call's JSON arguments made into a standard component's WIT values for every
        // function it exports, and the values back into JSON, as a call's result is.
        run: |bytes, _| {
            if let Ok(args) = serde_json::from_slice::<serde_json::Value>(bytes) {
                for conversions in wit_conversions() {
                    let _ = conversions.run(&args);
                }
            }
        },
    },
    Target {
        name: "manifest",
        seeds: &[
            ("manifests", ".toml"),
            ("manifests", ".yaml"),
            ("manifests/regressions", ".yaml"),
        ],
        dictionary: MANIFEST,
        // Both forms of a component's manifest, as `bx tool install --manifest` reads
        // them: the same bytes as bx's TOML and as Wassette's policy.yaml.
        run: |bytes, scratch| {
            for name in ["m.toml", "m.yaml"] {
                let path = scratch.path().join(name);
                if std::fs::write(&path, bytes).is_ok() {
                    let _ = bx_store::Manifest::read(&path);
                }
            }
        },
    },
    Target {
        name: "upstream_manifest",
        seeds: &[("gateway", ".toml")],
        dictionary: TOML,
        // An upstream's manifest, and each label in it through the broker's parser.
        run: |bytes, _| {
            if let Ok(text) = std::str::from_utf8(bytes)
                && let Ok(m) = bx_gateway::UpstreamManifest::parse(Path::new("m.toml"), text)
            {
                for labels in m.tools.values() {
                    let _ = bx_broker::parse_label(&labels.result);
                    let _ = labels.sink.as_deref().map(bx_broker::parse_label);
                }
            }
        },
    },
    Target {
        name: "upstream",
        seeds: &[("gateway/answers", ".json")],
        dictionary: JSON,
        // What bx takes of an upstream's answers: `initialize` (its name line),
        // `tools/list` (each tool checked and pinned) and a call's result (its text).
        run: |bytes, _| {
            if let Ok(list) = serde_json::from_slice::<rmcp::model::ListToolsResult>(bytes) {
                let (listed, _) = bx_gateway::take_tools(list.tools);
                for tool in &listed {
                    let pin = tool.pin();
                    assert!(pin.description.len() <= bx_gateway::MAX_DESCRIPTION_BYTES);
                }
            }
            if let Ok(info) = serde_json::from_slice::<rmcp::model::ServerPeerInfo>(bytes) {
                assert!(bx_gateway::server_line(&info).len() <= 204);
            }
            if let Ok(result) = serde_json::from_slice::<rmcp::model::CallToolResult>(bytes) {
                let _ = bx_gateway::result_text(&result);
            }
        },
    },
    Target {
        name: "scope",
        seeds: &[("scopes", ".txt"), ("scopes/regressions", ".txt")],
        dictionary: SCOPE,
        // A scope as the owner types it, each line: what parses prints back as itself.
        run: |bytes, _| {
            for line in String::from_utf8_lossy(bytes).lines() {
                if let Ok(kind) = bx_broker::ScopeKind::parse(line) {
                    let again = bx_broker::ScopeKind::parse(&kind.to_string());
                    assert_eq!(again.ok(), Some(kind), "{line:?}");
                }
            }
        },
    },
    Target {
        name: "policy",
        seeds: &[("policy", ".toml")],
        dictionary: TOML,
        run: |bytes, _| {
            if let Ok(text) = std::str::from_utf8(bytes) {
                let _ = bx_broker::Policy::parse("policy.toml", text);
            }
        },
    },
    Target {
        name: "config",
        seeds: &[("config", ".toml")],
        dictionary: TOML,
        run: |bytes, _| {
            if let Ok(text) = std::str::from_utf8(bytes) {
                let _ = bx_state::Config::parse(Path::new("config.toml"), text);
            }
        },
    },
    Target {
        name: "wire",
        seeds: &[("wire", ".json")],
        dictionary: JSON,
        // A fixture is one envelope; as a frame it gets its 4-byte length (see `seed`).
        // What is read is written back as the same message (a JSON result as the
        // envelope's `output` included).
        run: |bytes, _| {
            if let Ok(envelope) = bx_protocol::decode(bytes)
                && let Ok(frame) = bx_protocol::encode(&envelope)
            {
                assert_eq!(bx_protocol::decode(&frame).ok(), Some(envelope), "written back");
            }
            let mut stream = Cursor::new(bytes);
            while let Ok(Some(_)) = bx_protocol::read_frame(&mut stream) {}
        },
    },
    Target {
        name: "sse",
        seeds: &[("sse", ".sse")],
        dictionary: SSE,
        run: |bytes, _| {
            let _ = bx_infer::parse_sse_bytes(bytes);
        },
    },
    Target {
        name: "audit",
        seeds: &[("audit/good", ".jsonl"), ("audit/torn", ".jsonl"), ("audit/forked", ".jsonl")],
        dictionary: AUDIT,
        run: |bytes, scratch| {
            let dir = scratch.path().join("audit");
            let _ = std::fs::remove_dir_all(&dir);
            if std::fs::create_dir_all(&dir).is_ok()
                && std::fs::write(dir.join("2026-11-29.jsonl"), bytes).is_ok()
            {
                let _ = bx_audit::verify(&dir);
                let _ = bx_audit::for_each_entry(&dir, |_, _| {});
            }
        },
    },
    Target {
        name: "installed",
        seeds: &[("store", ".json")],
        dictionary: INSTALLED,
        run: |bytes, scratch| {
            let path = scratch.path().join("installed.json");
            if std::fs::write(&path, bytes).is_ok() {
                let _ = bx_store::Installed::load(&path);
            }
        },
    },
    Target {
        name: "oci",
        seeds: &[("oci", ".json")],
        dictionary: OCI,
        run: |bytes, _| {
            if let Ok(manifest) = bx_store::oci::ImageManifest::parse(bytes) {
                let _ = manifest.component_layer();
            }
            let _ = bx_store::oci::Reference::parse(&String::from_utf8_lossy(bytes));
        },
    },
    Target {
        name: "checkpoint",
        seeds: &[("anchor", ".note")],
        dictionary: NOTE,
        run: |bytes, _| {
            let _ = bx_audit::open_note(bytes, NOTE_VERIFIER.trim());
        },
    },
    Target {
        name: "ledger",
        seeds: &[("ledger", ".json")],
        dictionary: JSON,
        // The ledger's checkpoint beside a real log: whatever it says, the open either
        // resumes at a record that is there or replays the whole log.
        run: |bytes, scratch| {
            let audit = scratch.path().join("audit");
            let log = audit.join("2026-12-02.jsonl");
            if !log.exists() {
                let _ = std::fs::create_dir_all(&audit);
                let _ = std::fs::write(&log, LEDGER_LOG);
            }
            let _ = std::fs::write(audit.join("ledger.json"), bytes);
            if let Ok(files) = bx_state::Sessions::open(&scratch.path().join("sessions"))
                && let Ok(ledger) = bx_agent::Ledger::open(files, &audit)
            {
                let _ = ledger.scopes("a");
            }
        },
    },
    Target {
        name: "transcript",
        seeds: &[("transcripts", ".jsonl")],
        dictionary: JSON,
        run: |bytes, scratch| {
            let path = scratch.path().join("s.transcript.jsonl");
            if std::fs::write(&path, bytes).is_ok()
                && let Ok(mut t) = bx_agent::Transcript::open(&path)
            {
                // Opening read-write appends the answers of dangling calls.
                let _ = t.close_dangling_calls();
            }
        },
    },
    Target {
        name: "mcp_http",
        seeds: &[("mcp-http", ".http")],
        dictionary: HTTP,
        // Raw requests to a real `bx mcp --http` (`http.rs` says what is a finding).
        run: http::run,
    },
    Target {
        name: "mcp_lines",
        seeds: &[("mcp", ".jsonl")],
        dictionary: LINES,
        // The stdio line reader of `bx mcp` against a plain reference, under a limit
        // picked by the input's length; what it holds stays within the limit and a read.
        run: |bytes, _| {
            use bx_protocol::lines::{LINE_READ_BYTES, LineError, LineReader};
            let max = LINE_LIMITS[bytes.len() % LINE_LIMITS.len()];
            let mut reader = LineReader::new(Pipe { rest: bytes, n: 0 }, max);
            let mut got = Vec::new();
            while let Some(line) = reader.next() {
                assert!(reader.buffered() <= max + LINE_READ_BYTES, "held {}", reader.buffered());
                got.push(match line {
                    Ok(text) => Ok(text),
                    Err(LineError::TooLong(n)) if n == max => Err("too long"),
                    Err(LineError::NotUtf8) => Err("not utf-8"),
                    Err(e) => panic!("{e}"),
                });
            }
            assert_eq!(got, expected_lines(bytes, max), "limit {max}");
        },
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The target's seeds from the repository's `fixtures/` (`fixtures` is that directory),
/// each as the bytes its parser reads.
pub fn seeds(target: &Target, fixtures: &Path) -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut out = Vec::new();
    for (dir, ends) in target.seeds {
        let dir = fixtures.join(dir);
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_str().is_some_and(|s| s.ends_with(ends)))
            .collect();
        paths.sort();
        for p in paths {
            let mut bytes = std::fs::read(&p)?;
            if target.name == "wire" {
                let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes).to_vec();
                bytes = (body.len() as u32).to_be_bytes().to_vec();
                bytes.extend_from_slice(&body);
            }
            out.push((p, bytes));
        }
    }
    anyhow::ensure!(!out.is_empty(), "no seeds for {} under {}", target.name, fixtures.display());
    Ok(out)
}

/// Makes inputs from seeds: byte flips and replacements, insertions of the format's
/// tokens and of bytes that break parsers, deletions, repeats of a slice (up to
/// [`MAX_INPUT`]), splices of two seeds, nesting, and cuts.
pub struct Mutator {
    rng: fastrand::Rng,
}

const BYTES: &[u8] = &[0, 0x7f, 0xff, 0xc0, 0x80, b'\n', b'\r', b'"', b'\\', b'{', b'[', 0x1b];

impl Mutator {
    /// A mutator whose choices follow from `seed`.
    pub fn new(seed: u64) -> Mutator {
        Mutator { rng: fastrand::Rng::with_seed(seed) }
    }

    /// One input: a seed (or two spliced), with one to eight mutations.
    pub fn make(&mut self, seeds: &[(PathBuf, Vec<u8>)], dictionary: &[&[u8]]) -> Vec<u8> {
        let mut input = seeds[self.rng.usize(..seeds.len())].1.clone();
        for _ in 0..self.rng.usize(1..=8) {
            self.mutate(&mut input, seeds, dictionary);
        }
        input.truncate(MAX_INPUT);
        input
    }

    fn mutate(&mut self, input: &mut Vec<u8>, seeds: &[(PathBuf, Vec<u8>)], dict: &[&[u8]]) {
        let r = &mut self.rng;
        match r.u8(..10) {
            0 if !input.is_empty() => {
                let i = r.usize(..input.len());
                input[i] ^= 1 << r.u8(..8);
            }
            1 if !input.is_empty() => {
                let i = r.usize(..input.len());
                input[i] = BYTES[r.usize(..BYTES.len())];
            }
            2 | 3 if !dict.is_empty() => {
                let token = dict[r.usize(..dict.len())];
                let at = r.usize(..=input.len());
                input.splice(at..at, token.iter().copied());
            }
            4 if !input.is_empty() => {
                let from = r.usize(..input.len());
                let to = (from + r.usize(1..=64)).min(input.len());
                input.drain(from..to);
            }
            5 if !input.is_empty() => {
                // Repeat a slice many times: deep nesting, long lines, many records.
                let from = r.usize(..input.len());
                let to = (from + r.usize(1..=32)).min(input.len());
                let piece = input[from..to].to_vec();
                let times = [2, 16, 256, 4096, 65536][r.usize(..5)];
                let room = MAX_INPUT.saturating_sub(input.len()) / piece.len().max(1);
                let times = times.min(room);
                let at = to;
                input.splice(at..at, piece.iter().copied().cycle().take(piece.len() * times));
            }
            6 => {
                // Splice: the head of this one, the tail of another seed.
                let other = &seeds[r.usize(..seeds.len())].1;
                let cut = r.usize(..=input.len());
                let from = r.usize(..=other.len());
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            7 if !input.is_empty() => {
                let at = r.usize(..input.len());
                input.truncate(at);
            }
            8 => {
                let at = r.usize(..=input.len());
                let n = r.usize(1..=16);
                let junk: Vec<u8> = (0..n).map(|_| r.u8(..)).collect();
                input.splice(at..at, junk);
            }
            _ => {
                // Nest: wrap a slice in brackets, many levels deep.
                let (open, close) = [(b'[', b']'), (b'{', b'}'), (b'"', b'"')][r.usize(..3)];
                let depth = [1, 8, 64, 1024][r.usize(..4)];
                let at = r.usize(..=input.len());
                input.splice(at..at, std::iter::repeat_n(open, depth));
                let end = (at + depth + r.usize(..=16)).min(input.len());
                input.splice(end..end, std::iter::repeat_n(close, depth));
            }
        }
    }
}

/// What one input did.
#[derive(Debug)]
pub enum Outcome {
    /// Parsed or refused, in time.
    Fine(Duration),
    /// The parser panicked, with this message.
    Panicked(String),
}

/// The CPU time this thread has used, from `/proc/thread-self/schedstat`: what an input
/// cost, whatever else the machine is doing (wall time on a busy 2-core machine made an
/// input of 0.2 s look like 2.1 s). `None` where there is no such file.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

/// Runs `target` on `input`, catching a panic. The time is the thread's CPU time where
/// the system reports it, else wall time.
pub fn run_one(target: &Target, input: &[u8], scratch: &Scratch) -> Outcome {
    let started = Instant::now();
    let cpu = thread_cpu();
    scratch.spent.store(0, std::sync::atomic::Ordering::Relaxed);
    match std::panic::catch_unwind(AssertUnwindSafe(|| (target.run)(input, scratch))) {
        Ok(()) => Outcome::Fine(
            match (cpu, thread_cpu()) {
                (Some(before), Some(after)) => after.saturating_sub(before),
                _ => started.elapsed(),
            } + Duration::from_nanos(scratch.spent.load(std::sync::atomic::Ordering::Relaxed)),
        ),
        Err(e) => Outcome::Panicked(
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
    }

    /// Every target has seeds, runs them, and runs a few hundred mutations of them
    /// without a finding (the short form of `make fuzz`, so the targets stay alive).
    #[test]
    fn every_target_runs_its_seeds_and_mutations() {
        let scratch = Scratch::new().unwrap();
        for t in TARGETS {
            let seeds = seeds(t, &fixtures()).unwrap();
            let mut m = Mutator::new(7);
            let inputs = seeds
                .iter()
                .map(|(_, b)| b.clone())
                .chain((0..300).map(|_| m.make(&seeds, t.dictionary)));
            for input in inputs {
                match run_one(t, &input, &scratch) {
                    Outcome::Fine(_) => {}
                    Outcome::Panicked(why) => {
                        panic!("{}: {why} on {:?}", t.name, String::from_utf8_lossy(&input))
                    }
                }
            }
        }
    }

    /// The seeds are inputs the parsers accept, so mutations start from the inside of
    /// each format rather than from its front door.
    #[test]
    fn the_seeds_parse() {
        let dir = fixtures();
        let text = std::fs::read_to_string(dir.join("policy/example.toml")).unwrap();
        assert!(bx_broker::Policy::parse("example.toml", &text).is_ok());
        for (path, bytes) in seeds(target("wire").unwrap(), &dir).unwrap() {
            assert!(bx_protocol::decode(&bytes).is_ok(), "{}", path.display());
        }
        let scratch = Scratch::new().unwrap();
        let path = scratch.path().join("t.jsonl");
        std::fs::copy(dir.join("transcripts/session.transcript.jsonl"), &path).unwrap();
        assert_eq!(bx_agent::Transcript::open(&path).unwrap().messages().len(), 7);
        for (path, bytes) in seeds(target("mcp_lines").unwrap(), &dir).unwrap() {
            let lines = bx_protocol::lines::LineReader::new(&bytes[..], 8 << 20);
            assert!(lines.filter(Result::is_ok).count() >= 3, "{}", path.display());
        }
        let sse = seeds(target("sse").unwrap(), &dir).unwrap();
        assert!(sse.iter().any(|(_, b)| bx_infer::parse_sse_bytes(b).is_ok()));
        let installed = bx_store::Installed::load(&dir.join("store/installed.json")).unwrap();
        assert_eq!((installed.epoch, installed.tools.len()), (3, 2));
        // The seed is byte for byte what bx writes.
        installed.save(&scratch.path().join("installed.json")).unwrap();
        assert_eq!(
            std::fs::read(scratch.path().join("installed.json")).unwrap(),
            std::fs::read(dir.join("store/installed.json")).unwrap()
        );
        for (path, bytes) in seeds(target("oci").unwrap(), &dir).unwrap() {
            let manifest = bx_store::oci::ImageManifest::parse(&bytes).unwrap();
            let wasm = manifest.component_layer().is_ok();
            assert_eq!(wasm, !path.ends_with("skopeo-signature.json"), "{}", path.display());
        }
        let sizes: Vec<u64> = seeds(target("checkpoint").unwrap(), &dir)
            .unwrap()
            .iter()
            .map(|(_, b)| bx_audit::open_note(b, NOTE_VERIFIER.trim()).unwrap().size)
            .collect();
        assert_eq!(sizes, [1, 7]);
        // The checkpoint seed resumes at its record of the seed log.
        let audit = scratch.path().join("audit");
        std::fs::create_dir_all(&audit).unwrap();
        std::fs::write(audit.join("2026-12-02.jsonl"), LEDGER_LOG).unwrap();
        std::fs::copy(dir.join("ledger/ledger.json"), audit.join("ledger.json")).unwrap();
        let files = bx_state::Sessions::open(&scratch.path().join("sessions")).unwrap();
        let ledger = bx_agent::Ledger::open(files, &audit).unwrap();
        assert_eq!(*ledger.replayed(), bx_agent::Replayed::After { seq: 7, records: 3 });
        for (path, _) in seeds(target("manifest").unwrap(), &dir).unwrap() {
            // (A regression seed is the input that found a bug: refused now, quickly.)
            let regression = path.parent().is_some_and(|p| p.ends_with("regressions"));
            assert_eq!(bx_store::Manifest::read(&path).is_ok(), !regression, "{}", path.display());
        }
        for (path, bytes) in seeds(target("upstream_manifest").unwrap(), &dir).unwrap() {
            let text = String::from_utf8(bytes).unwrap();
            let m = bx_gateway::UpstreamManifest::parse(&path, &text).unwrap();
            assert!(!m.tools.is_empty(), "{}", path.display());
        }
        let list = std::fs::read(dir.join("gateway/answers/tools-list.json")).unwrap();
        let list: rmcp::model::ListToolsResult = serde_json::from_slice(&list).unwrap();
        let (tools, problems) = bx_gateway::take_tools(list.tools);
        assert_eq!((tools.len(), problems.len()), (4, 0));
        let call = std::fs::read(dir.join("gateway/answers/call-result.json")).unwrap();
        let call: rmcp::model::CallToolResult = serde_json::from_slice(&call).unwrap();
        assert!(bx_gateway::result_text(&call).contains("Broken link"));
        // Each arguments seed fits at least one of the test components' functions.
        for (path, bytes) in seeds(target("wit_json").unwrap(), &dir).unwrap() {
            let args: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let fits: usize = wit_conversions().iter().map(|c| c.run(&args)).sum();
            assert!(fits > 0, "{}", path.display());
        }
        for (path, bytes) in seeds(target("scope").unwrap(), &dir).unwrap() {
            let text = String::from_utf8_lossy(&bytes);
            let regression = path.parent().is_some_and(|p| p.ends_with("regressions"));
            let parsed = bx_broker::ScopeKind::parse(text.trim()).is_ok();
            assert_eq!(parsed, !regression, "{}", path.display());
        }
    }

    /// The mutator reaches the sizes and depths that found bugs before.
    #[test]
    fn mutations_grow_nest_and_stay_bounded() {
        let seeds = vec![(PathBuf::from("s"), b"a = 1\n[t]\n".to_vec())];
        let mut m = Mutator::new(3);
        let made: Vec<Vec<u8>> = (0..2000).map(|_| m.make(&seeds, TOML)).collect();
        assert!(made.iter().all(|i| i.len() <= MAX_INPUT));
        assert!(made.iter().any(|i| i.len() > 64 << 10), "no large input");
        assert!(made.iter().any(|i| i.windows(64).any(|w| w.iter().all(|&b| b == b'['))));
        assert!(
            made.iter()
                .any(|i| i.starts_with(b"\xef\xbb\xbf")
                    || i.windows(3).any(|w| w == b"\xef\xbb\xbf"))
        );
    }
}
