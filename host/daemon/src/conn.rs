//! One client connection: frames in, replies and turn events out. A `send` starts a turn
//! (a `run_tool`, a one-shot call) whose events flow back on this connection while it
//! keeps reading (an inline approval answer or a cancel arrives on the same socket).
//!
//! Every wait is bounded: a frame must arrive whole within [`FRAME_SECS`] of its first
//! byte; a connection with nothing running may sit idle for [`IDLE_SECS`] (less when
//! the daemon needs its place); replies wait in a queue of at most
//! [`MAX_QUEUED_BYTES`], and a client that does not read them is dropped (a call's
//! last reply waits up to [`WRITE_SECS`] for room first).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bx_agent::{Agent, Overlay};
use bx_broker::Answered;
use bx_protocol::{
    Answer, ApprovalSummary, Body, Envelope, ErrorCode, SessionSummary, ToolSummary, VERSION,
};
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixStream;
use tokio::sync::{Notify, mpsc, watch};

use crate::admit::Ticket;
use crate::frames::Frames;

/// Seconds a frame may take to arrive once its first byte has. Without it a client
/// that sends half a frame holds its connection (and its place) for ever.
pub const FRAME_SECS: u64 = 10;
/// Seconds a connection with nothing running may wait for its next frame. Without it
/// idle clients would hold every place; an interactive `bx chat` reconnects when it
/// next has something to say.
pub const IDLE_SECS: u64 = 600;
/// Seconds one frame's write to the client may take. Without it a client that stops
/// reading would hold the writer (and its queue) for ever.
const WRITE_SECS: u64 = 30;
/// Bytes of replies and events queued for one client (8 MiB). A client that sends
/// requests and never reads is dropped at this bound instead of growing the daemon.
pub const MAX_QUEUED_BYTES: usize = 8 << 20;
/// Bytes of calls' results waiting for room in the queue (32 MiB, eight of the largest
/// frames): past it the client is dropped at once, as past the queue's bound, so that a
/// client that reads nothing while it starts calls cannot make the daemon hold their
/// results for [`WRITE_SECS`] each.
const MAX_WAITING_BYTES: usize = 4 * MAX_QUEUED_BYTES;

/// The sending side of a connection: bounded by bytes queued, closed when the client
/// falls too far behind.
#[derive(Clone)]
struct Out {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    queue: Arc<Queue>,
}

/// What the senders of a connection and its writer share.
#[derive(Default)]
struct Queue {
    /// Bytes of frames sent to the writer and not yet written.
    queued: AtomicUsize,
    /// Bytes of results waiting for room ([`Out::send_last`]).
    waiting: AtomicUsize,
    /// Set once the connection takes no more frames (the client fell behind, or the
    /// writer ended).
    overflow: AtomicBool,
    /// Woken when the connection should end.
    closed: Notify,
    /// Woken each time the writer has taken a frame off the queue, and when it ends.
    room: Notify,
}

impl Queue {
    /// The connection takes no more frames: its reader stops and it closes.
    fn fall_behind(&self) {
        self.overflow.store(true, Ordering::Release);
        self.closed.notify_one();
    }
}

impl Out {
    fn new(tx: mpsc::UnboundedSender<Vec<u8>>) -> Out {
        Out { tx, queue: Arc::default() }
    }

    /// Queues a reply or event; a client whose queue is full is dropped.
    fn send(&self, id: u64, msg: Body) {
        let frame = Out::frame(id, msg);
        let len = frame.len();
        let q = &self.queue;
        if q.overflow.load(Ordering::Relaxed)
            || q.queued.fetch_add(len, Ordering::AcqRel) + len > MAX_QUEUED_BYTES
        {
            return q.fall_behind();
        }
        if self.tx.send(frame).is_err() {
            q.closed.notify_one();
        }
    }

    /// Queues a request's last reply, which may be as large as a frame: where the queue
    /// has no room for it yet, it waits for the writer to make room (one such reply at a
    /// time, when they are megabytes each), at most [`WRITE_SECS`] (what the writer
    /// gives the client for one frame) and within [`MAX_WAITING_BYTES`], and only then
    /// drops the client as too far behind. `bx mcp` sends every call of its client on
    /// one connection, and a few results of megabytes at once would otherwise pass the
    /// bound while the client reads them as fast as they come.
    async fn send_last(&self, id: u64, msg: Body) {
        let frame = Out::frame(id, msg);
        let len = frame.len();
        let q = &self.queue;
        if q.waiting.fetch_add(len, Ordering::AcqRel) + len > MAX_WAITING_BYTES {
            q.waiting.fetch_sub(len, Ordering::AcqRel);
            return q.fall_behind();
        }
        let queued = self.wait_for_room(len).await;
        q.waiting.fetch_sub(len, Ordering::AcqRel);
        if !queued {
            return q.fall_behind();
        }
        if self.tx.send(frame).is_err() {
            q.closed.notify_one();
        }
    }

    /// Counts `len` bytes into the queue once they fit (at most half the queue, or all
    /// of an empty one: the rest is left for other requests' small replies and events,
    /// which are not held back); false when the connection ends or [`WRITE_SECS`] pass
    /// first.
    async fn wait_for_room(&self, len: usize) -> bool {
        let q = &self.queue;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(WRITE_SECS);
        let fits = |queued: usize| {
            (queued == 0 || queued + len <= MAX_QUEUED_BYTES / 2).then_some(queued + len)
        };
        loop {
            let room = q.room.notified();
            tokio::pin!(room);
            // Listening before looking: a frame written in between still wakes it.
            room.as_mut().enable();
            if q.overflow.load(Ordering::Acquire) {
                return false;
            }
            if q.queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, fits).is_ok() {
                return true;
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                return false;
            }
        }
    }

    /// `msg` as the frame of a reply to `id`, or, when it is too large for one, the
    /// error that says so.
    fn frame(id: u64, msg: Body) -> Vec<u8> {
        match bx_protocol::encode(&Envelope { v: VERSION, id, msg }) {
            Ok(frame) => frame,
            // A reply too large for a frame (a tool's text output escapes to several
            // times its size) ends its request with an error that says so: dropped
            // silently, it left the client waiting for it with no deadline.
            Err(e) => {
                let why = error(
                    ErrorCode::Internal,
                    format!("the reply could not be sent: {e}"),
                    "docs/runbook.md#reply-too-large",
                );
                // An error of at most MAX_ERROR_BYTES of message always fits.
                bx_protocol::encode(&Envelope { v: VERSION, id, msg: why }).unwrap_or_default()
            }
        }
    }
}

/// The longest error message a reply carries: a message may quote what a client sent
/// (serde names an unknown variant in full), and must not grow with it.
const MAX_ERROR_BYTES: usize = 4 << 10;

fn error(code: ErrorCode, message: String, runbook: &str) -> Body {
    let message = bx_audit::bounded(&message, MAX_ERROR_BYTES);
    Body::Error { code, message, runbook: runbook.to_owned() }
}

/// A name a client sent, as a reply repeats it: bounded, so a reply always fits in a
/// frame (a 4 MiB "id" echoed back made a reply too big to send, and the client waited
/// out its timeout).
fn echoed(name: &str) -> String {
    bx_audit::bounded(name, 64)
}

/// The most bytes an approvals listing may take, well inside a frame.
const MAX_LIST_BYTES: usize = bx_protocol::MAX_FRAME_BYTES / 2;
/// The most bytes of arguments one `approval_args` reply carries: escaped as a JSON
/// string they at most double, so a part always fits in a frame.
const ARGS_PART_BYTES: usize = 1 << 20;

/// Up to [`ARGS_PART_BYTES`] of `args` from `offset`, both ends moved back to character
/// boundaries; and where it starts.
fn args_part(args: &str, offset: u64) -> (String, u64) {
    let mut start = usize::try_from(offset).unwrap_or(usize::MAX).min(args.len());
    while !args.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = start.saturating_add(ARGS_PART_BYTES).min(args.len());
    while !args.is_char_boundary(end) {
        end -= 1;
    }
    (args[start..end].to_owned(), start as u64)
}

/// Messages a control-only connection may send: none of them starts work.
/// Whether two tokens are equal, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn is_control(msg: &Body) -> bool {
    matches!(
        msg,
        Body::Cancel { .. }
            | Body::AnswerApproval { .. }
            | Body::RevokeScopes { .. }
            | Body::EndSession { .. }
            | Body::ListApprovals {}
            | Body::ShowApproval { .. }
            | Body::ListSessions {}
            | Body::ReportGrants { .. }
            | Body::ListTools {}
    )
}

pub(crate) async fn handle(
    agent: Arc<Agent>,
    stream: UnixStream,
    ticket: Ticket,
    control_only: bool,
    mut shutdown: watch::Receiver<bool>,
    token: Arc<str>,
) {
    let (rd, mut wr) = stream.into_split();
    let mut frames = Frames::new(rd, Duration::from_secs(FRAME_SECS));
    let (tx, mut queue) = mpsc::unbounded_channel::<Vec<u8>>();
    let out = Out::new(tx);
    let writer = {
        let shared = Arc::clone(&out.queue);
        tokio::spawn(async move {
            while let Some(frame) = queue.recv().await {
                let wrote =
                    tokio::time::timeout(Duration::from_secs(WRITE_SECS), wr.write_all(&frame))
                        .await;
                shared.queued.fetch_sub(frame.len(), Ordering::AcqRel);
                shared.room.notify_waiters();
                if !matches!(wrote, Ok(Ok(()))) {
                    break;
                }
            }
            // Written out, or failed: a last reply waiting for room waits no more.
            shared.fall_behind();
            shared.room.notify_waiters();
        })
    };
    let ticket = Arc::new(ticket);
    let mut turns = tokio::task::JoinSet::new();
    let mut owner = false;
    loop {
        // Nothing running: the wait for the next frame is bounded.
        let idle = !ticket.is_busy() && turns.is_empty();
        // Reading a frame does not make the connection busy: a client that sends a byte
        // and stalls must stay evictable, or a few of them, reconnecting, would hold
        // every place (the frame's own deadline ends the stall either way, and the
        // frame's bytes and deadline survive going round for a finished turn).
        let frame = tokio::select! {
            f = frames.next() => f,
            () = ticket.evict.notified() => break,
            () = out.queue.closed.notified() => break,
            () = tokio::time::sleep(Duration::from_secs(IDLE_SECS)), if idle => break,
            Some(_) = turns.join_next(), if !turns.is_empty() => continue,
            _ = shutdown.changed() => break,
        };
        let envelope = match frame {
            Some(Ok(envelope)) => envelope,
            None => break, // closed between frames
            Some(Err(why)) => {
                // A bad frame ends the connection: the stream cannot be resynchronised.
                out.send(0, error(ErrorCode::BadRequest, why.to_string(), "docs/wire.md"));
                break;
            }
        };
        let id = envelope.id;
        // The first frame is the token from the state directory, or nothing is done.
        if !owner {
            match &envelope.msg {
                Body::Hello { token: given } if same(given.as_bytes(), token.as_bytes()) => {
                    owner = true;
                    continue;
                }
                _ => {
                    let why = "this connection did not begin with the daemon's token (bx.sock.token in the state directory); only bx may use the socket";
                    out.send(
                        id,
                        error(ErrorCode::NotOwner, why.into(), "docs/runbook.md#not-owner"),
                    );
                    break;
                }
            }
        }
        if control_only && !is_control(&envelope.msg) {
            let why = format!(
                "the daemon is serving its {} connections, all busy; this one may only answer approvals, cancel and list",
                agent.max_connections()
            );
            out.send(id, error(ErrorCode::DaemonBusy, why, "docs/runbook.md#daemon-busy"));
            continue;
        }
        match envelope.msg {
            Body::Send { session, text, require_tool, workspace } => {
                let (agent, out, busy) = (Arc::clone(&agent), out.clone(), ticket.busy());
                turns.spawn(async move {
                    turn(agent, out, id, session, text, require_tool, workspace).await;
                    drop(busy);
                });
            }
            Body::RunTool { session, tool, args, overlay, workspace, quiet, traceparent } => {
                let (agent, out, busy) = (Arc::clone(&agent), out.clone(), ticket.busy());
                let call = ByHand { session, tool, args, overlay, workspace, quiet, traceparent };
                turns.spawn(async move {
                    run_tool(agent, out, id, call).await;
                    drop(busy);
                });
            }
            Body::RebuildSession { session } => {
                let msg = match agent.rebuild_session(&session) {
                    Ok(body) => body,
                    Err(e) => error(e.code(), e.to_string(), e.runbook()),
                };
                out.send(id, msg);
            }
            Body::RevokeScopes { session, answer } => {
                let msg = match agent.end_scopes(&session, answer.as_deref(), false) {
                    Ok(body) => body,
                    Err(e) => error(e.code(), e.to_string(), e.runbook()),
                };
                out.send(id, msg);
            }
            Body::EndSession { session } => {
                let msg = match agent.end_scopes(&session, None, true) {
                    Ok(body) => body,
                    Err(e) => error(e.code(), e.to_string(), e.runbook()),
                };
                out.send(id, msg);
            }
            Body::Cancel { session } => {
                let msg = if agent.cancel(&session) {
                    Body::Ok {}
                } else {
                    Body::Refused {
                        reason: format!("session {} has no turn running", echoed(&session)),
                    }
                };
                out.send(id, msg);
            }
            Body::AnswerApproval { approval, answer } => {
                let (approve, reason, scope, seen) = match answer {
                    Answer::Approve { scope, seen } => (true, String::new(), scope, seen),
                    Answer::Refuse { reason, scope } => (false, reason, scope, None),
                };
                let answered = agent.approvals().answer_as(
                    &approval,
                    approve,
                    reason,
                    scope.as_deref(),
                    seen.as_deref(),
                );
                let msg = match answered {
                    Err(why) => Body::Refused { reason: why.to_string() },
                    Ok(Answered::Taken(_)) => Body::Ok {},
                    Ok(Answered::Unseen(_)) => error(
                        ErrorCode::ApprovalUnseen,
                        format!(
                            "approval {} shows the call in part, and was approved without the seal at the end of the rest: read the rest (`bx approve {0}` shows it, then takes the id); the call still waits",
                            echoed(&approval)
                        ),
                        "docs/runbook.md#approval-unseen",
                    ),
                    Ok(Answered::AlreadyAnswered) => Body::Refused {
                        reason: format!("approval {} already answered", echoed(&approval)),
                    },
                    Ok(Answered::Expired(_)) => Body::Refused {
                        reason: format!(
                            "approval {} expired; the call was refused",
                            echoed(&approval)
                        ),
                    },
                    Ok(Answered::Unknown) => Body::Refused {
                        reason: format!("no approval {} is pending", echoed(&approval)),
                    },
                };
                out.send(id, msg);
            }
            Body::ListApprovals {} => {
                let now = bx_agent::now_ms();
                let waiting = agent.approvals().list();
                let total = waiting.len();
                // Oldest first, as many as fit in one frame with room to spare (each
                // block is bounded, so only hundreds of waiting calls reach this).
                let mut room = MAX_LIST_BYTES;
                let items: Vec<ApprovalSummary> = waiting
                    .into_iter()
                    .map(|w| ApprovalSummary {
                        approval: w.pending.id.clone(),
                        session: w.session,
                        tool: w.pending.request.call.tool.clone(),
                        expires_in_s: w.pending.expires_ms.saturating_sub(now) / 1000,
                        scopes: bx_broker::offers(&w.pending.request, &w.pending.args)
                            .into_iter()
                            .map(|(name, _)| name.to_owned())
                            .collect(),
                        block: w.block,
                    })
                    .take_while(|a| {
                        // JSON escaping at most doubles what the block holds, plus a
                        // few hundred bytes of the other fields.
                        let size = 2 * (a.block.len() + a.session.len() + a.tool.len()) + 256;
                        room = room.saturating_sub(size);
                        room > 0
                    })
                    .collect();
                let more = (total - items.len()) as u64;
                out.send(id, Body::Approvals { items, more });
            }
            Body::ShowApproval { approval, offset } => {
                let msg = match agent.approvals().waiting_entry(&approval) {
                    Some(pending) => {
                        let args = &pending.args;
                        let (text, start) = args_part(args, offset);
                        // The seal comes only once the parts asked for cover the
                        // arguments from their first byte to their last.
                        let end = start as usize + text.len();
                        let seal = agent.approvals().shown(&pending.id, start as usize, end);
                        Body::ApprovalArgs {
                            approval: approval.trim().to_ascii_lowercase(),
                            offset: start,
                            total: args.len() as u64,
                            text,
                            seal,
                        }
                    }
                    None => Body::Refused {
                        reason: format!("no approval {} is waiting", echoed(&approval)),
                    },
                };
                out.send(id, msg);
            }
            Body::ListSessions {} => out.send(id, sessions(&agent)),
            Body::ReportGrants { session } => out.send(id, grants(&agent, session)),
            Body::ListTools {} => {
                let msg = match agent.toolset() {
                    Ok(set) => Body::Tools {
                        items: set
                            .constrained_defs()
                            .into_iter()
                            .filter_map(|d| {
                                let tool = set.get(&d.name)?;
                                Some(ToolSummary {
                                    digest: tool.digest().to_owned(),
                                    parameters: d.parameters.to_string(),
                                    description: d.description,
                                    name: d.name,
                                })
                            })
                            .collect(),
                    },
                    Err(e) => error(ErrorCode::Internal, e.to_string(), e.runbook()),
                };
                out.send(id, msg);
            }
            other => {
                let why = format!(
                    "{} is a message the daemon sends, not one it takes",
                    other.type_name()
                );
                out.send(id, error(ErrorCode::BadRequest, why, "docs/wire.md"));
            }
        }
    }
    // The client went away, fell behind, idled out or was evicted, or the daemon is
    // stopping: running turns finish (or are cancelled by the shutdown) and record
    // their ends; their events go nowhere.
    drop(frames);
    while turns.join_next().await.is_some() {}
    drop(out);
    let _ = writer.await;
}

/// Forwards a request's events to `out` as replies to request `id`, as they come: those
/// that `keep` lets through.
fn forwarder(
    out: &Out,
    id: u64,
    keep: fn(&Body) -> bool,
) -> (bx_agent::Events, tokio::task::JoinHandle<()>) {
    let (events, mut rx) = mpsc::unbounded_channel::<Body>();
    let out = out.clone();
    let forward = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            if keep(&msg) {
                out.send(id, msg);
            }
        }
    });
    (events, forward)
}

fn every(_: &Body) -> bool {
    true
}

fn approvals_only(msg: &Body) -> bool {
    matches!(msg, Body::ApprovalNeeded { .. })
}

async fn turn(
    agent: Arc<Agent>,
    out: Out,
    id: u64,
    session: String,
    text: String,
    require_tool: bool,
    workspace: Option<String>,
) {
    let (events, forward) = forwarder(&out, id, every);
    let result =
        unwinding(agent.turn(&session, &text, require_tool, workspace.as_deref(), &events)).await;
    drop(events);
    let _ = forward.await;
    match result {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => out.send(id, error(e.code(), e.to_string(), e.runbook())),
        Err(bug) => out.send(id, bug),
    }
}

/// Runs `f`; a panic inside it becomes the error that ends the request, with its runbook
/// entry, so a bug ends one turn with an error event instead of leaving its client waiting
/// with no reply (found fuzzing: a panic in a stream parser did that). What the turn held
/// (its session, its slot) is released as the future is dropped.
async fn unwinding<T>(f: impl std::future::Future<Output = T>) -> Result<T, Body> {
    use futures_util::FutureExt as _;
    std::panic::AssertUnwindSafe(f).catch_unwind().await.map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        error(
            ErrorCode::Internal,
            format!("the request stopped on a bug in bx: {}", bx_audit::bounded(&what, 1024)),
            "docs/runbook.md#internal-error",
        )
    })
}

/// A `run_tool` request's fields.
struct ByHand {
    session: String,
    tool: String,
    args: String,
    overlay: Overlay,
    workspace: Option<String>,
    quiet: bool,
    traceparent: Option<String>,
}

async fn run_tool(agent: Arc<Agent>, out: Out, id: u64, call: ByHand) {
    use bx_telemetry::FutureExt as _;
    let ByHand { session, tool, args, overlay, workspace, quiet, traceparent } = call;
    let (events, forward) = forwarder(&out, id, if quiet { approvals_only } else { every });
    // The client's request (`bx mcp`'s span) is the call's parent, when it sent one
    // (bounded and checked there).
    let cx = bx_telemetry::continued(traceparent.as_deref(), None);
    let run = agent.run_tool(&session, &tool, &args, &overlay, workspace.as_deref(), &events);
    let result = unwinding(run.with_context(cx)).await;
    drop(events);
    let _ = forward.await;
    match result {
        Ok(Ok(output)) => out.send_last(id, output).await,
        Ok(Err(e)) => out.send(id, error(e.code(), e.to_string(), e.runbook())),
        Err(bug) => out.send(id, bug),
    }
}

fn sessions(agent: &Agent) -> Body {
    match agent.trust().ledger().list() {
        Ok(ids) => Body::Sessions {
            items: ids
                .into_iter()
                .map(|id| {
                    let taint = agent
                        .trust()
                        .ledger()
                        .files()
                        .taint(&id)
                        .map_or(bx_broker::Label::TOP, |(t, _)| t);
                    SessionSummary {
                        busy: agent.is_busy(&id),
                        taint: taint.to_string(),
                        workspace: agent
                            .trust()
                            .ledger()
                            .workspace_of(&id)
                            .map(|w| w.display().to_string()),
                        session: id,
                    }
                })
                .collect(),
        },
        Err(e) => error(ErrorCode::Internal, e.to_string(), "docs/runbook.md#internal-error"),
    }
}

fn grants(agent: &Agent, session: String) -> Body {
    let policy = match agent.policy() {
        Ok(p) => p,
        Err(why) => {
            return error(
                ErrorCode::PolicyInvalid,
                why.to_string(),
                "docs/runbook.md#policy-invalid",
            );
        }
    };
    let taint =
        agent.trust().ledger().files().taint(&session).map_or(bx_broker::Label::TOP, |(t, _)| t);
    let mut lines = vec![format!("session {session}: taint {taint}")];
    lines.extend(policy.grants().iter().map(ToString::to_string));
    lines.extend(policy.denies().iter().map(ToString::to_string));
    Body::Grants { session, lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply too large for a frame ends its request with an error naming why, with
    /// the request's id; it used to be dropped, and the client waited for ever.
    #[test]
    fn a_reply_too_large_for_a_frame_is_answered_with_an_error() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let out = Out::new(tx);
        // A text result goes in the frame as it is: one byte over the limit is too large.
        let text = "\u{1}".repeat(bx_protocol::MAX_FRAME_BYTES + 1);
        let msg = Body::ToolOutput {
            call: "c".into(),
            outcome: bx_protocol::RunOutcome::Text,
            label: String::new(),
            text,
            stderr: String::new(),
        };
        out.send(7, msg);
        let frame = rx.try_recv().unwrap();
        let env = bx_protocol::decode(&frame).unwrap();
        assert_eq!(env.id, 7);
        let Body::Error { message, runbook, .. } = env.msg else { panic!("{:?}", env.msg) };
        assert!(message.contains("over the 4194304-byte limit"), "{message}");
        assert_eq!(runbook, "docs/runbook.md#reply-too-large");
    }

    /// A call's last reply waits for room in a full queue instead of dropping the client,
    /// goes once the writer has made room, and takes at most half of a queue in use; past
    /// the bytes that may wait, or on a connection that takes no more frames, it is let
    /// go at once.
    #[tokio::test]
    async fn a_last_reply_waits_for_room_and_small_ones_keep_theirs() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let out = Out::new(tx);
        let output = |text: &str| Body::ToolOutput {
            call: "c".into(),
            outcome: bx_protocol::RunOutcome::Text,
            label: String::new(),
            text: text.into(),
            stderr: String::new(),
        };
        // A queue that is in use, with less than half of it free.
        let taken = MAX_QUEUED_BYTES / 2;
        out.queue.queued.store(taken, Ordering::Release);
        let waiting = tokio::spawn({
            let out = out.clone();
            let big = "x".repeat(1 << 20);
            async move { out.send_last(7, output(&big)).await }
        });
        // A small reply of another request still goes, and the last one still waits.
        out.send(8, output("small"));
        assert_eq!(bx_protocol::decode(&rx.recv().await.unwrap()).unwrap().id, 8);
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "went past the bound");
        assert!(!out.queue.overflow.load(Ordering::Acquire), "the client was dropped");
        // The writer takes what was queued: the last reply goes.
        out.queue.queued.store(0, Ordering::Release);
        out.queue.room.notify_waiters();
        waiting.await.unwrap();
        let env = bx_protocol::decode(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(env.id, 7);
        assert!(!out.queue.overflow.load(Ordering::Acquire));
        assert_eq!(out.queue.waiting.load(Ordering::Acquire), 0);
        // Past the bytes that may wait: the client is dropped at once, nothing waits.
        out.queue.queued.store(MAX_QUEUED_BYTES, Ordering::Release);
        out.queue.waiting.store(MAX_WAITING_BYTES - 10, Ordering::Release);
        let at_once = futures_util::FutureExt::now_or_never(out.send_last(10, output("over")));
        assert!(at_once.is_some(), "it waited");
        assert!(out.queue.overflow.load(Ordering::Acquire), "the client was kept");
        assert_eq!(out.queue.waiting.load(Ordering::Acquire), MAX_WAITING_BYTES - 10);
        assert!(rx.try_recv().is_err());
        out.queue.overflow.store(false, Ordering::Release);
        out.queue.waiting.store(0, Ordering::Release);
        // A connection that takes no more frames: nothing is queued, nothing waits.
        out.queue.queued.store(taken, Ordering::Release);
        out.queue.fall_behind();
        out.send_last(9, output("late")).await;
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_panic_in_a_request_is_its_error_with_the_runbook_entry() {
        let ok = unwinding(async { 7 }).await;
        assert!(matches!(ok, Ok(7)));
        let bug = unwinding(async {
            if std::hint::black_box(true) {
                panic!("byte index 1 is not a char boundary");
            }
        })
        .await;
        let Err(Body::Error { message, runbook, .. }) = bug else { panic!("{bug:?}") };
        assert!(message.contains("not a char boundary"), "{message}");
        assert_eq!(runbook, "docs/runbook.md#internal-error");
    }
}
