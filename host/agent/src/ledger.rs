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
use bx_broker::{Cover, Label, Scope, parse_label};
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
    /// The owner's scoped answers in force, oldest first.
    scopes: Vec<Scope>,
    /// The results that raised its taint, oldest first.
    rises: Vec<Rise>,
    /// How many results it has had.
    results: u64,
}

/// A result that raised a session's taint.
#[derive(Debug, Clone)]
struct Rise {
    /// Its place among the session's results (1 for the first).
    ordinal: u64,
    /// What it reached that raised the taint, with its label, as its record says (or its
    /// call's id and label).
    what: String,
}

/// The most rises remembered per session (the lattice is small: more can only come from
/// results that raised it again after a rebuild).
const MAX_RISES: usize = 8;

/// The most scoped answers a session holds; the oldest goes first past it.
pub(crate) const MAX_SCOPES: usize = 256;

impl Known {
    /// Counts a result with `label` that reached `touched` (each item as shown, with its
    /// label), noting the first item that raised the taint when the result did.
    /// `declared` are the resources the call's request named (`fetch URL`, `read PATH`):
    /// a host it reached is shown as the URL it named there.
    fn result(
        &mut self,
        label: Label,
        touched: &[(Label, String)],
        declared: &[String],
        call: &str,
    ) {
        self.results += 1;
        let raised = self.taint.join(label);
        if raised != self.taint {
            if self.rises.len() == MAX_RISES {
                self.rises.remove(0);
            }
            let what = touched
                .iter()
                .find(|(l, _)| !l.flows_to(self.taint))
                .map_or_else(|| format!("call {call} ({label})"), |(l, t)| named(t, *l, declared));
            self.rises.push(Rise { ordinal: self.results, what });
        }
        self.taint = raised;
    }

    fn add_scope(&mut self, scope: Scope) {
        self.scopes.retain(|s| s.id != scope.id);
        if self.scopes.len() == MAX_SCOPES {
            self.scopes.remove(0);
        }
        self.scopes.push(scope);
    }

    /// Applies a session event that ends scoped answers; returns how many it removed.
    fn end_scopes(&mut self, event: &str, detail: &str) -> usize {
        let before = self.scopes.len();
        match event {
            ENDED_EVENT => self.scopes.clear(),
            REVOKED_EVENT if detail == "*" => self.scopes.clear(),
            REVOKED_EVENT => self.scopes.retain(|s| s.id != detail),
            _ => {}
        }
        before - self.scopes.len()
    }
}

/// The session event that revokes a scoped answer (`detail`: its id, or `*`).
pub(crate) const REVOKED_EVENT: &str = "scope-revoked";
/// The session event that ends a session: its scoped answers end with it.
pub(crate) const ENDED_EVENT: &str = "ended";

/// A scoped answer as its `approval` record gives it; `None` for one that does not
/// read back whole (it then covers nothing).
fn scope_of(a: &bx_audit::Approval) -> Option<Scope> {
    let r = a.scope.as_ref()?;
    let approve = match a.answer {
        bx_audit::OwnerAnswer::Approve => true,
        bx_audit::OwnerAnswer::Refuse => false,
        bx_audit::OwnerAnswer::Expired => return None,
    };
    Some(Scope {
        id: a.id.clone(),
        tool: r.tool.clone(),
        digest: r.digest.clone(),
        taint: parse_label(&r.taint).ok()?,
        cover: Cover::from_record(&r.kind, &r.what)?,
        approve,
        reason: a.reason.clone(),
    })
}

/// A host a call reached (`fetch HOST (LABEL)`) as the URL its request named for it,
/// `fetch URL (LABEL)`; anything else as shown.
fn named(touched: &str, label: Label, declared: &[String]) -> String {
    let Some(host) = touched.strip_prefix("fetch ").and_then(|t| t.split(' ').next()) else {
        return touched.to_owned();
    };
    declared
        .iter()
        .filter_map(|d| d.strip_prefix("fetch "))
        .find(|u| url::Url::parse(u).is_ok_and(|u| u.host_str() == Some(host)))
        .map_or_else(|| touched.to_owned(), |u| format!("fetch {u} ({label})"))
}

/// What a result record says it reached, each item with the label it names last, in
/// parentheses (`fetch example.org (public/untrusted)`); an item without one counts as
/// the top label.
fn reached(touched: &[String]) -> Vec<(Label, String)> {
    touched
        .iter()
        .map(|t| {
            let label = t
                .strip_suffix(')')
                .and_then(|t| t.rsplit_once(" ("))
                .map_or(Label::TOP, |(_, l)| result_label(l));
            (label, t.clone())
        })
        .collect()
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
    // Each session's last request: its result follows it, and names what it reached.
    let mut last: HashMap<String, (String, Vec<String>)> = HashMap::new();
    bx_audit::for_each_entry(audit_dir, |_, entry| {
        let Some(session) = entry.session() else { return };
        let k = known.entry(session.to_owned()).or_default();
        match &entry {
            Entry::Request(r) => {
                last.insert(session.to_owned(), (r.call.clone(), r.resources.clone()));
            }
            Entry::Result(r) => {
                let declared = match last.get(session) {
                    Some((call, resources)) if *call == r.call => resources.as_slice(),
                    _ => &[],
                };
                k.result(result_label(&r.label), &reached(&r.touched), declared, &r.call);
            }
            Entry::Approval(a) => {
                if let Some(scope) = scope_of(a) {
                    k.add_scope(scope);
                }
            }
            Entry::Session(s) => {
                k.end_scopes(&s.event, &s.detail);
                // The first one holds: a session's workspace never moves.
                if s.event == WORKSPACE_EVENT && k.workspace.is_none() {
                    k.workspace = Some(PathBuf::from(&s.detail));
                }
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
    /// in its state file, for the result of `call` that reached `touched` (each item as
    /// shown, with its label), having named `declared`; returns the new taint.
    pub fn observe(
        &self,
        session: &str,
        call: &str,
        label: Label,
        touched: &[(Label, String)],
        declared: &[String],
    ) -> Result<Label, AgentError> {
        let mut known = self.lock();
        let k = known.entry(session.to_owned()).or_default();
        k.result(label, touched, declared, call);
        let taint = k.taint;
        let (state, _) = self.files.state(session)?;
        let taint =
            taint.join(if self.files.has_state(session) { state.taint } else { Label::CLEAN });
        if taint != state.taint || !self.files.has_state(session) {
            self.files.put(session, &SessionState { taint, slot: state.slot })?;
        }
        known.entry(session.to_owned()).or_default().taint = taint;
        Ok(taint)
    }

    /// The session's scoped answers in force, oldest first.
    pub fn scopes(&self, session: &str) -> Vec<Scope> {
        self.lock().get(session).map(|k| k.scopes.clone()).unwrap_or_default()
    }

    /// Holds `scope` for the session: its `approval` record is on the log already.
    pub(crate) fn add_scope(&self, session: &str, scope: Scope) {
        self.lock().entry(session.to_owned()).or_default().add_scope(scope);
    }

    /// Ends scoped answers of `session`: the one given for approval `id`, or all of them
    /// (`None`), or, with `ended`, all of them as the session ends. The event goes on
    /// `log` first (the ledger rebuilds the same from it); returns how many ended.
    pub fn end_scopes(
        &self,
        log: &AuditLog,
        session: &str,
        id: Option<&str>,
        ended: bool,
    ) -> Result<usize, AgentError> {
        let mut known = self.lock();
        let (event, detail) = match (ended, id) {
            (true, _) => (ENDED_EVENT, String::new()),
            (false, Some(id)) => (REVOKED_EVENT, id.trim().to_ascii_lowercase()),
            (false, None) => (REVOKED_EVENT, "*".to_owned()),
        };
        let held = known.get(session).map_or(0, |k| k.scopes.len());
        let hit = match (ended, id) {
            (false, Some(_)) => {
                known.get(session).map_or(0, |k| k.scopes.iter().filter(|s| s.id == detail).count())
            }
            _ => held,
        };
        // Revoking what is not held records nothing (an id the session never had).
        if hit == 0 && !ended {
            return Ok(0);
        }
        log.append(&Entry::Session(Session {
            session: session.to_owned(),
            call: None,
            event: event.to_owned(),
            detail: detail.clone(),
            taint: None,
        }))?;
        Ok(known.get_mut(session).map_or(0, |k| k.end_scopes(event, &detail)))
    }

    /// Where the session's taint came from, one line per result that raised it:
    /// `fetch https://… (public/untrusted), 3 calls ago`.
    pub fn taint_from(&self, session: &str) -> Vec<String> {
        let known = self.lock();
        let Some(k) = known.get(session) else { return Vec::new() };
        k.rises
            .iter()
            .map(|r| {
                let ago = k.results - r.ordinal;
                let when = match ago {
                    0 => "the last call".to_owned(),
                    1 => "1 call ago".to_owned(),
                    n => format!("{n} calls ago"),
                };
                format!("{}, {when}", r.what)
            })
            .collect()
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
