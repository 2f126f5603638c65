//! Session taint, authoritative while this process holds the audit log: rebuilt from the
//! log's result records when the ledger opens, kept in memory, raised under one lock and
//! written through to the session files, which are a cache. A state file that is
//! missing for a session the log or a transcript knows, or that claims a lower taint
//! than the log shows, is rebuilt from the log, and the rebuild is recorded; one that
//! cannot be read counts as the top label. A session is never taken as new and clean
//! because its file went away.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bx_audit::{AuditLog, Entry, Session};
use bx_broker::{Label, parse_label};
use bx_state::{SessionState, Sessions};

use crate::error::AgentError;

/// What the log says of one session.
#[derive(Debug, Clone, Default)]
struct Known {
    /// The join of the labels of its results (and of anything raised since).
    taint: Label,
    /// Its workspace, from the `workspace` record made when it was created; fixed for
    /// the session's life.
    workspace: Option<PathBuf>,
}

/// The session event that records a session's workspace.
pub(crate) const WORKSPACE_EVENT: &str = "workspace";

/// The taint of every session, as this writer knows it.
#[derive(Debug)]
pub struct Ledger {
    files: Sessions,
    known: Mutex<HashMap<String, Known>>,
}

/// The label a result record carries; one that cannot be read counts as the top.
fn result_label(text: &str) -> Label {
    parse_label(text).unwrap_or(Label::TOP)
}

/// Reads the whole log in `audit_dir`: each session's taint, the join of its results.
fn scan(audit_dir: &Path) -> Result<HashMap<String, Known>, AgentError> {
    let mut known: HashMap<String, Known> = HashMap::new();
    bx_audit::for_each_entry(audit_dir, |_, entry| {
        let Some(session) = entry.session() else { return };
        let k = known.entry(session.to_owned()).or_default();
        match &entry {
            Entry::Result(r) => k.taint = k.taint.join(result_label(&r.label)),
            // The first one holds: a session's workspace never moves.
            Entry::Session(s) if s.event == WORKSPACE_EVENT && k.workspace.is_none() => {
                k.workspace = Some(PathBuf::from(&s.detail));
            }
            _ => {}
        }
    })?;
    Ok(known)
}

impl Ledger {
    /// The ledger of the session files in `files`, rebuilt from the log in `audit_dir`.
    pub fn open(files: Sessions, audit_dir: &Path) -> Result<Ledger, AgentError> {
        Ok(Ledger { known: Mutex::new(scan(audit_dir)?), files })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Known>> {
        // Each update is one insert; a panic elsewhere leaves the map whole.
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session files.
    pub fn files(&self) -> &Sessions {
        &self.files
    }

    /// Every session this ledger or the session directory knows, sorted.
    pub fn list(&self) -> Result<Vec<String>, AgentError> {
        let mut ids = self.files.list()?;
        ids.extend(self.lock().keys().cloned());
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// The session's taint as this ledger and its state file say, without recording or
    /// writing anything (for `bx policy explain` and `bx session show`): the log's
    /// taint joined with the file's, and the top label when the file cannot be read.
    pub fn peek(&self, session: &str) -> Result<(Label, Option<String>), AgentError> {
        let logged = self.lock().get(session).map_or(Label::CLEAN, |k| k.taint);
        let (state, damage) = self.files.state(session)?;
        Ok((logged.join(state.taint), damage))
    }

    /// The session's taint as a call (`call`, when there is one) sees it, checking its
    /// state file against what the log says; any damage or rebuild is recorded on `log`.
    pub fn taint(
        &self,
        log: &AuditLog,
        session: &str,
        call: Option<&str>,
    ) -> Result<Label, AgentError> {
        self.taint_noting(log, session, call).map(|(t, _)| t)
    }

    /// [`Ledger::taint`], with a note for the owner when the state file was damaged.
    pub fn taint_noting(
        &self,
        log: &AuditLog,
        session: &str,
        call: Option<&str>,
    ) -> Result<(Label, Option<String>), AgentError> {
        let mut known = self.lock();
        let in_log = known.get(session).map(|k| k.taint);
        let logged = in_log.unwrap_or(Label::CLEAN);
        let record = |event: &str, detail: String, taint: Label| {
            log.append(&Entry::Session(Session {
                session: session.to_owned(),
                call: call.map(str::to_owned),
                event: event.to_owned(),
                detail,
                taint: Some(taint.to_string()),
            }))
        };
        let (state, damage) = self.files.state(session)?;
        let mut note = None;
        let taint = match damage {
            Some(why) => {
                // Unreadable state counts as the top label, and stays so until the owner
                // rebuilds it (`bx session rebuild`).
                record("state-damaged", why.clone(), Label::TOP)?;
                note = Some(format!(
                    "the session's state is damaged ({why}); see docs/runbook.md#session-state-damaged"
                ));
                Label::TOP
            }
            None if !self.files.has_state(session) => {
                // A file whose absence would lower the taint is rebuilt and recorded; one
                // for a session whose results were all clean (or that has none yet, as
                // when its first call waits for the owner) holds nothing to miss.
                let known = in_log.is_some() || self.files.has_transcript(session);
                if known && logged != Label::CLEAN {
                    let detail = format!(
                        "{}: missing for a session the log knows; rebuilt from the audit log",
                        self.files.dir().join(format!("{session}.json")).display()
                    );
                    record("state-rebuilt", detail, logged)?;
                    self.files.put(session, &SessionState { taint: logged, slot: None })?;
                }
                logged
            }
            None if !logged.flows_to(state.taint) => {
                let rebuilt = logged.join(state.taint);
                let detail = format!(
                    "state file claims {} but the audit log shows {logged}; rebuilt as {rebuilt}",
                    state.taint
                );
                record("state-rebuilt", detail, rebuilt)?;
                self.files.put(session, &SessionState { taint: rebuilt, slot: state.slot })?;
                rebuilt
            }
            None => logged.join(state.taint),
        };
        known.entry(session.to_owned()).or_default().taint = taint;
        Ok((taint, note))
    }

    /// Raises the session's taint to include `label` (never lowers it), in memory and
    /// in its state file; returns the new taint.
    pub fn observe(&self, session: &str, label: Label) -> Result<Label, AgentError> {
        let mut known = self.lock();
        let before = known.get(session).map_or(Label::CLEAN, |k| k.taint);
        let taint = before.join(label);
        let (state, _) = self.files.state(session)?;
        let taint =
            taint.join(if self.files.has_state(session) { state.taint } else { Label::CLEAN });
        if taint != state.taint || !self.files.has_state(session) {
            self.files.put(session, &SessionState { taint, slot: state.slot })?;
        }
        known.entry(session.to_owned()).or_default().taint = taint;
        Ok(taint)
    }

    /// Recomputes the session's taint from the log in `audit_dir` alone (the owner's
    /// `bx session rebuild`), writes it and records the rebuild; returns it and how many
    /// results it came from.
    pub fn rebuild(
        &self,
        log: &AuditLog,
        audit_dir: &Path,
        session: &str,
    ) -> Result<(Label, u64), AgentError> {
        let mut taint = Label::CLEAN;
        let mut results = 0;
        bx_audit::for_each_entry(audit_dir, |_, entry| {
            if let Entry::Result(r) = entry
                && r.session == session
            {
                taint = taint.join(result_label(&r.label));
                results += 1;
            }
        })?;
        let mut known = self.lock();
        let (state, _) = self.files.state(session)?;
        log.append(&Entry::Session(Session {
            session: session.to_owned(),
            call: None,
            event: "state-rebuilt".into(),
            detail: format!("rebuilt by the owner from {results} results in the audit log"),
            taint: Some(taint.to_string()),
        }))?;
        let slot = if self.files.has_state(session) { state.slot } else { None };
        self.files.put(session, &SessionState { taint, slot })?;
        known.entry(session.to_owned()).or_default().taint = taint;
        Ok((taint, results))
    }

    /// The session's workspace, as the log records it (`None` for a session that has
    /// none: one made before workspaces, or by a client that named none).
    pub fn workspace_of(&self, session: &str) -> Option<PathBuf> {
        self.lock().get(session).and_then(|k| k.workspace.clone())
    }

    /// The session's workspace: the one recorded when it was created, else `requested`,
    /// which is then recorded on `log` (and so fixed for the session's life). The second
    /// value is true when `requested` names another directory than the one that holds,
    /// or asks for one in a session that exists without one.
    /// `requested` must be [valid](crate::check_workspace).
    pub fn workspace(
        &self,
        log: &AuditLog,
        session: &str,
        requested: Option<&Path>,
    ) -> Result<(Option<PathBuf>, bool), AgentError> {
        let mut known = self.lock();
        if let Some(held) = known.get(session).and_then(|k| k.workspace.clone()) {
            let moved = requested.is_some_and(|r| r != held);
            return Ok((Some(held), moved));
        }
        let Some(requested) = requested else { return Ok((None, false)) };
        // A session that exists without one (made by `bx tool run`, or before bx had
        // workspaces) keeps none: a workspace is only ever set when a session is created.
        if known.contains_key(session)
            || self.files.has_state(session)
            || self.files.has_transcript(session)
        {
            return Ok((None, true));
        }
        log.append(&Entry::Session(Session {
            session: session.to_owned(),
            call: None,
            event: WORKSPACE_EVENT.to_owned(),
            detail: requested.display().to_string(),
            taint: None,
        }))?;
        known.entry(session.to_owned()).or_default().workspace = Some(requested.to_path_buf());
        Ok((Some(requested.to_path_buf()), false))
    }

    /// Remembers the inference slot the session is on (its prompt cache), keeping its
    /// taint as this ledger knows it.
    pub fn set_slot(&self, session: &str, slot: usize) -> Result<(), AgentError> {
        let known = self.lock();
        let (state, damage) = self.files.state(session)?;
        if damage.is_some() || (self.files.has_state(session) && state.slot == Some(slot)) {
            // Damaged state is left for the owner to look at (it counts as the top).
            return Ok(());
        }
        let logged = known.get(session).map_or(Label::CLEAN, |k| k.taint);
        let taint = if self.files.has_state(session) { state.taint.join(logged) } else { logged };
        self.files.put(session, &SessionState { taint, slot: Some(slot) })?;
        Ok(())
    }
}
