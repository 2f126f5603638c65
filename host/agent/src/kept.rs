//! The transcripts kept in memory between turns.

use crate::agent::Agent;
use crate::transcript::Transcript;

/// Most transcripts kept in memory between turns.
const KEPT_TRANSCRIPTS: usize = 64;
/// Most bytes of transcript files kept in memory between turns, in all; a transcript
/// is held about three times over (the messages and their wire form).
const KEPT_TRANSCRIPT_BYTES: u64 = 16 << 20;

/// The transcripts kept between turns, least recently used first, so a turn reads only
/// the new bytes of a long session rather than parsing and checking its whole file
/// again. One is used again only while its file is the one it wrote
/// ([`Transcript::is_current`]); otherwise the file is read afresh.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    order: std::collections::VecDeque<(String, Transcript)>,
}

impl Kept {
    pub(crate) fn take(&mut self, session: &str) -> Option<Transcript> {
        let at = self.order.iter().position(|(s, _)| s == session)?;
        self.order.remove(at).map(|(_, t)| t)
    }

    fn put(&mut self, session: String, transcript: Transcript) {
        // One transcript over the whole bound is not kept (keeping it would push out
        // every other).
        if !transcript.is_current() || transcript.bytes() > KEPT_TRANSCRIPT_BYTES {
            return;
        }
        self.order.push_back((session, transcript));
        let mut bytes = self.order.iter().fold(0u64, |n, (_, t)| n.saturating_add(t.bytes()));
        while self.order.len() > KEPT_TRANSCRIPTS
            || (bytes > KEPT_TRANSCRIPT_BYTES && !self.order.is_empty())
        {
            if let Some((_, t)) = self.order.pop_front() {
                bytes = bytes.saturating_sub(t.bytes());
            }
        }
    }
}

/// A session's transcript for the length of a turn; handed back to be kept when the
/// turn ends in any way (its appends are on disk as they happen, so it matches its file
/// even when the turn was cancelled part way).
pub(crate) struct TurnTranscript<'a> {
    pub(crate) agent: &'a Agent,
    pub(crate) session: String,
    pub(crate) transcript: Option<Transcript>,
}

impl std::ops::Deref for TurnTranscript<'_> {
    type Target = Transcript;
    fn deref(&self) -> &Transcript {
        self.transcript.as_ref().unwrap_or_else(|| unreachable!("held until dropped"))
    }
}

impl std::ops::DerefMut for TurnTranscript<'_> {
    fn deref_mut(&mut self) -> &mut Transcript {
        self.transcript.as_mut().unwrap_or_else(|| unreachable!("held until dropped"))
    }
}

impl Drop for TurnTranscript<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.transcript.take() {
            self.agent.transcripts.lock().put(std::mem::take(&mut self.session), t);
        }
    }
}
