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
}

/// `bx approve`
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The approval's id, as shown in its block.
    id: String,
}

/// `bx refuse`
#[derive(Debug, Args)]
pub(crate) struct RefuseArgs {
    /// The approval's id, as shown in its block.
    id: String,
    /// Why; the model reads it.
    #[arg(long, default_value = "refused by the owner", value_name = "TEXT")]
    reason: String,
}

pub(crate) fn list(state: &StateDir, args: &ListArgs) -> anyhow::Result<u8> {
    let reply = connect_running(state)?.request(Body::ListApprovals {})?;
    let Body::Approvals { items } = reply else {
        anyhow::bail!("unexpected reply: {}", reply.type_name())
    };
    if args.json {
        println!("{}", term::json(&Body::Approvals { items })?);
        return Ok(EXIT_OK);
    }
    if items.is_empty() {
        println!("no approvals waiting");
    }
    for a in items {
        print!("{}", term::shown(&a.block));
        println!("  session {}, expires in {} s", term::one_line(&a.session), a.expires_in_s);
        println!("  bx approve {id}   or   bx refuse {id} --reason TEXT\n", id = a.approval);
    }
    Ok(EXIT_OK)
}

fn answer(state: &StateDir, id: &str, answer: Answer) -> anyhow::Result<u8> {
    let approving = matches!(answer, Answer::Approve {});
    let reply = connect_running(state)?
        .request(Body::AnswerApproval { approval: id.to_owned(), answer })?;
    match reply {
        Body::Ok {} => {
            println!("{} {id}", if approving { "approved" } else { "refused" });
            Ok(EXIT_OK)
        }
        Body::Refused { reason } => {
            eprintln!("bx: {}", term::shown(&reason));
            Ok(EXIT_DENIED)
        }
        Body::Error { message, runbook, .. } => {
            eprintln!("bx: {}\n    runbook: {}", term::shown(&message), term::one_line(&runbook));
            Ok(EXIT_ERROR)
        }
        other => {
            eprintln!("bx: unexpected reply: {}", term::one_line(other.type_name()));
            Ok(EXIT_ERROR)
        }
    }
}

pub(crate) fn approve(state: &StateDir, args: &ApproveArgs) -> anyhow::Result<u8> {
    answer(state, &args.id, Answer::Approve {})
}

pub(crate) fn refuse(state: &StateDir, args: &RefuseArgs) -> anyhow::Result<u8> {
    answer(state, &args.id, Answer::Refuse { reason: args.reason.clone() })
}
