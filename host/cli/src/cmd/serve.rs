//! `bx serve`: runs the daemon in the foreground until SIGTERM or SIGINT; with `--web`,
//! the owner's page beside it (docs/approvals.md#the-page).

use std::net::SocketAddr;

use bx_state::StateDir;
use clap::Args;

use super::{EXIT_DAEMON_RUNNING, EXIT_OK};

/// `bx serve`
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Serve the owner's page at ADDR too (127.0.0.1:7870 when none is given): calls
    /// waiting, sessions, the audit log, the tools. Log in with the token in web.token.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:7870")]
    web: Option<SocketAddr>,
    /// Let --web serve an address that is not loopback (plain HTTP: the token and the
    /// page cross the network unencrypted).
    #[arg(long, requires = "web")]
    allow_remote: bool,
}

pub(crate) fn run(state: &StateDir, args: &ServeArgs) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match runtime.block_on(serve(state, args)) {
        Ok(()) => Ok(EXIT_OK),
        Err(e) if e.downcast_ref::<bx_daemon::AlreadyRunning>().is_some() => {
            errln!("bx: {e:#}");
            Ok(EXIT_DAEMON_RUNNING)
        }
        Err(e) => Err(e),
    }
}

async fn serve(state: &StateDir, args: &ServeArgs) -> anyhow::Result<()> {
    // The flag for this run, else `[approvals] web` (which `bx chat`'s daemon reads too).
    let configured = || bx_daemon::load_config(state).ok().and_then(|c| c.approvals.web);
    let Some(addr) = args.web.or_else(configured) else {
        return bx_daemon::serve(state.clone()).await;
    };
    // The page's address and token first: a page that cannot be served stops bx serve
    // before the daemon starts.
    let (listener, web) = super::web::bind(state, addr, args.allow_remote).await?;
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let daemon = bx_daemon::serve_ready(state.clone(), Some(ready_tx));
    tokio::pin!(daemon);
    // The page is served once the daemon answers, and until it ends.
    tokio::select! {
        ended = &mut daemon => return ended,
        _ = ready => {}
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let page = tokio::spawn(super::web::run(listener, web, async move {
        let _ = stop_rx.await;
    }));
    let ended = daemon.await;
    let _ = stop_tx.send(());
    let _ = page.await;
    ended
}
