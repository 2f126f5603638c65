//! A session's transcript: one JSON message per line in `sessions/<id>.transcript.jsonl`,
//! only ever appended to. The request to the model is rebuilt from it byte for byte, so
//! the server's prompt cache sees the same prefix on every turn and after a restart.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bx_infer::{History, Message};

use crate::error::AgentError;

/// What a dangling tool call is answered with when a turn ended before its result.
pub(crate) const NO_RESULT: &str =
    "no result: the turn ended (cancelled, failed or the daemon stopped) before this call finished";

/// An open transcript.
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    file: File,
    history: Arc<History>,
    /// What the file is, as this transcript last wrote or read it. A kept transcript
    /// is only used again while the file still matches.
    seen: Seen,
}

/// A file's identity, length, and modification and change times. The change time
/// cannot be set from user space, so an edit whose modification time was put back is
/// still seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Seen {
    fn of(m: &std::fs::Metadata) -> Seen {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Seen {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }

    /// Matches no file: the transcript must be read again.
    const STALE: Seen = Seen { dev: 0, ino: 0, len: u64::MAX, mtime_ns: 0, ctime_ns: 0 };
}

impl Transcript {
    /// Opens (creating if missing) and reads the whole transcript at `path` (see
    /// [`bx_state::Sessions::transcript`]). Every line must be one message in canonical
    /// form (what [`Transcript::append`] writes) and end with a newline; anything else is
    /// damage, reported with its line, and nothing is changed.
    pub fn open(path: &Path) -> Result<Transcript, AgentError> {
        let path = path.to_path_buf();
        let damaged =
            |why: String| AgentError::SessionDamaged { path: path.display().to_string(), why };
        // Not through a symlink, and without waiting on a FIFO: the transcript is bx's
        // own regular file, and a FIFO put in its place blocked the daemon's thread.
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| damaged(format!("cannot open: {e} (a symlink is refused)")))?;
        let before = file.metadata().map_err(|e| damaged(format!("cannot stat: {e}")))?;
        if !before.is_file() {
            return Err(damaged("not a regular file".into()));
        }
        let mut bytes = Vec::new();
        (&file).read_to_end(&mut bytes).map_err(|e| damaged(format!("cannot read: {e}")))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| damaged(format!("not UTF-8: {e}")))?;
        if !text.is_empty() && !text.ends_with('\n') {
            let line = text.lines().count();
            return Err(damaged(format!("line {line} is cut off (no newline)")));
        }
        let mut messages = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let message: Message =
                serde_json::from_str(line).map_err(|e| damaged(format!("line {}: {e}", i + 1)))?;
            if serde_json::to_string(&message).ok().as_deref() != Some(line) {
                return Err(damaged(format!(
                    "line {}: not in the form bx writes (edited by hand?)",
                    i + 1
                )));
            }
            messages.push(message);
        }
        let after = file.metadata().map_err(|e| damaged(format!("cannot stat: {e}")))?;
        // A write that came in while the file was read: read it again next time rather
        // than take what was read as the whole file.
        let seen = if Seen::of(&after) == Seen::of(&before) && after.len() == bytes.len() as u64 {
            Seen::of(&after)
        } else {
            Seen::STALE
        };
        Ok(Transcript { path, file, history: Arc::new(History::new(messages)), seen })
    }

    /// Whether the file at this transcript's path is still the one it read and wrote
    /// (the same file, length and modification time); false when anyone else replaced,
    /// cut, edited or appended to it, and the transcript must be opened again.
    pub fn is_current(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| Seen::of(&m) == self.seen)
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> Vec<Message> {
        self.history.messages()
    }

    /// The file's length in bytes, as this transcript knows it.
    pub fn bytes(&self) -> u64 {
        self.seen.len
    }

    /// The messages as the requests of a turn share them.
    pub fn history(&self) -> &Arc<History> {
        &self.history
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `messages` and syncs them to disk. Earlier bytes are never touched (the
    /// file is opened for appending only).
    pub fn append(&mut self, messages: &[Message]) -> Result<(), AgentError> {
        let mut text = String::new();
        for m in messages {
            let line = serde_json::to_string(m)
                .map_err(|e| AgentError::Internal(format!("serialising a message: {e}")))?;
            text.push_str(&line);
            text.push('\n');
        }
        let io = |e: std::io::Error| AgentError::SessionDamaged {
            path: self.path.display().to_string(),
            why: format!("cannot append: {e}"),
        };
        // Until the write is done and checked, the transcript counts as stale: after a
        // failure it is not used again without reading the file. A file someone else
        // changed since bx last wrote it stays stale too: its change is not taken as
        // bx's own.
        let unchanged = self.is_current();
        let expected = self.seen.len.saturating_add(text.len() as u64);
        self.seen = Seen::STALE;
        self.file.write_all(text.as_bytes()).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        if unchanged
            && let Ok(m) = self.file.metadata()
            && m.len() == expected
        {
            self.seen = Seen::of(&m);
        }
        self.history.extend(messages);
        Ok(())
    }

    /// Answers every tool call of the last assistant message that has no result yet (a
    /// turn that was cancelled or crashed between a call and its result), so the
    /// transcript is again one the server accepts. Returns how many it answered.
    pub fn close_dangling_calls(&mut self) -> Result<usize, AgentError> {
        let missing = self.history.with_messages(dangling);
        let n = missing.len();
        if n > 0 {
            self.append(&missing)?;
        }
        Ok(n)
    }
}

/// Results for the calls of the last assistant message in `messages` that have none.
fn dangling(messages: &[Message]) -> Vec<Message> {
    let Some(last_assistant) =
        messages.iter().rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return vec![];
    };
    let Message::Assistant { tool_calls, .. } = &messages[last_assistant] else {
        return vec![];
    };
    let answered: Vec<&str> = messages[last_assistant + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .map(|c| Message::Tool { tool_call_id: c.id.clone(), content: NO_RESULT.into() })
        .collect()
}
