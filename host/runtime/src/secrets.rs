//! Secrets at the HTTP layer: the values the host puts into a tool's requests to the
//! hosts the owner bound them to, and the leak guard that looks for every value, and its
//! common encodings, in everything that goes out and comes back.
//!
//! A guest never holds a value. It sees the placeholder `{secret:NAME}` (in its
//! environment, when a binding gives it one); the host replaces a placeholder only in a
//! request's headers and query, only to a host its binding names, and only over https
//! (or to a loopback address). Everything else is the guard's: a value, hex, base64 at
//! each of the three byte offsets (standard and URL-safe alphabets), URL-encoded,
//! reversed, or a run of half of it (a value split over two requests), found in a
//! request to a host not bound to it refuses the request; found in a response, a tool's
//! output, its stdout or stderr, or an error text, it is replaced by
//! `[redacted secret NAME]` before a guest, the model or the log sees it.

use std::collections::BTreeMap;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;

/// How a value was spelled where the guard found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Encoding {
    /// As it is.
    Raw,
    /// Reversed.
    Reversed,
    /// Hex, either case.
    Hex,
    /// Base64 (standard or URL-safe alphabet) starting at byte offset 0, 1 or 2.
    Base64(u8),
    /// Percent-encoded (its reserved bytes, or every byte).
    Url,
    /// A run of at least half of it: a value split over requests.
    Part,
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Encoding::Raw => f.write_str("as it is"),
            Encoding::Reversed => f.write_str("reversed"),
            Encoding::Hex => f.write_str("hex"),
            Encoding::Base64(o) => write!(f, "base64 at offset {o}"),
            Encoding::Url => f.write_str("URL-encoded"),
            Encoding::Part => f.write_str("a part of at least half"),
        }
    }
}

/// Where the guard found a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// In a request to a host the secret is not bound to: the request was refused.
    Request,
    /// In a response: redacted before the guest saw it.
    Response,
    /// In what the tool returned, printed or failed with: redacted before the model and
    /// the log saw it.
    Output,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::Request => "request",
            Direction::Response => "response",
            Direction::Output => "output",
        })
    }
}

/// One time the guard found a value: the secret's name, never the value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Leak {
    /// The secret.
    pub name: String,
    /// Where.
    pub direction: Direction,
    /// The host of the request or response; empty for a tool's output.
    pub host: String,
    /// How it was spelled.
    pub encoding: Encoding,
}

impl std::fmt::Display for Leak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.direction {
            Direction::Request => write!(
                f,
                "secret {} ({}) in a request to {}, which it is not bound to: refused (see docs/runbook.md#secret-leak)",
                self.name, self.encoding, self.host
            ),
            Direction::Response => write!(
                f,
                "secret {} ({}) in a response from {}: redacted (see docs/runbook.md#secret-leak)",
                self.name, self.encoding, self.host
            ),
            Direction::Output => write!(
                f,
                "secret {} ({}) in the tool's output: redacted (see docs/runbook.md#secret-leak)",
                self.name, self.encoding
            ),
        }
    }
}

/// The most leaks a call's report keeps (each also counts once in the record).
pub(crate) const MAX_LEAKS: usize = 32;

/// Notes `leak` in `leaks`: once each, at most [`MAX_LEAKS`].
pub(crate) fn note_leak(leaks: &mut Vec<Leak>, leak: Leak) {
    if leaks.len() < MAX_LEAKS && !leaks.contains(&leak) {
        leaks.push(leak);
    }
}

/// The values a call may need and the guard over every value of the store. Built once
/// per store content (the driver keeps it while the store is unchanged) and shared.
#[derive(Clone, Default)]
pub struct Secrets {
    inner: Option<Arc<Guard>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = self.inner.as_ref().map(|g| g.names.clone()).unwrap_or_default();
        f.debug_struct("Secrets").field("names", &names).finish_non_exhaustive()
    }
}

struct Guard {
    names: Vec<String>,
    values: BTreeMap<String, String>,
    /// Every pattern, leftmost-longest, so a whole value wins over a part of it.
    ac: AhoCorasick,
    /// Per pattern: the index of its secret in `names`, and its encoding.
    what: Vec<(usize, Encoding)>,
    /// The longest pattern, in bytes: how far past a cut a spelling that starts before
    /// it can reach (hex doubles a value, percent-encoding triples it).
    longest: usize,
}

/// The leak guard could not be built over the store's values (every call is then
/// refused: docs/runbook.md#secrets-unreadable).
#[derive(Debug, thiserror::Error)]
#[error("the leak guard could not be built: {0}")]
pub struct GuardError(aho_corasick::BuildError);

impl Secrets {
    /// No secrets: nothing is injected and nothing is looked for.
    pub fn none() -> Secrets {
        Secrets::default()
    }

    /// The store's secrets, `(name, value)`. Values are what `bx secret set` accepts
    /// (8 bytes at least).
    pub fn new(values: impl IntoIterator<Item = (String, String)>) -> Result<Secrets, GuardError> {
        let values: BTreeMap<String, String> = values.into_iter().collect();
        if values.is_empty() {
            return Ok(Secrets::none());
        }
        let names: Vec<String> = values.keys().cloned().collect();
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut what = Vec::new();
        for (i, value) in values.values().enumerate() {
            for (pattern, encoding) in spellings(value.as_bytes()) {
                what.push((i, encoding));
                patterns.push(pattern);
            }
        }
        // ASCII case is ignored: header names travel lower-cased, and hex and percent
        // escapes come in either case.
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .ascii_case_insensitive(true)
            .build(&patterns)
            .map_err(GuardError)?;
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        Ok(Secrets { inner: Some(Arc::new(Guard { names, values, ac, what, longest })) })
    }

    /// Whether there is anything to guard.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// The names of the store's secrets.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.inner.iter().flat_map(|g| g.names.iter().map(String::as_str))
    }

    /// The value of `name`, if the store has it.
    pub(crate) fn value(&self, name: &str) -> Option<&str> {
        self.inner.as_ref()?.values.get(name).map(String::as_str)
    }

    /// Every secret the guard finds in an outgoing `bytes`, looking also through one and
    /// two rounds of URL-decoding (`%XX` and `+`), so escaping a few of a value's bytes
    /// hides nothing.
    pub fn find_outgoing(&self, bytes: &[u8]) -> Vec<(&str, Encoding)> {
        let mut found = self.find(bytes);
        if found.is_empty() && !self.is_empty() && bytes.iter().any(|b| *b == b'%' || *b == b'+') {
            let once = url_decode(bytes);
            found = self.find(&once);
            if found.is_empty() && once.contains(&b'%') {
                found = self.find(&url_decode(&once));
            }
        }
        found
    }

    /// Every secret the guard finds in `bytes`, with its encoding, in order (one per
    /// match, overlapping parts of a match left out).
    pub fn find(&self, bytes: &[u8]) -> Vec<(&str, Encoding)> {
        let Some(g) = &self.inner else { return Vec::new() };
        g.ac.find_iter(bytes)
            .map(|m| {
                let (i, enc) = g.what[m.pattern().as_usize()];
                (g.names[i].as_str(), enc)
            })
            .collect()
    }

    /// `bytes` with every value found replaced by `[redacted secret NAME]`, and what was
    /// found. Bytes in, bytes out: a body need not be text.
    pub(crate) fn redact(&self, bytes: &[u8]) -> (Vec<u8>, Vec<(String, Encoding)>) {
        self.redact_before(bytes, bytes.len())
    }

    /// How many bytes past a cut must be read for [`Secrets::redact_before`] to see whole
    /// every spelling that starts before it: the longest the guard looks for (0 when
    /// there is nothing to guard).
    pub(crate) fn reach(&self) -> usize {
        self.inner.as_ref().map_or(0, |g| g.longest)
    }

    /// [`Secrets::redact`] of `bytes`, keeping only what starts before byte `keep`: a
    /// value that starts before it is replaced whole, and nothing from `keep` on is kept.
    /// The cut is made in the bytes as they came, never in the redacted ones (whose length
    /// redaction changes), so a value across it reaches nobody in part. `bytes` must run
    /// [`Secrets::reach`] bytes past `keep`, where there was more.
    pub(crate) fn redact_before(
        &self,
        bytes: &[u8],
        keep: usize,
    ) -> (Vec<u8>, Vec<(String, Encoding)>) {
        let keep = keep.min(bytes.len());
        let Some(g) = &self.inner else { return (bytes[..keep].to_vec(), Vec::new()) };
        let mut found = Vec::new();
        let mut out = Vec::with_capacity(keep);
        let mut at = 0;
        for m in g.ac.find_iter(bytes) {
            if m.start() >= keep {
                break;
            }
            let (i, enc) = g.what[m.pattern().as_usize()];
            out.extend_from_slice(&bytes[at..m.start()]);
            out.extend_from_slice(format!("[redacted secret {}]", g.names[i]).as_bytes());
            at = m.end();
            found.push((g.names[i].clone(), enc));
        }
        if at < keep {
            out.extend_from_slice(&bytes[at..keep]);
        }
        (out, found)
    }

    /// [`Secrets::redact`] for text (what is put in stays text): every value found
    /// replaced by `[redacted secret NAME]`, and what was found.
    pub fn redact_text(&self, text: &str) -> (String, Vec<(String, Encoding)>) {
        if self.is_empty() {
            return (text.to_owned(), Vec::new());
        }
        let (bytes, found) = self.redact(text.as_bytes());
        // Patterns are whole ASCII runs of a value, so a match never splits a character;
        // the lossy conversion only guards that.
        (String::from_utf8_lossy(&bytes).into_owned(), found)
    }
}

/// Every spelling the guard looks for, for one value: as it is, reversed, hex (both
/// cases), base64 at each offset (both alphabets), percent-encoded, and parts of half.
fn spellings(v: &[u8]) -> Vec<(Vec<u8>, Encoding)> {
    let mut out: Vec<(Vec<u8>, Encoding)> = Vec::new();
    let mut add = |p: Vec<u8>, e: Encoding| {
        if p.len() >= 8 && !out.iter().any(|(q, _)| *q == p) {
            out.push((p, e));
        }
    };
    add(v.to_vec(), Encoding::Raw);
    add(v.iter().rev().copied().collect(), Encoding::Reversed);
    add(hex::encode(v).into_bytes(), Encoding::Hex);
    add(hex::encode_upper(v).into_bytes(), Encoding::Hex);
    for offset in 0..3u8 {
        for engine in [
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ] {
            add(base64_inner(engine, v, offset), Encoding::Base64(offset));
        }
    }
    let reserved: String =
        percent_encoding::percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string();
    let unreserved_kept: String = v
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let every: String = v.iter().map(|b| format!("%{b:02X}")).collect();
    // A form's spelling: a space is `+`.
    let form = unreserved_kept.replace("%20", "+");
    for text in [reserved, unreserved_kept, every, form] {
        add(lower_escapes(&text), Encoding::Url);
        add(text.into_bytes(), Encoding::Url);
    }
    for part in halves(v) {
        add(part.to_vec(), Encoding::Part);
    }
    out
}

/// `bytes` URL-decoded once: `%XX` to its byte, `+` to a space; anything else kept.
fn url_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// `text` with its percent escapes in lower case (`%2f` for `%2F`), the other spelling
/// clients send.
fn lower_escapes(text: &str) -> Vec<u8> {
    let mut out = text.as_bytes().to_vec();
    for i in 0..out.len().saturating_sub(2) {
        if out[i] == b'%' {
            out[i + 1] = out[i + 1].to_ascii_lowercase();
            out[i + 2] = out[i + 2].to_ascii_lowercase();
        }
    }
    out
}

/// The base64 characters that depend only on `v` when `v` starts `offset` bytes into
/// the encoded data: those whose six bits lie wholly inside `v`'s bytes, so what comes
/// before or after it cannot change them.
fn base64_inner(engine: &base64::engine::GeneralPurpose, v: &[u8], offset: u8) -> Vec<u8> {
    let offset = usize::from(offset);
    let mut data = vec![0u8; offset];
    data.extend_from_slice(v);
    let encoded = engine.encode(&data).into_bytes();
    let (start_bit, end_bit) = (offset * 8, (offset + v.len()) * 8);
    let first = start_bit.div_ceil(6);
    let last = end_bit / 6; // exclusive: character i covers bits 6i .. 6i+6
    if last <= first {
        return Vec::new();
    }
    encoded[first..last.min(encoded.len())].to_vec()
}

/// Runs of `v` such that any part of at least half of it holds one: `v` split into two
/// pieces (over two requests, say) leaves one piece of at least half, which the guard
/// then finds. Windows of `half - step` bytes every `step` bytes, at most some 64 of
/// them however long the value; none for values under 16 bytes (a part would be
/// shorter than the 8 bytes the guard needs to tell it from ordinary text).
fn halves(v: &[u8]) -> Vec<&[u8]> {
    let n = v.len();
    let half = n.div_ceil(2);
    let step = n.div_ceil(64).max(1);
    let Some(len) = half.checked_sub(step) else { return Vec::new() };
    if len < 8 || len >= n {
        return Vec::new();
    }
    (0..=n - len).step_by(step).map(|p| &v[p..p + len]).collect()
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    const VALUE: &str = "ghp_Zx81tokenVALUE/with+odd=chars";

    fn secrets() -> Secrets {
        Secrets::new([("gh".to_owned(), VALUE.to_owned())]).unwrap()
    }

    #[test]
    fn finds_the_value_in_every_common_encoding() {
        let s = secrets();
        let b64 = |prefix: &[u8], e: &base64::engine::GeneralPurpose| {
            let mut d = prefix.to_vec();
            d.extend_from_slice(VALUE.as_bytes());
            d.extend_from_slice(b"trailing");
            e.encode(d)
        };
        let std = &base64::engine::general_purpose::STANDARD;
        let url = &base64::engine::general_purpose::URL_SAFE;
        let cases: Vec<(String, Encoding)> = vec![
            (format!("x={VALUE}&"), Encoding::Raw),
            (VALUE.chars().rev().collect(), Encoding::Reversed),
            (hex::encode(VALUE), Encoding::Hex),
            (hex::encode_upper(VALUE), Encoding::Hex),
            (b64(b"", std), Encoding::Base64(0)),
            (b64(b"a", std), Encoding::Base64(1)),
            (b64(b"ab", std), Encoding::Base64(2)),
            (b64(b"ab", url), Encoding::Base64(2)),
            (
                percent_encoding::percent_encode(
                    VALUE.as_bytes(),
                    percent_encoding::NON_ALPHANUMERIC,
                )
                .to_string(),
                Encoding::Url,
            ),
            (format!("a={}", &VALUE[..17]), Encoding::Part),
            (format!("b={}", &VALUE[16..]), Encoding::Part),
        ];
        for (text, expect) in cases {
            let found = s.find(text.as_bytes());
            assert_eq!(found.first().map(|(n, e)| (*n, *e)), Some(("gh", expect)), "{text}");
        }
        assert!(s.find(b"nothing of it here, ghp_ alone").is_empty());
    }

    #[test]
    fn looks_through_partial_escapes_form_spaces_and_case() {
        let s = secrets();
        // A few bytes escaped leave no run of half as it is; decoding finds it whole.
        let partial = "/c?k=ghp_Zx81t%6FkenVALUE%2Fwith%2Bodd%3Dchars";
        assert_eq!(s.find(partial.as_bytes()), vec![]);
        assert_eq!(s.find_outgoing(partial.as_bytes()).first().map(|f| f.0), Some("gh"));
        let twice = "/c?k=ghp_Zx81t%256FkenVALUE%252Fwith%252Bodd%253Dchars";
        assert_eq!(s.find_outgoing(twice.as_bytes()).first().map(|f| f.0), Some("gh"));
        // A header name travels lower-cased.
        assert_eq!(s.find(VALUE.to_ascii_lowercase().as_bytes()).first().map(|f| f.0), Some("gh"));
        let spaced =
            Secrets::new([("sp".to_owned(), "Ab1 Cd2 Ef3 Gh4 Ij5 Kl6 Mn7".to_owned())]).unwrap();
        let form = "k=Ab1+Cd2+Ef3+Gh4+Ij5+Kl6+Mn7";
        assert_eq!(spaced.find(form.as_bytes()).first().map(|f| f.0), Some("sp"));
        assert_eq!(spaced.redact_text(form).0, "k=[redacted secret sp]");
    }

    #[test]
    fn redacts_whole_values_and_keeps_the_rest() {
        let s = secrets();
        let (out, found) = s.redact_text(&format!("echo: Bearer {VALUE}; done"));
        assert_eq!(out, "echo: Bearer [redacted secret gh]; done");
        assert_eq!(found, vec![("gh".to_owned(), Encoding::Raw)]);
        let (same, none) = s.redact_text("clean");
        assert_eq!((same.as_str(), none.len()), ("clean", 0));
    }

    #[test]
    fn halves_cover_every_two_piece_split() {
        let v: Vec<u8> = (0..200u8).collect();
        let parts = halves(&v);
        assert!(parts.len() <= 70, "{}", parts.len());
        for cut in 1..v.len() {
            let (a, b) = v.split_at(cut);
            let longer = if a.len() >= b.len() { a } else { b };
            assert!(
                parts.iter().any(|p| longer.windows(p.len()).any(|w| w == *p)),
                "split at {cut}"
            );
        }
        assert!(halves(b"0123456789abcde").is_empty());
    }
}
