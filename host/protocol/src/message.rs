//! Messages: the envelope and every body type, client to daemon and back.

use serde::{Deserialize, Serialize};

/// The protocol version this bx speaks.
pub const VERSION: u32 = 1;

/// One message on the socket.
///
/// On the wire, a `tool_output` carries its result so that it is not escaped into a JSON
/// string and unescaped again (docs/wire.md): one whose outcome is `json` as the
/// envelope's `output`, the JSON as it is; in a frame, one whose outcome is `text` as the
/// bytes after the envelope's JSON, their count in `attached`. Either way the message's
/// `text` is empty. Every other message, and a `json` text that is not one JSON value,
/// goes as its fields say; so does a `text` result where there is no frame (plain JSON).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Wire")]
pub struct Envelope {
    /// Protocol version ([`VERSION`]).
    pub v: u32,
    /// Chosen by the client for a request; a reply or event carries the id of the
    /// request it belongs to.
    pub id: u64,
    /// What the message says.
    pub msg: Body,
}

/// An envelope as the wire has it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Wire {
    v: u32,
    id: u64,
    msg: Body,
    // `null` is a value here (a result of `null`), not an absent field.
    #[serde(default, deserialize_with = "present")]
    output: Option<Box<serde_json::value::RawValue>>,
    /// Bytes of the message's text that follow the envelope's JSON in its frame
    /// (`null` is not a count, and not an absent field either).
    #[serde(default, deserialize_with = "count")]
    attached: Option<usize>,
}

/// A field that is there, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<serde_json::value::RawValue>>, D::Error> {
    Box::<serde_json::value::RawValue>::deserialize(d).map(Some)
}

/// A count that is there.
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    usize::deserialize(d).map(Some)
}

/// The same, borrowed, to write.
#[derive(Serialize)]
struct WireOut<'a> {
    v: u32,
    id: u64,
    msg: &'a Body,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attached: Option<usize>,
}

/// A result carried where it does not belong, or not as its envelope says.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StrayOutput {
    /// `output` beside a message other than a `json` tool output, or beside a text of
    /// its own.
    #[error("`output` belongs only to a tool_output of outcome json, whose text is then empty")]
    Output,
    /// `attached` beside a message other than a `text` tool output, beside a text of its
    /// own, or outside a frame.
    #[error(
        "`attached` belongs only to a tool_output of outcome text, whose text is then empty, \
         in a frame"
    )]
    Attached,
    /// The frame's bytes after the envelope are not the count `attached` gives.
    #[error("`attached` says {said} bytes follow the envelope, and the frame has {found}")]
    Length {
        /// What `attached` says.
        said: usize,
        /// What the frame has.
        found: usize,
    },
    /// The bytes after the envelope are not UTF-8.
    #[error("the text attached to the envelope is not UTF-8 (at byte {at})")]
    NotUtf8 {
        /// Where the first bad byte is.
        at: usize,
    },
}

impl TryFrom<Wire> for Envelope {
    type Error = StrayOutput;

    fn try_from(wire: Wire) -> Result<Envelope, StrayOutput> {
        Envelope::from_wire(wire, None)
    }
}

impl Wire {
    /// Whether bytes after the envelope's JSON are its text (`attached`).
    pub(crate) fn attaches(&self) -> bool {
        self.attached.is_some()
    }
}

impl Envelope {
    /// The envelope `wire` says, with `after`, the bytes its frame holds after its JSON
    /// (`None` outside a frame, where nothing can be attached).
    pub(crate) fn from_wire(wire: Wire, after: Option<&[u8]>) -> Result<Envelope, StrayOutput> {
        let Wire { v, id, mut msg, output, attached } = wire;
        if let Some(output) = output {
            match &mut msg {
                Body::ToolOutput { outcome: RunOutcome::Json, text, .. } if text.is_empty() => {
                    *text = String::from(Box::<str>::from(output));
                }
                _ => return Err(StrayOutput::Output),
            }
        }
        if let Some(said) = attached {
            let (Body::ToolOutput { outcome: RunOutcome::Text, text, .. }, Some(after)) =
                (&mut msg, after)
            else {
                return Err(StrayOutput::Attached);
            };
            if !text.is_empty() {
                return Err(StrayOutput::Attached);
            }
            if after.len() != said {
                return Err(StrayOutput::Length { said, found: after.len() });
            }
            *text = std::str::from_utf8(after)
                .map_err(|e| StrayOutput::NotUtf8 { at: e.valid_up_to() })?
                .to_owned();
        }
        Ok(Envelope { v, id, msg })
    }

    /// Writes the envelope as a frame's body: a `text` tool output's text after the JSON,
    /// as it is, and everything else as [`Serialize`] writes it.
    pub(crate) fn write_body(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let Envelope { v, id, msg } = self;
        if let Body::ToolOutput { outcome: RunOutcome::Text, text, .. } = msg {
            let head = WireOut {
                v: *v,
                id: *id,
                msg: &msg.without_text(),
                output: None,
                attached: Some(text.len()),
            };
            serde_json::to_writer(&mut *out, &head)?;
            out.extend_from_slice(text.as_bytes());
            return Ok(());
        }
        serde_json::to_writer(out, self)
    }
}

impl Serialize for Envelope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Envelope { v, id, msg } = self;
        if let Body::ToolOutput { outcome: RunOutcome::Json, text, .. } = msg
            && let Some(raw) = one_value(text)
        {
            let msg = msg.without_text();
            let out = WireOut { v: *v, id: *id, msg: &msg, output: Some(raw), attached: None };
            return out.serialize(s);
        }
        WireOut { v: *v, id: *id, msg, output: None, attached: None }.serialize(s)
    }
}

/// `text` as a raw JSON value, when it is exactly one (no space around it, which the
/// raw form would drop).
fn one_value(text: &str) -> Option<&serde_json::value::RawValue> {
    let raw: &serde_json::value::RawValue = serde_json::from_str(text).ok()?;
    (raw.get().len() == text.len()).then_some(raw)
}

/// How the owner answers an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// Run the call.
    Approve {
        /// With a scope (`args`, `path`, `path=/dir` or `host`), the session's later calls
        /// that scope covers too; none for this call only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        /// For a block shown in part: the seal that the end of its rest gave
        /// ([`Body::ApprovalArgs`]), which shows the rest was shown; without it such an
        /// approval is not taken ([`ErrorCode::ApprovalUnseen`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seen: Option<String>,
    },
    /// Do not run it; the reason reaches the model.
    Refuse {
        /// Why.
        reason: String,
        /// With a scope, refuse the session's later calls that scope covers too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
}

/// Error codes; each maps to a runbook entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The audit log cannot record.
    AuditUnavailable,
    /// The policy is invalid and none was ever valid.
    PolicyInvalid,
    /// The inference server cannot be reached.
    InferenceUnreachable,
    /// Every slot is busy and the queue is full.
    InferenceBusy,
    /// The session already has a turn running.
    SessionBusy,
    /// The session's transcript cannot be read back.
    SessionDamaged,
    /// The owner's `core.md` exists but cannot be read.
    CoreUnreadable,
    /// The turn hit a limit (tool calls, tokens or wall time).
    TurnLimit,
    /// The turn was cancelled (by the owner, or by the daemon shutting down).
    Cancelled,
    /// The inference server answered, but not with a usable reply.
    InferenceFailed,
    /// The daemon is at its connection bound with every connection busy; this one may
    /// only answer approvals and list things.
    DaemonBusy,
    /// No model server is configured: tools work, turns do not.
    NoModel,
    /// The model proposed a call again after it was refused in the same turn.
    RepeatedRefusal,
    /// The workspace a client named cannot be one (not an absolute, real directory).
    BadWorkspace,
    /// The request was malformed.
    BadRequest,
    /// The connection did not begin with the daemon's token: only a process that reads
    /// bx's state directory may use the socket (an upstream MCP server, confined away
    /// from it, may not).
    NotOwner,
    /// An approval of a block shown in part came without the seal at the end of its
    /// rest: the owner was not shown all of the call, and it still waits.
    ApprovalUnseen,
    /// Anything else.
    Internal,
}

/// A pending approval, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSummary {
    /// The id to answer with.
    pub approval: String,
    /// The session it belongs to.
    pub session: String,
    /// The tool.
    pub tool: String,
    /// Seconds until it expires.
    pub expires_in_s: u64,
    /// The whole block, escaped: what the owner approves.
    pub block: String,
    /// The scopes the block offers, by the name an answer gives (`args`, `path`,
    /// `host`); none for a call no scope can answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// A session, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSummary {
    /// Its id.
    pub session: String,
    /// Its taint, as `confidentiality/integrity`.
    pub taint: String,
    /// Whether a turn is running.
    pub busy: bool,
    /// The directory it works in, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// An installed tool, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSummary {
    /// Its name.
    pub name: String,
    /// Its digest.
    pub digest: String,
    /// What it does, from its `describe` (empty from a daemon that sends none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The JSON Schema of its arguments, as JSON text, path arguments described as
    /// relative to the session's workspace (empty from a daemon that sends none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parameters: String,
}

/// What a one-shot call (`run_tool`) added by hand on top of the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    /// Paths to read under.
    pub read: Vec<String>,
    /// Paths to read and write under.
    pub write: Vec<String>,
    /// Hosts to fetch from.
    pub hosts: Vec<String>,
    /// Paths never reached.
    pub deny: Vec<String>,
}

impl Overlay {
    /// Whether it adds nothing.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty()
            && self.write.is_empty()
            && self.hosts.is_empty()
            && self.deny.is_empty()
    }
}

/// How a one-shot call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// It returned JSON.
    Json,
    /// It returned text.
    Text,
    /// The broker or the owner refused it; it did not run.
    Refused,
    /// Every call is refused until the owner acts (no valid policy); it did not run.
    Unavailable,
    /// It ran, and the host refused one of its operations.
    HostDenied,
    /// It ran, and refused its arguments.
    InvalidArgs,
    /// It ran, and failed.
    Failed,
    /// It ran, and its output was too large.
    OutputTooLarge,
    /// A runtime limit stopped it.
    Limit,
    /// It trapped or the host faulted.
    Stopped,
}

/// Token counts of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnUsage {
    /// Prompt tokens.
    pub prompt: u64,
    /// Prompt tokens reused from the server's cache.
    pub cached: u64,
    /// Generated tokens.
    pub completion: u64,
}

/// Every message type. `type` names it on the wire; the other fields sit beside it.
/// Variants without fields are written `Name {}`: serde refuses unknown fields only for
/// struct variants of an internally tagged enum, never for unit ones.
/// (Not flattened into the envelope: serde cannot refuse unknown fields through a
/// flatten, and refusing them is the point.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    // Client to daemon.
    /// The first frame of every connection: the daemon's token, read from the state
    /// directory (`bx.sock.token`). Nothing is answered; a wrong or missing token ends
    /// the connection with `not_owner`.
    Hello {
        /// The token.
        token: String,
    },
    /// Send the owner's message to a session (starts a turn).
    Send {
        /// The session.
        session: String,
        /// The text.
        text: String,
        /// The model's first reply must be a tool call.
        require_tool: bool,
        /// The directory the session works in, for a session this creates: relative
        /// paths in its calls resolve against it. A session keeps the one it was
        /// created with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<String>,
    },
    /// Cancel the session's running turn.
    Cancel {
        /// The session.
        session: String,
    },
    /// Answer an approval by its id.
    AnswerApproval {
        /// The approval id.
        approval: String,
        /// The answer.
        answer: Answer,
    },
    /// List pending approvals.
    ListApprovals {},
    /// A waiting approval's whole arguments, from byte `offset` (`bx approvals show`):
    /// a block shows a long argument in part, and arguments can be bigger than a frame.
    ShowApproval {
        /// The approval id.
        approval: String,
        /// Where to start, in bytes of the arguments' text.
        offset: u64,
    },
    /// List sessions.
    ListSessions {},
    /// Report what a session's calls may reach.
    ReportGrants {
        /// The session.
        session: String,
    },
    /// List installed tools.
    ListTools {},
    /// Run one tool call by hand (`bx tool run`) through the daemon's trust path.
    RunTool {
        /// The session whose taint the call sees and raises.
        session: String,
        /// The tool.
        tool: String,
        /// The arguments, a JSON object as text.
        args: String,
        /// Grants added by hand on top of the policy.
        overlay: Overlay,
        /// The session's workspace, as for [`Body::Send`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<String>,
        /// Only `approval_needed` and the outcome come back, not the call's other
        /// events: for a client that shows nothing else (`bx mcp`), each event spared is
        /// a write and a wake-up on both sides.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        quiet: bool,
        /// The W3C `traceparent` of the client's request (`bx mcp`'s span): the call's
        /// span continues its trace (docs/telemetry.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    /// Recompute a session's taint from the audit log (`bx session rebuild`).
    RebuildSession {
        /// The session.
        session: String,
    },
    /// End the owner's scoped answers in a session (`bx session revoke`): the one given
    /// for approval `answer`, or every one.
    RevokeScopes {
        /// The session.
        session: String,
        /// The approval id the scoped answer was given for; none for all of them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
    /// The session ends (`bx session end`, or `bx chat` leaving): its scoped answers
    /// end with it.
    EndSession {
        /// The session.
        session: String,
    },

    // Daemon to client: replies.
    /// The request was done.
    Ok {},
    /// The request was refused (an approval already answered, say).
    Refused {
        /// Why.
        reason: String,
    },
    /// The request failed; `runbook` names the entry to read.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// What happened.
        message: String,
        /// The runbook entry to read, as a path with an anchor into docs/runbook.md.
        runbook: String,
    },
    /// Pending approvals.
    Approvals {
        /// The list, oldest first, as many as fit in one frame.
        items: Vec<ApprovalSummary>,
        /// How many more are waiting than the list holds (each block is bounded, so this
        /// takes hundreds of waiting calls).
        #[serde(default, skip_serializing_if = "is_zero")]
        more: u64,
    },
    /// Part of a waiting approval's arguments: `text` is bytes `offset..offset+len` of
    /// them (cut at a character boundary), out of `total`.
    ApprovalArgs {
        /// The approval id.
        approval: String,
        /// Where this part starts.
        offset: u64,
        /// The arguments' whole length in bytes.
        total: u64,
        /// This part.
        text: String,
        /// With the part that reaches the end, for a block shown in part: the seal that
        /// approves it (sent back as [`Answer::Approve`]'s `seen`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seal: Option<String>,
    },
    /// Sessions.
    Sessions {
        /// The list.
        items: Vec<SessionSummary>,
    },
    /// A session's grants, one line each.
    Grants {
        /// The session.
        session: String,
        /// Grant lines as `bx policy explain` prints them.
        lines: Vec<String>,
    },
    /// Installed tools.
    Tools {
        /// The list.
        items: Vec<ToolSummary>,
    },

    /// The end of a `run_tool`: what the call produced.
    ToolOutput {
        /// The call id.
        call: String,
        /// How it ended.
        outcome: RunOutcome,
        /// The result's label (empty when it did not run).
        label: String,
        /// The output, or the reason it has none.
        text: String,
        /// What the tool wrote to stderr.
        stderr: String,
    },
    /// A session's taint, rebuilt from the audit log.
    Rebuilt {
        /// The session.
        session: String,
        /// Its taint now.
        taint: String,
        /// The results it was rebuilt from.
        results: u64,
    },
    /// Scoped answers ended, by `revoke_scopes` or `end_session`.
    ScopesEnded {
        /// The session.
        session: String,
        /// How many ended.
        count: u64,
    },

    // Daemon to client: turn events.
    /// Model text as it streams.
    ContentDelta {
        /// The session.
        session: String,
        /// The text.
        text: String,
    },
    /// Model thinking as it streams.
    ReasoningDelta {
        /// The session.
        session: String,
        /// The text.
        text: String,
    },
    /// The model proposed a tool call.
    ToolCallProposed {
        /// The session.
        session: String,
        /// The call id.
        call: String,
        /// The tool.
        tool: String,
        /// The arguments, JSON text.
        args: String,
    },
    /// A call waits for the owner; `block` is the whole approval block, escaped.
    ApprovalNeeded {
        /// The session.
        session: String,
        /// The call id.
        call: String,
        /// The id to answer with.
        approval: String,
        /// The block to show, never truncated.
        block: String,
        /// The block shows the call in part: approving it shows the rest first
        /// ([`Body::ShowApproval`]), and takes the seal at its end.
        #[serde(default, skip_serializing_if = "is_false")]
        in_part: bool,
    },
    /// A call started running.
    ToolStarted {
        /// The session.
        session: String,
        /// The call id.
        call: String,
        /// When the owner's scoped answer allowed it without a prompt: that answer's
        /// approval id and what it covers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        covered_by: Option<String>,
    },
    /// A call finished.
    ToolResult {
        /// The session.
        session: String,
        /// The call id.
        call: String,
        /// `ok`, `error` or `stopped`.
        status: String,
        /// The result's label.
        label: String,
        /// Bytes of output.
        bytes: u64,
    },
    /// A call was refused; the reason also reaches the model.
    ToolDenied {
        /// The session.
        session: String,
        /// The call id.
        call: String,
        /// Why.
        reason: String,
    },
    /// One request to the model finished: its token counts and the server's timings.
    ModelUsage {
        /// The session.
        session: String,
        /// Prompt tokens in all.
        prompt: u64,
        /// Of those, reused from the slot's cache (`timings.cache_n`).
        cached: u64,
        /// Generated tokens.
        completion: u64,
        /// Milliseconds spent on the uncached prompt.
        prompt_ms: f64,
        /// Milliseconds spent generating.
        predicted_ms: f64,
        /// The thinking reached `[loop] max_thinking_tokens` and was ended early.
        thinking_capped: bool,
        /// Milliseconds the request waited for its slot (other sessions were using it).
        slot_wait_ms: f64,
    },
    /// The turn ended.
    TurnDone {
        /// The session.
        session: String,
        /// Token counts.
        usage: TurnUsage,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Body {
    /// A `tool_output` with its text left out, the rest copied (it is small), for the
    /// envelope that carries the text beside it; any other message as it is.
    fn without_text(&self) -> Body {
        match self {
            Body::ToolOutput { call, outcome, label, stderr, .. } => Body::ToolOutput {
                call: call.clone(),
                outcome: *outcome,
                label: label.clone(),
                text: String::new(),
                stderr: stderr.clone(),
            },
            other => other.clone(),
        }
    }

    /// Every type name, in declaration order. The fixture test checks each has a fixture.
    pub const TYPES: &'static [&'static str] = &[
        "hello",
        "send",
        "cancel",
        "answer_approval",
        "list_approvals",
        "show_approval",
        "list_sessions",
        "report_grants",
        "list_tools",
        "run_tool",
        "rebuild_session",
        "revoke_scopes",
        "end_session",
        "ok",
        "refused",
        "error",
        "approvals",
        "approval_args",
        "sessions",
        "grants",
        "tools",
        "tool_output",
        "rebuilt",
        "scopes_ended",
        "content_delta",
        "reasoning_delta",
        "tool_call_proposed",
        "approval_needed",
        "tool_started",
        "tool_result",
        "tool_denied",
        "model_usage",
        "turn_done",
    ];

    /// The wire name of this body's type. An exhaustive match: a new variant does not
    /// compile until it is named here (and then the fixture test asks for its fixture).
    pub fn type_name(&self) -> &'static str {
        match self {
            Body::Hello { .. } => "hello",
            Body::Send { .. } => "send",
            Body::Cancel { .. } => "cancel",
            Body::AnswerApproval { .. } => "answer_approval",
            Body::ListApprovals {} => "list_approvals",
            Body::ShowApproval { .. } => "show_approval",
            Body::ListSessions {} => "list_sessions",
            Body::ReportGrants { .. } => "report_grants",
            Body::ListTools {} => "list_tools",
            Body::RunTool { .. } => "run_tool",
            Body::RebuildSession { .. } => "rebuild_session",
            Body::RevokeScopes { .. } => "revoke_scopes",
            Body::EndSession { .. } => "end_session",
            Body::Ok {} => "ok",
            Body::Refused { .. } => "refused",
            Body::Error { .. } => "error",
            Body::Approvals { .. } => "approvals",
            Body::ApprovalArgs { .. } => "approval_args",
            Body::Sessions { .. } => "sessions",
            Body::Grants { .. } => "grants",
            Body::Tools { .. } => "tools",
            Body::ToolOutput { .. } => "tool_output",
            Body::Rebuilt { .. } => "rebuilt",
            Body::ScopesEnded { .. } => "scopes_ended",
            Body::ContentDelta { .. } => "content_delta",
            Body::ReasoningDelta { .. } => "reasoning_delta",
            Body::ToolCallProposed { .. } => "tool_call_proposed",
            Body::ApprovalNeeded { .. } => "approval_needed",
            Body::ToolStarted { .. } => "tool_started",
            Body::ToolResult { .. } => "tool_result",
            Body::ToolDenied { .. } => "tool_denied",
            Body::ModelUsage { .. } => "model_usage",
            Body::TurnDone { .. } => "turn_done",
        }
    }
}
