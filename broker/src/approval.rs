//! The approval table: each `Ask` waits here under a short id until the owner answers it
//! by typing that id, or it expires. The owner sees the request with invisible and
//! bidirectional characters made visible; a long argument is shown in part with its size
//! and SHA-256 and printed whole on request, so no call can make a block too big to show.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use crate::decide::AskRequest;
use crate::scope::ScopeKind;

/// Characters of an approval id: no `0`/`o`, `1`/`l`/`i`, so an id read aloud or off a
/// screen is typed right.
const ID_ALPHABET: &[u8] = b"23456789abcdefghjkmnpqrstuvwxyz";
/// Length of an approval id (31^6, about 887 million ids).
const ID_LEN: usize = 6;
/// Answered ids remembered, so a second answer says "already answered" rather than
/// "unknown". Bounded so a long-running daemon does not grow without end.
const REMEMBERED_ANSWERS: usize = 10_000;

/// One waiting call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The id the owner types.
    pub id: String,
    /// The request as the broker asked it.
    pub request: AskRequest,
    /// The call's arguments, JSON text as the model wrote them.
    pub args: String,
    /// When it was asked, in milliseconds of the caller's clock.
    pub created_ms: u64,
    /// When it expires (a refusal), same clock.
    pub expires_ms: u64,
    /// For a block that shows the call in part ([`shown_in_part`]): the code that
    /// approves it, handed out only with the end of the rest ([`rest_parts`]), so that
    /// nothing approves a call whose rest nobody was shown. `None` for a whole block.
    pub seal: Option<String>,
}

/// What answering an id found.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// The entry, now out of the table: this answer decides it.
    Taken(Pending),
    /// Someone answered it first.
    AlreadyAnswered,
    /// It expired before this answer; it was refused.
    Expired(Pending),
    /// No such id.
    Unknown,
    /// An approval of a block shown in part, without the code the end of its rest
    /// gives: nothing was answered, and the call still waits.
    Unseen(Pending),
}

#[derive(Debug, Default)]
struct State {
    pending: BTreeMap<String, Pending>,
    answered: VecDeque<String>,
}

/// Pending approvals. Every method takes the time from the caller, so the table itself is
/// deterministic.
#[derive(Debug, Default)]
pub struct ApprovalTable {
    state: Mutex<State>,
}

fn new_id(taken: &BTreeMap<String, Pending>) -> String {
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        let mut bytes = [0u8; ID_LEN];
        // Without the OS's randomness, fall back to ids derived from a counter: guessable
        // but harmless, since only the owner's own terminal answers; the attempt number
        // makes every try different, so the loop ends.
        if getrandom::fill(&mut bytes).is_err() {
            let n = (taken.len() as u64).wrapping_mul(1_000_003).wrapping_add(attempt);
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (n >> (5 * i)) as u8 & 0x1f;
            }
        }
        let id: String = bytes
            .iter()
            .map(|b| ID_ALPHABET[usize::from(*b) % ID_ALPHABET.len()] as char)
            .collect();
        if !taken.contains_key(&id) {
            return id;
        }
    }
}

/// A fresh approval id, drawn before its call's `ask` decision is recorded (the record
/// carries it); [`ApprovalTable::insert_as`] files the call under it.
pub fn new_approval_id() -> String {
    new_id(&BTreeMap::new())
}

impl ApprovalTable {
    /// An empty table.
    pub fn new() -> ApprovalTable {
        ApprovalTable::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Files `request` under a fresh id; it expires `ttl_ms` after `now_ms`.
    pub fn insert(&self, request: AskRequest, args: String, now_ms: u64, ttl_ms: u64) -> Pending {
        let mut state = self.lock();
        let id = new_id(&state.pending);
        Self::file(&mut state, id, request, args, now_ms, ttl_ms)
    }

    /// Files `request` under `id` (one drawn by [`new_approval_id`] and already on the
    /// log with the call's `ask` decision); `None` when that id is waiting already, or
    /// was answered.
    pub fn insert_as(
        &self,
        id: String,
        request: AskRequest,
        args: String,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Option<Pending> {
        let mut state = self.lock();
        if state.pending.contains_key(&id) || state.answered.contains(&id) {
            return None;
        }
        Some(Self::file(&mut state, id, request, args, now_ms, ttl_ms))
    }

    fn file(
        state: &mut State,
        id: String,
        request: AskRequest,
        args: String,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Pending {
        let pending = Pending {
            id: id.clone(),
            request,
            args,
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(ttl_ms),
            seal: None,
        };
        let pending =
            Pending { seal: shown_in_part(&pending.args).then(new_approval_id), ..pending };
        state.pending.insert(id, pending.clone());
        pending
    }

    /// The entry for `id` (as [`ApprovalTable::take`] reads it), if still waiting at
    /// `now_ms`.
    pub fn get(&self, id: &str, now_ms: u64) -> Option<Pending> {
        let id = id.trim().to_ascii_lowercase();
        self.lock().pending.get(&id).filter(|p| p.expires_ms > now_ms).cloned()
    }

    /// The entries still waiting at `now_ms`, oldest first.
    pub fn list(&self, now_ms: u64) -> Vec<Pending> {
        let mut list: Vec<Pending> =
            self.lock().pending.values().filter(|p| p.expires_ms > now_ms).cloned().collect();
        list.sort_by_key(|p| p.created_ms);
        list
    }

    fn remember(state: &mut State, id: String) {
        state.answered.push_back(id);
        if state.answered.len() > REMEMBERED_ANSWERS {
            state.answered.pop_front();
        }
    }

    /// Takes the entry for `id` (case-insensitive, surrounding spaces ignored) out of the
    /// table. Exactly one of any number of concurrent answers gets `Taken`.
    pub fn take(&self, id: &str, now_ms: u64) -> Answered {
        let id = id.trim().to_ascii_lowercase();
        let mut state = self.lock();
        match state.pending.remove(&id) {
            Some(p) if p.expires_ms <= now_ms => {
                Self::remember(&mut state, id);
                Answered::Expired(p)
            }
            Some(p) => {
                Self::remember(&mut state, id);
                Answered::Taken(p)
            }
            None if state.answered.contains(&id) => Answered::AlreadyAnswered,
            None => Answered::Unknown,
        }
    }

    /// [`ApprovalTable::take`] for an approval: a block shown in part is taken only with
    /// the code its rest ends with (`seen`); without it the entry stays, and the answer is
    /// [`Answered::Unseen`]. A refusal needs no code (refusing unseen is always safe).
    pub fn take_approving(&self, id: &str, seen: Option<&str>, now_ms: u64) -> Answered {
        let key = id.trim().to_ascii_lowercase();
        {
            let state = self.lock();
            if let Some(p) = state.pending.get(&key).filter(|p| p.expires_ms > now_ms)
                && let Some(seal) = &p.seal
                && seen.map(str::trim) != Some(seal.as_str())
            {
                return Answered::Unseen(p.clone());
            }
        }
        self.take(id, now_ms)
    }

    /// Removes and returns every entry expired at `now_ms`; each is a refusal.
    pub fn expire(&self, now_ms: u64) -> Vec<Pending> {
        let mut state = self.lock();
        let expired: Vec<String> = state
            .pending
            .values()
            .filter(|p| p.expires_ms <= now_ms)
            .map(|p| p.id.clone())
            .collect();
        let mut out = Vec::new();
        for id in expired {
            if let Some(p) = state.pending.remove(&id) {
                Self::remember(&mut state, id);
                out.push(p);
            }
        }
        out
    }
}

/// True for characters that render as nothing, reorder text, break lines or steer a
/// terminal (C0 and C1 controls, escape included): they are shown as `\u{…}` escapes
/// wherever untrusted text reaches the owner. Tab and newline are not in this set; the
/// caller decides about them.
pub fn is_hidden(c: char) -> bool {
    matches!(c as u32,
        0x00..=0x08 | 0x0b..=0x1f | 0x7f..=0x9f // controls (tab and newline handled apart)
        | 0xad | 0x34f | 0x61c | 0x115f | 0x1160 | 0x17b4 | 0x17b5 | 0x180b..=0x180f
        | 0x200b..=0x200f // zero-width space, joiners, LRM/RLM
        | 0x2028..=0x202e // line/paragraph separators, bidi embeddings and overrides
        | 0x2060..=0x206f // word joiner, invisible operators, bidi isolates (2066–2069)
        | 0x3164 | 0xfe00..=0xfe0f | 0xfeff | 0xffa0 | 0xfff0..=0xfffb
        | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a | 0xe0000..=0xe007f | 0xe0100..=0xe01ef)
}

/// What the owner typed at an approval prompt, as an answer and its scope. Only the id
/// approves (case and surrounding spaces aside), alone for this call or followed by a
/// scope (`7kq3mx path`) for the session's later calls it covers: a reflexive `y`,
/// `yes` or an empty line refuses, saying so, and so does the id followed by anything
/// that is not a scope. `refuse ID [SCOPE] [reason]` refuses, with a scope when one
/// follows the id; anything else refuses with the text as the reason the model reads.
pub fn typed_answer(id: &str, line: &str) -> (crate::Answer, ScopeKind) {
    let line = line.trim();
    let id = id.trim();
    let words: Vec<&str> = line.split_whitespace().collect();
    let refuse = |why: String| (crate::Answer::Refuse(why), ScopeKind::Call);
    match words.as_slice() {
        [first] if first.eq_ignore_ascii_case(id) => (crate::Answer::Approve, ScopeKind::Call),
        [first, scope] if first.eq_ignore_ascii_case(id) => match ScopeKind::parse(scope) {
            Ok(kind) => (crate::Answer::Approve, kind),
            Err(why) => {
                refuse(format!("answered {line:?}, which is not the id and a scope ({why})"))
            }
        },
        [first, ..] if first.eq_ignore_ascii_case(id) => {
            refuse(format!("answered {line:?}, which is not the id and a scope"))
        }
        [verb, first, rest @ ..]
            if verb.eq_ignore_ascii_case("refuse") && first.eq_ignore_ascii_case(id) =>
        {
            let (scope, reason) = match rest.split_first() {
                Some((scope, reason)) => match ScopeKind::parse(scope) {
                    Ok(kind) => (kind, reason.join(" ")),
                    Err(_) => (ScopeKind::Call, rest.join(" ")),
                },
                None => (ScopeKind::Call, String::new()),
            };
            let reason = if reason.is_empty() { "refused by the owner".to_owned() } else { reason };
            (crate::Answer::Refuse(reason), scope)
        }
        _ if line.is_empty()
            || line.eq_ignore_ascii_case("y")
            || line.eq_ignore_ascii_case("yes") =>
        {
            refuse(format!("answered {line:?}, not the id {id}"))
        }
        _ => refuse(line.to_owned()),
    }
}

/// Makes untrusted text safe to show: hidden characters (see above) and tabs become
/// `\u{…}` escapes; newlines stay only when `keep_newlines`. Never shortens the text.
pub fn escape_untrusted(text: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c == '\n' && keep_newlines) || !(is_hidden(c) || c == '\t' || c == '\n') {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    out
}

/// The most bytes of one argument a block shows (escaped); a longer one is shown in part,
/// with its size and SHA-256, and `bx approvals show ID` prints it whole. Without it a
/// client could send one call with megabytes of arguments whose block no listing can
/// carry, and hide every other waiting call from the owner.
pub(crate) const MAX_ARG_SHOWN_BYTES: usize = 2 << 10;
/// The most bytes of a block's arguments section; past it, the rest is named by size and
/// hash (an object of many small arguments is bounded as one long one is).
pub(crate) const MAX_ARGS_SHOWN_BYTES: usize = 16 << 10;
/// The most bytes of one reason or resource line in a block (they echo paths and URLs
/// the call named).
pub(crate) const MAX_LINE_SHOWN_BYTES: usize = 1 << 10;

/// The block for `pending`, as the owner sees it, and never longer than about 24 KiB
/// whatever the call holds: every line that came from the model or a tool is escaped;
/// an argument over [`MAX_ARG_SHOWN_BYTES`] is shown in part with its size and SHA-256,
/// and the line under the arguments says how to see them whole.
pub fn render_block(pending: &Pending, digest: &str, now_ms: u64) -> String {
    let r = &pending.request;
    let e = |s: &str| shown_part(s, MAX_LINE_SHOWN_BYTES, false);
    let mut out = String::new();
    out.push_str(&format!("approval needed: {}\n", pending.id));
    out.push_str(&format!("  tool:      {} {}\n", e(&r.call.tool), e(digest)));
    out.push_str(&format!("  taint:     {}\n", r.taint));
    for from in &r.taint_from {
        out.push_str(&format!("    from:    {}\n", e(from)));
    }
    if r.flow != r.taint {
        out.push_str(&format!(
            "    what this call reads or fetches (all a folder it names holds) raises it to {}\n",
            r.flow
        ));
    }
    if let Some(clean) = &r.at_clean {
        out.push_str(&format!("    in a clean session the policy would: {}\n", e(clean)));
    }
    out.push_str("  why:\n");
    for reason in &r.reasons {
        out.push_str(&format!("    - {}\n", e(reason)));
    }
    out.push_str("  resources:\n");
    for m in &r.matched {
        let state = if m.clean { "clean" } else { "tainted" };
        out.push_str(&format!(
            "    - {} -> {}, label {}, {state}\n",
            e(&m.resource.to_string()),
            m.grant,
            m.label
        ));
    }
    if !r.secrets.is_empty() {
        out.push_str("  secrets the host puts in (the tool sees placeholders):\n");
        for binding in &r.secrets {
            out.push_str(&format!("    - {}\n", e(binding)));
        }
    }
    let (pretty, cut) = shown_args(&pending.args);
    out.push_str("  arguments:\n");
    for line in pretty.lines() {
        out.push_str(&format!("    {line}\n"));
    }
    if cut {
        out.push_str(&format!(
            "  (arguments shown in part: {} bytes in all, sha256 {}; `bx approvals show {}` prints them whole)\n",
            pending.args.len(),
            sha256_hex(pending.args.as_bytes()),
            pending.id
        ));
    }
    let left = pending.expires_ms.saturating_sub(now_ms) / 1000;
    let id = &pending.id;
    if pending.seal.is_some() {
        out.push_str(
            "  (this block shows the call in part: approving it shows you the rest first, and takes the id at its end)\n",
        );
    }
    out.push_str(&format!(
        "  expires in {left} s; answer with the id, and a scope if you choose:\n"
    ));
    out.push_str(&format!("    {id}          approve this call only\n"));
    for (name, cover) in crate::scope::offers(r, &pending.args) {
        out.push_str(&format!(
            "    {id} {name:<5}    approve {}, for the rest of this session\n",
            e(&cover.describe(&r.call.tool))
        ));
    }
    if r.every.iter().any(|res| matches!(res, crate::Resource::Call { .. })) {
        out.push_str("    (no scope: a tool no manifest labels asks before every use)\n");
    } else if !r.every.is_empty() {
        out.push_str("    (no scope: an [[ask]] rule asks before every use of a path it names)\n");
    } else if r.flow.integrity == crate::Integrity::Untrusted {
        out.push_str(&format!("    (no approving scope: {})\n", crate::scope::UNTRUSTED_NO_SCOPE));
    }
    out.push_str(&format!(
        "    refuse {id} [SCOPE] [REASON]   refuse it, and with a scope what that covers\n"
    ));
    out.push_str(&format!(
        "  from another terminal: bx approve {id} [--scope SCOPE] | bx refuse {id} [--scope SCOPE]\n"
    ));
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a block shows the call `args` in part (an argument, or the whole section,
/// cut to its bound): approving it then takes the code at the end of its rest.
pub fn shown_in_part(args: &str) -> bool {
    shown_args(args).1
}

/// The most bytes of one part of a rest ([`rest_parts`]): about a screenful.
pub const REST_PART_BYTES: usize = 2 << 10;

/// The call's whole arguments `args` as the owner is shown them: pretty-printed when
/// they are JSON, every string whole, escaped (as [`escape_untrusted`], newlines kept).
pub fn args_whole(args: &str) -> String {
    let pretty = serde_json::from_str::<serde_json::Value>(args)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| args.to_owned());
    escape_untrusted(&pretty, true)
}

/// The whole arguments of approval `id` as the owner is shown them before approving a
/// block shown in part: pretty-printed when they are JSON, every string whole, escaped
/// (as [`escape_untrusted`], newlines kept), in numbered parts of at most about
/// [`REST_PART_BYTES`], the last saying it is the end, with the size and SHA-256 the
/// block named.
pub fn rest_parts(id: &str, args: &str) -> Vec<String> {
    let text = args_whole(args);
    let mut chunks = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let mut end = rest.len().min(REST_PART_BYTES);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        // At a line's end where there is one in the second half of the part.
        if end < rest.len()
            && let Some(nl) = rest[..end].rfind('\n').filter(|nl| *nl >= end / 2)
        {
            end = nl + 1;
        }
        chunks.push(&rest[..end]);
        rest = &rest[end..];
    }
    if chunks.is_empty() {
        chunks.push("");
    }
    let n = chunks.len();
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let mut part = format!("--- approval {id}: arguments, part {} of {n} ---\n", i + 1);
            part.push_str(chunk);
            if !chunk.ends_with('\n') {
                part.push('\n');
            }
            if i + 1 == n {
                part.push_str(&format!(
                    "--- end of approval {id}'s arguments: {} bytes, sha256 {} ---\n",
                    args.len(),
                    sha256_hex(args.as_bytes())
                ));
            }
            part
        })
        .collect()
}

/// Where to cut `text` so that its escaped form (as [`escape_untrusted`]) stays within
/// `max` bytes: `None` when all of it fits.
fn cut_at(text: &str, max: usize, keep_newlines: bool) -> Option<usize> {
    let mut shown = 0;
    for (at, c) in text.char_indices() {
        // The one escaping rule, a character at a time.
        shown += escape_untrusted(c.encode_utf8(&mut [0; 4]), keep_newlines).len();
        if shown > max {
            return Some(at);
        }
    }
    None
}

/// `text`, unescaped, cut so that it shows within `max` bytes, ending in `…[N bytes,
/// sha256 H]` (N and H of the whole text) when it was cut.
fn part(text: &str, max: usize, keep_newlines: bool) -> Option<String> {
    let at = cut_at(text, max, keep_newlines)?;
    Some(format!("{}…[{} bytes, sha256 {}]", &text[..at], text.len(), sha256_hex(text.as_bytes())))
}

/// `text` escaped for the owner's terminal (as [`escape_untrusted`]), shown within about
/// `max` bytes (see [`part`]).
fn shown_part(text: &str, max: usize, keep_newlines: bool) -> String {
    match part(text, max, keep_newlines) {
        Some(cut) => escape_untrusted(&cut, keep_newlines),
        None => escape_untrusted(text, keep_newlines),
    }
}

/// The arguments as a block shows them: pretty-printed JSON with each long string (or
/// key) shown in part (the raw text, shown in part, when they are not JSON), escaped, and
/// the whole section within [`MAX_ARGS_SHOWN_BYTES`]; and whether anything was left out.
fn shown_args(args: &str) -> (String, bool) {
    let mut cut = false;
    let text = match serde_json::from_str::<serde_json::Value>(args) {
        Ok(mut value) => {
            shorten_strings(&mut value, &mut cut);
            let pretty = serde_json::to_string_pretty(&value).unwrap_or_default();
            escape_untrusted(&pretty, true)
        }
        Err(_) => match part(args, MAX_ARG_SHOWN_BYTES, true) {
            Some(p) => {
                cut = true;
                escape_untrusted(&p, true)
            }
            None => escape_untrusted(args, true),
        },
    };
    if text.len() <= MAX_ARGS_SHOWN_BYTES {
        return (text, cut);
    }
    let mut end = MAX_ARGS_SHOWN_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}\n…", &text[..end]), true)
}

/// Replaces every string in `value` (keys too) that would show in more than
/// [`MAX_ARG_SHOWN_BYTES`] by its [`part`]; sets `cut` when one was.
fn shorten_strings(value: &mut serde_json::Value, cut: &mut bool) {
    use serde_json::Value;
    fn shorten(s: &str, cut: &mut bool) -> Option<String> {
        let p = part(s, MAX_ARG_SHOWN_BYTES, true);
        *cut |= p.is_some();
        p
    }
    match value {
        Value::String(s) => {
            if let Some(p) = shorten(s, cut) {
                *s = p;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| shorten_strings(v, cut)),
        Value::Object(map) => {
            for (key, mut v) in std::mem::take(map) {
                shorten_strings(&mut v, cut);
                let key = shorten(&key, cut).unwrap_or(key);
                map.insert(key, v);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{CallRequest, Resource};
    use crate::label::Label;

    fn request() -> AskRequest {
        AskRequest {
            call: CallRequest {
                tool: "fs.write".into(),
                digest: "sha256:ab".into(),
                resources: vec![Resource::PathWrite("/w/x".into())],
            },
            reasons: vec!["write /w/x: tainted".into()],
            asking: vec![Resource::PathWrite("/w/x".into())],
            every: vec![],
            matched: vec![],
            taint: Label::TOP,
            flow: Label::TOP,
            secrets: vec![],
            taint_from: vec![],
            at_clean: None,
            person: false,
        }
    }

    #[test]
    fn ids_are_short_and_unambiguous() {
        let table = ApprovalTable::new();
        for _ in 0..200 {
            let p = table.insert(request(), "{}".into(), 0, 1000);
            assert_eq!(p.id.len(), ID_LEN);
            assert!(p.id.bytes().all(|b| ID_ALPHABET.contains(&b)), "{}", p.id);
        }
        assert_eq!(table.list(0).len(), 200);
    }

    #[test]
    fn answer_takes_the_entry_once() {
        let table = ApprovalTable::new();
        let p = table.insert(request(), "{}".into(), 0, 1000);
        assert_eq!(
            table.take(&format!(" {} ", p.id.to_uppercase()), 10),
            Answered::Taken(p.clone())
        );
        assert_eq!(table.take(&p.id, 11), Answered::AlreadyAnswered);
        assert_eq!(table.take("zzzzzz", 11), Answered::Unknown);
        assert!(table.list(11).is_empty());
    }

    #[test]
    fn expiry_is_a_refusal() {
        let table = ApprovalTable::new();
        let p = table.insert(request(), "{}".into(), 0, 1000);
        let q = table.insert(request(), "{}".into(), 500, 1000);
        assert_eq!(table.expire(1000), vec![p.clone()]);
        assert_eq!(table.take(&p.id, 1001), Answered::AlreadyAnswered);
        assert!(matches!(table.take(&q.id, 1600), Answered::Expired(_)));
    }

    #[test]
    fn concurrent_answers_have_one_winner() {
        for _ in 0..50 {
            let table = std::sync::Arc::new(ApprovalTable::new());
            let p = table.insert(request(), "{}".into(), 0, 10_000);
            let results: Vec<Answered> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8).map(|_| s.spawn(|| table.take(&p.id, 1))).collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let taken = results.iter().filter(|r| matches!(r, Answered::Taken(_))).count();
            let already = results.iter().filter(|r| **r == Answered::AlreadyAnswered).count();
            assert_eq!((taken, already), (1, 7));
        }
    }

    #[test]
    fn a_block_is_bounded_whatever_the_arguments_hold() {
        // 2 MB of U+0085 (escaped six times wider), two 2.1 MiB writes, and an object of
        // 100,000 small keys: each block stays small and says how to see the whole.
        let nel = "\u{85}".repeat(1 << 20);
        let big = "a".repeat(2_200_000);
        let many: serde_json::Map<String, serde_json::Value> =
            (0..100_000).map(|i| (format!("k{i}"), serde_json::Value::from(i))).collect();
        for args in [
            serde_json::json!({ "path": "/w/x", "content": nel }).to_string(),
            serde_json::json!({ "path": big.clone(), "content": big }).to_string(),
            serde_json::Value::Object(many).to_string(),
            "not json ".repeat(100_000),
        ] {
            let table = ApprovalTable::new();
            let p = table.insert(request(), args.clone(), 0, 1000);
            let block = render_block(&p, "sha256:ab", 0);
            assert!(block.len() < 24 << 10, "{} bytes", block.len());
            assert!(
                block.contains(&format!("{} bytes in all", args.len())),
                "{}",
                &block[block.len() - 300..]
            );
            assert!(block.contains(&format!("bx approvals show {}", p.id)));
            assert!(!block.chars().any(is_hidden), "escaped");
        }
    }

    #[test]
    fn a_short_argument_is_shown_whole() {
        let table = ApprovalTable::new();
        let p = table.insert(request(), r#"{"path":"/w/x","content":"hi\u0085"}"#.into(), 0, 1000);
        let block = render_block(&p, "sha256:ab", 0);
        assert!(block.contains(r#""content": "hi\u{85}""#), "{block}");
        assert!(!block.contains("in all"), "{block}");
    }

    #[test]
    fn escapes_hidden_characters_and_keeps_everything_else() {
        let hostile = "rm\u{202e}txt.exe\u{200b}\u{2066}x\u{2069}\u{e0041}\t\u{7}ok é";
        assert_eq!(
            escape_untrusted(hostile, false),
            "rm\\u{202e}txt.exe\\u{200b}\\u{2066}x\\u{2069}\\u{e0041}\\u{9}\\u{7}ok é"
        );
        assert_eq!(escape_untrusted("a\nb", true), "a\nb");
        assert_eq!(escape_untrusted("a\nb", false), "a\\u{a}b");
    }
}
