//! `bx approvals`, `bx approve ID`, `bx refuse ID --reason TEXT`: answer a waiting call
//! from another terminal. The first answer wins; a second gets "already answered".

use bx_protocol::{Answer, Body};
use bx_state::StateDir;
use clap::Args;

use super::{EXIT_DENIED, EXIT_ERROR, EXIT_OK};
use crate::client::connect_running;
use crate::term;

/// `bx approvals`
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    show: Option<Show>,
}

/// `bx approvals show ID`
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Show {
    /// Print a waiting call's whole arguments, as the call gave them (a block shows a
    /// long argument in part, with its size and SHA-256). Escaped for the terminal unless
    /// --raw.
    Show {
        /// The approval's id.
        id: String,
        /// Write the arguments' bytes as they are (for a file or a pipe, to check the
        /// SHA-256 the block shows).
        #[arg(long)]
        raw: bool,
    },
}

/// `bx approve`
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The approval's id, as shown in its block.
    id: String,
    /// Approve the session's later calls this covers too, as the block shows each: `args`
    /// (the same tool with these exact arguments), `path` (the same tool under the
    /// call's directory), `path=/dir` (under a directory that holds the call's paths) or
    /// `host` (the same tool to the call's origin). Until the session ends, the answer is
    /// revoked (`bx session revoke`), or the session's taint rises past this call's.
    #[arg(long, value_name = "SCOPE")]
    scope: Option<String>,
}

/// `bx refuse`
#[derive(Debug, Args)]
pub(crate) struct RefuseArgs {
    /// The approval's id, as shown in its block.
    id: String,
    /// Why; the model reads it.
    #[arg(long, default_value = "refused by the owner", value_name = "TEXT")]
    reason: String,
    /// Refuse the session's later calls this covers too (as `bx approve --scope`), at
    /// every taint, until the session ends or the answer is revoked.
    #[arg(long, value_name = "SCOPE")]
    scope: Option<String>,
}

/// An answer typed at a prompt ([`bx_broker::typed_answer`]), as the daemon takes it;
/// `None` for no answer.
/// `seen` is the seal of the rest the owner was shown, for a block shown in part.
pub(crate) fn to_wire(
    answer: bx_broker::Answer,
    scope: &bx_broker::ScopeKind,
    seen: Option<String>,
) -> Option<Answer> {
    let scope = (*scope != bx_broker::ScopeKind::Call).then(|| scope.to_string());
    match answer {
        bx_broker::Answer::Approve => Some(Answer::Approve { scope, seen }),
        bx_broker::Answer::Refuse(reason) => Some(Answer::Refuse { reason, scope }),
        // Only the daemon's table makes these.
        bx_broker::Answer::Expired | bx_broker::Answer::Scoped(_) => None,
    }
}

pub(crate) fn list(state: &StateDir, args: &ListArgs) -> anyhow::Result<u8> {
    if let Some(Show::Show { id, raw }) = &args.show {
        return show(state, id, *raw);
    }
    let reply = connect_running(state)?.request(Body::ListApprovals {})?;
    let Body::Approvals { items, more } = reply else {
        anyhow::bail!("unexpected reply: {}", reply.type_name())
    };
    if args.json {
        outln!("{}", term::json(&Body::Approvals { items, more })?);
        return Ok(EXIT_OK);
    }
    if items.is_empty() {
        outln!("no approvals waiting");
    }
    for a in items {
        outp!("{}", term::shown(&a.block));
        outln!("  session {}, expires in {} s", term::one_line(&a.session), a.expires_in_s);
        outln!(
            "  bx approve {id} [--scope SCOPE]   or   bx refuse {id} [--scope SCOPE] --reason TEXT\n",
            id = a.approval
        );
    }
    if more > 0 {
        outln!("{more} more waiting than one listing holds; answer some and list again");
    }
    Ok(EXIT_OK)
}

/// Prints approval `id`'s whole arguments, part by part.
fn show(state: &StateDir, id: &str, raw: bool) -> anyhow::Result<u8> {
    use std::io::IsTerminal as _;
    // The bytes as the call gave them may steer a terminal: they go to a file or a pipe.
    anyhow::ensure!(
        !(raw && std::io::stdout().is_terminal()),
        "--raw writes the arguments' bytes as they are, which could steer this terminal; redirect it to a file or a pipe (`bx approvals show {} --raw > args.json`)",
        term::one_line(id)
    );
    let args = match super::rest::whole_args(state, id)? {
        Ok((args, _)) => args,
        Err(reason) => {
            errln!("bx: {}", term::shown(&reason));
            return Ok(EXIT_DENIED);
        }
    };
    if raw {
        outp!("{args}");
    } else {
        outp!("{}", bx_broker::escape_untrusted(&args, true));
    }
    outln!();
    Ok(EXIT_OK)
}

fn answer(state: &StateDir, id: &str, answer: Answer) -> anyhow::Result<u8> {
    let approving = matches!(answer, Answer::Approve { .. });
    let scope = match &answer {
        Answer::Approve { scope, .. } | Answer::Refuse { scope, .. } => scope.clone(),
    };
    let mut reply = connect_running(state)?
        .request(Body::AnswerApproval { approval: id.to_owned(), answer: answer.clone() })?;
    // A block shown in part is approved only after the rest: shown here, then the id
    // typed at its end, sent with the seal the rest ended with.
    if let (Body::Error { code: bx_protocol::ErrorCode::ApprovalUnseen, .. }, true) =
        (&reply, approving)
    {
        let Some(seen) = seen_rest(state, id)? else {
            errln!("bx: not approved; approval {} still waits", term::one_line(id));
            return Ok(EXIT_DENIED);
        };
        let answer = Answer::Approve { scope: scope.clone(), seen: Some(seen) };
        reply = connect_running(state)?
            .request(Body::AnswerApproval { approval: id.to_owned(), answer })?;
    }
    match reply {
        Body::Ok {} => {
            let verb = if approving { "approved" } else { "refused" };
            match scope {
                Some(scope) => outln!(
                    "{verb} {id}, and the session's later calls within scope {} (`bx session show` lists it)",
                    term::one_line(&scope)
                ),
                None => outln!("{verb} {id}"),
            }
            Ok(EXIT_OK)
        }
        Body::Refused { reason } => {
            errln!("bx: {}", term::shown(&reason));
            Ok(EXIT_DENIED)
        }
        Body::Error { message, runbook, .. } => {
            errln!("bx: {}\n    runbook: {}", term::shown(&message), term::one_line(&runbook));
            Ok(EXIT_ERROR)
        }
        other => {
            errln!("bx: unexpected reply: {}", term::one_line(other.type_name()));
            Ok(EXIT_ERROR)
        }
    }
}

/// Shows approval `id`'s rest and takes the id at its end: the seal to approve with, or
/// `None` when the owner stopped or typed something else.
fn seen_rest(state: &StateDir, id: &str) -> anyhow::Result<Option<String>> {
    use std::io::Write as _;
    // Shown on stderr: where that goes nowhere a person reads (/dev/null, closed), the
    // rest is not shown, and nothing is approved.
    if term::stderr_is_void() {
        errln!("bx: the rest cannot be shown: standard error goes nowhere a person reads");
        return Ok(None);
    }
    let rest = super::rest::fetch(state, id)?;
    errln!(
        "bx: approval {} shows the call in part; here is the rest, escaped:",
        term::one_line(id)
    );
    if !super::rest::show(&rest.parts, rest.until) {
        return Ok(None);
    }
    errp!("that is the whole call; type {} to approve it: ", term::one_line(id));
    let _ = std::io::stderr().flush();
    // No longer than the approval waits at the daemon.
    let Some(line) = super::rest::read_line_until(rest.until) else { return Ok(None) };
    let typed = matches!(bx_broker::typed_answer(id, line.trim()).0, bx_broker::Answer::Approve);
    Ok(rest.seal.filter(|_| typed))
}

pub(crate) fn approve(state: &StateDir, args: &ApproveArgs) -> anyhow::Result<u8> {
    answer(state, &args.id, Answer::Approve { scope: args.scope.clone(), seen: None })
}

pub(crate) fn refuse(state: &StateDir, args: &RefuseArgs) -> anyhow::Result<u8> {
    answer(
        state,
        &args.id,
        Answer::Refuse { reason: args.reason.clone(), scope: args.scope.clone() },
    )
}
