//! The approval table: each `Ask` waits here under a short id until the owner answers it
//! by typing that id, or it expires. The owner sees the whole request, never truncated,
//! with invisible and bidirectional characters made visible.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use crate::decide::AskRequest;

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
        let pending = Pending {
            id: id.clone(),
            request,
            args,
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(ttl_ms),
        };
        state.pending.insert(id, pending.clone());
        pending
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

/// What the owner typed at an approval prompt, as an answer. Only the id approves
/// (case and surrounding spaces aside): a reflexive `y`, `yes` or an empty line refuses,
/// saying so; anything else refuses with the text as the reason the model reads.
pub fn typed_answer(id: &str, line: &str) -> crate::Answer {
    let line = line.trim();
    if line.eq_ignore_ascii_case(id.trim()) {
        crate::Answer::Approve
    } else if line.is_empty() || line.eq_ignore_ascii_case("y") || line.eq_ignore_ascii_case("yes")
    {
        crate::Answer::Refuse(format!("answered {line:?}, not the id {id}"))
    } else {
        crate::Answer::Refuse(line.to_owned())
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

/// The whole approval block for `pending`, as the owner sees it. Nothing is truncated;
/// everything that came from the model or a tool is escaped.
pub fn render_block(pending: &Pending, digest: &str, now_ms: u64) -> String {
    let r = &pending.request;
    let e = |s: &str| escape_untrusted(s, false);
    let mut out = String::new();
    out.push_str(&format!("approval needed: {}\n", pending.id));
    out.push_str(&format!("  tool:      {} {}\n", e(&r.call.tool), e(digest)));
    out.push_str(&format!("  taint:     {}\n", r.taint));
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
    let pretty = serde_json_pretty(&pending.args);
    out.push_str("  arguments:\n");
    for line in escape_untrusted(&pretty, true).lines() {
        out.push_str(&format!("    {line}\n"));
    }
    let left = pending.expires_ms.saturating_sub(now_ms) / 1000;
    out.push_str(&format!(
        "  expires in {left} s; answer with the id: approve {0} | refuse {0}\n",
        pending.id
    ));
    out
}

/// Arguments pretty-printed when they are JSON (string contents unchanged), the raw text
/// otherwise.
fn serde_json_pretty(args: &str) -> String {
    serde_json::from_str::<serde_json::Value>(args)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| args.to_owned())
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
            matched: vec![],
            taint: Label::TOP,
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
