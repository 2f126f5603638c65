//! `bx confine` (hidden): how bx starts a stdio upstream. It restricts its own process with
//! Landlock (it reads everything but bx's own files, and writes only where it is told and
//! in the shared temporary directories) and then becomes the server: the restriction is
//! inherited by everything the server runs. See `bx_gateway::confine_self`.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

use clap::Args;

/// `bx confine --hide PATH... --write DIR... -- COMMAND [ARGS...]`
#[derive(Debug, Args)]
pub(crate) struct ConfineArgs {
    /// A path out of the server's reach, for reading and writing (repeatable).
    #[arg(long = "hide", value_name = "PATH")]
    hide: Vec<PathBuf>,
    /// The server's own directory: it reads and writes there.
    #[arg(long = "home", value_name = "DIR")]
    home: PathBuf,
    /// A directory the server may write in (repeatable).
    #[arg(long = "write", value_name = "DIR")]
    write: Vec<PathBuf>,
    /// The server's command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Confines this process, then executes the command in its place; returns only on a
/// failure (said on stderr, which the upstream's log keeps).
pub(crate) fn run(args: &ConfineArgs) -> anyhow::Result<u8> {
    bx_gateway::confine_self(&args.hide, &args.home, &args.write)?;
    let (command, rest) =
        args.command.split_first().ok_or_else(|| anyhow::anyhow!("no command"))?;
    let error = std::process::Command::new(command).args(rest).exec();
    anyhow::bail!("its command {command:?} could not be started: {error}")
}
