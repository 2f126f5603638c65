//! Verifying the log against signed checkpoints kept off the host: each checkpoint's
//! signature, then whether the log's tree at that size has that root. Where they part,
//! the `leaves` file beside the checkpoints (authenticated by the roots it hashes to)
//! names the first record that differs.

use std::collections::BTreeMap;
use std::io::{BufReader, Read as _};
use std::path::{Path, PathBuf};

use crate::anchor::{LEAF_BYTES, SignedCheckpoint, checkpoint_files, open_note_file, origin_dir};
use crate::tree::{Hash, Tree};
use crate::verify::Problem;

/// What to verify the log against.
#[derive(Debug, Clone, Default)]
pub struct Against {
    /// The verifier key (C2SP `signed-note`) the checkpoints must be signed with.
    pub verifier: Option<String>,
    /// Export directories (as in `[audit] export`): the checkpoints of the key's origin
    /// there, and their `leaves`.
    pub exports: Vec<PathBuf>,
    /// Checkpoint files, or directories of them (an export directory, or its origin's
    /// subdirectory); a `leaves` file beside them is used too.
    pub files: Vec<PathBuf>,
    /// The owner named a key or a place to check against: finding no checkpoint signed
    /// by the key is then a problem (`anchor-missing`), not merely "unanchored".
    pub required: bool,
}

impl Against {
    /// Whether there is anything to verify against.
    pub fn is_empty(&self) -> bool {
        self.exports.is_empty() && self.files.is_empty()
    }
}

/// Whether the log is anchored, and to what.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AnchorReport {
    /// `unanchored` (no signed checkpoint outside the log was checked), `anchored` (every
    /// one checked is consistent with the log) or `broken` (one is not: see problems).
    pub state: String,
    /// Signed checkpoints whose signature checked.
    pub checkpoints: u64,
    /// The largest of them the log is consistent with (0 for none).
    pub size: u64,
    /// Records past `size`: no signed checkpoint vouches for them. Some are normal (what
    /// a running daemon wrote since its last export); they are also where records an
    /// attacker added would be.
    pub unanchored: u64,
    /// The origin they name.
    pub origin: Option<String>,
    /// Where checkpoints were looked for.
    pub sources: Vec<String>,
    /// What the owner should know about how far the anchor can be trusted (a key kept
    /// inside the state directory).
    pub notes: Vec<String>,
}

struct Source {
    label: String,
    checkpoints: Vec<(PathBuf, SignedCheckpoint)>,
    /// Their sizes.
    sizes: std::collections::BTreeSet<u64>,
    leaves: Option<BufReader<std::fs::File>>,
    /// The tree over the leaves file, read in step with the log.
    tree: Tree,
    /// Roots of that tree at this source's checkpoint sizes.
    roots: BTreeMap<u64, Hash>,
    /// The first line where the log and the leaves file differ.
    first_diff: Option<u64>,
}

impl Source {
    fn wants(&self, size: u64) -> bool {
        self.sizes.contains(&size)
    }

    /// The next leaf of the leaves file, if it has one.
    fn next_leaf(&mut self) -> Option<Hash> {
        let reader = self.leaves.as_mut()?;
        let mut buf = [0u8; LEAF_BYTES as usize];
        match reader.read_exact(&mut buf) {
            Ok(()) => {
                let leaf = Hash(buf);
                self.tree.push(leaf);
                if self.wants(self.tree.size()) {
                    self.roots.insert(self.tree.size(), self.tree.root());
                }
                Some(leaf)
            }
            Err(_) => {
                self.leaves = None;
                None
            }
        }
    }

    /// The largest checkpoint size up to which the leaves file is what the key signed.
    fn authentic(&self) -> u64 {
        self.checkpoints
            .iter()
            .filter(|(_, c)| self.roots.get(&c.size) == Some(&c.root))
            .map(|(_, c)| c.size)
            .max()
            .unwrap_or(0)
    }
}

/// Where a line of the log is, to name it.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub(crate) file: String,
    pub(crate) line: u64,
    pub(crate) seq: Option<u64>,
}

/// The check, fed every line of the log as verify walks it.
pub(crate) struct Check {
    sources: Vec<Source>,
    log: Tree,
    /// The log's roots at every checkpoint size.
    roots: BTreeMap<u64, Hash>,
    wanted: std::collections::BTreeSet<u64>,
    /// Where each first difference is, by line index.
    places: BTreeMap<u64, Place>,
    found: Vec<Problem>,
    origin: Option<String>,
    notes: Vec<String>,
    required: bool,
}

fn problem(kind: &str, file: &str, line: u64, detail: String) -> Problem {
    Problem { kind: kind.to_owned(), file: file.to_owned(), line, detail }
}

impl Check {
    /// Reads every checkpoint `against` names, checking signatures; `None` when there is
    /// nothing to check against.
    pub(crate) fn new(against: &Against) -> Option<Check> {
        if against.is_empty() && !against.required {
            return None;
        }
        let mut found = Vec::new();
        let mut notes = Vec::new();
        let Some(verifier) = &against.verifier else {
            found.push(problem(
                "anchor-key",
                "",
                0,
                "no verifier key to check the checkpoints with (pass --key, or make one with `bx audit key init`)".into(),
            ));
            return Some(Check::empty(found));
        };
        let origin = verifier.split('+').next().unwrap_or_default().to_owned();
        let mut sources = Vec::new();
        for export in &against.exports {
            let dir = origin_dir(export, &origin);
            let label = dir.display().to_string();
            match checkpoint_files(&dir) {
                Ok((files, more)) => {
                    if more > 0 {
                        found.push(problem(
                            "anchor-unreadable",
                            &label,
                            0,
                            format!(
                                "{more} more checkpoints than are read; the newest were left out"
                            ),
                        ));
                    }
                    sources.push(Source::read(
                        label,
                        files.into_iter().map(|(_, p)| p),
                        &dir.join("leaves"),
                        verifier,
                        &mut found,
                    ));
                }
                // An export directory with nothing in it yet (or not mounted) is not a
                // problem of the log; `bx doctor` reports exports that fail.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    notes.push(format!(
                        "{label} does not exist (not mounted, or nothing exported yet)"
                    ));
                }
                Err(e) => found.push(problem(
                    "anchor-unreadable",
                    &label,
                    0,
                    format!("cannot list it: {e}"),
                )),
            }
        }
        for file in &against.files {
            let label = file.display().to_string();
            if file.is_dir() {
                let sub = origin_dir(file, &origin);
                let dir = if sub.is_dir() { sub } else { file.clone() };
                match checkpoint_files(&dir) {
                    Ok((files, _)) => sources.push(Source::read(
                        dir.display().to_string(),
                        files.into_iter().map(|(_, p)| p),
                        &dir.join("leaves"),
                        verifier,
                        &mut found,
                    )),
                    Err(e) => found.push(problem(
                        "anchor-unreadable",
                        &label,
                        0,
                        format!("cannot list it: {e}"),
                    )),
                }
                continue;
            }
            let leaves = file.parent().unwrap_or(Path::new(".")).join("leaves");
            sources.push(Source::read(
                label,
                std::iter::once(file.clone()),
                &leaves,
                verifier,
                &mut found,
            ));
        }
        let wanted =
            sources.iter().flat_map(|s| s.checkpoints.iter().map(|(_, c)| c.size)).collect();
        let mut check = Check::empty(found);
        check.notes = notes;
        check.required = against.required;
        check.sources = sources;
        check.wanted = wanted;
        check.origin = Some(origin);
        Some(check)
    }

    fn empty(found: Vec<Problem>) -> Check {
        Check {
            sources: Vec::new(),
            log: Tree::new(),
            roots: BTreeMap::new(),
            wanted: Default::default(),
            places: BTreeMap::new(),
            found,
            origin: None,
            notes: Vec::new(),
            required: false,
        }
    }

    /// One line of the log, by its leaf hash, and where it is.
    pub(crate) fn leaf(&mut self, leaf: Hash, place: impl FnOnce() -> Place) {
        let index = self.log.size();
        self.log.push(leaf);
        if self.wanted.contains(&self.log.size()) {
            self.roots.insert(self.log.size(), self.log.root());
        }
        let mut differs = false;
        for s in &mut self.sources {
            if let Some(theirs) = s.next_leaf()
                && theirs != leaf
                && s.first_diff.is_none()
            {
                s.first_diff = Some(index);
                differs = true;
            }
        }
        if differs {
            self.places.insert(index, place());
        }
    }

    /// Finishes: reads the rest of each leaves file and compares every checkpoint with
    /// the log. Returns the problems and the report.
    pub(crate) fn finish(mut self) -> (Vec<Problem>, AnchorReport) {
        let max = self.wanted.iter().max().copied().unwrap_or(0);
        for s in &mut self.sources {
            while s.tree.size() < max && s.next_leaf().is_some() {}
        }
        let log_len = self.log.size();
        let mut all: Vec<(&PathBuf, &SignedCheckpoint)> =
            self.sources.iter().flat_map(|s| s.checkpoints.iter().map(|(p, c)| (p, c))).collect();
        all.sort_by_key(|(_, c)| c.size);
        // Two heads of one size with different roots: the key signed two histories.
        for pair in all.windows(2) {
            let ((pa, a), (pb, b)) = (pair[0], pair[1]);
            if a.size == b.size && a.root != b.root {
                self.found.push(problem("anchor-forked", &pb.display().to_string(), 0, format!(
                    "{} and {} both sign {} records, with different roots: the key signed two histories",
                    pa.display(), pb.display(), a.size
                )));
            }
        }
        let consistent = |c: &SignedCheckpoint| self.roots.get(&c.size) == Some(&c.root);
        let ok_sizes: Vec<u64> =
            all.iter().filter(|(_, c)| consistent(c)).map(|(_, c)| c.size).collect();
        let bad: Vec<(&PathBuf, &SignedCheckpoint)> =
            all.iter().copied().filter(|(_, c)| !consistent(c)).collect();
        if let Some((path, c)) = bad.first() {
            let file = path.display().to_string();
            let later = bad.len() - 1;
            let also = if later > 0 {
                format!(" ({later} later checkpoint(s) disagree too)")
            } else {
                String::new()
            };
            // The first difference a leaves file can vouch for.
            let diff = self
                .sources
                .iter()
                .filter_map(|s| s.first_diff.filter(|d| *d < s.authentic()))
                .min();
            let last_ok = ok_sizes.iter().filter(|s| **s < c.size).max().copied().unwrap_or(0);
            let name = |d: u64| -> (String, u64, String) {
                match self.places.get(&d) {
                    Some(p) => (
                        p.file.clone(),
                        p.line,
                        format!(
                            "record {} ({}:{}{})",
                            d + 1,
                            p.file,
                            p.line,
                            p.seq.map(|s| format!(", seq {s}")).unwrap_or_default()
                        ),
                    ),
                    None => (file.clone(), 0, format!("record {}", d + 1)),
                }
            };
            let p = if log_len < c.size && diff.is_none_or(|d| d >= log_len) {
                problem(
                    "anchor-truncated",
                    &file,
                    0,
                    format!(
                        "the log has {log_len} records but {file} signed {}: records {}..={} were cut off{also}",
                        c.size,
                        log_len + 1,
                        c.size
                    ),
                )
            } else if let Some(d) = diff {
                let (f, line, what) = name(d);
                if ok_sizes.iter().any(|s| *s > c.size) {
                    problem(
                        "anchor-forked",
                        &f,
                        line,
                        format!(
                            "{what} is not the record {file} signed, yet the log matches a later checkpoint: the key signed two histories that part there{also}"
                        ),
                    )
                } else {
                    problem(
                        "anchor-rewritten",
                        &f,
                        line,
                        format!(
                            "{what} is not the record {file} signed: the log was rewritten from there{also}"
                        ),
                    )
                }
            } else {
                problem(
                    "anchor-rewritten",
                    &file,
                    0,
                    format!(
                        "the log's records {}..={} are not those {file} signed (no leaves file beside it names which){also}",
                        last_ok + 1,
                        c.size.min(log_len)
                    ),
                )
            };
            self.found.push(p);
        }
        // One head exported to two places, or copied under another name, is one head.
        let mut heads: Vec<(u64, [u8; 32])> = all.iter().map(|(_, c)| (c.size, c.root.0)).collect();
        heads.sort();
        heads.dedup();
        let checkpoints = heads.len() as u64;
        if checkpoints == 0 && self.required {
            let places = if self.sources.is_empty() {
                "the places given".to_owned()
            } else {
                self.sources.iter().map(|s| s.label.as_str()).collect::<Vec<_>>().join(", ")
            };
            self.found.push(problem(
                "anchor-missing",
                "",
                0,
                format!("no checkpoint signed by the key was found in {places}: nothing outside the log vouches for it"),
            ));
        }
        let state = if !bad.is_empty() || self.found.iter().any(|p| p.kind != "anchor-unreadable") {
            "broken"
        } else if checkpoints == 0 {
            "unanchored"
        } else {
            "anchored"
        };
        let report = AnchorReport {
            state: state.into(),
            checkpoints,
            size: ok_sizes.iter().max().copied().unwrap_or(0),
            unanchored: log_len.saturating_sub(ok_sizes.iter().max().copied().unwrap_or(0)),
            origin: self.origin.clone(),
            sources: self.sources.iter().map(|s| s.label.clone()).collect(),
            notes: self.notes,
        };
        (self.found, report)
    }
}

impl Source {
    fn read(
        label: String,
        files: impl Iterator<Item = PathBuf>,
        leaves: &Path,
        verifier: &str,
        found: &mut Vec<Problem>,
    ) -> Source {
        let mut checkpoints = Vec::new();
        for path in files {
            let shown = path.display().to_string();
            let named = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".checkpoint"))
                .and_then(|n| n.parse::<u64>().ok());
            match open_note_file(&path, verifier) {
                Ok(cp) if named.is_some_and(|n| n != cp.size) => found.push(problem(
                    "anchor-unreadable",
                    &shown,
                    0,
                    format!(
                        "named for {} records but signs {}: not a file the writer made",
                        named.unwrap_or_default(),
                        cp.size
                    ),
                )),
                Ok(cp) => checkpoints.push((path, cp)),
                Err(e) => found.push(problem(
                    "anchor-signature",
                    &shown,
                    0,
                    format!("not a checkpoint signed by the key: {e}"),
                )),
            }
        }
        let leaves = crate::file::open_read(leaves).ok().map(BufReader::new);
        let sizes = checkpoints.iter().map(|(_, c)| c.size).collect();
        Source {
            label,
            checkpoints,
            sizes,
            leaves,
            tree: Tree::new(),
            roots: BTreeMap::new(),
            first_diff: None,
        }
    }
}
