//! Session state: each session's taint, in `sessions/<id>.json`, written atomically. It
//! is a cache of what the audit log says (results carry their labels): the writer that
//! holds the audit log (the daemon, or the one command holding its lock) keeps the
//! authoritative taint and writes these files; state that cannot be read counts as
//! `secret/untrusted`, and state that is missing or lower than the log is rebuilt.

use std::path::{Path, PathBuf};

use bx_broker::Label;

use crate::error::StateError;
use crate::read::{MAX_OWN_FILE_BYTES, read_own};

/// Writes `data` to `path` atomically ([`bx_fs::write_atomically`]).
pub fn write_atomically(path: &Path, data: &[u8]) -> Result<(), StateError> {
    bx_fs::write_atomically(path, data).map_err(|e| StateError::io(path, e))
}

/// What is kept per session.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionState {
    /// The join of every result label the session has seen. Only rises.
    pub taint: Label,
    /// The inference slot the session's prompt cache lives on, kept so that a restarted
    /// daemon sends the session back to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<usize>,
}

/// The `sessions/` directory.
#[derive(Debug, Clone)]
pub struct Sessions {
    dir: PathBuf,
}

/// The longest session id accepted, and its characters: ids become file names.
const MAX_ID: usize = 64;

/// Whether `id` can name a session (it becomes a file name).
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && !id.starts_with('.')
}

impl Sessions {
    /// Sessions in `dir` (the state directory's `sessions/`), created if missing.
    pub fn open(dir: &Path) -> Result<Sessions, StateError> {
        std::fs::create_dir_all(dir).map_err(|e| StateError::io(dir, e))?;
        Ok(Sessions { dir: dir.to_path_buf() })
    }

    /// Whether `id` has a state file.
    pub fn has_state(&self, id: &str) -> bool {
        self.path(id).is_ok_and(|p| p.symlink_metadata().is_ok())
    }

    /// Whether `id` has a transcript (a session the loop has talked in).
    pub fn has_transcript(&self, id: &str) -> bool {
        valid_session_id(id) && self.transcript(id).symlink_metadata().is_ok()
    }

    /// The transcript file of `id` (`<id>.transcript.jsonl`).
    pub fn transcript(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.transcript.jsonl"))
    }

    fn path(&self, id: &str) -> Result<PathBuf, StateError> {
        if !valid_session_id(id) {
            return Err(StateError::BadSession(id.to_owned()));
        }
        Ok(self.dir.join(format!("{id}.json")))
    }

    /// The session's taint. A new session is clean. State that exists but cannot be read
    /// or parsed counts as `secret/untrusted`, and the second value says why, so the
    /// caller can record it (see `docs/runbook.md#session-state-damaged`).
    pub fn taint(&self, id: &str) -> Result<(Label, Option<String>), StateError> {
        let (state, damage) = self.state(id)?;
        Ok((state.taint, damage))
    }

    /// The whole state of a session, read as [`Sessions::taint`] describes.
    pub fn state(&self, id: &str) -> Result<(SessionState, Option<String>), StateError> {
        let path = self.path(id)?;
        let damaged = |why: String| (SessionState { taint: Label::TOP, slot: None }, Some(why));
        match read_own(&path, MAX_OWN_FILE_BYTES) {
            Ok(None) => Ok((SessionState { taint: Label::CLEAN, slot: None }, None)),
            Err(e) => Ok(damaged(format!("{e}; counted as secret/untrusted"))),
            Ok(Some(bytes)) => match serde_json::from_slice::<SessionState>(&bytes) {
                Ok(state) => Ok((state, None)),
                Err(e) => Ok(damaged(format!(
                    "{}: damaged ({e}); counted as secret/untrusted",
                    path.display()
                ))),
            },
        }
    }

    /// Every session with state on disk, by id, sorted.
    pub fn list(&self) -> Result<Vec<String>, StateError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| StateError::io(&self.dir, e))?;
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StateError::io(&self.dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".json")
                && valid_session_id(id)
            {
                ids.push(id.to_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// The directory the session files live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the whole state of `id`. Only the writer that holds the audit log calls
    /// this (see [the module docs](self)).
    pub fn put(&self, id: &str, state: &SessionState) -> Result<(), StateError> {
        let path = self.path(id)?;
        let text = serde_json::to_string(state).map_err(|e| StateError::io(&path, e))?;
        write_atomically(&path, format!("{text}\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bx_broker::parse_label;

    #[test]
    fn state_round_trips_and_damage_counts_as_top() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::open(&dir.path().join("sessions")).unwrap();
        assert_eq!(s.taint("a").unwrap(), (Label::CLEAN, None));
        assert!(!s.has_state("a"));
        let private = parse_label("private/trusted").unwrap();
        s.put("a", &SessionState { taint: private, slot: Some(1) }).unwrap();
        assert_eq!(s.state("a").unwrap(), (SessionState { taint: private, slot: Some(1) }, None));
        assert!(s.has_state("a"));
        std::fs::write(dir.path().join("sessions/b.json"), "{\"taint\": ").unwrap();
        let (t, why) = s.taint("b").unwrap();
        assert_eq!(t, Label::TOP);
        assert!(why.unwrap().contains("damaged"));
        assert!(s.taint("../x").is_err());
        assert_eq!(s.list().unwrap(), vec!["a".to_owned(), "b".to_owned()]);
    }
}
