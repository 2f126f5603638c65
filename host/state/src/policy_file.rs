//! The owner's policy file, watched: re-read when its content changes, an invalid edit
//! never takes effect, and with no valid policy ever read every call is refused. bx's own
//! paths are out of every grant's reach in whatever policy is in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bx_broker::{Policy, PolicyErrors};
use sha2::{Digest as _, Sha256};

use crate::read::{MAX_POLICY_BYTES, read_own};

/// What identifies one version of the file: the SHA-256 of its bytes, or that there was
/// none. Content, not metadata: an edit of the same length with its mtime restored
/// (`cp -p`, `touch -r`) is still seen.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stamp {
    Missing,
    Content([u8; 32]),
    Unreadable(String),
}

/// Where the policy stands.
#[derive(Debug, Clone)]
pub enum PolicyStatus {
    /// No policy file: nothing is granted, so every call is refused.
    Missing,
    /// The file is valid and in force.
    Valid,
    /// The file is invalid; the last valid policy (if any) stays in force.
    Invalid(PolicyErrors),
    /// The file could not be read; the last valid policy (if any) stays in force.
    Unreadable(String),
}

/// The policy file at a path, and the policy in force.
#[derive(Debug)]
pub struct PolicyFile {
    path: PathBuf,
    own: Vec<PathBuf>,
    seen: Option<Stamp>,
    in_force: Option<Arc<Policy>>,
    status: PolicyStatus,
}

impl PolicyFile {
    /// Watches `path` (usually `policy.toml` in the state directory), with `own` (bx's
    /// own paths, see [`crate::StateDir::own_paths`]) out of every grant's reach; reads
    /// it now.
    pub fn open(path: &Path, own: Vec<PathBuf>) -> PolicyFile {
        let mut file = PolicyFile {
            path: path.to_path_buf(),
            own,
            seen: None,
            in_force: None,
            status: PolicyStatus::Missing,
        };
        file.refresh();
        file
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `policy` with bx's own paths out of every grant's reach; `Err` when one of them
    /// cannot be a path a rule names (then nothing is in force from it).
    fn protect(&self, policy: Policy) -> Result<Policy, bx_broker::PathError> {
        policy.protect_own(self.own.iter().cloned())
    }

    /// Reads the file and, when its content differs from what was last read, takes the
    /// new version: in force if valid, else reported while the last valid one stays.
    /// One bounded read and a hash when nothing changed, so callers do it before every
    /// decision.
    pub fn refresh(&mut self) -> &PolicyStatus {
        let (stamp, text) = match read_own(&self.path, MAX_POLICY_BYTES) {
            Ok(None) => (Stamp::Missing, None),
            Ok(Some(bytes)) => (Stamp::Content(Sha256::digest(&bytes).into()), Some(bytes)),
            Err(e) => (Stamp::Unreadable(e.to_string()), None),
        };
        if self.seen.as_ref() == Some(&stamp) {
            return &self.status;
        }
        match (&stamp, text) {
            (Stamp::Missing, _) => {
                // Deleting the file withdraws every grant.
                match self.protect(Policy::empty()) {
                    Ok(p) => {
                        self.in_force = Some(Arc::new(p));
                        self.status = PolicyStatus::Missing;
                    }
                    Err(e) => {
                        self.status = PolicyStatus::Unreadable(format!("bx's own paths: {e}"))
                    }
                }
            }
            (Stamp::Unreadable(why), _) => self.status = PolicyStatus::Unreadable(why.clone()),
            (Stamp::Content(_), Some(bytes)) => match String::from_utf8(bytes) {
                Err(e) => {
                    self.status =
                        PolicyStatus::Unreadable(format!("{}: not UTF-8: {e}", self.path.display()))
                }
                Ok(text) => match Policy::parse(&self.path.display().to_string(), &text) {
                    Ok(policy) => match self.protect(policy) {
                        Ok(p) => {
                            self.in_force = Some(Arc::new(p));
                            self.status = PolicyStatus::Valid;
                        }
                        Err(e) => {
                            self.status = PolicyStatus::Unreadable(format!("bx's own paths: {e}"))
                        }
                    },
                    Err(errors) => self.status = PolicyStatus::Invalid(errors),
                },
            },
            (Stamp::Content(_), None) => {}
        }
        self.seen = Some(stamp);
        &self.status
    }

    /// The policy in force: the last valid one read. `None` when no valid policy was ever
    /// read (every call must be refused; see `docs/runbook.md#policy-invalid`).
    pub fn in_force(&self) -> Option<Arc<Policy>> {
        self.in_force.clone()
    }

    /// Where the file stands now.
    pub fn status(&self) -> &PolicyStatus {
        &self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str =
        "[[grant]]\ntool = \"*\"\npath = \"/srv\"\nmode = \"read\"\nlabel = \"public/trusted\"\n";

    fn write(path: &Path, text: &str) {
        // A new inode each time, as editors that save by rename do; the stamp changes
        // even within one mtime tick.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn invalid_edit_keeps_the_last_valid_policy_and_a_fix_takes_effect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        write(&path, VALID);
        let mut file = PolicyFile::open(&path, vec![]);
        assert!(matches!(file.status(), PolicyStatus::Valid));
        let first = file.in_force().unwrap();
        assert_eq!(first.grants().len(), 1);

        write(
            &path,
            "[[grant]]\ntool = \"*\"\npath = \"/\"\nmode = \"read\"\nlabel = \"public/trusted\"\n",
        );
        assert!(matches!(file.refresh(), PolicyStatus::Invalid(_)));
        assert_eq!(file.in_force().unwrap(), first, "an invalid edit took effect");

        write(&path, &format!("{VALID}[[deny]]\ntool = \"*\"\npath = \"/srv/x\"\n"));
        assert!(matches!(file.refresh(), PolicyStatus::Valid));
        assert_eq!(file.in_force().unwrap().denies().len(), 1);
    }

    #[test]
    fn no_valid_policy_ever_means_none_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        write(&path, "[[grant]]\nnonsense = 1\n");
        let file = PolicyFile::open(&path, vec![]);
        assert!(matches!(file.status(), PolicyStatus::Invalid(_)));
        assert!(file.in_force().is_none());
    }

    /// Regression: a change was detected by mtime, length and inode, so an in-place
    /// rewrite of the same length with the mtime restored kept a removed grant working.
    #[test]
    fn a_same_length_edit_with_the_mtime_restored_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, VALID).unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let mut file = PolicyFile::open(&path, vec![]);
        assert_eq!(file.in_force().unwrap().grants().len(), 1);
        // Same length, same inode, mtime put back: the grant now names another path.
        let edited = VALID.replace("/srv", "/sr2");
        assert_eq!(edited.len(), VALID.len());
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut &f, edited.as_bytes()).unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        assert!(matches!(file.refresh(), PolicyStatus::Valid));
        let now = file.in_force().unwrap();
        assert_eq!(
            now.grants()[0].to_string(),
            "grant[0] (line 1): tool * read /sr2, label public/trusted, when tainted ask"
        );
    }

    #[test]
    fn own_paths_are_protected_in_the_policy_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        write(&path, VALID);
        let file = PolicyFile::open(&path, vec![PathBuf::from("/srv/state")]);
        assert_eq!(file.in_force().unwrap().own(), &[PathBuf::from("/srv/state")]);
        let missing =
            PolicyFile::open(&dir.path().join("none.toml"), vec![PathBuf::from("/srv/state")]);
        assert_eq!(missing.in_force().unwrap().own(), &[PathBuf::from("/srv/state")]);
    }

    #[test]
    fn missing_file_grants_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = PolicyFile::open(&dir.path().join("policy.toml"), vec![]);
        assert!(matches!(file.status(), PolicyStatus::Missing));
        assert!(file.in_force().unwrap().grants().is_empty());
    }
}
