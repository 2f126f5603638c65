//! Whether the log is the history its signed checkpoints kept off the host vouch for:
//! checked by the writer before it signs or exports anything, and by [`crate::prove`]
//! before it proves a record.
//!
//! The root to trust comes from outside the state directory: a checkpoint in an
//! `[audit] export` directory, signed by the owner's key (checked with the verifier key
//! [`crate::Anchor::load`] found to be the signing key's pair). What it is compared with
//! is computed from the records themselves, never read from `checkpoint.json`, which
//! anyone who can write the log can edit. The comparison is an RFC 6962 consistency proof
//! (`tlog_tiles`' `prove_tree` and `check_tree`) from the checkpoint's size to the tree the
//! writer holds: it checks only if the tree is the signed one with records added after it.
//! Streaming the log, only the few stored hashes the proof reads are kept (about two per
//! level of the tree), so the check runs in bounded memory; its cost is one SHA-256 pass
//! over the records (docs/audit.md has the numbers).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tlog_tiles::tlog::{self, HashReader};

use crate::anchor::{SignedCheckpoint, checkpoint_files, open_note, origin_dir, read_note};
use crate::checked::{HeadMark, Mark, Start};
use crate::error::AuditError;
use crate::log::day_files;
use crate::tree::Hash;

/// A signed checkpoint found in an export directory, and its file.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    /// The checkpoint file.
    pub(crate) path: PathBuf,
    /// What it signs.
    pub(crate) cp: SignedCheckpoint,
}

/// The signed checkpoint in the file `path` named `<size>.checkpoint`, when `verifier`
/// signed it and it signs that size.
fn head_at(size: u64, path: PathBuf, verifier: &str) -> Option<Head> {
    let bytes = read_note(&path).ok()?;
    let cp = open_note(&bytes, verifier).ok().filter(|cp| cp.size == size)?;
    Some(Head { path, cp })
}

/// What the newest checkpoint of an export directory is, for the key's origin.
#[derive(Debug)]
pub(crate) enum Newest {
    /// There is none yet.
    Nothing,
    /// The newest, signed by the key.
    Head(Head),
    /// The newest is not signed by the key (another key of the same origin signed it,
    /// or it does not read as a signed checkpoint): the writer cannot tell what it
    /// vouches for, so it signs nothing over it.
    Foreign(PathBuf),
}

/// The newest checkpoint in the export directory `export`: the file with the largest
/// size in the key's origin subdirectory, which `verifier` must have signed. An error
/// when the subdirectory cannot be listed (not mounted, never set up): nothing there to
/// trust.
pub(crate) fn newest_head(export: &Path, verifier: &str) -> std::io::Result<Newest> {
    let origin = verifier.split('+').next().unwrap_or_default();
    let (files, _) = checkpoint_files(&origin_dir(export, origin))?;
    Ok(match files.into_iter().next_back() {
        None => Newest::Nothing,
        Some((size, path)) => match head_at(size, path.clone(), verifier) {
            Some(head) => Newest::Head(head),
            None => Newest::Foreign(path),
        },
    })
}

/// Why the writer will not sign over a checkpoint another key signed.
pub(crate) fn foreign_reason(path: &Path) -> String {
    AuditError::AnchorMismatch(format!(
        "{} is the newest checkpoint there and the configured key did not sign it (was the key in config.toml changed?); the writer signs and exports nothing over it",
        path.display()
    ))
    .to_string()
}

/// Every checkpoint in the export directory `export` that `verifier` signed (named for
/// the size it signs), smallest first; none when it cannot be listed.
pub(crate) fn all_heads(export: &Path, verifier: &str) -> Vec<Head> {
    let origin = verifier.split('+').next().unwrap_or_default();
    let Ok((files, _)) = checkpoint_files(&origin_dir(export, origin)) else {
        return Vec::new();
    };
    files.into_iter().filter_map(|(size, path)| head_at(size, path, verifier)).collect()
}

/// The stored-hash indexes that a consistency proof from size `n` to size `t` reads:
/// asked of `prove_tree` itself, so the two can never disagree.
fn proof_indexes(t: u64, n: u64) -> Vec<u64> {
    struct Ask(RefCell<Vec<u64>>);
    impl HashReader for Ask {
        fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog::Error> {
            self.0.borrow_mut().extend_from_slice(indexes);
            Err(tlog::Error::IndexesNotInTree)
        }
    }
    let ask = Ask(RefCell::new(Vec::new()));
    // It fails once it has asked: the indexes are what it asked for.
    let _ = tlog::prove_tree(t, n, &ask);
    ask.0.into_inner()
}

/// The stored hashes a set of proofs reads, kept as the records stream past.
#[derive(Default)]
struct Gathered {
    want: BTreeSet<u64>,
    got: BTreeMap<u64, Hash>,
}

impl Gathered {
    fn keep(&mut self, first: u64, hashes: &[Hash]) {
        let end = first + hashes.len() as u64;
        for index in self.want.range(first..end) {
            if let Some(h) = usize::try_from(index - first).ok().and_then(|i| hashes.get(i)) {
                self.got.insert(*index, *h);
            }
        }
    }
}

impl HashReader for Gathered {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog::Error> {
        indexes
            .iter()
            .map(|i| self.got.get(i).copied().ok_or(tlog::Error::IndexesNotInTree))
            .collect()
    }
}

/// What [`check_log`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The records' tree of the size asked has the root asked, and extends every head.
    Consistent,
    /// The records' tree is not the one asked about (its size or its root differ): the
    /// caller's tree came from somewhere other than the records.
    TreeDiffers,
    /// A head the key signed contradicts the records: why, naming the head's file.
    Contradicted(String),
    /// Only from a start (`crate::checked`): what it vouched for no longer holds, or a
    /// head or a proof needs what it did not read. No verdict on the log: check from the
    /// first record.
    Unsure,
}

/// What [`check_log`] found, and the start a later check may take from this one: the
/// files it read whole that no writer appends to again (all but the newest), settled
/// and unchanged while read, after those it was given; the tree after them; the heads
/// their records extend.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) verdict: Verdict,
    pub(crate) next: Start,
    /// Records read and hashed (those of the files `start` vouched for are not).
    pub(crate) read: u64,
}

/// Checks the log in `dir` against the signed `heads`: its tree over the first `size`
/// records, computed from them, must have root `root`, and for each head an RFC 6962
/// consistency proof (from the records' hashes) from the head's size to `size` must
/// check against the head's signed root and `root`.
///
/// With a non-empty `start` (`crate::checked`), the files it names are not read when
/// each is still exactly as recorded: the tree begins from its edge, and a head no larger
/// than that tree must be one it knows. Any doubt (a file changed, a head it does not
/// know, a proof that reads a hash it did not keep) is [`Verdict::Unsure`]: the caller
/// checks again from the first record, whose verdict is the one that counts.
///
/// With `record` (the open's clock), the files read are made ready to be vouched for
/// (synced, `crate::checked::settle`) and the result's `next` says which may be;
/// without it nothing is synced and `next` holds only `start`'s files.
pub(crate) fn check_log(
    dir: &Path,
    start: &Start,
    size: u64,
    root: Hash,
    heads: &[Head],
    record: Option<SystemTime>,
) -> Result<Checked, AuditError> {
    let unsure = |read| Checked { verdict: Verdict::Unsure, next: Start::default(), read };
    let files = day_files(dir)?;
    let trusted = start.files.len();
    let name = |path: &Path| {
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    };
    let same = |(mark, path): (&Mark, &PathBuf)| {
        let name = name(path);
        crate::file::open_read(path)
            .ok()
            .filter(crate::checked::vouchable)
            .and_then(|f| Mark::of(&f, &name).ok())
            .is_some_and(|m| m == *mark)
    };
    // The newest file is never vouched for: a writer appends to it.
    if trusted > 0 && (files.len() <= trusted || !start.files.iter().zip(&files).all(same)) {
        return Ok(unsure(0));
    }
    let mut gathered = Gathered::default();
    for head in heads.iter().filter(|h| (1..=size).contains(&h.cp.size)) {
        gathered.want.extend(proof_indexes(size, head.cp.size));
    }
    let mut tree = start.tree.clone();
    let mut next = Start { files: start.files.clone(), tree: tree.clone(), heads: Vec::new() };
    let mut read = 0u64;
    let newest = files.len().saturating_sub(1);
    for (i, path) in files.iter().enumerate().skip(trusted) {
        if tree.size() >= size {
            break;
        }
        let name = name(path);
        let file = crate::file::open_read(path).map_err(|e| AuditError::io(path, e))?;
        // A file that may be vouched for is made clean first (`crate::checked::settle`).
        let candidate = record.is_some()
            && next.files.len() == i
            && i < newest
            && crate::checked::vouchable(&file)
            && crate::checked::settle(&file).is_ok();
        let before = Mark::of(&file, &name).map_err(|e| AuditError::io(path, e))?;
        let mut whole = true;
        crate::verify::each_leaf(&mut std::io::BufReader::new(&file), path, |leaf| {
            if tree.size() < size {
                let (first, new) = tree.push_stored(leaf);
                gathered.keep(first, &new);
                read += 1;
            } else {
                whole = false;
            }
        })?;
        let after = Mark::of(&file, &name).map_err(|e| AuditError::io(path, e))?;
        if candidate && whole && before == after && record.is_some_and(|now| before.settled(now)) {
            next.files.push(before);
            next.tree = tree.clone();
        }
    }
    if tree.size() != size || tree.root() != root {
        return Ok(Checked { verdict: Verdict::TreeDiffers, next: Start::default(), read });
    }
    for head in heads {
        let (n, file) = (head.cp.size, head.path.display());
        if n == 0 {
            continue;
        }
        if n > size {
            return Ok(Checked {
                verdict: Verdict::Contradicted(format!(
                    "{file} signs {n} records and the log has {size}: records {}..={n} were cut off",
                    size + 1
                )),
                next: Start::default(),
                read,
            });
        }
        if n <= start.tree.size() {
            // Within the files trusted unread: only a head their check found extended.
            if start.knows(n, &head.cp.root) {
                continue;
            }
            return Ok(unsure(read));
        }
        let checks = tlog::prove_tree(size, n, &gathered)
            .and_then(|proof| tlog::check_tree(&proof, size, root, n, head.cp.root));
        if checks.is_err() {
            if trusted > 0 {
                return Ok(unsure(read));
            }
            return Ok(Checked {
                verdict: Verdict::Contradicted(format!(
                    "the log's first {n} records are not those {file} signed: the log was rewritten within them"
                )),
                next: Start::default(),
                read,
            });
        }
    }
    next.heads = start.heads.clone();
    next.heads
        .extend(heads.iter().map(|h| HeadMark { size: h.cp.size, root: h.cp.root.to_string() }));
    Ok(Checked { verdict: Verdict::Consistent, next, read })
}

/// Checks that every head in `others` is consistent with the checkpoint `cp` (the one a
/// proof is made from), with a consistency proof between the two computed from `tree`,
/// the log's full tree up to at least `cp.size`. A head that contradicts it means the key
/// signed two histories, and no proof from `cp` can be trusted.
pub(crate) fn check_heads(
    tree: &crate::tree::FullTree,
    cp: &SignedCheckpoint,
    others: &[Head],
) -> Result<(), AuditError> {
    for head in others {
        let (n, file) = (head.cp.size, head.path.display());
        let consistent = match n.cmp(&cp.size) {
            std::cmp::Ordering::Equal => head.cp.root == cp.root,
            std::cmp::Ordering::Less => {
                n == 0
                    || tlog::prove_tree(cp.size, n, tree)
                        .and_then(|p| tlog::check_tree(&p, cp.size, cp.root, n, head.cp.root))
                        .is_ok()
            }
            std::cmp::Ordering::Greater if tree.size() < n => {
                return Err(AuditError::AnchorMismatch(format!(
                    "{file} signs {n} records and the log has {}: records were cut off after the checkpoint proved from",
                    tree.size()
                )));
            }
            std::cmp::Ordering::Greater => tlog::prove_tree(n, cp.size, tree)
                .and_then(|p| tlog::check_tree(&p, n, head.cp.root, cp.size, cp.root))
                .is_ok(),
        };
        if !consistent {
            return Err(AuditError::AnchorMismatch(format!(
                "{file}, signed by the same key, does not agree with the checkpoint of {} records proved from: the key signed two histories",
                cp.size
            )));
        }
    }
    Ok(())
}
