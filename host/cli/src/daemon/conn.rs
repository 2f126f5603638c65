//! One client connection: frames in, replies and turn events out. A `send` starts a turn
//! whose events flow back on this connection while it keeps reading (an inline approval
//! answer or a cancel arrives on the same socket).

use std::sync::Arc;

use bx_agent::Agent;
use bx_broker::Answered;
use bx_protocol::{
    Answer, ApprovalSummary, Body, Envelope, ErrorCode, SessionSummary, ToolSummary, VERSION,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedReadHalf;
use tokio::sync::{mpsc, watch};

type Out = mpsc::UnboundedSender<Envelope>;

fn reply(out: &Out, id: u64, msg: Body) {
    let _ = out.send(Envelope { v: VERSION, id, msg });
}

fn error(code: ErrorCode, message: String, runbook: &str) -> Body {
    Body::Error { code, message, runbook: runbook.to_owned() }
}

/// Reads one frame; `None` at a clean end between frames.
async fn read(rd: &mut OwnedReadHalf) -> Result<Option<Envelope>, String> {
    let mut head = [0u8; 4];
    match rd.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let len = bx_protocol::body_len(head).map_err(|e| e.to_string())?;
    let mut body = vec![0; len];
    rd.read_exact(&mut body).await.map_err(|e| format!("truncated frame: {e}"))?;
    bx_protocol::parse_body(&body).map(Some).map_err(|e| e.to_string())
}

pub(super) async fn handle(
    agent: Arc<Agent>,
    stream: UnixStream,
    mut shutdown: watch::Receiver<bool>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let (out, mut queue) = mpsc::unbounded_channel::<Envelope>();
    let writer = tokio::spawn(async move {
        while let Some(envelope) = queue.recv().await {
            let Ok(frame) = bx_protocol::encode(&envelope) else { continue };
            if wr.write_all(&frame).await.is_err() {
                break;
            }
        }
    });
    let mut turns = tokio::task::JoinSet::new();
    loop {
        let frame = tokio::select! {
            f = read(&mut rd) => f,
            _ = shutdown.changed() => break,
        };
        let envelope = match frame {
            Ok(Some(envelope)) => envelope,
            Ok(None) => break,
            Err(why) => {
                // A bad frame ends the connection: the stream cannot be resynchronised.
                let msg = error(ErrorCode::BadRequest, why, "docs/wire.md");
                reply(&out, 0, msg);
                break;
            }
        };
        let id = envelope.id;
        match envelope.msg {
            Body::Send { session, text, require_tool } => {
                let (agent, out) = (Arc::clone(&agent), out.clone());
                turns.spawn(async move { turn(agent, out, id, session, text, require_tool).await });
            }
            Body::Cancel { session } => {
                let msg = if agent.cancel(&session) {
                    Body::Ok {}
                } else {
                    Body::Refused { reason: format!("session {session} has no turn running") }
                };
                reply(&out, id, msg);
            }
            Body::AnswerApproval { approval, answer } => {
                let answer = match answer {
                    Answer::Approve {} => bx_broker::Answer::Approve,
                    Answer::Refuse { reason } => bx_broker::Answer::Refuse(reason),
                };
                let msg = match agent.approvals().answer(&approval, answer) {
                    Answered::Taken(_) => Body::Ok {},
                    Answered::AlreadyAnswered => {
                        Body::Refused { reason: format!("approval {approval} already answered") }
                    }
                    Answered::Expired(_) => Body::Refused {
                        reason: format!("approval {approval} expired; the call was refused"),
                    },
                    Answered::Unknown => {
                        Body::Refused { reason: format!("no approval {approval} is pending") }
                    }
                };
                reply(&out, id, msg);
            }
            Body::ListApprovals {} => {
                let now = bx_agent::now_ms();
                let items = agent
                    .approvals()
                    .list()
                    .into_iter()
                    .map(|w| ApprovalSummary {
                        approval: w.pending.id.clone(),
                        session: w.session,
                        tool: w.pending.request.call.tool.clone(),
                        expires_in_s: w.pending.expires_ms.saturating_sub(now) / 1000,
                        block: w.block,
                    })
                    .collect();
                reply(&out, id, Body::Approvals { items });
            }
            Body::ListSessions {} => reply(&out, id, sessions(&agent)),
            Body::ReportGrants { session } => reply(&out, id, grants(&agent, session)),
            Body::ListTools {} => {
                let msg = match agent.toolset() {
                    Ok(set) => Body::Tools {
                        items: set
                            .defs()
                            .iter()
                            .filter_map(|d| {
                                let tool = set.get(&d.name)?;
                                Some(ToolSummary {
                                    name: d.name.clone(),
                                    digest: tool.digest().to_owned(),
                                })
                            })
                            .collect(),
                    },
                    Err(e) => error(ErrorCode::Internal, e.to_string(), e.runbook()),
                };
                reply(&out, id, msg);
            }
            other => {
                let why = format!(
                    "{} is a message the daemon sends, not one it takes",
                    other.type_name()
                );
                reply(&out, id, error(ErrorCode::BadRequest, why, "docs/wire.md"));
            }
        }
    }
    // The client went away or the daemon is stopping: running turns finish (or are
    // cancelled by the shutdown) and record their ends; their events go nowhere.
    while turns.join_next().await.is_some() {}
    drop(out);
    let _ = writer.await;
}

async fn turn(
    agent: Arc<Agent>,
    out: Out,
    id: u64,
    session: String,
    text: String,
    require_tool: bool,
) {
    let (events, mut rx) = mpsc::unbounded_channel::<Body>();
    let forward = {
        let out = out.clone();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                reply(&out, id, msg);
            }
        })
    };
    let result = agent.turn(&session, &text, require_tool, &events).await;
    drop(events);
    let _ = forward.await;
    if let Err(e) = result {
        reply(&out, id, error(e.code(), e.to_string(), e.runbook()));
    }
}

fn sessions(agent: &Agent) -> Body {
    match agent.sessions().list() {
        Ok(ids) => Body::Sessions {
            items: ids
                .into_iter()
                .map(|id| {
                    let taint = agent
                        .sessions()
                        .taint(&id)
                        .map_or_else(|_| bx_broker::Label::TOP, |(t, _)| t);
                    SessionSummary {
                        busy: agent.is_busy(&id),
                        taint: taint.to_string(),
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
        Err(why) => return error(ErrorCode::PolicyInvalid, why, "docs/runbook.md#policy-invalid"),
    };
    let taint = agent.sessions().taint(&session).map_or(bx_broker::Label::TOP, |(t, _)| t);
    let mut lines = vec![format!("session {session}: taint {taint}")];
    lines.extend(policy.grants().iter().map(ToString::to_string));
    lines.extend(policy.denies().iter().map(ToString::to_string));
    Body::Grants { session, lines }
}
