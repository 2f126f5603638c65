//! Inclusion proofs of one record against a signed checkpoint, as C2SP `tlog-proof`
//! bundles: the proof header, the record itself as the `extra` data, the RFC 6962
//! inclusion proof, then the signed checkpoint verbatim. Someone holding only the public
//! key checks one offline ([`check_proof`]).
//!
//! `tlog_tiles` has the proofs but not this text format, so its few lines are read and
//! written here.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::anchor::open_note;
use crate::consistent::Head;
use crate::error::{AuditError, ProofError};
use crate::log::day_files;
use crate::tree::{FullTree, Hash, check_inclusion, leaf_hash};

pub(crate) const HEADER: &str = "c2sp.org/tlog-proof@v1";

/// The longest proof read (1 MiB: a record is at most 256 KiB, base64 makes it 342 KiB).
pub const MAX_PROOF_BYTES: usize = 1 << 20;

/// A proof that checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    /// The log's origin.
    pub origin: String,
    /// The record's index in the tree (0 for the first line of the log).
    pub index: u64,
    /// The records the checkpoint covers.
    pub size: u64,
    /// The record's line, as the log holds it.
    pub record: String,
}

/// Writes the proof that the record with sequence number `seq` is in the checkpoint
/// `note` (checked with `verifier` first), reading the log in `dir`. Refuses when the
/// log's tree at the checkpoint's size is not the checkpoint's, and
/// ([`AuditError::AnchorMismatch`]) when a checkpoint in the export directories `exports`
/// signed by the same key contradicts `note` (an RFC 6962 consistency proof between the
/// two, from the log's hashes, does not check): the key then signed two histories, and
/// the newer one may sign a rewrite.
pub fn prove(
    dir: &Path,
    seq: u64,
    note: &[u8],
    verifier: &str,
    exports: &[PathBuf],
) -> Result<String, AuditError> {
    let bad = |why: String| AuditError::Io { path: dir.display().to_string(), message: why };
    let cp = open_note(note, verifier).map_err(|e| bad(format!("the checkpoint: {e}")))?;
    let others: Vec<Head> =
        exports.iter().flat_map(|e| crate::consistent::all_heads(e, verifier)).collect();
    // The tree reaches every checkpoint to compare, as far as the log goes.
    let reach = others.iter().map(|h| h.cp.size).fold(cp.size, u64::max);
    let mut tree = FullTree::default();
    let mut found: Option<(u64, Vec<u8>)> = None;
    let want = format!("{{\"seq\":{seq},");
    'files: for path in day_files(dir)? {
        let file = crate::file::open_read(&path).map_err(|e| AuditError::io(&path, e))?;
        let mut reader = std::io::BufReader::new(file);
        let mut buf = Vec::new();
        loop {
            if tree.size() >= reach {
                break 'files;
            }
            match crate::verify::next_line(&mut reader, &mut buf, &path)? {
                crate::verify::Line::End | crate::verify::Line::Torn => break,
                crate::verify::Line::Oversize(_, _, leaf) => tree.push(leaf),
                crate::verify::Line::Whole => {
                    if found.is_none() && tree.size() < cp.size && buf.starts_with(want.as_bytes())
                    {
                        found = Some((tree.size(), buf.clone()));
                    }
                    tree.push(leaf_hash(&buf));
                }
            }
        }
    }
    if tree.root_at(cp.size) != Some(cp.root) {
        return Err(AuditError::AnchorMismatch(format!(
            "the log's first {} records do not hash to the root the checkpoint signed: they were rewritten or cut",
            cp.size
        )));
    }
    crate::consistent::check_heads(&tree, &cp, &others)?;
    let Some((index, line)) = found else {
        return Err(bad(format!(
            "no record with seq {seq} among the {} the checkpoint covers",
            cp.size
        )));
    };
    let proof = tree.prove(cp.size, index).ok_or_else(|| bad("no proof for that record".into()))?;
    let mut out = format!("{HEADER}\nextra {}\nindex {index}\n", BASE64.encode(&line));
    for h in &proof {
        out.push_str(&format!("{h}\n"));
    }
    out.push('\n');
    out.push_str(&String::from_utf8_lossy(note));
    Ok(out)
}

/// Checks a `tlog-proof` bundle with `verifier`: the checkpoint's signature, then the
/// record (its `extra` data) at its index under the checkpoint's root.
pub fn check_proof(text: &[u8], verifier: &str) -> Result<Proof, ProofError> {
    if text.len() > MAX_PROOF_BYTES {
        return Err(ProofError::TooLarge);
    }
    let text = std::str::from_utf8(text).map_err(|_| ProofError::NotUtf8)?;
    let (head, note) = text.split_once("\n\n").ok_or(ProofError::NoCheckpoint)?;
    let mut lines = head.split('\n');
    if lines.next() != Some(HEADER) {
        return Err(ProofError::NoHeader);
    }
    let mut line = lines.next();
    let mut record = None;
    if let Some(extra) = line.and_then(|l| l.strip_prefix("extra ")) {
        let bytes = BASE64.decode(extra).map_err(ProofError::Extra)?;
        record = Some(String::from_utf8(bytes).map_err(|_| ProofError::ExtraNotUtf8)?);
        line = lines.next();
    }
    let index = line
        .and_then(|l| l.strip_prefix("index "))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .filter(|n| *n == "0" || !n.starts_with('0'))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or(ProofError::NoIndex)?;
    let proof = lines
        .map(|l| {
            Hash::parse_hash(l)
                .map_err(|error| ProofError::Hash { line: l.chars().take(60).collect(), error })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cp = open_note(note.as_bytes(), verifier).map_err(ProofError::Checkpoint)?;
    let record = record.ok_or(ProofError::NoRecord)?;
    if index >= cp.size
        || !check_inclusion(&proof, cp.size, cp.root, index, leaf_hash(record.as_bytes()))
    {
        return Err(ProofError::NotIncluded { index, size: cp.size });
    }
    Ok(Proof { origin: cp.origin, index, size: cp.size, record })
}
