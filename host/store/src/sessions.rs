//! Session state: each session's taint, in `sessions/<id>.json`, written atomically. It
//! is a cache of what the audit log says (results carry their labels), so it can be
//! rebuilt; state that cannot be read counts as `secret/untrusted`.

use std::path::{Path, PathBuf};

use bx_broker::Label;

use crate::error::StoreError;
use crate::store::write_atomically;

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
    /// Sessions under `state_dir/sessions`.
    pub fn open(state_dir: &Path) -> Result<Sessions, StoreError> {
        let dir = state_dir.join("sessions");
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(Sessions { dir })
    }

    fn path(&self, id: &str) -> Result<PathBuf, StoreError> {
        if !valid_session_id(id) {
            return Err(StoreError::BadSession(id.to_owned()));
        }
        Ok(self.dir.join(format!("{id}.json")))
    }

    /// The session's taint. A new session is clean. State that exists but cannot be read
    /// or parsed counts as `secret/untrusted`, and the second value says why, so the
    /// caller can record it (see `docs/runbook.md#session-state-damaged`).
    pub fn taint(&self, id: &str) -> Result<(Label, Option<String>), StoreError> {
        let (state, damage) = self.state(id)?;
        Ok((state.taint, damage))
    }

    /// The whole state of a session, read as [`Sessions::taint`] describes.
    pub fn state(&self, id: &str) -> Result<(SessionState, Option<String>), StoreError> {
        let path = self.path(id)?;
        let damaged = |why: String| (SessionState { taint: Label::TOP, slot: None }, Some(why));
        match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok((SessionState { taint: Label::CLEAN, slot: None }, None))
            }
            Err(e) => Ok(damaged(format!(
                "{}: unreadable ({e}); counted as secret/untrusted",
                path.display()
            ))),
            Ok(text) => match serde_json::from_str::<SessionState>(&text) {
                Ok(state) => Ok((state, None)),
                Err(e) => Ok(damaged(format!(
                    "{}: damaged ({e}); counted as secret/untrusted",
                    path.display()
                ))),
            },
        }
    }

    /// Raises the session's taint to include `label` (never lowers it); returns the new
    /// taint.
    pub fn observe(&self, id: &str, label: Label) -> Result<Label, StoreError> {
        let (mut state, _) = self.state(id)?;
        let taint = state.taint.join(label);
        if taint != state.taint || !self.path(id)?.exists() {
            state.taint = taint;
            self.put(id, &state)?;
        }
        Ok(taint)
    }

    /// Replaces the session's taint with `taint`, as rebuilt from the audit log.
    pub fn write(&self, id: &str, taint: Label) -> Result<(), StoreError> {
        let (mut state, _) = self.state(id)?;
        state.taint = taint;
        self.put(id, &state)
    }

    /// Remembers the inference slot the session is on.
    pub fn set_slot(&self, id: &str, slot: usize) -> Result<(), StoreError> {
        let (mut state, damage) = self.state(id)?;
        if damage.is_some() || state.slot == Some(slot) {
            // Damaged state is left for the owner to look at (it already counts as top).
            return Ok(());
        }
        state.slot = Some(slot);
        self.put(id, &state)
    }

    /// Every session with state on disk, by id, sorted.
    pub fn list(&self) -> Result<Vec<String>, StoreError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| StoreError::io(&self.dir, e))?;
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&self.dir, e))?;
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

    fn put(&self, id: &str, state: &SessionState) -> Result<(), StoreError> {
        let path = self.path(id)?;
        let text = serde_json::to_string(state).map_err(|e| StoreError::io(&path, e))?;
        write_atomically(&path, format!("{text}\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bx_broker::parse_label;

    #[test]
    fn taint_only_rises_and_damage_counts_as_top() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::open(dir.path()).unwrap();
        assert_eq!(s.taint("a").unwrap(), (Label::CLEAN, None));
        assert_eq!(
            s.observe("a", parse_label("private/trusted").unwrap()).unwrap(),
            parse_label("private/trusted").unwrap()
        );
        assert_eq!(
            s.observe("a", parse_label("public/untrusted").unwrap()).unwrap(),
            parse_label("private/untrusted").unwrap()
        );
        assert_eq!(
            s.observe("a", Label::CLEAN).unwrap(),
            parse_label("private/untrusted").unwrap()
        );
        std::fs::write(dir.path().join("sessions/b.json"), "{\"taint\": ").unwrap();
        let (t, why) = s.taint("b").unwrap();
        assert_eq!(t, Label::TOP);
        assert!(why.unwrap().contains("damaged"));
        assert!(s.taint("../x").is_err());
    }
}
