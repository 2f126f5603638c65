//! `bx chat`: talk to the agent. Interactive by default; `--say TEXT` runs one turn and
//! exits with its status; `--json` prints every event as a JSON line. Tool activity and
//! approval blocks go to stderr, the model's text to stdout; everything that came from
//! the daemon is escaped for the terminal (`crate::term`).

use std::io::{BufRead as _, Write as _};
use std::sync::mpsc;

use anyhow::Context as _;
use bx_protocol::{Body, Envelope, ErrorCode};
use bx_state::StateDir;
use clap::Args;

use super::{EXIT_ERROR, EXIT_OK, EXIT_TURN, EXIT_UNAVAILABLE};
use crate::client::Conn;
use crate::term;

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
    /// The directory the session works in (default: this one). Relative paths in the
    /// model's calls resolve against it, and the policy's `{workspace}` names it. A
    /// session keeps the workspace it was created with.
    #[arg(long, value_name = "DIR")]
    workspace: Option<std::path::PathBuf>,
}

/// The workspace a client asks for: `given`, else the current directory, as it resolves
/// on disk (the daemon refuses one that does not). The owner's home, or a directory
/// above it, is a workspace only when named with `--workspace`: a client started there
/// by an editor would otherwise put every credential store under the home in reach
/// (`docs/runbook.md#workspace-home`).
pub(crate) fn workspace(given: Option<&std::path::Path>) -> anyhow::Result<String> {
    let dir = match given {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let real = std::fs::canonicalize(&dir).with_context(|| {
        let shown = term::one_line(&dir.display().to_string());
        format!("workspace {shown} (see docs/runbook.md#workspace)")
    })?;
    if given.is_none()
        && let Some(home) = home_covered_by(&real)
    {
        anyhow::bail!(
            "the current directory {} {}; a workspace there puts every file of yours in the tools' reach. Start in a project directory, or name it with --workspace {} if you mean it (see docs/runbook.md#workspace-home)",
            term::one_line(&real.display().to_string()),
            if home == real {
                "is your home".to_owned()
            } else {
                format!("holds your home {}", term::one_line(&home.display().to_string()))
            },
            term::one_line(&real.display().to_string()),
        );
    }
    real.into_os_string().into_string().map_err(|p| {
        anyhow::anyhow!(
            "workspace {}: not UTF-8 (see docs/runbook.md#workspace)",
            term::one_line(&p.to_string_lossy())
        )
    })
}

/// The owner's home (`$HOME`, as it resolves on disk) when `dir` is it or above it.
pub(crate) fn home_covered_by(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let home = std::env::home_dir()?;
    let home = std::fs::canonicalize(home).ok()?;
    home.starts_with(dir).then_some(home)
}

/// The workspace to send with each message: the session's own when it exists (with one,
/// or without any), else `asked`. A `--workspace` that differs from what an existing
/// session has is an error; the current directory differing is only a note.
fn settle_workspace(
    conn: &mut Conn,
    args: &ChatArgs,
    asked: &str,
) -> anyhow::Result<Option<String>> {
    let existing = match conn.request(Body::ListSessions {})? {
        Body::Sessions { items } => items.into_iter().find(|s| s.session == args.session),
        _ => None,
    };
    let Some(existing) = existing else { return Ok(Some(asked.to_owned())) };
    let session = term::one_line(&args.session);
    match existing.workspace {
        Some(held) if held == asked => Ok(Some(held)),
        held => {
            let has = match &held {
                Some(h) => format!("works in {} (fixed when it was created)", term::one_line(h)),
                None => "was created without a workspace, so relative paths are refused".into(),
            };
            if args.workspace.is_some() {
                anyhow::bail!(
                    "session {session} {has}; talk in another --session to work in {} (see docs/runbook.md#workspace)",
                    term::one_line(asked)
                );
            }
            errln!("bx: session {session} {has}; --session NAME starts one here");
            Ok(held)
        }
    }
}

enum Input {
    Line(Option<String>),
    /// A frame from the reader of connection number `.0`; `None` when it closed.
    Frame(u64, Option<Box<Envelope>>),
    Interrupt,
}

/// Starts the thread that reads connection number `generation` into `tx`.
fn read_into(conn: &Conn, generation: u64, tx: mpsc::Sender<Input>) -> anyhow::Result<()> {
    let mut reader = conn.reader()?;
    std::thread::spawn(move || {
        loop {
            let frame = reader.recv().ok().flatten();
            let end = frame.is_none();
            if tx.send(Input::Frame(generation, frame.map(Box::new))).is_err() || end {
                break;
            }
        }
    });
    Ok(())
}

pub(crate) fn run(state: &StateDir, args: &ChatArgs) -> anyhow::Result<u8> {
    let asked = workspace(args.workspace.as_deref())?;
    let mut conn = Conn::connect_or_start(state)?;
    let workspace = settle_workspace(&mut conn, args, &asked)?;
    let (tx, rx) = mpsc::channel::<Input>();
    read_into(&conn, 1, tx.clone())?;
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
    let mut chat = Chat {
        state,
        conn: Some(conn),
        generation: 1,
        tx,
        rx,
        args,
        workspace: workspace.clone(),
        stdin_open: true,
    };
    if let Some(text) = &args.say {
        return chat.turn(text);
    }
    errln!(
        "bx chat: session {} in {} (state {}). Ctrl-D leaves (ending the session's scoped answers), Ctrl-C cancels a turn; approve a call by typing its id, or `bx approve ID` from another terminal.",
        term::one_line(&args.session),
        term::one_line(workspace.as_deref().unwrap_or("no workspace")),
        term::one_line(&state.root().display().to_string())
    );
    loop {
        if !chat.stdin_open {
            // Input ended during the last turn.
            return chat.leave();
        }
        errp!("you> ");
        let _ = std::io::stderr().flush();
        match chat.rx.recv() {
            Ok(Input::Line(Some(line))) if line.trim().is_empty() => {}
            Ok(Input::Line(Some(line))) => {
                // A failed turn prints its error and the loop goes on.
                let _ = chat.turn(&line)?;
            }
            Ok(Input::Line(None)) | Err(_) => return chat.leave(),
            Ok(Input::Frame(generation, None)) if generation == chat.generation => {
                // The daemon let an idle connection go (or stopped): the next message
                // connects again.
                chat.conn = None;
                errln!();
            }
            Ok(Input::Frame(..) | Input::Interrupt) => errln!(),
        }
    }
}

struct Chat<'a> {
    state: &'a StateDir,
    conn: Option<Conn>,
    generation: u64,
    tx: mpsc::Sender<Input>,
    rx: mpsc::Receiver<Input>,
    args: &'a ChatArgs,
    /// The workspace sent with each message (a session created by it takes it).
    workspace: Option<String>,
    stdin_open: bool,
}

impl Chat<'_> {
    /// The owner leaves the chat: the session's scoped answers end with it (they answer
    /// for "the rest of this session"); its taint and transcript stay. As `bx session
    /// end` does it: through the daemon when one runs, else on the log here.
    fn leave(&mut self) -> anyhow::Result<u8> {
        let session = self.args.session.clone();
        let ended = super::session::end_scopes(
            self.state,
            &session,
            Body::EndSession { session: session.clone() },
        );
        match ended {
            Ok(Some(0)) => Ok(EXIT_OK),
            Ok(Some(count)) => {
                errln!("bx chat: {count} scoped answer(s) of this session ended with it");
                Ok(EXIT_OK)
            }
            // The daemon said why (printed).
            Ok(None) => Ok(EXIT_ERROR),
            Err(e) => {
                errln!(
                    "bx: the session's scoped answers may not have ended ({}); run `bx session end {}`",
                    term::shown(&format!("{e:#}")),
                    term::one_line(&session)
                );
                Ok(EXIT_ERROR)
            }
        }
    }

    /// The connection, made again (starting a daemon if needed) when the last one closed.
    fn conn(&mut self) -> anyhow::Result<&mut Conn> {
        if self.conn.is_none() {
            let conn = Conn::connect_or_start(self.state)?;
            self.generation += 1;
            read_into(&conn, self.generation, self.tx.clone())?;
            self.conn = Some(conn);
        }
        self.conn.as_mut().ok_or_else(|| anyhow::anyhow!("no connection to the daemon"))
    }

    /// Prints `msg` as one JSON line when `--json` is on.
    fn print_json(&self, msg: &Body) -> anyhow::Result<()> {
        if self.args.json {
            outln!("{}", term::json(msg)?);
            let _ = std::io::stdout().flush();
        }
        Ok(())
    }

    /// Runs one turn; returns the exit status it deserves.
    fn turn(&mut self, text: &str) -> anyhow::Result<u8> {
        let session = self.args.session.clone();
        let require_tool = self.args.require_tool;
        let workspace = self.workspace.clone();
        let id = self.conn()?.send(Body::Send {
            session: session.clone(),
            text: text.to_owned(),
            require_tool,
            workspace,
        })?;
        let generation = self.generation;
        let mut approval: Option<Asked> = None;
        let mut wrote_text = false;
        loop {
            let input = self.rx.recv().map_err(|_| anyhow::anyhow!("input channel closed"))?;
            let envelope = match input {
                Input::Interrupt => {
                    errln!("\nbx: cancelling the turn");
                    self.conn()?.send(Body::Cancel { session: session.clone() })?;
                    continue;
                }
                Input::Line(None) => {
                    // No more answers from here; a pending approval can still be
                    // answered with `bx approve` from another terminal.
                    self.stdin_open = false;
                    continue;
                }
                Input::Line(Some(line)) => {
                    if let Some(asked) = approval.take() {
                        approval = self.heard(asked, line.trim())?;
                    }
                    continue;
                }
                Input::Frame(g, _) if g != generation => continue,
                Input::Frame(_, None) => {
                    self.conn = None;
                    // Every way a turn ends has one final event, this one too.
                    let lost = Body::Error {
                        code: ErrorCode::Internal,
                        message: "the daemon closed the connection mid-turn".into(),
                        runbook: "docs/runbook.md#internal-error".into(),
                    };
                    self.print_json(&lost)?;
                    errln!("bx: the daemon closed the connection mid-turn");
                    return Ok(EXIT_UNAVAILABLE);
                }
                Input::Frame(_, Some(envelope)) => *envelope,
            };
            self.print_json(&envelope.msg)?;
            if envelope.id != id && envelope.id != 0 {
                // The reply to an approval answer or a cancel.
                if let Body::Refused { reason } = &envelope.msg {
                    errln!("bx: {}", term::shown(reason));
                }
                continue;
            }
            match envelope.msg {
                Body::TurnDone { .. } => {
                    if wrote_text && !self.args.json {
                        outln!();
                    }
                    return Ok(EXIT_OK);
                }
                Body::Error { code, message, runbook } => {
                    if wrote_text && !self.args.json {
                        outln!();
                    }
                    errln!(
                        "bx: {}\n    runbook: {}{}",
                        term::shown(&message),
                        term::one_line(&runbook),
                        next_step(code)
                    );
                    return Ok(match code {
                        ErrorCode::TurnLimit
                        | ErrorCode::Cancelled
                        | ErrorCode::RepeatedRefusal => EXIT_TURN,
                        ErrorCode::AuditUnavailable
                        | ErrorCode::NoModel
                        | ErrorCode::PolicyInvalid
                        | ErrorCode::InferenceUnreachable
                        | ErrorCode::InferenceBusy
                        | ErrorCode::SessionBusy
                        | ErrorCode::DaemonBusy => EXIT_UNAVAILABLE,
                        ErrorCode::SessionDamaged
                        | ErrorCode::CoreUnreadable
                        | ErrorCode::InferenceFailed
                        | ErrorCode::BadWorkspace
                        | ErrorCode::BadRequest
                        | ErrorCode::ApprovalUnseen
                        | ErrorCode::NotOwner
                        | ErrorCode::Internal => EXIT_ERROR,
                    });
                }
                _ if self.args.json => {}
                Body::ContentDelta { text, .. } => {
                    outp!("{}", term::shown(&text));
                    let _ = std::io::stdout().flush();
                    wrote_text = true;
                }
                Body::ReasoningDelta { text, .. } => errp!("{}", term::shown(&text)),
                Body::ToolCallProposed { tool, args, .. } => {
                    // Bounded like any reason: the whole call is the approval block's
                    // (and its rest's) to show, never this line's.
                    errln!("\n[tool] {} {}", term::reason(&tool), term::reason(&args));
                }
                Body::ApprovalNeeded { approval: waiting, block, in_part, .. } => {
                    errp!("{}", term::shown(&block));
                    if self.stdin_open {
                        ask_for(&waiting);
                        approval = Some(Asked { id: waiting, in_part, paging: None, seal: None });
                    } else {
                        let w = term::one_line(&waiting);
                        errln!("answer with `bx approve {w}` or `bx refuse {w}`");
                    }
                }
                Body::ToolStarted { covered_by: Some(answer), .. } => {
                    errln!("[tool] runs under your scoped answer {}", term::one_line(&answer));
                }
                Body::ToolStarted { .. } => {}
                Body::ToolResult { status, label, bytes, .. } => {
                    errln!(
                        "[tool] {}: {bytes} bytes, label {}",
                        term::one_line(&status),
                        term::one_line(&label)
                    );
                }
                Body::ToolDenied { reason, .. } => {
                    errln!("[tool] refused: {}", term::reason(&reason));
                }
                Body::ModelUsage { thinking_capped: true, .. } => {
                    errln!("\n[thinking capped: the model was made to answer]");
                }
                _ => {}
            }
        }
    }

    /// What a line typed at an approval's prompt does: an answer sent, or the approval
    /// still asked (returned). Approving a block shown in part shows its rest first, a
    /// part per Enter at a terminal, and takes the id at its end.
    fn heard(&mut self, mut asked: Asked, line: &str) -> anyhow::Result<Option<Asked>> {
        let approving =
            matches!(bx_broker::typed_answer(&asked.id, line).0, bx_broker::Answer::Approve);
        if let Some((parts, next)) = &mut asked.paging {
            if line.is_empty() {
                errp!("{}", term::shown(&parts[*next]));
                *next += 1;
                if *next == parts.len() {
                    asked.paging = None;
                    errp!("that is the whole call; ");
                    ask_for(&asked.id);
                } else {
                    errp!("(Enter for part {} of {}) ", *next + 1, parts.len());
                }
                let _ = std::io::stderr().flush();
                return Ok(Some(asked));
            }
            if approving {
                errp!("read the rest first: Enter for part {} of {} ", *next + 1, parts.len());
                let _ = std::io::stderr().flush();
                return Ok(Some(asked));
            }
        } else if approving && asked.in_part && asked.seal.is_none() {
            let rest = match super::rest::fetch(self.state, &asked.id) {
                Ok(rest) => rest,
                Err(e) => {
                    errln!("bx: the rest of approval {}: {e:#}", term::one_line(&asked.id));
                    ask_for(&asked.id);
                    return Ok(Some(asked));
                }
            };
            errln!("the rest of approval {}, escaped:", term::one_line(&asked.id));
            asked.seal = rest.seal;
            let paged = super::rest::paged() && rest.parts.len() > 1;
            let shown = if paged { &rest.parts[..1] } else { &rest.parts[..] };
            for part in shown {
                errp!("{}", term::shown(part));
            }
            if paged {
                errp!("(Enter for part 2 of {}) ", rest.parts.len());
                asked.paging = Some((rest.parts, 1));
            } else {
                errp!("that is the whole call; ");
                ask_for(&asked.id);
            }
            let _ = std::io::stderr().flush();
            return Ok(Some(asked));
        }
        let (answer, scope) = bx_broker::typed_answer(&asked.id, line);
        // typed_answer never times out; an expiry is the daemon's to decide.
        let Some(answer) = super::approvals::to_wire(answer, &scope, asked.seal.clone()) else {
            return Ok(None);
        };
        self.conn()?.send(Body::AnswerApproval { approval: asked.id, answer })?;
        Ok(None)
    }
}

/// An approval asked at the chat's prompt.
struct Asked {
    id: String,
    /// Its block shows the call in part: approving it shows the rest first.
    in_part: bool,
    /// The rest's parts and the next to show, while the owner pages through them.
    paging: Option<(Vec<String>, usize)>,
    /// The seal the rest ended with, once shown.
    seal: Option<String>,
}

/// The prompt for approval `id`'s answer.
fn ask_for(id: &str) {
    errp!(
        "type {} to approve (with a scope after it for this session's later calls), or a reason to refuse: ",
        term::one_line(id)
    );
    let _ = std::io::stderr().flush();
}

/// What the owner can do next after a turn failed with `code`, as one more line.
fn next_step(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::TurnLimit => "\n    next: rephrase, or raise the [loop] limit in config.toml",
        ErrorCode::Cancelled => "\n    next: send the next message",
        ErrorCode::RepeatedRefusal => {
            "\n    next: say what to do differently, or grant what the call needed (`bx policy explain`)"
        }
        ErrorCode::BadWorkspace => {
            "\n    next: start bx chat in a project directory, or pass --workspace DIR"
        }
        ErrorCode::InferenceUnreachable | ErrorCode::InferenceFailed => {
            "\n    next: `bx doctor` checks the model server; the chat goes on"
        }
        ErrorCode::InferenceBusy | ErrorCode::SessionBusy | ErrorCode::DaemonBusy => {
            "\n    next: wait for the other turn, or talk in another --session"
        }
        ErrorCode::PolicyInvalid => "\n    next: `bx policy check` shows what to fix",
        ErrorCode::NoModel => {
            "\n    next: set [inference] url or launch in config.toml, then restart bx serve"
        }
        ErrorCode::AuditUnavailable => {
            "\n    next: fix the cause, run `bx audit verify`, restart the daemon"
        }
        ErrorCode::SessionDamaged | ErrorCode::CoreUnreadable => {
            "\n    next: fix or move the file named, or talk in another --session"
        }
        ErrorCode::NotOwner => "\n    next: run bx as the user whose state directory this is",
        ErrorCode::BadRequest | ErrorCode::ApprovalUnseen | ErrorCode::Internal => "",
    }
}
