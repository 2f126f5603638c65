//! The rest of an approval block that shows its call in part: fetched whole from the
//! daemon, shown escaped in numbered parts (a part at a time at a terminal), and the seal
//! its end gives, without which the daemon takes no approval of it.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use bx_protocol::Body;
use bx_state::StateDir;

use crate::client::connect_running;
use crate::term;

/// The most bytes of arguments a client reads for a rest: what any call's arguments can
/// hold through the daemon's frames is far less; a daemon that sent more is not believed.
const MAX_REST_BYTES: u64 = 64 << 20;

/// A waiting call's rest, as shown, and the seal that approves it.
#[derive(Debug)]
pub(crate) struct Rest {
    /// Numbered parts, escaped ([`bx_broker::rest_parts`]).
    pub(crate) parts: Vec<String>,
    /// The seal the last part came with; `None` when the block was whole after all.
    pub(crate) seal: Option<String>,
}

/// Approval `id`'s whole arguments, as the call gave them, and the seal their end came
/// with, read part by part over a connection of its own; `Ok(Err(reason))` when the
/// daemon refused (no such approval waits).
pub(crate) fn whole_args(
    state: &StateDir,
    id: &str,
) -> anyhow::Result<Result<(String, Option<String>), String>> {
    let mut conn = connect_running(state)?;
    let (mut args, mut offset, mut seal) = (String::new(), 0u64, None);
    loop {
        let reply = conn.request(Body::ShowApproval { approval: id.to_owned(), offset })?;
        let (text, total, part_seal) = match reply {
            Body::ApprovalArgs { text, total, seal, .. } => (text, total, seal),
            Body::Refused { reason } => return Ok(Err(reason)),
            other => anyhow::bail!("unexpected reply: {}", term::one_line(other.type_name())),
        };
        anyhow::ensure!(
            total <= MAX_REST_BYTES,
            "approval {} has {total} bytes of arguments, more than a rest is read for ({MAX_REST_BYTES}); refuse it",
            term::one_line(id)
        );
        offset += text.len() as u64;
        args.push_str(&text);
        seal = part_seal.or(seal);
        if text.is_empty() || offset >= total {
            break;
        }
    }
    Ok(Ok((args, seal)))
}

/// Approval `id`'s rest, as shown, with its seal.
pub(crate) fn fetch(state: &StateDir, id: &str) -> anyhow::Result<Rest> {
    match whole_args(state, id)? {
        Ok((args, seal)) => Ok(Rest { parts: bx_broker::rest_parts(id, &args), seal }),
        Err(reason) => anyhow::bail!("{}", term::reason(&reason)),
    }
}

/// Whether the rest is shown a part at a time: the owner reads at a terminal and answers
/// from one.
pub(crate) fn paged() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Writes `parts` to stderr; at a terminal, waits for Enter (read from stdin) after each
/// but the last. False when the owner stopped it (end of input, or `q`).
pub(crate) fn show(parts: &[String]) -> bool {
    let paging = paged();
    let n = parts.len();
    for (i, part) in parts.iter().enumerate() {
        errp!("{}", term::shown(part));
        if paging && i + 1 < n {
            errp!("(Enter for part {} of {n}, q to stop) ", i + 2);
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => return false,
                Ok(_) if line.trim().eq_ignore_ascii_case("q") => return false,
                Ok(_) => {}
            }
        }
    }
    true
}
