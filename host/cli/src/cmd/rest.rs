//! The rest of an approval block that shows its call in part: fetched whole from the
//! daemon, shown escaped in numbered parts (a part at a time at a terminal), and the seal
//! its end gives, without which the daemon takes no approval of it.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

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
    /// When the approval expires at the daemon: no wait for the owner outlasts it.
    pub(crate) until: Instant,
}

/// Approval `id`'s whole arguments, as the call gave them, and the seal their end came
/// with, read part by part over a connection of its own; `Ok(Err(reason))` when the
/// daemon refused (no such approval waits).
pub(crate) fn whole_args(
    state: &StateDir,
    id: &str,
) -> anyhow::Result<Result<(String, Option<String>), String>> {
    whole_args_within(state, id, MAX_REST_BYTES)
}

/// [`whole_args`] of a call whose arguments hold at most `max` bytes: a bigger one is an
/// error after its first part, before the rest is read.
pub(crate) fn whole_args_within(
    state: &StateDir,
    id: &str,
    max: u64,
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
            total <= max,
            "approval {} has {total} bytes of arguments, more than are read here ({max}): read them with `bx approvals show {}`, or refuse it",
            term::one_line(id),
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

/// Approval `id`'s rest, as shown, with its seal and when it expires.
pub(crate) fn fetch(state: &StateDir, id: &str) -> anyhow::Result<Rest> {
    let (args, seal) = match whole_args(state, id)? {
        Ok(found) => found,
        Err(reason) => anyhow::bail!("{}", term::reason(&reason)),
    };
    let reply = connect_running(state)?.request(Body::ListApprovals {})?;
    let Body::Approvals { items, .. } = reply else {
        anyhow::bail!("unexpected reply: {}", term::one_line(reply.type_name()))
    };
    let wanted = id.trim().to_ascii_lowercase();
    let left = items.iter().find(|a| a.approval == wanted).map_or(0, |a| a.expires_in_s);
    let until = Instant::now() + Duration::from_secs(left);
    Ok(Rest { parts: bx_broker::rest_parts(id, &args), seal, until })
}

/// A line the owner types before `until`; `None` at the end of input, on an error, or
/// when `until` passes first (the line is read on a thread of its own, so the wait ends).
pub(crate) fn read_line_until(until: Instant) -> Option<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        if let Ok(n) = std::io::stdin().lock().read_line(&mut line) {
            let _ = tx.send((n > 0).then_some(line));
        }
    });
    rx.recv_timeout(until.saturating_duration_since(Instant::now())).ok().flatten()
}

/// Whether the rest is shown a part at a time: the owner reads at a terminal and answers
/// from one.
pub(crate) fn paged() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Writes `parts` to stderr; at a terminal, waits for Enter (read from stdin, until
/// `until`) after each but the last. False when the owner stopped it (end of input, `q`,
/// or no Enter in time).
pub(crate) fn show(parts: &[String], until: Instant) -> bool {
    let paging = paged();
    let n = parts.len();
    for (i, part) in parts.iter().enumerate() {
        errp!("{}", term::shown(part));
        if paging && i + 1 < n {
            errp!("(Enter for part {} of {n}, q to stop) ", i + 2);
            let _ = std::io::stderr().flush();
            match read_line_until(until) {
                None => return false,
                Some(line) if line.trim().eq_ignore_ascii_case("q") => return false,
                Some(_) => {}
            }
        }
    }
    true
}
