//! The client side of the socket: connect to the daemon of a state directory (starting
//! one in the background when none answers), send requests, read replies and events.

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bx_protocol::{Body, Envelope, VERSION};
use bx_state::StateDir;

/// How long `bx chat` waits for a daemon it started to answer: it may launch llama-server
/// and load a model first.
const START_WAIT: Duration = Duration::from_secs(300);
/// How long a one-off request waits for its reply. Every listing and answer is quick;
/// without a bound a stalled daemon would hang `bx approve`.
const REQUEST_WAIT: Duration = Duration::from_secs(60);

/// A connection to the daemon.
pub(crate) struct Conn {
    stream: UnixStream,
    next_id: u64,
}

impl Conn {
    /// Connects to a running daemon.
    pub(crate) fn connect(state: &StateDir) -> std::io::Result<Conn> {
        let mut stream = UnixStream::connect(state.socket())?;
        let token = state.read_socket_token().unwrap_or_default();
        let hello = bx_protocol::hello(&token).map_err(std::io::Error::other)?;
        stream.write_all(&hello)?;
        Ok(Conn { stream, next_id: 1 })
    }

    /// Connects, or starts `bx serve` in the background (its output in `serve.log`) and
    /// waits until it answers or exits.
    ///
    /// A `bx serve` that exits because another holds `serve.lock` lost a race: the other
    /// is starting, and answers soon, or is stopping (SIGTERM drains for up to 10 s) and
    /// never will. So once the lock is free and nothing answers, it is started again.
    pub(crate) fn connect_or_start(state: &StateDir) -> anyhow::Result<Conn> {
        if let Ok(conn) = Conn::connect(state) {
            return Ok(conn);
        }
        let log_path = state.serve_log();
        let mut child = start(state)?;
        let started = Instant::now();
        loop {
            if let Ok(conn) = Conn::connect(state) {
                return Ok(conn);
            }
            if let Some(status) = child.try_wait()? {
                if status.code() != Some(i32::from(crate::cmd::EXIT_DAEMON_RUNNING)) {
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    bail!(
                        "bx serve exited ({status}) before answering:\n{}",
                        bx_audit::bounded(&log, 4 << 10)
                    );
                }
                if lock_is_free(state) && Conn::connect(state).is_err() {
                    child = start(state)?;
                }
            }
            if started.elapsed() > START_WAIT {
                bail!("bx serve did not answer within {START_WAIT:?}; see {}", log_path.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A read-only handle on the same connection, for a thread that reads while this one
    /// writes (request ids stay this handle's alone).
    pub(crate) fn reader(&self) -> anyhow::Result<Reader> {
        Ok(Reader(self.stream.try_clone()?))
    }

    /// Sends a request; returns its id.
    pub(crate) fn send(&mut self, msg: Body) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = bx_protocol::encode(&Envelope { v: VERSION, id, msg })?;
        self.stream.write_all(&frame).context("writing to the daemon")?;
        Ok(id)
    }

    /// Reads the next message; `None` when the daemon closed the connection.
    pub(crate) fn recv(&mut self) -> anyhow::Result<Option<Envelope>> {
        Ok(bx_protocol::read_frame(&mut self.stream)?)
    }

    /// Sends a request and waits (at most a minute) for its reply.
    pub(crate) fn request(&mut self, msg: Body) -> anyhow::Result<Body> {
        self.stream.set_read_timeout(Some(REQUEST_WAIT))?;
        let id = self.send(msg)?;
        let reply = loop {
            match self.recv() {
                Ok(Some(envelope)) if envelope.id == id || envelope.id == 0 => break envelope.msg,
                Ok(Some(_)) => {}
                Ok(None) => bail!("the daemon closed the connection"),
                Err(e) => bail!("no reply from the daemon within {REQUEST_WAIT:?}: {e}"),
            }
        };
        self.stream.set_read_timeout(None)?;
        Ok(reply)
    }
}

/// The reading half of a [`Conn`].
pub(crate) struct Reader(UnixStream);

impl Reader {
    /// Reads the next message; `None` when the daemon closed the connection.
    pub(crate) fn recv(&mut self) -> anyhow::Result<Option<Envelope>> {
        Ok(bx_protocol::read_frame(&mut self.0)?)
    }
}

/// Connects to the daemon for a one-off request, with a clear error when none runs.
pub(crate) fn connect_running(state: &StateDir) -> anyhow::Result<Conn> {
    Conn::connect(state).with_context(|| {
        format!(
            "no bx daemon answers at {} (start one with `bx serve` or `bx chat`)",
            state.socket().display()
        )
    })
}

/// Starts `bx serve` for `state` in the background, its output in `serve.log`.
fn start(state: &StateDir) -> anyhow::Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    let log_path = state.serve_log();
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    errln!("bx: starting the daemon (log: {})", log_path.display());
    Command::new(std::env::current_exe()?)
        .arg("--state-dir")
        .arg(state.root())
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        // Its own process group: Ctrl-C at the chat must not reach the daemon.
        .process_group(0)
        .spawn()
        .context("starting bx serve")
}

/// Whether no daemon holds `state`'s `serve.lock` now (taken and let go at once).
fn lock_is_free(state: &StateDir) -> bool {
    match std::fs::File::open(state.serve_lock()) {
        Ok(file) => file.try_lock_shared().is_ok(),
        Err(_) => true,
    }
}
