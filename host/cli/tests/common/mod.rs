//! Helpers to run `bx` against a state directory, to run `bx serve` and `bx chat` against
//! a real llama-server, and to look at what they left there. Shared by the integration
//! tests and the `verify-device` target, each of which uses part of them.
#![allow(dead_code, reason = "each target uses part of it")]

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use sha2::Digest as _;

#[path = "../../../infer/tests/suite/server.rs"]
pub mod server;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A built component's path; fails (never skips) when `make tools` has not run.
pub fn component(crate_name: &str) -> PathBuf {
    let path = repo().join(format!("tools/target/wasm32-wasip2/release/bx_tool_{crate_name}.wasm"));
    assert!(path.exists(), "{} is missing; run `make tools` before the tests", path.display());
    path
}

pub fn digest_file(path: &Path) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap())))
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `bx --state-dir STATE`, with no `BX_HOME` from the test's environment.
pub fn bx_command(state: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bx"));
    command.arg("--state-dir").arg(state).env_remove("BX_HOME");
    command
}

pub fn bx(state: &Path, args: &[&str]) -> Run {
    let out: Output = bx_command(state).args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Installs a built component by file and digest, asserting success.
pub fn install(state: &Path, crate_name: &str) -> String {
    let path = component(crate_name);
    let digest = digest_file(&path);
    let r = bx(state, &["tool", "install", path.to_str().unwrap(), "--digest", &digest]);
    assert_eq!(r.code, 0, "install {crate_name}: {}", r.stderr);
    digest
}

/// A state directory whose config points at `url`.
pub fn state(url: &str, loop_table: &str) -> tempfile::TempDir {
    state_with(url, "", loop_table)
}

/// [`state`] with more `[inference]` keys (lines of TOML).
pub fn state_with(url: &str, inference: &str, loop_table: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[inference]\nurl = \"{url}\"\ntemperature = 0.0\nseed = 7\nconnect_secs = 120\n{inference}\n\n[loop]\n{loop_table}\n"
        ),
    )
    .unwrap();
    dir
}

/// Each line `reader` gives, passed through `parse`, on a channel (read on a thread, so
/// a test can wait for a line with a timeout).
pub fn forward_lines<R, T>(reader: R, parse: fn(String) -> T) -> mpsc::Receiver<T>
where
    R: std::io::Read + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if tx.send(parse(line)).is_err() {
                break;
            }
        }
    });
    rx
}

/// `bx serve` in the background. Ready once it says it is listening (read from its
/// stderr, not guessed with a sleep).
pub struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Daemon {
    pub fn start(state: &Path) -> Daemon {
        Daemon::start_under(state, &[])
    }

    /// `bx serve` run by `wrapper` (a command that execs the rest of its arguments, such
    /// as `unshare -m`), so that the daemon is the wrapper's process.
    pub fn start_under(state: &Path, wrapper: &[&str]) -> Daemon {
        Daemon::start_with(state, wrapper, &[])
    }

    /// `bx serve ARGS…`, run by `wrapper` as [`Daemon::start_under`].
    pub fn start_with(state: &Path, wrapper: &[&str], args: &[&str]) -> Daemon {
        let mut command = match wrapper {
            [] => Command::new(env!("CARGO_BIN_EXE_bx")),
            [program, args @ ..] => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_bx"));
                c
            }
        };
        let mut child = command
            .arg("--state-dir")
            .arg(state)
            .arg("serve")
            .args(args)
            .env_remove("BX_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = forward_lines(child.stderr.take().unwrap(), |line| line);
        let mut d = Daemon { child, lines, log: Vec::new() };
        d.wait_for("listening on");
        d
    }

    pub fn wait_for(&mut self, what: &str) {
        self.line_with(what);
    }

    /// The next line of its stderr that holds `what` (those before it are kept in the
    /// log).
    pub fn line_with(&mut self, what: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(180)) {
                Ok(line) => {
                    let found = line.contains(what);
                    self.log.push(line.clone());
                    if found {
                        return line;
                    }
                }
                Err(_) => panic!("bx serve never said {what:?}; it said:\n{}", self.log.join("\n")),
            }
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait: the graceful path (turns cancelled, checkpoint written).
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "bx serve exited {status}; log:\n{}", self.log.join("\n"));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bx chat --json` for one turn: exit code and the events.
pub fn say(state: &Path, session: &str, text: &str, extra: &[&str]) -> (i32, Vec<Value>) {
    let mut args = vec!["chat", "--json", "--session", session, "--say", text];
    args.extend_from_slice(extra);
    let r = bx(state, &args);
    let events = r.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (r.code, events)
}

pub fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

pub fn transcript(state: &Path, session: &str) -> Vec<Value> {
    let path = state.join(format!("sessions/{session}.transcript.jsonl"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every audit record, across day files.
pub fn audit_records(state: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for file in bx_audit::day_files(&state.join("audit")).unwrap() {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            out.push(serde_json::from_str(line).unwrap());
        }
    }
    out
}

pub fn write_policy(state: &Path, text: &str) {
    std::fs::write(state.join("policy.toml"), text).unwrap();
    let r = bx(state, &["policy", "check"]);
    assert_eq!(r.code, 0, "policy: {}{}", r.stdout, r.stderr);
}

/// A one-page HTTP server on loopback.
pub fn page_server(body: &'static str) -> u16 {
    typed_page_server(body.to_owned(), "text/plain")
}

/// A one-page HTTP server on loopback whose page is `body` of type `content_type`.
pub fn typed_page_server(body: String, content_type: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// Runs `bx chat --json --say` in the background with `extra` arguments, its events
/// arriving on a channel.
pub fn say_in_background(
    state: &Path,
    session: &str,
    text: &str,
    extra: &[&str],
) -> (Child, mpsc::Receiver<Value>) {
    let mut child = chat_json(state, session, text, extra);
    let events = forward_lines(child.stdout.take().unwrap(), |l| serde_json::from_str(&l).unwrap());
    (child, events)
}

/// `bx chat --json --say` started with its stdout piped.
pub fn chat_json(state: &Path, session: &str, text: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bx"))
        .args(["--state-dir", state.to_str().unwrap(), "chat", "--json"])
        .args(extra)
        .args(["--session", session, "--say", text])
        .env_remove("BX_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

pub fn next_of(rx: &mpsc::Receiver<Value>, t: &str, seen: &mut Vec<Value>) -> Value {
    loop {
        let e = rx.recv_timeout(Duration::from_secs(300)).unwrap_or_else(|_| {
            panic!("no {t} event; saw {seen:?}");
        });
        seen.push(e.clone());
        if e["type"] == t {
            return e;
        }
    }
}

/// A connection to the running daemon's socket that has said its token, as every bx
/// client does first.
pub fn daemon_socket(state: &Path) -> std::os::unix::net::UnixStream {
    use std::io::Write as _;
    let mut stream = std::os::unix::net::UnixStream::connect(state.join("bx.sock")).unwrap();
    let token = std::fs::read_to_string(state.join("bx.sock.token")).unwrap();
    stream.write_all(&bx_protocol::hello(token.trim()).unwrap()).unwrap();
    stream
}
