//! The ledger's checkpoint, `ledger.json` beside the audit log's `checkpoint.json`: what
//! the ledger knew of every session after one record of the log, and where that record
//! is ([`Position`]). A writer opening the log replays only the records after it. A
//! checkpoint that does not name a record of the log as it is now (cut, rewritten,
//! edited), or that does not read back whole, is not trusted: the open replays the
//! whole log and says why. It is bx's own state, as the session files are, and like them
//! it is only ever a shortcut to what the log says.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use bx_audit::Position;
use bx_broker::{Cover, Label, Scope, parse_label};
use serde::{Deserialize, Serialize};

use super::{Known, Rise};

/// The file's name, in the audit directory.
pub(crate) const FILE: &str = "ledger.json";

/// The most bytes read of it (tens of thousands of sessions fit many times over).
const MAX_BYTES: u64 = 64 << 20;

/// The format's version.
const VERSION: u32 = 1;

/// The checkpoint as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Saved {
    v: u32,
    /// The last record it covers.
    at: Position,
    sessions: BTreeMap<String, SavedSession>,
    /// The day files up to `at.file`, in order: one added, removed or renamed before it
    /// since holds records the checkpoint does not cover.
    files: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedSession {
    taint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workspace: Option<PathBuf>,
    #[serde(default)]
    results: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rises: Vec<(u64, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    scopes: Vec<SavedScope>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedScope {
    id: String,
    tool: String,
    digest: String,
    taint: String,
    kind: String,
    what: String,
    approve: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    reason: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    reviewer: bool,
}

/// The path of the checkpoint for the log in `audit_dir`.
pub(crate) fn path(audit_dir: &Path) -> PathBuf {
    audit_dir.join(FILE)
}

/// Why the ledger's checkpoint is not taken (the open then replays the whole log and says
/// why), or could not be written (the next open replays more, nothing else).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SavedError {
    /// It could not be opened, read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The checkpoint file.
        path: PathBuf,
        /// The failure.
        error: std::io::Error,
    },
    /// It is not a regular file.
    #[error("{} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    /// It is larger than [`MAX_BYTES`].
    #[error("{} is over {MAX_BYTES} bytes", .0.display())]
    TooLarge(PathBuf),
    /// It is not the checkpoint's JSON.
    #[error("{}: {error}", path.display())]
    Json {
        /// The checkpoint file.
        path: PathBuf,
        /// Where and why.
        error: serde_json::Error,
    },
    /// The log's day files could not be listed.
    #[error("{0}")]
    DayFiles(bx_audit::AuditError),
    /// The day files up to the one it names are not those it covered.
    #[error(
        "{}: the day files up to {file} are not those it covered (one was added, removed or renamed)",
        path.display()
    )]
    FilesChanged {
        /// The checkpoint file.
        path: PathBuf,
        /// The last day file it covers.
        file: String,
    },
    /// A field does not read back.
    #[error("{}: {why}", path.display())]
    Content {
        /// The checkpoint file.
        path: PathBuf,
        /// Which field, and why.
        why: ContentError,
    },
    /// It could not be written.
    #[error("{0}")]
    Write(bx_state::StateError),
}

/// What in a checkpoint does not read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ContentError {
    /// Another format's version.
    #[error("version {0} is not {VERSION}")]
    Version(u32),
    /// A label that does not parse.
    #[error("label {text:?}: {error}")]
    Label {
        /// The label as written.
        text: String,
        /// Why it does not parse.
        error: bx_broker::LabelError,
    },
    /// A scope whose cover does not parse.
    #[error("session {session}: scope {scope} does not read back")]
    Scope {
        /// The session.
        session: String,
        /// The scope's approval id.
        scope: String,
    },
}

/// The checkpoint in `audit_dir`: `Ok(None)` when there is none, `Err` (why) when there
/// is one that cannot be read back whole.
/// What a checkpoint holds: the sessions, and where it stands. (Nothing of a call in
/// flight: it is written when the log's writer opens, so a call whose request came before
/// it never goes on, and one after it is replayed whole.)
pub(crate) type Loaded = (HashMap<String, Known>, Position);

pub(crate) fn read(audit_dir: &Path) -> Result<Option<Loaded>, SavedError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = path(audit_dir);
    // Never waited on (a FIFO's open blocks until a writer comes) and never followed (a
    // symlink puts the checkpoint wherever it leads): only a regular file is read.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(&path);
    let io = |error| SavedError::Io { path: path.clone(), error };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(SavedError::NotAFile(path));
    }
    let mut text = Vec::new();
    file.take(MAX_BYTES + 1).read_to_end(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_BYTES {
        return Err(SavedError::TooLarge(path));
    }
    let saved: Saved = serde_json::from_slice(&text)
        .map_err(|error| SavedError::Json { path: path.clone(), error })?;
    let files = day_files_through(audit_dir, &saved.at.file)?;
    if files != saved.files {
        return Err(SavedError::FilesChanged { path, file: saved.at.file });
    }
    saved.into_known().map(Some).map_err(|why| SavedError::Content { path, why })
}

/// Writes the checkpoint of `known` at `at` (atomically: a crash leaves the old one);
/// `Err` says why it could not be (the next open then replays more, nothing else).
pub(crate) fn write(
    audit_dir: &Path,
    known: &HashMap<String, Known>,
    at: &Position,
) -> Result<(), SavedError> {
    let files = day_files_through(audit_dir, &at.file)?;
    let saved = Saved {
        v: VERSION,
        at: at.clone(),
        sessions: known.iter().map(|(id, k)| (id.clone(), SavedSession::of(k))).collect(),
        files,
    };
    // Plain data: serialising it cannot fail.
    let text = serde_json::to_vec(&saved).unwrap_or_default();
    bx_state::write_atomically(&path(audit_dir), &text).map_err(SavedError::Write)
}

/// The names of the day files of the log in `audit_dir` up to and including `last`.
fn day_files_through(audit_dir: &Path, last: &str) -> Result<Vec<String>, SavedError> {
    let files = bx_audit::day_files(audit_dir).map_err(SavedError::DayFiles)?;
    Ok(files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.as_str() <= last)
        .collect())
}

impl SavedSession {
    fn of(k: &Known) -> SavedSession {
        SavedSession {
            taint: k.taint.to_string(),
            workspace: k.workspace.clone(),
            results: k.results,
            rises: k.rises.iter().map(|r| (r.ordinal, r.what.clone())).collect(),
            scopes: k
                .scopes
                .iter()
                .map(|s| SavedScope {
                    id: s.id.clone(),
                    tool: s.tool.clone(),
                    digest: s.digest.clone(),
                    taint: s.taint.to_string(),
                    kind: s.cover.kind().to_owned(),
                    what: s.cover.what(),
                    approve: s.approve,
                    reason: s.reason.clone(),
                    reviewer: s.reviewer,
                })
                .collect(),
        }
    }
}

impl Saved {
    /// What it says, or why it cannot be taken (every field must read back).
    fn into_known(self) -> Result<Loaded, ContentError> {
        if self.v != VERSION {
            return Err(ContentError::Version(self.v));
        }
        let label = |text: &str| {
            parse_label(text).map_err(|error| ContentError::Label { text: text.to_owned(), error })
        };
        let mut known = HashMap::with_capacity(self.sessions.len());
        for (id, s) in self.sessions {
            let scopes = s
                .scopes
                .into_iter()
                .map(|x| {
                    let cover = Cover::from_record(&x.kind, &x.what).ok_or_else(|| {
                        ContentError::Scope { session: id.clone(), scope: x.id.clone() }
                    })?;
                    Ok(Scope {
                        taint: label(&x.taint)?,
                        id: x.id,
                        tool: x.tool,
                        digest: x.digest,
                        cover,
                        approve: x.approve,
                        reason: x.reason,
                        reviewer: x.reviewer,
                    })
                })
                .collect::<Result<Vec<Scope>, ContentError>>()?;
            let taint: Label = label(&s.taint)?;
            let rises = s.rises.into_iter().map(|(ordinal, what)| Rise { ordinal, what }).collect();
            known.insert(
                id,
                Known { taint, workspace: s.workspace, scopes, rises, results: s.results },
            );
        }
        Ok((known, self.at))
    }
}
