//! Serving HTTP with every wait and every count bounded, for `bx mcp --http` and
//! `bx serve --web`: a request's headers must arrive within [`HEADER_SECS`], and at most
//! [`MAX_CONNECTIONS`] connections are open at once (well below the descriptor limit,
//! so a flood of idle ones cannot starve the owner's own client).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

/// Seconds a connection may take to send a request's headers, and may sit idle between
/// requests. Without it one client could hold a connection (and a descriptor) for ever
/// by sending a byte a minute (slowloris).
const HEADER_SECS: u64 = 10;
/// Connections open at once. Past it, new ones wait in the kernel's backlog until one
/// closes; without it 1,100 idle connections exhausted the descriptors and the owner's
/// own client got no answer.
const MAX_CONNECTIONS: usize = 256;
/// How long the accept loop waits after a failed accept before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `stop` ends. With `lifetime`, a connection is
/// closed that long after it was accepted, whatever it is doing: a client that sends its
/// body a byte at a time, or never reads its response, then holds its slot for that long
/// at most, and a client waiting in the backlog behind a flood of them is served within
/// about that long (the backlog is accepted in order). `bx mcp --http` has none: its
/// streams wait for the owner's approvals.
pub(crate) async fn serve_bounded(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: impl Future<Output = ()>,
    lifetime: Option<Duration>,
) -> anyhow::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stop);
    loop {
        // A slot first: at the cap, new connections wait in the backlog.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.context("connection slots")?,
            () = &mut stop => return Ok(()),
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of descriptors, or a connection reset before accept: wait a moment
                // (an accept that fails at once would otherwise spin a core), then go on.
                Err(_) => {
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = &mut stop => return Ok(()),
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(HEADER_SECS))
                // A client that closes its sending half after its request still gets
                // the answer (hyper's default drops the connection at the end of input
                // before answering), and one that closes it in the middle of a request
                // ends that request at once.
                .half_close(true)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            match lifetime {
                Some(life) => {
                    let _ = tokio::time::timeout(life, conn).await;
                }
                None => {
                    let _ = conn.await;
                }
            }
        });
    }
}

/// SIGINT or SIGTERM, whichever comes first.
pub(crate) async fn signalled() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
