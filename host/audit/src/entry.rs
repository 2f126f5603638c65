//! The typed content of each kind of record: what the writer puts in `fields`, what
//! verify checks every record against, and what `bx session rebuild` reads back. One
//! struct per kind, each refusing unknown fields, so a record read back is exactly a
//! record that could have been written.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::record::Kind;
use crate::verify::Problem;

/// The most bytes one record's line may have (256 KiB). The writer refuses a longer one
/// and verify reports one, so the log the writer reopens and the log verify reads agree
/// on what is valid. Without it one field from a tool or the model could make a line
/// that the next open cannot read back.
pub const MAX_RECORD_BYTES: usize = 256 << 10;

/// The most bytes of one text field that came from outside bx (a tool's error, the
/// model's arguments) kept in a record (8 KiB); [`bounded`] cuts the rest and says how
/// much, and the whole text's size and hash are kept beside it where it matters (the
/// arguments). Sized so that a record stays under [`MAX_RECORD_BYTES`] even when every
/// byte of its fields is a control character that JSON writes as six.
pub const MAX_FIELD_BYTES: usize = 8 << 10;

/// The most bytes of one entry of a list field (a resource, a path a call touched).
pub const MAX_ITEM_BYTES: usize = 256;

/// `text` cut to at most `max` bytes on a character boundary, ending with a note of how
/// many bytes were cut when it was.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..end], text.len() - end)
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A tool call was proposed: on disk before anything is decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The session.
    pub session: String,
    /// The call's id.
    pub call: String,
    /// The tool's name as proposed.
    pub tool: String,
    /// The installed tool's digest (empty when no such tool is installed).
    pub digest: String,
    /// The arguments as JSON text, cut at [`MAX_FIELD_BYTES`].
    pub args: String,
    /// Bytes of the whole arguments.
    #[serde(default)]
    pub args_bytes: u64,
    /// SHA-256 of the whole arguments.
    #[serde(default)]
    pub args_sha256: String,
    /// The resources the arguments name, as the broker read them.
    pub resources: Vec<String>,
}

impl Request {
    /// A request for `args`, with its size and hash, and the text bounded.
    pub fn new(
        session: &str,
        call: &str,
        tool: &str,
        digest: &str,
        args: &str,
        resources: Vec<String>,
    ) -> Request {
        Request {
            session: bounded(session, MAX_FIELD_BYTES),
            call: call.to_owned(),
            tool: bounded(tool, 256),
            digest: digest.to_owned(),
            args: bounded(args, MAX_FIELD_BYTES),
            args_bytes: args.len() as u64,
            args_sha256: sha256_hex(args.as_bytes()),
            resources: resources.iter().take(16).map(|r| bounded(r, MAX_ITEM_BYTES)).collect(),
        }
    }
}

/// What the broker decided about a call: written as `allow`, `ask` or `deny`. Any other
/// value in a record is refused when it is read (verify reports it as a `fields` problem
/// of that record), never counted as one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The call runs under its grant.
    Allow,
    /// The call waits for the owner's answer.
    Ask,
    /// The call is refused.
    Deny,
}

/// How the owner answered an `ask`: written as `approve`, `refuse` or `expired`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerAnswer {
    /// The owner approved it.
    Approve,
    /// The owner refused it.
    Refuse,
    /// Nobody answered in time: a refusal.
    Expired,
}

/// Who answered an `ask`: the owner (at a terminal or through the daemon; also an answer
/// that expired), written as no `by` at all, or `"by": {"reviewer": {...}}`, the owner's
/// reviewer program (`[approvals] reviewer` in `config.toml`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnsweredBy {
    /// The owner.
    #[default]
    Owner,
    /// The reviewer program.
    Reviewer(ReviewerId),
}

impl AnsweredBy {
    /// Whether the owner answered.
    pub fn is_owner(&self) -> bool {
        matches!(self, AnsweredBy::Owner)
    }
}

/// A reviewer program as its answers are recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewerId {
    /// The program, an absolute path, as `config.toml` names it.
    pub command: String,
    /// `sha256:HEX` of the program's file as it was read just before it ran.
    pub digest: String,
}

/// What an answered `ask` became: written as `allow` or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Settled {
    /// The call runs.
    Allow,
    /// The call is refused.
    Deny,
}

/// How a call that ran ended: written as `ok`, `error` or `stopped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    /// The tool returned its output.
    Ok,
    /// The tool returned an error.
    Error,
    /// A limit or a host fault stopped the call.
    Stopped,
}

impl CallStatus {
    /// The status as written in a record (`ok`, `error`, `stopped`).
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::Error => "error",
            CallStatus::Stopped => "stopped",
        }
    }
}

impl From<CallStatus> for String {
    fn from(status: CallStatus) -> String {
        status.as_str().to_owned()
    }
}

/// The broker decided a call (or it was refused before the broker was asked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The session.
    pub session: String,
    /// The call's id.
    pub call: String,
    /// `allow`, `ask` or `deny`.
    pub decision: Verdict,
    /// The session's taint it was decided at.
    pub taint: String,
    /// Why (empty for allow).
    pub why: String,
    /// For an `ask`: the id the owner answers it by, on the log before anyone can answer
    /// (`bx approve ID`), so a waiting call can be found by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The approval id of the owner's scoped answer that decided this call without a
    /// prompt (an `allow` it approved, or a `deny` it refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_by: Option<String>,
    /// For an `ask`: the approval id of a scoped answer that would have covered the call
    /// had the session's taint not risen past the one it was given at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voided: Option<String>,
}

/// The owner answered an `ask` (or it expired), and what that decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// The session.
    pub session: String,
    /// The call's id.
    pub call: String,
    /// The approval's id.
    pub id: String,
    /// `approve`, `refuse` or `expired`.
    pub answer: OwnerAnswer,
    /// Who gave the answer: written only for the reviewer, so an owner's answer is the
    /// record it always was.
    #[serde(default, skip_serializing_if = "AnsweredBy::is_owner")]
    pub by: AnsweredBy,
    /// The owner's reason for a refusal.
    pub reason: String,
    /// `allow` or `deny`: the decision after the answer.
    pub decision: Settled,
    /// The scope the owner gave the answer, when it answers the session's later calls
    /// too: the ledger rebuilds the session's scoped answers from these records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeRecord>,
}

/// The scope of an owner's answer, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeRecord {
    /// The tool's installed name.
    pub tool: String,
    /// The tool's digest.
    pub digest: String,
    /// The taint the answered call was decided at.
    pub taint: String,
    /// `args`, `path` or `host`.
    pub kind: String,
    /// What it covers: the arguments' SHA-256, `read DIR` / `write DIR`, or the origin
    /// `scheme://host:port`.
    pub what: String,
}

/// A call that ran finished: on disk before anyone sees its output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// The session.
    pub session: String,
    /// The call's id.
    pub call: String,
    /// `ok`, `error` (the tool returned an error) or `stopped` (a limit or a fault).
    pub status: CallStatus,
    /// The result's label.
    pub label: String,
    /// What the call reached (at most 64 entries).
    pub touched: Vec<String>,
    /// How many more things it reached than `touched` lists.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub touched_more: u64,
    /// SHA-256 of the output, when there was one (the output itself is not kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
    /// Bytes of the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// The error the model was told, cut at [`MAX_FIELD_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the host refused the call while it ran, and why (each cut at
    /// [`MAX_ITEM_BYTES`], at most 16): a standard WASI component hears only an error
    /// code and may go on, so the log says what it was refused even when the call ends
    /// well.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// The secrets the host put into the call's requests, and where each went: never a
    /// value (docs/runtime.md#secrets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretUse>,
    /// What the leak guard found: a value in a request to a host it is not bound to
    /// (refused), or in a response or the tool's output (redacted). At most 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaks: Vec<LeakFound>,
}

/// A secret the host put into a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretUse {
    /// The secret's name.
    pub name: String,
    /// The host it went to.
    pub host: String,
}

/// A secret's value the leak guard found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeakFound {
    /// The secret's name.
    pub name: String,
    /// `request` (refused), `response` or `output` (redacted).
    pub direction: String,
    /// The host of the request or response; absent for the output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// How it was spelled: `as it is`, `hex`, `base64 at offset 1`, ….
    pub encoding: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Something happened to a session's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// The session.
    pub session: String,
    /// The call that found it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// `state-damaged` (unreadable: counted as the top label), `state-rebuilt` (missing
    /// or lower than the log: rebuilt from it), `workspace` (set when the session was
    /// made), `scope-revoked` (the owner revoked a scoped answer, `detail` its id or
    /// `*` for all) or `ended` (the session ended; its scoped answers with it).
    pub event: String,
    /// What was found.
    #[serde(default)]
    pub detail: String,
    /// The taint the session has after the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<String>,
}

/// A torn last line found at open, moved aside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recovered {
    /// The day file it was in.
    pub file: String,
    /// Its byte offset there.
    pub offset: u64,
    /// Its length.
    pub bytes: u64,
    /// SHA-256 of the bytes moved.
    pub sha256: String,
    /// Where they are now, relative to the log directory.
    pub moved_to: String,
}

/// The owner accepted a break after verifying the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Break {
    /// The owner's reason.
    pub reason: String,
    /// Exactly the problems accepted.
    pub problems: Vec<Problem>,
}

/// A signed checkpoint could not be written to an export directory; calls go on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportFailed {
    /// The export directory, as configured.
    pub dir: String,
    /// The records the checkpoint covered.
    pub size: u64,
    /// What went wrong, cut at [`MAX_FIELD_BYTES`].
    pub error: String,
}

/// The installed set changed: a tool installed, replaced or removed (`bx tool install`,
/// `bx tool remove`), written before the change is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolChange {
    /// `install`, `replace` or `remove`.
    pub action: String,
    /// The tool, or the standard component whose tools these are.
    pub name: String,
    /// The tools it adds, replaces or removes.
    pub tools: Vec<String>,
    /// The digest installed now (empty for a removal).
    pub digest: String,
    /// The digest it replaced or removed (empty for a first install).
    #[serde(default)]
    pub previous: String,
    /// Where it came from, when that was a registry: `oci://…@sha256:…`.
    #[serde(default)]
    pub source: String,
    /// Who signed its manifest, when a pinned key's scope asked for a signature.
    #[serde(default)]
    pub signer: String,
    /// What it declares beyond or short of what it replaced, a line each (`+`, `-`,
    /// `~`); each line cut at [`MAX_ITEM_BYTES`].
    #[serde(default)]
    pub difference: Vec<String>,
    /// Whether the owner accepted a widening (`--accept-widening`).
    #[serde(default)]
    pub widening_accepted: bool,
    /// The tool epoch the change made.
    #[serde(default)]
    pub epoch: u64,
}

/// What one record says happened, typed by its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// See [`Request`].
    Request(Request),
    /// See [`Decision`].
    Decision(Decision),
    /// See [`Approval`].
    Approval(Approval),
    /// See [`Outcome`].
    Result(Outcome),
    /// See [`Session`].
    Session(Session),
    /// See [`Recovered`].
    Recovered(Recovered),
    /// See [`Break`].
    Break(Break),
    /// See [`ExportFailed`].
    ExportFailed(ExportFailed),
    /// See [`ToolChange`].
    Tool(ToolChange),
}

impl Entry {
    /// The record kind this entry is written as.
    pub fn kind(&self) -> Kind {
        match self {
            Entry::Request(_) => Kind::Request,
            Entry::Decision(_) => Kind::Decision,
            Entry::Approval(_) => Kind::Approval,
            Entry::Result(_) => Kind::Result,
            Entry::Session(_) => Kind::Session,
            Entry::Recovered(_) => Kind::Recovered,
            Entry::Break(_) => Kind::Break,
            Entry::ExportFailed(_) => Kind::ExportFailed,
            Entry::Tool(_) => Kind::Tool,
        }
    }

    /// The session the entry belongs to, when it belongs to one.
    pub fn session(&self) -> Option<&str> {
        match self {
            Entry::Request(r) => Some(&r.session),
            Entry::Decision(d) => Some(&d.session),
            Entry::Approval(a) => Some(&a.session),
            Entry::Result(r) => Some(&r.session),
            Entry::Session(s) => Some(&s.session),
            Entry::Recovered(_) | Entry::Break(_) | Entry::ExportFailed(_) | Entry::Tool(_) => None,
        }
    }

    /// The call the entry belongs to, when it belongs to one.
    pub fn call(&self) -> Option<&str> {
        match self {
            Entry::Request(r) => Some(&r.call),
            Entry::Decision(d) => Some(&d.call),
            Entry::Approval(a) => Some(&a.call),
            Entry::Result(r) => Some(&r.call),
            Entry::Session(s) => s.call.as_deref(),
            Entry::Recovered(_) | Entry::Break(_) | Entry::ExportFailed(_) | Entry::Tool(_) => None,
        }
    }

    /// The `fields` object of the record.
    pub fn fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let value = match self {
            Entry::Request(e) => serde_json::to_value(e),
            Entry::Decision(e) => serde_json::to_value(e),
            Entry::Approval(e) => serde_json::to_value(e),
            Entry::Result(e) => serde_json::to_value(e),
            Entry::Session(e) => serde_json::to_value(e),
            Entry::Recovered(e) => serde_json::to_value(e),
            Entry::Break(e) => serde_json::to_value(e),
            Entry::ExportFailed(e) => serde_json::to_value(e),
            Entry::Tool(e) => serde_json::to_value(e),
        };
        // Structs of strings, numbers and lists always serialise to an object.
        match value {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        }
    }

    /// Reads the `fields` of a record of `kind` (JSON text) strictly as that kind's
    /// struct.
    pub fn parse(kind: Kind, fields: &str) -> Result<Entry, serde_json::Error> {
        use serde_json::from_str as typed;
        Ok(match kind {
            Kind::Request => Entry::Request(typed(fields)?),
            Kind::Decision => Entry::Decision(typed(fields)?),
            Kind::Approval => Entry::Approval(typed(fields)?),
            Kind::Result => Entry::Result(typed(fields)?),
            Kind::Session => Entry::Session(typed(fields)?),
            Kind::Recovered => Entry::Recovered(typed(fields)?),
            Kind::Break => Entry::Break(typed(fields)?),
            Kind::ExportFailed => Entry::ExportFailed(typed(fields)?),
            Kind::Tool => Entry::Tool(typed(fields)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_refuse_unknown_fields() {
        let e = Entry::Request(Request::new("s", "c", "fs.read", "sha256:00", "{}", vec![]));
        let text = serde_json::to_string(&e.fields()).unwrap();
        assert_eq!(Entry::parse(Kind::Request, &text).unwrap(), e);
        let extra = text.replacen('{', "{\"extra\":1,", 1);
        let refused = Entry::parse(Kind::Request, &extra).unwrap_err();
        assert!(refused.to_string().contains("unknown field"), "{refused}");
        assert!(
            Entry::parse(Kind::Result, &text).is_err(),
            "a request's fields are not a result's"
        );
    }

    /// The enums are written as the strings the records always held, so the chain of an
    /// existing log does not change; a value no writer makes is refused, not mapped.
    #[test]
    fn decisions_answers_and_statuses_are_written_as_before_and_nothing_else_reads() {
        let written = |v: serde_json::Result<String>| v.unwrap();
        let verdicts = [Verdict::Allow, Verdict::Ask, Verdict::Deny]
            .map(|v| written(serde_json::to_string(&v)));
        assert_eq!(verdicts, [r#""allow""#, r#""ask""#, r#""deny""#]);
        let answers = [OwnerAnswer::Approve, OwnerAnswer::Refuse, OwnerAnswer::Expired]
            .map(|v| written(serde_json::to_string(&v)));
        assert_eq!(answers, [r#""approve""#, r#""refuse""#, r#""expired""#]);
        let settled = [Settled::Allow, Settled::Deny].map(|v| written(serde_json::to_string(&v)));
        assert_eq!(settled, [r#""allow""#, r#""deny""#]);
        let statuses = [CallStatus::Ok, CallStatus::Error, CallStatus::Stopped];
        assert_eq!(
            statuses.map(|v| written(serde_json::to_string(&v))),
            [r#""ok""#, r#""error""#, r#""stopped""#]
        );
        assert_eq!(statuses.map(CallStatus::as_str), ["ok", "error", "stopped"]);
        assert!(serde_json::from_str::<Verdict>(r#""alow""#).is_err());
        assert!(serde_json::from_str::<Verdict>(r#""Allow""#).is_err());
        assert!(serde_json::from_str::<Settled>(r#""ask""#).is_err());
        assert!(serde_json::from_str::<CallStatus>(r#""OK""#).is_err());
    }

    #[test]
    fn bounded_cuts_on_a_character_boundary_and_says_how_much() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("aé", 2), "a… [2 bytes cut]");
        let r = Request::new("s", "c", "t", "", &"x".repeat(MAX_FIELD_BYTES + 10), vec![]);
        assert_eq!(r.args_bytes, (MAX_FIELD_BYTES + 10) as u64);
        assert!(r.args.ends_with("[10 bytes cut]"));
    }
}
