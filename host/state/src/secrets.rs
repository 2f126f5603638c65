//! The secret store: `secrets/store.json` in the state directory, which no tool reaches
//! (it is bx's own state), kept mode 0600 in a 0700 directory, with `secrets/uses.json`
//! beside it for when and where each secret was last sent.
//!
//! A file, not the OS keyring: bx runs headless (the daemon, CI, a server over ssh),
//! where a keyring needs a session bus and an unlock prompt that nobody answers; and the
//! state directory already holds what bx guards as its own (the audit log, the policy).
//! The values are as safe as the owner's account: bx refuses to use a store that other
//! users can read (`docs/runbook.md#secrets-exposed`).

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::StateError;
use crate::read::read_own;

/// The shortest value accepted (bytes). The leak guard looks for a value and its
/// encodings in everything tools send and receive; a shorter value would match
/// ordinary text.
pub const MIN_SECRET_BYTES: usize = 8;
/// The longest value accepted (bytes): an API token or a key, not a file.
pub const MAX_SECRET_BYTES: usize = 4096;
/// The most secrets kept: every one is scanned for in every request and response.
pub const MAX_SECRETS: usize = 64;
/// The largest store file read: `MAX_SECRETS` of the largest values, with room.
const MAX_STORE_BYTES: u64 = 1 << 20;
/// How long a change waits for another command's change to the store.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Why a value cannot be a secret's. `Copy`, and holding nothing of the value: no
/// message made from it can echo the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretValueError {
    /// Shorter than [`MIN_SECRET_BYTES`] (its length).
    #[error(
        "the value is {0} bytes; at least {MIN_SECRET_BYTES} are needed (the leak guard would match a shorter one in ordinary text)"
    )]
    TooShort(usize),
    /// Longer than [`MAX_SECRET_BYTES`].
    #[error("the value is over {MAX_SECRET_BYTES} bytes")]
    TooLong,
    /// Not printable ASCII.
    #[error("the value must be printable ASCII (what a header can carry)")]
    NotPrintable,
    /// A `"` or a `\`, which JSON escapes.
    #[error("the value holds a quote or a backslash, which no token needs")]
    QuoteOrBackslash,
    /// A space at the start or the end.
    #[error("the value starts or ends with a space")]
    SpaceAtAnEnd,
}

/// A secret's value. Its `Debug` prints nothing of it.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct SecretValue(String);

impl SecretValue {
    /// Checks `text` as a value: 8 to 4096 bytes of printable ASCII (space included,
    /// not at either end; no `"` or `\`), what a header or a query can carry as it is.
    pub fn new(text: String) -> Result<SecretValue, SecretValueError> {
        if text.len() < MIN_SECRET_BYTES {
            return Err(SecretValueError::TooShort(text.len()));
        }
        if text.len() > MAX_SECRET_BYTES {
            return Err(SecretValueError::TooLong);
        }
        if !text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(SecretValueError::NotPrintable);
        }
        // JSON writes these escaped, where the guard must still find the value (and
        // replace it without breaking the escape).
        if text.contains(['"', '\\']) {
            return Err(SecretValueError::QuoteOrBackslash);
        }
        if text.starts_with(' ') || text.ends_with(' ') {
            return Err(SecretValueError::SpaceAtAnEnd);
        }
        Ok(SecretValue(text))
    }

    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretValue({} bytes)", self.0.len())
    }
}

/// One stored secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredSecret {
    /// The value.
    pub value: SecretValue,
    /// When it was set (RFC 3339, UTC).
    pub set: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    version: u32,
    secrets: BTreeMap<String, StoredSecret>,
}

/// When and where a secret was last sent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LastUse {
    /// When (RFC 3339, UTC).
    pub at: String,
    /// The host it went to.
    pub host: String,
}

/// The store as read: its secrets, and whether other users can read it.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every secret, by name.
    pub secrets: BTreeMap<String, StoredSecret>,
    /// Set when the file or its directory is readable by other users: calls that need
    /// a secret are refused (`docs/runbook.md#secrets-exposed`), though the leak guard
    /// still looks for every value.
    pub exposed: Option<String>,
}

/// The `secrets/` directory of the state directory.
#[derive(Debug, Clone)]
pub struct SecretStore {
    dir: PathBuf,
}

impl SecretStore {
    /// The store in `dir` (the state directory's `secrets/`); nothing is read or made.
    pub fn at(dir: impl Into<PathBuf>) -> SecretStore {
        SecretStore { dir: dir.into() }
    }

    /// `secrets/store.json`.
    pub fn store_file(&self) -> PathBuf {
        self.dir.join("store.json")
    }

    fn uses_file(&self) -> PathBuf {
        self.dir.join("uses.json")
    }

    /// `secrets/quarantine.json`: secrets a tool tried to send where they are not bound.
    pub fn quarantine_file(&self) -> PathBuf {
        self.dir.join("quarantine.json")
    }

    /// The secrets held back since a tool tried to send them to a host they are not bound
    /// to, with when and where (`docs/runbook.md#secret-quarantined`). A file that cannot
    /// be read holds back every secret: `None`, and the caller refuses.
    pub fn quarantined(&self) -> Option<BTreeMap<String, LastUse>> {
        match read_own(&self.quarantine_file(), MAX_STORE_BYTES) {
            Ok(None) => Some(BTreeMap::new()),
            Ok(Some(data)) => serde_json::from_slice(&data).ok(),
            Err(_) => None,
        }
    }

    /// Holds `name` back: until it is set again or removed, no call that can send a
    /// request runs. Called by the one writer of the audit log, after the call's record.
    pub fn quarantine(&self, name: &str, host: &str, at: &str) -> Result<(), StateError> {
        self.make_dir()?;
        let _lock = self.lock()?;
        let mut all = self.quarantined().unwrap_or_default();
        if all.contains_key(name) {
            return Ok(());
        }
        all.insert(name.to_owned(), LastUse { at: at.to_owned(), host: host.to_owned() });
        let text = serde_json::to_vec_pretty(&all)
            .map_err(|e| StateError::io(&self.quarantine_file(), e))?;
        crate::sessions::write_atomically(&self.quarantine_file(), &text)
    }

    /// Lets `name` out of quarantine (its value was set again, or it is gone).
    fn release(&self, name: &str) -> Result<(), StateError> {
        let Some(mut all) = self.quarantined() else { return Ok(()) };
        if all.remove(name).is_none() {
            return Ok(());
        }
        let text = serde_json::to_vec_pretty(&all)
            .map_err(|e| StateError::io(&self.quarantine_file(), e))?;
        crate::sessions::write_atomically(&self.quarantine_file(), &text)
    }

    /// Reads the store: a missing one is empty. A file that cannot be read or parsed is
    /// [`StateError::SecretsUnreadable`]; one that other users can read is returned
    /// with [`Loaded::exposed`] set.
    pub fn load(&self) -> Result<Loaded, StateError> {
        let path = self.store_file();
        let unreadable =
            |why: String| StateError::SecretsUnreadable { path: path.display().to_string(), why };
        let data = match read_own(&path, MAX_STORE_BYTES) {
            Ok(None) => return Ok(Loaded::default()),
            Ok(Some(data)) => data,
            Err(e) => return Err(unreadable(e.to_string())),
        };
        let file: StoreFile = serde_json::from_slice(&data)
            .map_err(|e| unreadable(format!("not a secret store: {e}")))?;
        if file.version != 1 {
            return Err(unreadable(format!("store version {} (this bx reads 1)", file.version)));
        }
        for name in file.secrets.keys() {
            if !bx_broker::valid_secret_name(name) {
                return Err(unreadable(format!("{name:?} is not a secret name")));
            }
        }
        Ok(Loaded { secrets: file.secrets, exposed: self.exposure() })
    }

    /// Why other users can read the store, if they can: a group or world bit on the
    /// file or on its directory.
    fn exposure(&self) -> Option<String> {
        for path in [self.dir.clone(), self.store_file()] {
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Some(format!(
                    "{} has mode {mode:o}; other users can read it (0600 for the file, 0700 for the directory)",
                    path.display()
                ));
            }
        }
        None
    }

    /// Sets `name` to `value`, replacing any value it had (and letting it out of
    /// quarantine); `Ok(true)` when it had one.
    pub fn set(&self, name: &str, value: SecretValue, now: String) -> Result<bool, StateError> {
        if !bx_broker::valid_secret_name(name) {
            return Err(StateError::BadSecretName(name.to_owned()));
        }
        let path = self.store_file();
        self.change(name, |file| {
            if !file.secrets.contains_key(name) && file.secrets.len() >= MAX_SECRETS {
                return Err(StateError::SecretsFull {
                    path: path.display().to_string(),
                    max: MAX_SECRETS,
                });
            }
            Ok(file.secrets.insert(name.to_owned(), StoredSecret { value, set: now }).is_some())
        })
    }

    /// Removes `name`; `Ok(false)` when there was no such secret.
    pub fn remove(&self, name: &str) -> Result<bool, StateError> {
        self.change(name, |file| Ok(file.secrets.remove(name).is_some()))
    }

    /// Reads, changes and writes the store under its lock; the file is written whole
    /// (mode 0600) and renamed into place.
    fn change<T>(
        &self,
        name: &str,
        edit: impl FnOnce(&mut StoreFile) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        self.make_dir()?;
        let _lock = self.lock()?;
        let mut file = StoreFile { version: 1, secrets: self.load()?.secrets };
        let out = edit(&mut file)?;
        let text =
            serde_json::to_vec_pretty(&file).map_err(|e| StateError::io(&self.store_file(), e))?;
        crate::sessions::write_atomically(&self.store_file(), &text)?;
        let meta = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(self.store_file(), meta)
            .map_err(|e| StateError::io(&self.store_file(), e))?;
        self.release(name)?;
        Ok(out)
    }

    fn make_dir(&self) -> Result<(), StateError> {
        if !self.dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)
                .map_err(|e| StateError::io(&self.dir, e))?;
        }
        Ok(())
    }

    /// Takes `secrets/.lock`, waiting up to [`LOCK_WAIT`] for another command.
    fn lock(&self) -> Result<std::fs::File, StateError> {
        let path = self.dir.join(".lock");
        match bx_fs::lock_waiting(&path, LOCK_WAIT) {
            Ok(Some(file)) => Ok(file),
            Ok(None) => Err(StateError::io(
                &path,
                "another bx command has held the secret store's lock for 10 s; nothing was changed",
            )),
            Err(e) => Err(StateError::io(&path, e)),
        }
    }

    /// When and where each secret was last sent (empty when never, or unreadable).
    pub fn last_uses(&self) -> BTreeMap<String, LastUse> {
        read_own(&self.uses_file(), MAX_STORE_BYTES)
            .ok()
            .flatten()
            .and_then(|data| serde_json::from_slice(&data).ok())
            .unwrap_or_default()
    }

    /// Notes that each `(name, host)` was sent at `at`. Called by the one writer of the
    /// audit log (the daemon, or the command holding its lock), after the call's record.
    pub fn note_uses(&self, uses: &[(String, String)], at: &str) -> Result<(), StateError> {
        if uses.is_empty() {
            return Ok(());
        }
        self.make_dir()?;
        let mut all = self.last_uses();
        for (name, host) in uses {
            all.insert(name.clone(), LastUse { at: at.to_owned(), host: host.clone() });
        }
        // Names no longer in the store are dropped, so the file stays bounded.
        let kept = self.load().map(|l| l.secrets).unwrap_or_default();
        all.retain(|name, _| kept.contains_key(name));
        let text =
            serde_json::to_vec_pretty(&all).map_err(|e| StateError::io(&self.uses_file(), e))?;
        crate::sessions::write_atomically(&self.uses_file(), &text)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn value(s: &str) -> SecretValue {
        SecretValue::new(s.to_owned()).unwrap()
    }

    #[test]
    fn set_list_remove_and_the_modes_it_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::at(dir.path().join("secrets"));
        assert!(store.load().unwrap().secrets.is_empty());
        assert!(!store.set("gh", value("ghp_0123456789"), "t".into()).unwrap());
        assert!(store.set("gh", value("ghp_9876543210"), "t".into()).unwrap());
        let loaded = store.load().unwrap();
        assert_eq!(loaded.secrets["gh"].value.expose(), "ghp_9876543210");
        assert_eq!(loaded.exposed, None);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&store.store_file()), 0o600);
        assert_eq!(mode(&dir.path().join("secrets")), 0o700);
        assert!(format!("{:?}", loaded.secrets["gh"]).contains("14 bytes"));
        assert!(!format!("{:?}", loaded.secrets["gh"]).contains("ghp_"));
        std::fs::set_permissions(store.store_file(), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(store.load().unwrap().exposed.unwrap().contains("mode 644"));
        assert!(store.remove("gh").unwrap());
        assert!(!store.remove("gh").unwrap());
    }

    #[test]
    fn refuses_short_unprintable_and_bad_names() {
        assert_eq!(SecretValue::new("short".into()), Err(SecretValueError::TooShort(5)));
        assert_eq!(SecretValue::new("abcdefgh\n".into()), Err(SecretValueError::NotPrintable));
        assert_eq!(SecretValue::new(" abcdefgh".into()), Err(SecretValueError::SpaceAtAnEnd));
        assert_eq!(SecretValue::new("abc\"defgh".into()), Err(SecretValueError::QuoteOrBackslash));
        assert_eq!(SecretValue::new("x".repeat(4097)), Err(SecretValueError::TooLong));
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::at(dir.path());
        assert!(store.set("Bad Name", value("abcdefgh"), "t".into()).is_err());
        std::fs::write(store.store_file(), b"{\"version\":1,\"secrets\":{},\"x\":1}").unwrap();
        assert!(matches!(store.load(), Err(StateError::SecretsUnreadable { .. })));
    }
}
