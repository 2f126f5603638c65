//! The owner's policy file, watched: re-read when it changes, an invalid edit never takes
//! effect, and with no valid policy ever read every call is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bx_broker::{Policy, PolicyErrors};

/// What identifies one version of the file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp { modified: meta.modified().ok(), len: meta.len(), inode: meta.ino() })
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
    seen: Option<Stamp>,
    in_force: Option<Arc<Policy>>,
    status: PolicyStatus,
}

impl PolicyFile {
    /// Watches `path` (usually `policy.toml` in the state directory); reads it now.
    pub fn open(path: &Path) -> PolicyFile {
        let mut file = PolicyFile {
            path: path.to_path_buf(),
            seen: None,
            in_force: None,
            status: PolicyStatus::Missing,
        };
        file.reload();
        file
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn reload(&mut self) {
        self.seen = stamp(&self.path);
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Deleting the file withdraws every grant.
                self.in_force = Some(Arc::new(Policy::empty()));
                self.status = PolicyStatus::Missing;
                return;
            }
            Err(e) => {
                self.status = PolicyStatus::Unreadable(format!("{}: {e}", self.path.display()));
                return;
            }
        };
        match Policy::parse(&self.path.display().to_string(), &text) {
            Ok(policy) => {
                self.in_force = Some(Arc::new(policy));
                self.status = PolicyStatus::Valid;
            }
            Err(errors) => self.status = PolicyStatus::Invalid(errors),
        }
    }

    /// Re-reads the file if it changed since it was last read. Cheap when it did not
    /// (one `stat`), so callers do it before every decision.
    pub fn refresh(&mut self) -> &PolicyStatus {
        if stamp(&self.path) != self.seen {
            self.reload();
        }
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
        let mut file = PolicyFile::open(&path);
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
        let file = PolicyFile::open(&path);
        assert!(matches!(file.status(), PolicyStatus::Invalid(_)));
        assert!(file.in_force().is_none());
    }

    #[test]
    fn missing_file_grants_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = PolicyFile::open(&dir.path().join("policy.toml"));
        assert!(matches!(file.status(), PolicyStatus::Missing));
        assert!(file.in_force().unwrap().grants().is_empty());
    }
}
