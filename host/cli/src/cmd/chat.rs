//! `bx chat`: talk to the agent. Interactive by default; `--say TEXT` runs one turn and
//! exits with its status; `--json` prints every event as a JSON line. Tool activity and
//! approval blocks go to stderr, the model's text to stdout, escaped like approval text.

use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::sync::mpsc;

use bx_protocol::{Answer, Body, Envelope, ErrorCode};
use clap::Args;

use super::{EXIT_ERROR, EXIT_OK, EXIT_TURN, EXIT_UNAVAILABLE};
use crate::client::Conn;

/// `bx chat`
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// Run one turn with this message, then exit (0 done, 1 error, 5 unavailable, 6
    /// cancelled or over a limit).
    #[arg(long, value_name = "TEXT")]
    say: Option<String>,
    /// Print every event as one JSON line on stdout.
    #[arg(long)]
    json: bool,
    /// The session to talk in (created on first use, resumed after).
    #[arg(long, default_value = "main", value_name = "NAME")]
    session: String,
    /// Make the model's first reply a tool call.
    #[arg(long)]
    require_tool: bool,
}

enum Input {
    Line(Option<String>),
    Frame(Option<Envelope>),
    Interrupt,
}

pub(crate) fn run(state_dir: &Path, args: &ChatArgs) -> anyhow::Result<u8> {
    let conn = Conn::connect_or_start(state_dir)?;
    let (tx, rx) = mpsc::channel::<Input>();
    {
        let mut reader = conn.reader()?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            loop {
                let frame = reader.recv().ok().flatten();
                let end = frame.is_none();
                if tx.send(Input::Frame(frame)).is_err() || end {
                    break;
                }
            }
        });
    }
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if tx.send(Input::Line(line.ok())).is_err() {
                    return;
                }
            }
            let _ = tx.send(Input::Line(None));
        });
    }
    {
        let tx = tx.clone();
        // Ctrl-C cancels the running turn, not the chat.
        ctrlc::set_handler(move || {
            let _ = tx.send(Input::Interrupt);
        })?;
    }
    let mut chat = Chat { conn, rx, args, stdin_open: true };
    if let Some(text) = &args.say {
        return chat.turn(text);
    }
    eprintln!("bx chat: session {} (Ctrl-C cancels a turn, Ctrl-D quits)", args.session);
    loop {
        if !chat.stdin_open {
            // Input ended during the last turn.
            return Ok(EXIT_OK);
        }
        eprint!("you> ");
        let _ = std::io::stderr().flush();
        match chat.rx.recv() {
            Ok(Input::Line(Some(line))) if line.trim().is_empty() => {}
            Ok(Input::Line(Some(line))) => {
                // A failed turn prints its error and the loop goes on.
                let _ = chat.turn(&line)?;
            }
            Ok(Input::Line(None)) | Err(_) => return Ok(EXIT_OK),
            Ok(Input::Frame(None)) => {
                eprintln!("bx: the daemon closed the connection");
                return Ok(EXIT_UNAVAILABLE);
            }
            Ok(Input::Frame(Some(_)) | Input::Interrupt) => eprintln!(),
        }
    }
}

struct Chat<'a> {
    conn: Conn,
    rx: mpsc::Receiver<Input>,
    args: &'a ChatArgs,
    stdin_open: bool,
}

fn untrusted(text: &str) -> String {
    bx_broker::escape_untrusted(text, true)
}

impl Chat<'_> {
    /// Runs one turn; returns the exit status it deserves.
    fn turn(&mut self, text: &str) -> anyhow::Result<u8> {
        let session = self.args.session.clone();
        let id = self.conn.send(Body::Send {
            session: session.clone(),
            text: text.to_owned(),
            require_tool: self.args.require_tool,
        })?;
        let mut approval: Option<String> = None;
        let mut wrote_text = false;
        loop {
            let input = self.rx.recv().map_err(|_| anyhow::anyhow!("input channel closed"))?;
            let envelope = match input {
                Input::Interrupt => {
                    eprintln!("\nbx: cancelling the turn");
                    self.conn.send(Body::Cancel { session: session.clone() })?;
                    continue;
                }
                Input::Line(None) => {
                    // No more answers from here; a pending approval can still be
                    // answered with `bx approve` from another terminal.
                    self.stdin_open = false;
                    continue;
                }
                Input::Line(Some(line)) => {
                    if let Some(waiting) = approval.take() {
                        self.answer(&waiting, line.trim())?;
                    }
                    continue;
                }
                Input::Frame(None) => {
                    eprintln!("bx: the daemon closed the connection mid-turn");
                    return Ok(EXIT_UNAVAILABLE);
                }
                Input::Frame(Some(envelope)) => envelope,
            };
            if self.args.json {
                println!("{}", serde_json::to_string(&envelope.msg)?);
                let _ = std::io::stdout().flush();
            }
            if envelope.id != id {
                // The reply to an approval answer or a cancel.
                if let Body::Refused { reason } = &envelope.msg {
                    eprintln!("bx: {reason}");
                }
                continue;
            }
            match envelope.msg {
                Body::TurnDone { .. } => {
                    if wrote_text && !self.args.json {
                        println!();
                    }
                    return Ok(EXIT_OK);
                }
                Body::Error { code, message, runbook } => {
                    if wrote_text && !self.args.json {
                        println!();
                    }
                    eprintln!("bx: {message}\n    runbook: {runbook}");
                    return Ok(match code {
                        ErrorCode::TurnLimit | ErrorCode::Cancelled => EXIT_TURN,
                        ErrorCode::AuditUnavailable
                        | ErrorCode::PolicyInvalid
                        | ErrorCode::InferenceUnreachable
                        | ErrorCode::InferenceBusy
                        | ErrorCode::SessionBusy => EXIT_UNAVAILABLE,
                        ErrorCode::SessionDamaged
                        | ErrorCode::CoreUnreadable
                        | ErrorCode::InferenceFailed
                        | ErrorCode::BadRequest
                        | ErrorCode::Internal => EXIT_ERROR,
                    });
                }
                _ if self.args.json => {}
                Body::ContentDelta { text, .. } => {
                    print!("{}", untrusted(&text));
                    let _ = std::io::stdout().flush();
                    wrote_text = true;
                }
                Body::ReasoningDelta { text, .. } => eprint!("{}", untrusted(&text)),
                Body::ToolCallProposed { tool, args, .. } => {
                    eprintln!("\n[tool] {} {}", untrusted(&tool), untrusted(&args));
                }
                Body::ApprovalNeeded { approval: waiting, block, .. } => {
                    eprint!("{block}");
                    if self.stdin_open {
                        eprint!("type {waiting} to approve, or a reason to refuse: ");
                        let _ = std::io::stderr().flush();
                        approval = Some(waiting);
                    } else {
                        eprintln!("answer with `bx approve {waiting}` or `bx refuse {waiting}`");
                    }
                }
                Body::ToolStarted { .. } => {}
                Body::ToolResult { status, label, bytes, .. } => {
                    eprintln!("[tool] {status}: {bytes} bytes, label {label}");
                }
                Body::ToolDenied { reason, .. } => {
                    eprintln!("[tool] refused: {}", untrusted(&reason));
                }
                Body::ModelUsage { thinking_capped: true, .. } => {
                    eprintln!("\n[thinking capped: the model was made to answer]");
                }
                _ => {}
            }
        }
    }

    fn answer(&mut self, approval: &str, line: &str) -> anyhow::Result<()> {
        let answer = match bx_broker::typed_answer(approval, line) {
            bx_broker::Answer::Approve => Answer::Approve {},
            bx_broker::Answer::Refuse(reason) => Answer::Refuse { reason },
            // typed_answer never times out; an expiry is the daemon's to decide.
            bx_broker::Answer::Expired => return Ok(()),
        };
        self.conn.send(Body::AnswerApproval { approval: approval.to_owned(), answer })?;
        Ok(())
    }
}
