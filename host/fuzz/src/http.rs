//! The `mcp_http` target: raw HTTP/1.1 requests, mutated, sent to a real `bx mcp --http`
//! (and through it the real daemon) on a loopback socket. Its checks of the bearer
//! token, the Host and the Origin live in the `bx` binary's own crate, which this
//! crate cannot link, so the target drives the built binary, as a client would.
//!
//! Seeds are requests with placeholders filled in before each is sent: `{TOKEN}` (the
//! bearer token of `mcp.token`), `{SESSION}` (a live MCP session's id) and `{HOST}` (the
//! address served). A mutation that breaks a placeholder sends the broken text.
//!
//! What is a finding (each a panic, which `bx-fuzz` saves as `crash-N` with its message):
//! - `bx mcp` has exited;
//! - no answer ends within [`ANSWER_SECS`] (a stream of events, which an MCP server may
//!   keep open, is read for [`STREAM_SECS`] and then left);
//! - a request that does not carry the token is answered with a 2xx status;
//! - a request whose head has an `Origin` header is answered with a 2xx status;
//! - `bx mcp`'s peak resident memory passes [`MAX_RSS_KIB`].
//!
//! `bx mcp`'s own CPU time for the input (utime and stime from `/proc`, in ticks of
//! 10 ms) is added to the input's cost ([`Scratch::spend`]), so a request that makes the
//! server slow is a `slow-N` finding like a slow parser.

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Scratch;

/// The longest wait for an answer to end (the server's own longest wait for a client is
/// 10 s, for a request's head).
pub const ANSWER_SECS: u64 = 20;
/// How long `bx serve` and `bx mcp --http` have to say they are ready.
const START_SECS: u64 = 60;
/// How long a stream of events is read before it is left open.
const STREAM_SECS: u64 = 1;
/// The most of an answer that is read.
const MAX_ANSWER: usize = 16 << 20;
/// `bx mcp`'s peak resident memory past which an input is a finding (1 GiB).
const MAX_RSS_KIB: u64 = 1 << 20;

/// A `bx serve` and a `bx mcp --http` in a state directory of their own, stopped when
/// this is dropped.
pub struct Served {
    daemon: Child,
    mcp: Mutex<Child>,
    /// `mcp`'s process id.
    pid: u32,
    addr: SocketAddr,
    token: String,
    /// The MCP session the seeds' `{SESSION}` names; made again when the server has
    /// closed it (a fuzzed DELETE, or the cap on sessions).
    session: Mutex<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let mcp = self.mcp.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        for child in [mcp, &mut self.daemon] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `bx` binary: `$BX_FUZZ_BX`, else the one built beside this executable (a test's
/// executable is one level further down, in `deps/`).
fn bx_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BX_FUZZ_BX") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("bx")
}

/// `bx ARGS` with `state` as its state directory, its address-space limit raised to the
/// hard one: the daemon's instance pool reserves far more address space than `make
/// fuzz`'s soft limit of 2 GiB, which bounds the fuzzer itself.
fn bx(bx: &Path, state: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -S -v \"$(ulimit -H -v)\"; exec \"$0\" \"$@\"")
        .arg(bx)
        .args(args)
        .env("BX_HOME", state)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Waits up to [`START_SECS`] for a line of `child`'s stderr holding `marker` (the rest
/// is drained in a thread); the line. A server that never says it is ready is an error,
/// not a wait for ever.
fn line_with(child: &mut Child, marker: &str, what: &str) -> anyhow::Result<String> {
    let stderr = child.stderr.take().ok_or_else(|| anyhow::anyhow!("{what}: no stderr"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let marker_owned = marker.to_owned();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let found = loop {
            match lines.next() {
                Some(Ok(line)) if line.contains(&marker_owned) => break Ok(line),
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(anyhow::anyhow!("reading its output: {e}")),
                None => break Err(anyhow::anyhow!("it ended")),
            }
        };
        let _ = tx.send(found);
        for _ in lines {}
    });
    match rx.recv_timeout(Duration::from_secs(START_SECS)) {
        Ok(Ok(line)) => Ok(line),
        Ok(Err(why)) => anyhow::bail!("{what}: {why} before it said {marker:?}"),
        Err(_) => anyhow::bail!("{what} did not say {marker:?} within {START_SECS} s"),
    }
}

impl Served {
    /// Starts both under `scratch` and opens an MCP session.
    pub fn start(scratch: &Path) -> anyhow::Result<Served> {
        let bx_path = bx_binary();
        anyhow::ensure!(
            bx_path.is_file(),
            "{} is not there: the mcp_http target drives the built bx (cargo build --workspace \
             --bins, or set BX_FUZZ_BX)",
            bx_path.display()
        );
        let state = scratch.join("mcp-http-state");
        let workspace = scratch.join("mcp-http-workspace");
        std::fs::create_dir_all(&state)?;
        std::fs::create_dir_all(&workspace)?;
        // The daemon first, and listening, so `bx mcp` does not start one of its own.
        let mut daemon = bx(&bx_path, &state, &["serve"]).spawn()?;
        line_with(&mut daemon, "listening on", "bx serve")?;
        let ws = workspace.to_str().ok_or_else(|| anyhow::anyhow!("workspace not UTF-8"))?;
        let mut mcp =
            bx(&bx_path, &state, &["mcp", "--http", "127.0.0.1:0", "--workspace", ws]).spawn()?;
        let line = line_with(&mut mcp, "http://", "bx mcp --http")?;
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no address in {line:?}"))?;
        let token = std::fs::read_to_string(state.join("mcp.token"))?.trim().to_owned();
        let pid = mcp.id();
        let served = Served {
            daemon,
            mcp: Mutex::new(mcp),
            pid,
            addr,
            token,
            session: Mutex::new(String::new()),
        };
        served.new_session()?;
        Ok(served)
    }

    /// Opens an MCP session (`initialize`, then `notifications/initialized`) and keeps
    /// its id for `{SESSION}`.
    fn new_session(&self) -> anyhow::Result<()> {
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bx-fuzz","version":"1"}}}"#;
        let answer = self.send(&self.post(init, None))?;
        let id = header(&answer, "mcp-session-id")
            .ok_or_else(|| anyhow::anyhow!("initialize gave no session: {}", head_of(&answer)))?;
        let done = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        self.send(&self.post(done, Some(&id)))?;
        *self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = id;
        Ok(())
    }

    /// A well-formed POST of `body` with the token.
    fn post(&self, body: &str, session: Option<&str>) -> Vec<u8> {
        let session = session.map(|s| format!("Mcp-Session-Id: {s}\r\n")).unwrap_or_default();
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: \
             application/json\r\nAccept: application/json, text/event-stream\r\n{session}\
             Content-Length: {}\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        )
        .into_bytes()
    }

    /// Sends `request` on a new connection, closes its sending half, and reads the
    /// answer until the server closes, or for [`STREAM_SECS`] once a stream of events
    /// has begun. An answer that has not ended within [`ANSWER_SECS`] is an error.
    fn send(&self, request: &[u8]) -> anyhow::Result<Vec<u8>> {
        let started = Instant::now();
        let limit = Duration::from_secs(ANSWER_SECS);
        let mut conn = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
        conn.set_write_timeout(Some(limit))?;
        // The server may answer and close before it has read everything (a 401 on the
        // head): a failed write is not a finding, the answer is what counts.
        let _ = conn.write_all(request);
        let _ = conn.shutdown(Shutdown::Write);
        let mut answer = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        let mut stream_until: Option<Instant> = None;
        loop {
            let deadline = stream_until.unwrap_or(started + limit);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                if stream_until.is_some() {
                    return Ok(answer);
                }
                anyhow::bail!(
                    "no end to the answer within {ANSWER_SECS} s ({} bytes so far: {})",
                    answer.len(),
                    head_of(&answer)
                );
            }
            conn.set_read_timeout(Some(left))?;
            match conn.read(&mut buf) {
                Ok(0) => return Ok(answer),
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.len() >= MAX_ANSWER {
                        return Ok(answer);
                    }
                    if stream_until.is_none()
                        && header(&answer, "content-type")
                            .is_some_and(|t| t.starts_with("text/event-stream"))
                    {
                        stream_until = Some(Instant::now() + Duration::from_secs(STREAM_SECS));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                // Reset by the server: it refused the connection's bytes.
                Err(_) => return Ok(answer),
            }
        }
    }

    /// `bx mcp`'s CPU time so far, from `/proc/PID/stat` (ticks of 10 ms).
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        // The fields after the command's name, which ends at the last ')'.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<u64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
        // utime and stime are fields 14 and 15 of the line: 12 and 13 after the name.
        let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
        Duration::from_millis(ticks * 10)
    }

    /// `bx mcp`'s peak resident memory in KiB (`VmHWM`).
    fn peak_rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// `bytes` with its placeholders filled in.
    fn fill(&self, bytes: &[u8]) -> Vec<u8> {
        let session =
            self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let host = self.addr.to_string();
        let pairs: [(&[u8], &[u8]); 3] = [
            (b"{TOKEN}", self.token.as_bytes()),
            (b"{SESSION}", session.as_bytes()),
            (b"{HOST}", host.as_bytes()),
        ];
        let mut out = Vec::with_capacity(bytes.len() + 64);
        let mut i = 0;
        'outer: while i < bytes.len() {
            for (from, to) in pairs {
                if bytes[i..].starts_with(from) {
                    out.extend_from_slice(to);
                    i += from.len();
                    continue 'outer;
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        out
    }
}

/// The value of the first header `name` in the head of `answer`, if the head is whole.
fn header(answer: &[u8], name: &str) -> Option<String> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// The answer's first line, bounded and escaped, for a finding's message.
fn head_of(answer: &[u8]) -> String {
    let line = answer.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
    bx_broker::escape_untrusted(&text, true)
}

/// The status of the answer's first line, when it is an HTTP status line.
fn status(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.split_whitespace();
    parts.next()?.starts_with("HTTP/").then_some(())?;
    parts.next()?.parse().ok()
}

/// The header lines of `request`'s head, up to its first blank line. A line ends at
/// `\n`, with or without a `\r` before it, as hyper's parser reads it: a head that ends
/// at `\r\n\n` ends there, and what follows is not its header (the first hour of
/// `mcp_http` stopped on an `Origin` line after such an end, in the next request).
/// Blank lines before the request line are skipped, as httparse skips them.
fn head_lines(request: &[u8]) -> impl Iterator<Item = &[u8]> {
    request
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .skip_while(|line| line.is_empty())
        .skip(1)
        .take_while(|line| !line.is_empty())
}

/// Whether the head of `request` has a header line named `name`, as any HTTP parser
/// would read it: at the start of a line, before a colon.
fn has_header(request: &[u8], name: &str) -> bool {
    head_lines(request).any(|line| {
        line.len() > name.len()
            && line[..name.len()].eq_ignore_ascii_case(name.as_bytes())
            && line[name.len()] == b':'
    })
}

/// Runs one input against the server of `scratch` (started on the first input).
pub fn run(bytes: &[u8], scratch: &Scratch) {
    let served = scratch.served();
    let request = served.fill(bytes);
    let before = served.cpu();
    let answer = match served.send(&request) {
        Ok(a) => a,
        Err(e) => panic!("{e}"),
    };
    scratch.spend(served.cpu().saturating_sub(before));
    let exited = served.mcp.lock().unwrap_or_else(std::sync::PoisonError::into_inner).try_wait();
    if let Ok(Some(status)) = exited {
        panic!("bx mcp --http has exited: {status}");
    }
    let code = status(&answer);
    let ok = code.is_some_and(|c| (200..300).contains(&c));
    // In the head's Authorization: a token in a body, in the request line, or in a
    // request after this one, is not this one's.
    let carries_token = head_lines(&request).any(|l| {
        let named = l.len() > 14 && l[..14].eq_ignore_ascii_case(b"authorization:");
        named && l.windows(served.token.len()).any(|w| w == served.token.as_bytes())
    });
    assert!(!ok || carries_token, "a request without the token was answered {}", head_of(&answer));
    assert!(
        !ok || !has_header(&request, "origin"),
        "a request with an Origin header was answered {}",
        head_of(&answer)
    );
    let peak = served.peak_rss_kib();
    assert!(peak <= MAX_RSS_KIB, "bx mcp's resident memory reached {peak} KiB");
    if code == Some(404) && bytes.windows(9).any(|w| w == b"{SESSION}") {
        // The session is gone (a DELETE, or the cap on sessions): a new one for the
        // inputs after this.
        if let Err(e) = served.new_session() {
            panic!("a new session could not be opened: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each seed reaches the server as it is meant to: the ones with the token and a fit
    /// head are answered with a 2xx status, the ones without it (or with an Origin, or
    /// another Host, or a batch) are refused. So mutations start from inside the service, and the
    /// checks of `run` are checks of something the server does.
    #[test]
    fn the_seeds_are_answered_as_meant() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
        let scratch = Scratch::new().unwrap();
        let served = scratch.served();
        let target = crate::target("mcp_http").unwrap();
        let mut answered = Vec::new();
        for (path, bytes) in crate::seeds(target, &fixtures).unwrap() {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let answer = served.send(&served.fill(&bytes)).unwrap();
            let code = status(&answer).unwrap_or_else(|| panic!("{name}: {}", head_of(&answer)));
            // A batch is refused: MCP 2025-06-18 has none.
            let refused = ["no-token", "origin", "wrong-host", "batch"].contains(&name.as_str());
            assert_eq!((200..300).contains(&code), !refused, "{name}: {}", head_of(&answer));
            if name == "no-token" {
                assert_eq!(code, 401, "{name}");
            }
            if name == "delete-session" {
                served.new_session().unwrap();
            }
            answered.push(name);
        }
        assert!(answered.len() >= 11, "{answered:?}");
        // A tools/list through the session names the installed tools (none here), so
        // the session is real, not only accepted.
        let session = served.session.lock().unwrap().clone();
        let list = served
            .send(&served.post(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#, Some(&session)))
            .unwrap();
        assert!(String::from_utf8_lossy(&list).contains(r#""tools":[]"#), "{}", head_of(&list));
    }

    /// A server that ends, or says other things, before it says it is ready is an error
    /// that names it; one that says it is found.
    #[test]
    fn a_server_is_ready_only_when_it_says_so() {
        let spawn = |script: &str| {
            Command::new("sh").args(["-c", script]).stderr(Stdio::piped()).spawn().unwrap()
        };
        let mut ended = spawn("echo starting >&2");
        let err = line_with(&mut ended, "listening on", "bx serve").unwrap_err().to_string();
        assert!(err.contains("bx serve: it ended before it said"), "{err}");
        let mut ready = spawn("echo starting >&2; echo 'bx serve: listening on x' >&2");
        assert_eq!(
            line_with(&mut ready, "listening on", "bx serve").unwrap(),
            "bx serve: listening on x"
        );
        let _ = (ended.wait(), ready.wait());
    }

    /// The checks of `run` fail on what they are there to find: a placeholder the
    /// mutation broke leaves a request without the token, and the Origin check reads a
    /// header however it is cased.
    #[test]
    fn the_header_checks_read_what_a_parser_reads() {
        assert!(has_header(b"POST / HTTP/1.1\r\norigin: x\r\n\r\n", "origin"));
        assert!(has_header(b"POST / HTTP/1.1\r\nOrIgIn:x\r\n\r\n", "origin"));
        assert!(!has_header(b"POST / HTTP/1.1\r\n\r\nOrigin: x\r\n", "origin"));
        assert!(!has_header(b"POST / HTTP/1.1\r\nX-Origin: x\r\n\r\n", "origin"));
        // A head ends at a blank line however its lines end.
        assert!(!has_header(b"POST / HTTP/1.1\r\nA: b\r\n\nOrigin: x\r\n\r\n", "origin"));
        assert!(!has_header(b"POST / HTTP/1.1\nA: b\n\nOrigin: x\n\n", "origin"));
        assert!(has_header(b"POST / HTTP/1.1\nA: b\nOrigin: x\n\n", "origin"));
        // Blank lines before the request line are skipped, as httparse does.
        assert!(has_header(b"\r\n\r\nPOST / HTTP/1.1\r\nOrigin: x\r\n\r\n", "origin"));
        assert!(!has_header(b"\r\nOrigin: x\r\n\r\n", "origin"), "a request line");
        assert_eq!(status(b"HTTP/1.1 401 Unauthorized\r\n\r\n"), Some(401));
        assert_eq!(status(b"garbage"), None);
        let answer = b"HTTP/1.1 200 OK\r\nmcp-session-id: abc\r\n\r\n";
        assert_eq!(header(answer, "Mcp-Session-Id").as_deref(), Some("abc"));
    }
}
