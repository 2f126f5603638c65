//! The bridge's connection to the daemon: one socket, kept open between calls, that
//! carries every request of this `bx mcp` process, each under its own id (the wire
//! protocol's envelopes say which request a reply or event belongs to). A connection
//! per call cost a thread, a connect and the daemon's accept each time, about a third
//! of a small call.
//!
//! Frames are read with the wire protocol's own codec, [`bx_protocol::FrameCodec`], the
//! one the daemon reads with (a 4-byte big-endian length, at most
//! [`bx_protocol::MAX_FRAME_BYTES`], and a strictly parsed envelope).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bx_protocol::{Body, Envelope, FrameCodec, VERSION};
use bx_state::StateDir;
use futures_util::StreamExt as _;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

/// How long a one-off request (a listing) waits for its reply.
const REQUEST_WAIT: Duration = Duration::from_secs(60);
/// How long one frame's write to the daemon may take.
const WRITE_WAIT: Duration = Duration::from_secs(30);
/// A connection idle for longer is not used again: the daemon closes one that has been
/// idle for [`bx_daemon::IDLE_SECS`], or earlier when it needs the place, and a
/// request sent as it closes would be lost. Half of that leaves a wide margin.
const REUSE_IDLE: Duration = Duration::from_secs(bx_daemon::IDLE_SECS / 2);
/// After a failed start of the daemon, calls within this long fail at once instead of
/// each starting another `bx serve` that fails the same way.
const RESTART_BACKOFF: Duration = Duration::from_secs(10);

/// The daemon of one state directory, as this process reaches it.
pub(crate) struct Daemon {
    state: StateDir,
    link: tokio::sync::Mutex<Option<Arc<Link>>>,
    /// Whether a call that finds no daemon starts one (off only in unit tests, where
    /// this process is not `bx`).
    restart: bool,
    /// When a start last failed, and why.
    failed_start: Mutex<Option<(Instant, String)>>,
}

/// One open connection.
struct Link {
    write: tokio::sync::Mutex<OwnedWriteHalf>,
    /// Where the replies and events of each request in flight go, by request id.
    waiting: Mutex<HashMap<u64, mpsc::UnboundedSender<Body>>>,
    next_id: AtomicU64,
    /// False once the connection has closed or failed.
    open: AtomicBool,
    /// When a frame last went either way.
    last: Mutex<Instant>,
}

/// The replies and events of one request, in order; the request is forgotten when this
/// is dropped (what still comes for it is discarded).
pub(crate) struct Replies {
    id: u64,
    rx: mpsc::UnboundedReceiver<Body>,
    link: Arc<Link>,
}

impl Replies {
    /// The next message for this request; `None` once the connection has closed.
    pub(crate) async fn next(&mut self) -> Option<Body> {
        self.rx.recv().await
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.link.waiting.lock().remove(&self.id);
    }
}

impl Daemon {
    pub(crate) fn new(state: &StateDir) -> Daemon {
        Daemon {
            state: state.clone(),
            link: tokio::sync::Mutex::new(None),
            restart: true,
            failed_start: Mutex::new(None),
        }
    }

    /// Sends `msg` as a new request; its replies and events come from the result. A
    /// call ([`Start::IfGone`]) that finds no daemon starts one, as `bx mcp` did when it
    /// began: a daemon stopped or crashed since then comes back at the next call.
    /// Listings do not, so the every-second watch for new tools does not start a daemon
    /// the owner has just stopped; a call's own look-up of its tool does.
    ///
    /// A kept connection can have closed without this process having seen it yet (the
    /// daemon stopped, or dropped it as idle). A request whose write on it failed goes
    /// once more on a new connection: the daemon never read the whole frame, so it
    /// cannot have run it.
    pub(crate) async fn open(&self, msg: Body, start: Start) -> anyhow::Result<Replies> {
        let mut envelope = Envelope { v: VERSION, id: 0, msg };
        let mut retried = false;
        loop {
            let (link, kept) = self.link(start).await?;
            let again = kept && !retried;
            retried = true;
            envelope.id = link.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = mpsc::unbounded_channel();
            link.waiting.lock().insert(envelope.id, tx);
            let replies = Replies { id: envelope.id, rx, link: Arc::clone(&link) };
            // Closed since it was handed out: its reader has already let go of everyone
            // waiting, so this request would never hear back.
            if !link.open.load(Ordering::Acquire) {
                if again {
                    continue;
                }
                anyhow::bail!("the daemon closed the connection");
            }
            let frame = bx_protocol::encode(&envelope)?;
            let wrote = {
                let mut write = link.write.lock().await;
                tokio::time::timeout(WRITE_WAIT, write.write_all(&frame)).await
            };
            match wrote {
                Ok(Ok(())) => {
                    *link.last.lock() = Instant::now();
                    return Ok(replies);
                }
                Ok(Err(_)) if again => link.open.store(false, Ordering::Release),
                // A write that timed out may have reached the daemon in part or whole:
                // not sent again.
                _ => {
                    link.open.store(false, Ordering::Release);
                    anyhow::bail!("writing to the daemon failed");
                }
            }
        }
    }

    /// Sends `msg` and waits, at most a minute, for its one reply.
    pub(crate) async fn request(&self, msg: Body, start: Start) -> anyhow::Result<Body> {
        let mut replies = self.open(msg, start).await?;
        match tokio::time::timeout(REQUEST_WAIT, replies.next()).await {
            Ok(Some(body)) => Ok(body),
            Ok(None) => anyhow::bail!("the daemon closed the connection"),
            Err(_) => anyhow::bail!("no reply from the daemon within {REQUEST_WAIT:?}"),
        }
    }

    /// The open connection (true: kept from an earlier request), or a new one.
    async fn link(&self, start: Start) -> anyhow::Result<(Arc<Link>, bool)> {
        let mut slot = self.link.lock().await;
        if let Some(link) = slot.as_ref() {
            if link.usable() {
                return Ok((Arc::clone(link), true));
            }
            // Idle too long (or closed): end it, so the daemon does not hold it on.
            let _ = link.write.lock().await.shutdown().await;
        }
        let stream = match UnixStream::connect(self.state.socket()).await {
            Ok(stream) => stream,
            Err(e) if start == Start::No || !self.restart => {
                return Err(e)
                    .context("the bx daemon is not running (see docs/runbook.md#daemon-gone)");
            }
            Err(_) => {
                self.start().await?;
                UnixStream::connect(self.state.socket())
                    .await
                    .context("the bx daemon started but does not answer")?
            }
        };
        let (read, mut write) = stream.into_split();
        let token = self.state.read_socket_token().unwrap_or_default();
        write.write_all(&bx_protocol::hello(&token)?).await.context("writing to the daemon")?;
        let link = Arc::new(Link {
            write: tokio::sync::Mutex::new(write),
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            open: AtomicBool::new(true),
            last: Mutex::new(Instant::now()),
        });
        let frames = FramedRead::new(read, FrameCodec);
        tokio::spawn(read_frames(Arc::clone(&link), frames));
        *slot = Some(Arc::clone(&link));
        Ok((link, false))
    }
}

impl Daemon {
    /// Starts `bx serve`, as `bx chat` does, and waits until it answers; a start that
    /// failed less than [`RESTART_BACKOFF`] ago is not tried again.
    async fn start(&self) -> anyhow::Result<()> {
        if let Some((when, why)) = self.failed_start.lock().as_ref()
            && when.elapsed() < RESTART_BACKOFF
        {
            anyhow::bail!(
                "the bx daemon is not running, and starting it failed {}s ago: {why}",
                when.elapsed().as_secs()
            );
        }
        let state = self.state.clone();
        let started =
            tokio::task::spawn_blocking(move || crate::client::Conn::connect_or_start(&state))
                .await
                .context("starting the bx daemon")?;
        match started {
            Ok(_conn) => {
                *self.failed_start.lock() = None;
                Ok(())
            }
            Err(e) => {
                // What `bx serve` said can be long (its whole log): the client gets the
                // start of it, and the log's path.
                let why = format!(
                    "{} (see {} and docs/runbook.md#daemon-gone)",
                    bx_audit::bounded(&format!("{e:#}"), 1 << 10),
                    self.state.serve_log().display()
                );
                *self.failed_start.lock() = Some((Instant::now(), why.clone()));
                anyhow::bail!("the bx daemon is not running, and starting it failed: {why}")
            }
        }
    }
}

/// Whether a request that finds no daemon starts one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// For a tool call (and its look-up of the tool): start the daemon, as `bx mcp` did
    /// when it began.
    IfGone,
    /// A listing, the watch for new tools, or an answer: fail.
    No,
}

impl Link {
    fn usable(&self) -> bool {
        self.open.load(Ordering::Acquire)
            && (!self.waiting.lock().is_empty() || self.last.lock().elapsed() < REUSE_IDLE)
    }
}

/// Hands each frame to the request it names until the connection ends; then every
/// request still waiting hears that it has (its channel closes).
async fn read_frames(
    link: Arc<Link>,
    mut frames: FramedRead<tokio::net::unix::OwnedReadHalf, FrameCodec>,
) {
    // A frame that does not parse leaves the stream unreadable from there on.
    while let Some(Ok(envelope)) = frames.next().await {
        *link.last.lock() = Instant::now();
        let waiting = link.waiting.lock();
        if envelope.id == 0 {
            // About the connection itself (a bad frame, the daemon busy): everyone's.
            for tx in waiting.values() {
                let _ = tx.send(envelope.msg.clone());
            }
        } else if let Some(tx) = waiting.get(&envelope.id) {
            let _ = tx.send(envelope.msg);
        }
    }
    link.open.store(false, Ordering::Release);
    link.waiting.lock().clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for the daemon's end of the socket (the real daemon is in the
    /// integration tests): it reads three requests, answers the second and then the
    /// first, each with the other's id nowhere in it, and closes with the third unanswered.
    fn stand_in(listener: std::os::unix::net::UnixListener) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            use std::io::Write as _;
            let (mut conn, _) = listener.accept().unwrap();
            // Every connection says the token first (none here: no daemon wrote one).
            let hello = bx_protocol::read_frame(&mut conn).unwrap().unwrap();
            assert!(matches!(hello.msg, Body::Hello { .. }), "{:?}", hello.msg);
            let ids: Vec<u64> =
                (0..3).map(|_| bx_protocol::read_frame(&mut conn).unwrap().unwrap().id).collect();
            for id in [ids[1], ids[0]] {
                let msg = Body::Refused { reason: format!("answer to {id}") };
                conn.write_all(&bx_protocol::encode(&Envelope { v: VERSION, id, msg }).unwrap())
                    .unwrap();
            }
        })
    }

    #[tokio::test]
    async fn each_request_hears_its_own_replies_and_a_closed_link_ends_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path());
        let daemon = stand_in(std::os::unix::net::UnixListener::bind(state.socket()).unwrap());
        // This test binary is not `bx`: it must not try to start a daemon.
        let link = Daemon { restart: false, ..Daemon::new(&state) };
        let mut first = link.open(Body::ListTools {}, Start::IfGone).await.unwrap();
        let mut second = link.open(Body::ListSessions {}, Start::IfGone).await.unwrap();
        let mut third = link.open(Body::ListApprovals {}, Start::IfGone).await.unwrap();
        let reason = |b: Option<Body>| match b {
            Some(Body::Refused { reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(reason(second.next().await), format!("answer to {}", second.id));
        assert_eq!(reason(first.next().await), format!("answer to {}", first.id));
        assert!(third.next().await.is_none(), "the daemon closed: no answer comes");
        daemon.join().unwrap();
        // The next request opens a new connection; with nothing listening it fails.
        drop(std::fs::remove_file(state.socket()));
        assert!(link.open(Body::ListTools {}, Start::IfGone).await.is_err());
    }

    /// The daemon closes a kept connection and this process has not yet seen it (on a
    /// current-thread runtime the reader cannot run before the next write): the request
    /// goes on a new connection instead of failing.
    #[tokio::test]
    async fn a_request_on_a_connection_closed_unseen_goes_on_a_new_one() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path());
        let listener = std::os::unix::net::UnixListener::bind(state.socket()).unwrap();
        let (closed, was_closed) = std::sync::mpsc::channel();
        let (heard, was_heard) = std::sync::mpsc::channel::<()>();
        let daemon = std::thread::spawn(move || {
            for n in 1..=2 {
                let (mut conn, _) = listener.accept().unwrap();
                let hello = bx_protocol::read_frame(&mut conn).unwrap().unwrap();
                assert!(matches!(hello.msg, Body::Hello { .. }), "{:?}", hello.msg);
                let id = bx_protocol::read_frame(&mut conn).unwrap().unwrap().id;
                let msg = Body::Refused { reason: format!("connection {n}") };
                conn.write_all(&bx_protocol::encode(&Envelope { v: VERSION, id, msg }).unwrap())
                    .unwrap();
                // Closed once the answer is in, so the reader is waiting when it comes.
                was_heard.recv().unwrap();
                drop(conn);
                closed.send(()).unwrap();
            }
        });
        let link = Daemon { restart: false, ..Daemon::new(&state) };
        let reason = |b: Option<Body>| match b {
            Some(Body::Refused { reason }) => reason,
            other => panic!("{other:?}"),
        };
        let mut first = link.open(Body::ListTools {}, Start::No).await.unwrap();
        assert_eq!(reason(first.next().await), "connection 1");
        heard.send(()).unwrap();
        // Blocks this runtime's one thread: the reader does not see the close.
        was_closed.recv().unwrap();
        let mut second = link.open(Body::ListTools {}, Start::No).await.unwrap();
        assert_eq!(reason(second.next().await), "connection 2");
        heard.send(()).unwrap();
        daemon.join().unwrap();
    }
}
