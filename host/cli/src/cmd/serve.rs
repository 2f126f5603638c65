//! `bx serve`: runs the daemon in the foreground until SIGTERM or SIGINT.

use std::path::Path;

use clap::Args;

use super::EXIT_OK;

/// `bx serve`
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {}

pub(crate) fn run(state_dir: &Path, _args: &ServeArgs) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(crate::daemon::serve(state_dir.to_path_buf()))?;
    Ok(EXIT_OK)
}
