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

use crate::call::in_place;
use crate::error::AgentError;

mod saved;

/// What the log says of one session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    fn result(&mut self, label: Label, touched: &[(Label, &str)], urls: &[&str], call: &str) {
        self.results += 1;
        let raised = self.taint.join(label);
        if raised != self.taint {
            if self.rises.len() == MAX_RISES {
                self.rises.remove(0);
            }
            let what = touched
                .iter()
                .find(|(l, _)| !l.flows_to(self.taint))
                .map_or_else(|| format!("call {call} ({label})"), |(l, t)| named(t, *l, urls));
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
        reviewer: !a.by.is_owner(),
    })
}

/// A host a call reached (`fetch HOST (LABEL)`) as the URL its request named for it
/// (among `urls`), `fetch URL (LABEL)`; anything else as shown.
fn named(touched: &str, label: Label, urls: &[&str]) -> String {
    let Some(host) = touched.strip_prefix("fetch ").and_then(|t| t.split(' ').next()) else {
        return touched.to_owned();
    };
    urls.iter()
        .find(|u| url::Url::parse(u).is_ok_and(|u| u.host_str() == Some(host)))
        .map_or_else(|| touched.to_owned(), |u| format!("fetch {u} ({label})"))
}

/// What a result record says it reached, each item with the label it names last, in
/// parentheses (`fetch example.org (public/untrusted)`); an item without one counts as
/// the top label.
fn reached(touched: &[String]) -> Vec<(Label, &str)> {
    touched
        .iter()
        .map(|t| {
            let label = t
                .strip_suffix(')')
                .and_then(|t| t.rsplit_once(" ("))
                .map_or(Label::TOP, |(_, l)| result_label(l));
            (label, t.as_str())
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
    replayed: Replayed,
    /// Why the writer's open could not write its checkpoint, when it could not.
    unsaved: Option<String>,
}

/// The label a result record carries; one that cannot be read counts as the top.
fn result_label(text: &str) -> Label {
    parse_label(text).unwrap_or(Label::TOP)
}

/// How much of the log an open read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// Every record, there being no checkpoint (a new state directory, or one from before
    /// checkpoints).
    Whole {
        /// How many.
        records: u64,
    },
    /// The records after the checkpoint's.
    After {
        /// The checkpoint's last record.
        seq: u64,
        /// How many came after it.
        records: u64,
    },
    /// Every record, because the checkpoint could not be trusted (why).
    Mismatch {
        /// Why.
        why: String,
        /// How many.
        records: u64,
    },
}

impl std::fmt::Display for Replayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replayed::Whole { records } => write!(f, "replayed the whole log ({records} records)"),
            Replayed::After { seq, records } => {
                write!(f, "replayed {records} records after its checkpoint at record {seq}")
            }
            Replayed::Mismatch { why, records } => write!(
                f,
                "its checkpoint does not match the log ({why}); replayed the whole log ({records} records) instead (see docs/runbook.md#ledger-checkpoint)"
            ),
        }
    }
}

/// What a scan found: the sessions, how much it read, and the last record it read.
type Scanned = (HashMap<String, Known>, Replayed, Option<bx_audit::Position>);

/// What the log in `audit_dir` says of every session: from its checkpoint on, when it
/// has one that names a record of the log, else from the first record. Returns the
/// sessions, how much was read, and the last record read.
fn scan(audit_dir: &Path) -> Result<Scanned, AgentError> {
    let (mut known, from, bad) = match saved::read(audit_dir) {
        Ok(Some((known, at))) => (known, Some(at), None),
        Ok(None) => (HashMap::new(), None, None),
        Err(why) => (HashMap::new(), None, Some(why)),
    };
    let mut replay = Replay::default();
    let (resumed, end) = bx_audit::for_each_entry_after(audit_dir, from.as_ref(), |_, e| {
        replay.apply(e, &mut known);
    })?;
    let replayed = match (resumed, bad) {
        (bx_audit::Resumed::After(seq), _) => Replayed::After { seq, records: replay.records },
        (bx_audit::Resumed::Start, None) => Replayed::Whole { records: replay.records },
        (bx_audit::Resumed::Start, Some(why)) => {
            Replayed::Mismatch { why: why.to_string(), records: replay.records }
        }
        (bx_audit::Resumed::Mismatch(why), _) => {
            // The checkpoint's sessions were taken before the mismatch was found: read
            // the whole log again from nothing.
            let mut fresh = HashMap::new();
            let mut replay = Replay::default();
            let (_, end) = bx_audit::for_each_entry_after(audit_dir, None, |_, e| {
                replay.apply(e, &mut fresh);
            })?;
            let replayed = Replayed::Mismatch { why, records: replay.records };
            return Ok((fresh, replayed, end));
        }
    };
    Ok((known, replayed, end))
}

/// One pass over records, applying each to what the ledger knows. What it holds of calls
/// in flight (asks not yet answered, each session's last request) is not checkpointed: a
/// checkpoint is written as the log's writer opens, when no call is in flight.
#[derive(Debug, Default)]
struct Replay {
    records: u64,
    /// The approval ids of the `ask` decisions not yet answered, by session and call: an
    /// `approval` record makes a scope only when it answers one of them.
    asked: HashMap<(String, String), String>,
    /// Each session's last request: its result follows it, and names what it reached.
    last: HashMap<String, (String, Vec<String>)>,
}

impl Replay {
    fn apply(&mut self, entry: Entry, known: &mut HashMap<String, Known>) {
        self.records += 1;
        let Some(session) = entry.session() else { return };
        let k = known.entry(session.to_owned()).or_default();
        match &entry {
            Entry::Request(r) => {
                self.last.insert(session.to_owned(), (r.call.clone(), r.resources.clone()));
            }
            Entry::Result(r) => {
                let urls: Vec<&str> = match self.last.get(session) {
                    Some((call, resources)) if *call == r.call => {
                        resources.iter().filter_map(|d| d.strip_prefix("fetch ")).collect()
                    }
                    _ => Vec::new(),
                };
                k.result(result_label(&r.label), &reached(&r.touched), &urls, &r.call);
            }
            Entry::Decision(d) => {
                if let Some(id) = &d.approval {
                    self.asked.insert((session.to_owned(), d.call.clone()), id.clone());
                }
            }
            Entry::Approval(a) => {
                let asked = self.asked.remove(&(session.to_owned(), a.call.clone()));
                if asked.as_deref() == Some(a.id.as_str())
                    && let Some(scope) = scope_of(a)
                {
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
    }
}

impl Ledger {
    /// The ledger of the session files in `files`, rebuilt from the log in `audit_dir`
    /// (from its checkpoint on, when it has a good one), for reading: it writes nothing.
    pub fn open(files: Sessions, audit_dir: &Path) -> Result<Ledger, AgentError> {
        let (known, replayed, _) = scan(audit_dir)?;
        Ok(Ledger { known: Mutex::new(known), files, replayed, unsaved: None })
    }

    /// [`Ledger::open`] for the writer of `log`, which holds its lock (nothing appends
    /// while it reads): it then checkpoints what it read, so that the next open replays
    /// only the records after this one's end.
    pub fn open_writing(files: Sessions, log: &AuditLog) -> Result<Ledger, AgentError> {
        let (known, replayed, end) = scan(log.dir())?;
        let unchanged = matches!(replayed, Replayed::After { records: 0, .. });
        let mut unsaved = None;
        if let Some(end) = end.filter(|_| !unchanged)
            && let Err(why) = saved::write(log.dir(), &known, &end)
        {
            // Only a shortcut: the next open replays more, and nothing else changes.
            unsaved = Some(why.to_string());
        }
        Ok(Ledger { known: Mutex::new(known), files, replayed, unsaved })
    }

    /// How much of the log the open read.
    pub fn replayed(&self) -> &Replayed {
        &self.replayed
    }

    /// Why the writer's open could not write the ledger's checkpoint, when it could not
    /// (the next open replays the records since the last one; nothing is refused).
    pub fn unsaved(&self) -> Option<&str> {
        self.unsaved.as_deref()
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
            append_session(
                log,
                Session {
                    session: session.to_owned(),
                    call: call.map(str::to_owned),
                    event: event.to_owned(),
                    detail,
                    taint: Some(taint.to_string()),
                },
            )
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
                    self.put(session, &SessionState { taint: logged, slot: None })?;
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
                self.put(session, &SessionState { taint: rebuilt, slot: state.slot })?;
                rebuilt
            }
            None => logged.join(state.taint),
        };
        known.entry(session.to_owned()).or_default().taint = taint;
        Ok((taint, note))
    }

    /// Raises the session's taint to include `label` (never lowers it), in memory and
    /// in its state file, for the result of `call` that reached `touched` (each item as
    /// shown, with its label), having named `urls`; returns the new taint.
    pub fn observe(
        &self,
        session: &str,
        call: &str,
        label: Label,
        touched: &[(Label, &str)],
        urls: &[&str],
    ) -> Result<Label, AgentError> {
        let mut known = self.lock();
        let k = known.entry(session.to_owned()).or_default();
        k.result(label, touched, urls, call);
        let taint = k.taint;
        let (state, _) = self.files.state(session)?;
        let taint =
            taint.join(if self.files.has_state(session) { state.taint } else { Label::CLEAN });
        if taint != state.taint || !self.files.has_state(session) {
            self.put(session, &SessionState { taint, slot: state.slot })?;
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
        // Ending what is not held records nothing (an id the session never had, or a
        // session left with no scoped answers).
        if hit == 0 {
            return Ok(0);
        }
        append_session(
            log,
            Session {
                session: session.to_owned(),
                call: None,
                event: event.to_owned(),
                detail: detail.clone(),
                taint: None,
            },
        )?;
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
        append_session(
            log,
            Session {
                session: session.to_owned(),
                call: None,
                event: "state-rebuilt".into(),
                detail: format!("rebuilt by the owner from {results} results in the audit log"),
                taint: Some(taint.to_string()),
            },
        )?;
        let slot = if self.files.has_state(session) { state.slot } else { None };
        self.put(session, &SessionState { taint, slot })?;
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
        append_session(
            log,
            Session {
                session: session.to_owned(),
                call: None,
                event: WORKSPACE_EVENT.to_owned(),
                detail: requested.display().to_string(),
                taint: None,
            },
        )?;
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
        self.put(session, &SessionState { taint, slot: Some(slot) })
    }

    /// Writes `session`'s state file (synced), off the async threads ([`in_place`]): the
    /// ledger's steps run on them otherwise, as most write nothing.
    fn put(&self, session: &str, state: &SessionState) -> Result<(), AgentError> {
        Ok(in_place(|| self.files.put(session, state))?)
    }
}

/// Appends `event` to the log (synced), off the async threads ([`in_place`]).
fn append_session(log: &AuditLog, event: Session) -> Result<bx_audit::Receipt, AgentError> {
    Ok(in_place(|| log.append(&Entry::Session(event)))?)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, SystemTime};

    use bx_audit::{Approval, AuditLog, CallStatus, Entry, Outcome, Request, ScopeRecord, Session};

    use super::*;

    /// A clock a day later at every read past `day_every` reads, so the log spans files.
    struct Days(AtomicU64, u64);

    impl bx_audit::Clock for Days {
        fn now(&self) -> SystemTime {
            let n = self.0.fetch_add(1, Ordering::Relaxed);
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + (n / self.1) * 86_400)
        }
    }

    /// The `i`th entry of a history that taints, scopes, revokes and ends sessions: each
    /// call a request, a result, an `ask`, the owner's scoped answer to it, and a
    /// session event that revokes (or ends) an earlier answer.
    fn entry(i: u64) -> Entry {
        let session = format!("s{}", (i / 5) % 3);
        let call = format!("c{}", i / 5);
        match i % 5 {
            0 => Entry::Request(Request::new(
                &session,
                &call,
                "http.fetch",
                "sha256:ab",
                "{}",
                vec![format!("fetch https://h{i}.example/page")],
            )),
            1 => Entry::Result(Outcome {
                session,
                call,
                status: CallStatus::Ok,
                label: ["public/trusted", "private/trusted", "public/untrusted"]
                    [(i % 7 % 3) as usize]
                    .into(),
                touched: vec![format!("fetch h{}.example (public/untrusted)", i - 1)],
                touched_more: 0,
                output_sha256: Some(String::new()),
                output_bytes: Some(0),
                error: None,
                refused: vec![],
                secrets: vec![],
                leaks: vec![],
            }),
            2 => Entry::Decision(bx_audit::Decision {
                session,
                call,
                decision: bx_audit::Verdict::Ask,
                taint: "public/trusted".into(),
                why: String::new(),
                approval: Some(format!("a{}", i / 5)),
                covered_by: None,
                voided: None,
            }),
            3 => Entry::Approval(Approval {
                session,
                call,
                // Every seventh answers an id that no `ask` gave: it makes no scope.
                id: if i.is_multiple_of(7) { "forged".into() } else { format!("a{}", i / 5) },
                answer: bx_audit::OwnerAnswer::Approve,
                by: bx_audit::AnsweredBy::Owner,
                reason: String::new(),
                decision: bx_audit::Settled::Allow,
                scope: Some(ScopeRecord {
                    tool: "fs.write".into(),
                    digest: "sha256:ab".into(),
                    taint: "private/trusted".into(),
                    kind: "path".into(),
                    what: format!("write /w/d{i}"),
                }),
            }),
            _ => Entry::Session(Session {
                session,
                call: None,
                event: if i % 30 == 4 { ENDED_EVENT.into() } else { REVOKED_EVENT.into() },
                detail: format!("a{}", (i / 5).saturating_sub(2)),
                taint: None,
            }),
        }
    }

    fn log(dir: &Path) -> AuditLog {
        AuditLog::open_with_clock(dir, Box::new(Days(AtomicU64::new(0), 40))).unwrap()
    }

    fn files(dir: &Path) -> Sessions {
        Sessions::open(&dir.join("sessions")).unwrap()
    }

    /// What a ledger opened on the log alone (no checkpoint) knows.
    fn whole(audit: &Path, state: &Path) -> HashMap<String, Known> {
        let saved = saved::path(audit);
        let kept = std::fs::read(&saved).ok();
        let _ = std::fs::remove_file(&saved);
        let ledger = Ledger::open(files(state), audit).unwrap();
        assert!(matches!(ledger.replayed(), Replayed::Whole { .. }));
        if let Some(kept) = kept {
            std::fs::write(&saved, kept).unwrap();
        }
        ledger.known.into_inner().unwrap()
    }

    #[test]
    fn an_open_after_a_checkpoint_replays_only_what_is_new_and_knows_what_a_whole_replay_knows() {
        let state = tempfile::tempdir().unwrap();
        let audit = state.path().join("audit");
        let mut n = 0;
        // Whole calls (five records each), as a writer leaves them: a checkpoint is taken
        // as the writer opens, never with a call in flight.
        for batch in [0, 5, 35, 100, 5, 260] {
            {
                let log = log(&audit);
                for _ in 0..batch {
                    log.append(&entry(n)).unwrap();
                    n += 1;
                }
                let ledger = Ledger::open_writing(files(state.path()), &log).unwrap();
                let expected = whole(&audit, state.path());
                match ledger.replayed() {
                    // Only the first open finds no checkpoint.
                    Replayed::Whole { .. } => assert_eq!(n, batch, "a later open replayed all"),
                    Replayed::After { records, .. } => assert_eq!(*records, batch, "batch {batch}"),
                    Replayed::Mismatch { why, .. } => panic!("batch {batch}: {why}"),
                }
                assert_eq!(*ledger.known.lock().unwrap(), expected, "after {n} records");
                if n > 100 {
                    let scopes: usize = expected.values().map(|k| k.scopes.len()).sum();
                    assert!(scopes > 0, "the history holds scoped answers");
                }
                log.close().unwrap();
            }
        }
        assert!(n > 400);
    }

    #[test]
    fn a_checkpoint_that_does_not_match_the_log_is_not_trusted_and_the_open_says_so() {
        let state = tempfile::tempdir().unwrap();
        let audit = state.path().join("audit");
        let log = log(&audit);
        for i in 0..60 {
            log.append(&entry(i)).unwrap();
        }
        drop(Ledger::open_writing(files(state.path()), &log).unwrap());
        for i in 60..70 {
            log.append(&entry(i)).unwrap();
        }
        let expected = whole(&audit, state.path());
        let good = std::fs::read_to_string(saved::path(&audit)).unwrap();
        // Each edit of where it stands, and an edit that makes it unreadable.
        type Edit = Box<dyn Fn(&mut serde_json::Value)>;
        let edits: Vec<Edit> = vec![
            Box::new(|d| d["at"]["hash"] = "00".repeat(32).into()),
            Box::new(|d| d["at"]["seq"] = (d["at"]["seq"].as_u64().unwrap() + 1).into()),
            Box::new(|d| d["at"]["offset"] = (d["at"]["offset"].as_u64().unwrap() - 1).into()),
            Box::new(|d| {
                d["at"]["line_start"] = (d["at"]["line_start"].as_u64().unwrap() + 1).into()
            }),
            Box::new(|d| d["at"]["file"] = "../../etc/passwd".into()),
            Box::new(|d| d["sessions"]["s1"]["taint"] = "nonsense".into()),
            Box::new(|d| d["v"] = 9.into()),
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut edited = serde_json::from_str::<serde_json::Value>(&good).unwrap();
            edit(&mut edited);
            std::fs::write(saved::path(&audit), edited.to_string()).unwrap();
            let ledger = Ledger::open(files(state.path()), &audit).unwrap();
            assert!(
                matches!(ledger.replayed(), Replayed::Mismatch { records: 70, .. }),
                "edit {i}: {}",
                ledger.replayed()
            );
            assert!(ledger.replayed().to_string().contains("docs/runbook.md#ledger-checkpoint"));
            assert_eq!(*ledger.known.lock().unwrap(), expected, "edit {i}");
        }
        // Records cut off after the checkpoint was taken: its place is gone.
        std::fs::write(saved::path(&audit), &good).unwrap();
        drop(log);
        let newest = bx_audit::day_files(&audit).unwrap().pop().unwrap();
        let len = std::fs::metadata(&newest).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&newest).unwrap().set_len(len / 3).unwrap();
        let ledger = Ledger::open(files(state.path()), &audit).unwrap();
        assert!(matches!(ledger.replayed(), Replayed::Mismatch { .. }), "{}", ledger.replayed());
    }

    /// Found by a probe: a FIFO at `ledger.json` hung every open; a symlink was followed;
    /// a day file added before the checkpoint's went unread; a directory there stopped
    /// the writer. Each is now a full replay (or, for the write, a note), never a wait.
    #[test]
    fn what_stands_at_the_checkpoint_is_never_waited_on_followed_or_trusted_past_the_files() {
        let state = tempfile::tempdir().unwrap();
        let audit = state.path().join("audit");
        let log = log(&audit);
        for i in 0..30 {
            log.append(&entry(i)).unwrap();
        }
        drop(Ledger::open_writing(files(state.path()), &log).unwrap());
        let expected = whole(&audit, state.path());
        let saved = saved::path(&audit);
        let good = std::fs::read(&saved).unwrap();
        let mismatch = |what: &str| {
            let ledger = Ledger::open(files(state.path()), &audit).unwrap();
            assert!(
                matches!(ledger.replayed(), Replayed::Mismatch { .. }),
                "{what}: {}",
                ledger.replayed()
            );
            assert_eq!(*ledger.known.lock().unwrap(), expected, "{what}");
        };
        std::fs::remove_file(&saved).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&saved).status().unwrap().success());
        mismatch("a FIFO");
        std::fs::remove_file(&saved).unwrap();
        let elsewhere = state.path().join("copy.json");
        std::fs::write(&elsewhere, &good).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &saved).unwrap();
        mismatch("a symlink to a good copy");
        std::fs::remove_file(&saved).unwrap();
        std::fs::write(&saved, &good).unwrap();
        let first = bx_audit::day_files(&audit).unwrap()[0].clone();
        let earlier = audit.join("2000-01-01.jsonl");
        std::fs::copy(&first, &earlier).unwrap();
        let ledger = Ledger::open(files(state.path()), &audit).unwrap();
        assert!(
            ledger.replayed().to_string().contains("added, removed or renamed"),
            "{}",
            ledger.replayed()
        );
        std::fs::remove_file(&earlier).unwrap();
        // A directory where the checkpoint goes: the writer opens, and says it could not
        // write it.
        std::fs::remove_file(&saved).unwrap();
        std::fs::create_dir(&saved).unwrap();
        let ledger = Ledger::open_writing(files(state.path()), &log).unwrap();
        assert!(ledger.unsaved().is_some());
        assert_eq!(*ledger.known.lock().unwrap(), expected);
    }
}
