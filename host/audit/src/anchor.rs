//! Signed checkpoints of the log's tree, kept off the host.
//!
//! A checkpoint is a C2SP `tlog-checkpoint` body (origin, size, root hash) signed as a C2SP
//! `signed-note` with the owner's Ed25519 key (the formats of Go's `sumdb/note`, through
//! `signed_note` and `tlog_tiles`). The writer exports one to each `[audit] export`
//! directory at close and every [`crate::CHECKPOINT_EVERY`] records, in a subdirectory
//! named for the origin:
//!
//! - `<size>.checkpoint`: the signed note, created once and never overwritten;
//! - `leaves`: the 32-byte leaf hash of every record, oldest first, only ever appended.
//!
//! The leaves are authenticated by the signed roots they hash to, so verify can name the
//! first record where the log and an exported checkpoint part, not only that they do.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use signed_note::{Note, Signer as _, StandardSigner, StandardVerifier, VerifierList};
use tlog_tiles::checkpoint::Checkpoint as Body;

use crate::error::{AuditError, CheckpointError};
use crate::tree::{Hash, Tree};

/// The longest key or verifier-key file read (4 KiB; a key is about 100 bytes).
const MAX_KEY_BYTES: u64 = 4 << 10;
/// The longest checkpoint file read (64 KiB; one is about 200 bytes).
pub(crate) const MAX_NOTE_BYTES: u64 = 64 << 10;
/// The most checkpoints read from one directory (100,000: a year of closes, every
/// minute, is half that). Past it verify says how many it left out.
pub(crate) const MAX_CHECKPOINTS: usize = 100_000;
/// Bytes of one leaf hash in `leaves`.
pub(crate) const LEAF_BYTES: u64 = 32;

/// Whether `origin` can name a log: 1 to 128 characters of `A-Z a-z 0-9 . _ / -`, which
/// C2SP's key names allow and which map to one directory name.
pub fn is_valid_origin(origin: &str) -> bool {
    !origin.is_empty()
        && origin.len() <= 128
        && origin.bytes().all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b))
}

/// The subdirectory of an export directory that holds the log of `origin`.
pub fn origin_dir(export: &Path, origin: &str) -> PathBuf {
    export.join(origin.replace('/', "_"))
}

/// The verifier key beside a signing key: `KEY.pub`.
pub fn verifier_path(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

fn read_small(path: &Path, what: &str) -> Result<String, AuditError> {
    let mut text = String::new();
    crate::file::open_read(path)
        .and_then(|f| f.take(MAX_KEY_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| AuditError::Key(format!("cannot read the {what} {}: {e}", path.display())))?;
    if text.len() as u64 > MAX_KEY_BYTES {
        return Err(AuditError::Key(format!("{} is over {MAX_KEY_BYTES} bytes", path.display())));
    }
    Ok(text.trim_end().to_owned())
}

/// Makes a new signing key for `origin` at `path` (0600, never over an existing file)
/// and its verifier key at `path.pub`; returns the verifier key.
pub fn init_key(path: &Path, origin: &str) -> Result<String, AuditError> {
    if !is_valid_origin(origin) {
        return Err(AuditError::Key(format!(
            "origin {origin:?}: use 1 to 128 of A-Z a-z 0-9 . _ / -"
        )));
    }
    let (skey, vkey) = signed_note::generate_key(&mut rand_core::OsRng, origin);
    let write = |p: &Path, text: &str, mode: u32| -> Result<(), AuditError> {
        let fail =
            |e: std::io::Error| AuditError::Key(format!("cannot write {}: {e}", p.display()));
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(mode).open(p).map_err(fail)?;
        f.write_all(format!("{text}\n").as_bytes()).and_then(|()| f.sync_all()).map_err(fail)
    };
    let public = verifier_path(path);
    if public.exists() {
        return Err(AuditError::Key(format!("{} already exists", public.display())));
    }
    write(path, &skey, 0o600)?;
    write(&public, &vkey, 0o644)?;
    Ok(vkey)
}

/// A verifier key (C2SP `signed-note`: `name+id+base64`), read from the text itself or a
/// file holding it.
pub fn read_verifier(key_or_file: &str) -> Result<String, AuditError> {
    let text = if Path::new(key_or_file).exists() {
        read_small(Path::new(key_or_file), "verifier key")?
    } else {
        key_or_file.trim().to_owned()
    };
    StandardVerifier::new(&text)
        .map_err(|e| AuditError::Key(format!("not a verifier key ({e}): {text:.80}")))?;
    Ok(text)
}

/// What the writer signs with and where it exports.
pub struct Anchor {
    signer: StandardSigner,
    origin: String,
    verifier: String,
    key: PathBuf,
    exports: Vec<PathBuf>,
    /// The key of `checked.json`'s MAC (`crate::checked`): SHA-256 of a label and the
    /// signing key, so only a holder of the key can vouch for what was checked.
    marker_key: [u8; 32],
}

impl std::fmt::Debug for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anchor")
            .field("origin", &self.origin)
            .field("key", &self.key)
            .field("exports", &self.exports)
            .finish_non_exhaustive()
    }
}

impl Anchor {
    /// Loads the signing key at `key` (which must be readable by its owner only) and its
    /// verifier key at `key.pub`, and checks that they are one pair.
    pub fn load(key: &Path, exports: Vec<PathBuf>) -> Result<Anchor, AuditError> {
        let meta = std::fs::metadata(key)
            .map_err(|e| AuditError::Key(format!("cannot read {}: {e}", key.display())))?;
        if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
            return Err(AuditError::Key(format!(
                "{} must be a regular file readable by its owner only (chmod 600)",
                key.display()
            )));
        }
        let skey = read_small(key, "signing key")?;
        let signer = StandardSigner::new(&skey)
            .map_err(|e| AuditError::Key(format!("{}: not a signing key ({e})", key.display())))?;
        let verifier = read_verifier(&read_small(&verifier_path(key), "verifier key")?)?;
        let marker_key = {
            use sha2::Digest as _;
            let mut h = sha2::Sha256::new();
            h.update(b"bx audit checked.json v1\n");
            h.update(skey.as_bytes());
            h.finalize().into()
        };
        let anchor = Anchor {
            marker_key,
            origin: signer.name().to_owned(),
            signer,
            verifier,
            key: key.to_path_buf(),
            exports,
        };
        // One pair: what the key signs, the verifier key accepts.
        let probe = anchor.sign(&Tree::new())?;
        if open_note(&probe, &anchor.verifier).is_err() {
            return Err(AuditError::Key(format!(
                "{} does not verify what {} signs",
                verifier_path(key).display(),
                key.display()
            )));
        }
        Ok(anchor)
    }

    /// The key of `checked.json`'s MAC.
    pub(crate) fn marker_key(&self) -> &[u8; 32] {
        &self.marker_key
    }

    /// The origin (the key's name).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The verifier key, for the owner to keep.
    pub fn verifier(&self) -> &str {
        &self.verifier
    }

    /// Where the signing key is.
    pub fn key(&self) -> &Path {
        &self.key
    }

    /// The export directories, as configured.
    pub fn exports(&self) -> &[PathBuf] {
        &self.exports
    }

    /// The signed checkpoint of `tree`.
    pub fn sign(&self, tree: &Tree) -> Result<Vec<u8>, AuditError> {
        let body = Body::new(&self.origin, tree.size(), tree.root(), "")
            .map_err(|e| AuditError::Key(format!("checkpoint: {e}")))?;
        let mut note = Note::new(&body.to_bytes(), &[])
            .map_err(|e| AuditError::Key(format!("checkpoint note: {e}")))?;
        note.add_sigs(&[&self.signer])
            .map_err(|e| AuditError::Key(format!("signing the checkpoint: {e}")))?;
        Ok(note.to_bytes())
    }
}

/// A checkpoint whose signature checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedCheckpoint {
    /// The log's origin.
    pub origin: String,
    /// Records it covers.
    pub size: u64,
    /// The tree's root over them.
    pub root: Hash,
}

/// Checks `note`'s signature by `verifier` and reads its checkpoint, whose origin must be
/// the key's name.
pub fn open_note(note: &[u8], verifier: &str) -> Result<SignedCheckpoint, CheckpointError> {
    let v = StandardVerifier::new(verifier).map_err(CheckpointError::Verifier)?;
    let name = signed_note::Verifier::name(&v).to_owned();
    let note = Note::from_bytes(note).map_err(CheckpointError::Note)?;
    note.verify(&VerifierList::new(vec![Box::new(v)])).map_err(|e| match e {
        signed_note::NoteError::UnverifiedNote => CheckpointError::NotSigned(name.clone()),
        e => CheckpointError::Note(e),
    })?;
    let body = Body::from_bytes(note.text()).map_err(CheckpointError::Body)?;
    if body.origin() != name {
        return Err(CheckpointError::Origin { origin: body.origin().to_owned(), name });
    }
    Ok(SignedCheckpoint { origin: name, size: body.size(), root: *body.hash() })
}

/// [`open_note`] of the checkpoint file at `path`.
pub(crate) fn open_note_file(
    path: &Path,
    verifier: &str,
) -> Result<SignedCheckpoint, CheckpointError> {
    let bytes = read_note(path).map_err(CheckpointError::Unreadable)?;
    open_note(&bytes, verifier)
}

/// Sets up `export` for the log of `origin`: makes its subdirectory (the export directory
/// itself must exist). The writer never makes it: a device that is not mounted leaves an
/// empty mount point, and exports there would land on this host's own disk.
///
/// A new origin is not set up beside another origin's checkpoints: that is how a key
/// swapped into `config.toml` (a file in the state directory) would get a rewritten log
/// signed into the owner's export directory under a fresh name. The owner who means it
/// (a new key, or a second machine sharing the folder) makes the subdirectory by hand.
pub fn prepare_export(export: &Path, origin: &str) -> Result<PathBuf, AuditError> {
    let dir = origin_dir(export, origin);
    if !dir.exists()
        && let Some(other) = other_origin(export)
    {
        return Err(AuditError::Key(format!(
            "{} already holds the signed checkpoints of another origin ({}); a key that is not the one that signed them does not start a new origin there by itself. If this is a new key or another machine sharing the folder, make {} yourself",
            export.display(),
            other.display(),
            dir.display()
        )));
    }
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(dir),
        Err(e) => Err(AuditError::Io { path: dir.display().to_string(), message: e.to_string() }),
    }
}

/// A subdirectory of `export` that holds a checkpoint file (another origin's), if any.
fn other_origin(export: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(export).ok()?;
    entries
        .flatten()
        .take(1_000)
        .map(|e| e.path())
        .find(|sub| sub.is_dir() && checkpoint_files(sub).is_ok_and(|(files, _)| !files.is_empty()))
}

/// Why one export of a signed checkpoint failed (it goes on the log as an
/// `export-failed` record, and into `export.json`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    /// The export directory (the origin's subdirectory) is not there.
    #[error(
        "{} is not there: the export directory is not mounted, or was never set up (`bx audit checkpoint` sets it up; see docs/runbook.md#audit-export-failed)",
        .0.display()
    )]
    NotThere(PathBuf),
    /// Another writer holds the directory's lock.
    #[error(
        "another bx is exporting to {} right now: two logs share this origin and export directory (give each its own origin; see docs/runbook.md#audit-export-failed)",
        .0.display()
    )]
    Busy(PathBuf),
    /// Reading or writing a file of it failed (what was being done).
    #[error("{what}: {error}")]
    Io {
        /// What was being done, and to which file.
        what: String,
        /// The failure.
        error: std::io::Error,
    },
    /// `leaves` is not a regular file.
    #[error("{} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    /// It holds more leaves than the log has records.
    #[error(
        "it holds {have} records and the log only {size}: records were cut from the log, or this directory belongs to another log (run `bx audit verify`; see docs/runbook.md#audit-export-failed)"
    )]
    AheadOfLog {
        /// Leaves it holds.
        have: u64,
        /// Records the log has.
        size: u64,
    },
    /// The leaves it lacks could not be read from the log.
    #[error("{0}")]
    Leaves(AuditError),
    /// A checkpoint of the same size with other bytes is there.
    #[error(
        "{} is already there with another head: the log forked (run `bx audit verify`; see docs/runbook.md#audit-export-failed)",
        .0.display()
    )]
    Forked(PathBuf),
}

impl ExportError {
    fn io(what: impl Into<String>, error: std::io::Error) -> ExportError {
        ExportError::Io { what: what.into(), error }
    }
}

/// Writes one export: appends the leaves `dir` lacks (from `leaves(from, to)`), then the
/// signed checkpoint of `size`, never overwriting one. Refuses when `dir` knows more
/// records than the log has (the log was cut, or `dir` is another log's), and when `dir`
/// is not there ([`prepare_export`] makes it).
pub(crate) fn export(
    dir: &Path,
    size: u64,
    note: &[u8],
    leaves: &mut dyn FnMut(u64, u64) -> Result<Vec<Hash>, AuditError>,
) -> Result<(), ExportError> {
    if !dir.is_dir() {
        return Err(ExportError::NotThere(dir.to_path_buf()));
    }
    // One writer at a time: two logs given one origin and one export directory (two
    // state directories, or a copy of one) would interleave their leaves.
    let lock_path = dir.join(".lock");
    let lock = crate::file::open_with(
        OpenOptions::new().create(true).truncate(false).write(true),
        &lock_path,
    )
    .map_err(|e| ExportError::io(format!("cannot open {}", lock_path.display()), e))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(ExportError::Busy(dir.to_path_buf()));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(ExportError::io(format!("locking {}", lock_path.display()), e));
        }
    }
    let path = dir.join("leaves");
    let mut file = crate::file::open_with(
        OpenOptions::new().read(true).write(true).create(true).truncate(false),
        &path,
    )
    .map_err(|e| ExportError::io("cannot open leaves", e))?;
    let meta = file.metadata().map_err(|e| ExportError::io("leaves", e))?;
    if !meta.is_file() {
        return Err(ExportError::NotAFile(path));
    }
    let len = meta.len();
    // A crash mid-append leaves part of a hash; no checkpoint covers it yet.
    let have = len / LEAF_BYTES;
    if have > size {
        return Err(ExportError::AheadOfLog { have, size });
    }
    if len % LEAF_BYTES != 0 {
        file.set_len(have * LEAF_BYTES).map_err(|e| ExportError::io("leaves", e))?;
    }
    if have < size {
        let new = leaves(have, size).map_err(ExportError::Leaves)?;
        let bytes: Vec<u8> = new.iter().flat_map(|h| h.0).collect();
        file.seek(SeekFrom::End(0))
            .and_then(|_| file.write_all(&bytes))
            .and_then(|()| file.sync_data())
            .map_err(|e| ExportError::io("appending leaves", e))?;
    }
    let cp = dir.join(format!("{size}.checkpoint"));
    match crate::file::open_with(OpenOptions::new().write(true).create_new(true), &cp) {
        Ok(mut f) => {
            f.write_all(note)
                .and_then(|()| f.sync_all())
                .and_then(|()| File::open(dir)?.sync_all())
                .map_err(|e| ExportError::io(format!("writing {}", cp.display()), e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Signatures are deterministic: the same head signs to the same bytes.
            let mut there = Vec::new();
            let read = crate::file::open_read(&cp)
                .and_then(|f| f.take(MAX_NOTE_BYTES).read_to_end(&mut there));
            if read.is_err() || there != note {
                return Err(ExportError::Forked(cp));
            }
        }
        Err(e) => return Err(ExportError::io(format!("writing {}", cp.display()), e)),
    }
    Ok(())
}

/// The checkpoint files in `dir` (`<size>.checkpoint`), smallest first, at most
/// [`MAX_CHECKPOINTS`]; and how many more there were.
pub(crate) fn checkpoint_files(dir: &Path) -> std::io::Result<(Vec<(u64, PathBuf)>, usize)> {
    let mut out = Vec::new();
    let mut more = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(size) = name.strip_suffix(".checkpoint").and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if out.len() < MAX_CHECKPOINTS {
            out.push((size, entry.path()));
        } else {
            more += 1;
        }
    }
    out.sort();
    Ok((out, more))
}

/// The size of the newest checkpoint exported for `origin` to `export`, if any.
pub fn newest_exported(export: &Path, origin: &str) -> Option<u64> {
    let (files, _) = checkpoint_files(&origin_dir(export, origin)).ok()?;
    files.last().map(|(size, _)| *size)
}

/// The newest checkpoint in `export` that `verifier` signed and that is named for its
/// size: its size, its file and its bytes. Walks from the largest name down and stops at
/// the first that checks, rather than check every signature there.
pub fn newest_signed(export: &Path, verifier: &str) -> Option<(u64, PathBuf, Vec<u8>)> {
    let origin = verifier.split('+').next().unwrap_or_default();
    let (files, _) = checkpoint_files(&origin_dir(export, origin)).ok()?;
    files.into_iter().rev().find_map(|(size, path)| {
        let bytes = read_note(&path).ok()?;
        let cp = open_note(&bytes, verifier).ok().filter(|cp| cp.size == size)?;
        Some((cp.size, path, bytes))
    })
}

/// Reads one checkpoint file, bounded.
pub(crate) fn read_note(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    crate::file::open_read(path)?.take(MAX_NOTE_BYTES).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::leaf_hash;

    #[test]
    fn a_key_signs_checkpoints_its_verifier_opens_and_no_other() {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("audit.key");
        let vkey = init_key(&key, "bx.test/host-1").unwrap();
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(init_key(&key, "bx.test/host-1").is_err(), "never over an existing key");
        let anchor = Anchor::load(&key, vec![]).unwrap();
        assert_eq!(anchor.verifier(), vkey);
        let mut tree = Tree::new();
        tree.push(leaf_hash(b"one"));
        let note = anchor.sign(&tree).unwrap();
        let cp = open_note(&note, &vkey).unwrap();
        assert_eq!((cp.size, cp.root, cp.origin.as_str()), (1, tree.root(), "bx.test/host-1"));

        let other = init_key(&tmp.path().join("other.key"), "bx.test/host-1").unwrap();
        let refused = open_note(&note, &other).unwrap_err();
        assert!(matches!(refused, CheckpointError::NotSigned(_)), "{refused:?}");
        assert!(refused.to_string().starts_with("not signed by "), "{refused}");
        let mut forged = note.clone();
        let at = forged.iter().position(|b| *b == b'\n').unwrap() + 1;
        forged[at] = b'2';
        assert!(open_note(&forged, &vkey).is_err());

        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Anchor::load(&key, vec![]).unwrap_err().to_string().contains("chmod 600"));
        assert!(init_key(&tmp.path().join("k"), "has space").is_err());
    }
}
