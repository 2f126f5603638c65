//! `bx serve`: runs the daemon in the foreground until SIGTERM or SIGINT.

use bx_state::StateDir;
use clap::Args;

use super::{EXIT_DAEMON_RUNNING, EXIT_OK};

/// `bx serve`
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {}

pub(crate) fn run(state: &StateDir, _args: &ServeArgs) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match runtime.block_on(bx_daemon::serve(state.clone())) {
        Ok(()) => Ok(EXIT_OK),
        Err(e) if e.downcast_ref::<bx_daemon::AlreadyRunning>().is_some() => {
            errln!("bx: {e:#}");
            Ok(EXIT_DAEMON_RUNNING)
        }
        Err(e) => Err(e),
    }
}
