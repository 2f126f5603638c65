//! The secret store as the trust path reads it: loaded again only when the file
//! changes, its values turned into the runtime's [`Secrets`] (the injector and the leak
//! guard), and the uses of each call noted for `bx secret list`.

use bx_broker::Grant;
use bx_runtime::{RunError, Secrets};
use bx_state::SecretStore;
use parking_lot::Mutex;
use std::os::unix::fs::MetadataExt as _;

/// What identifies one content of a file: a change of any makes a reload.
type Stamp = Option<(u64, u64, i64, i64, u64, u32)>;
/// The store file's stamp (its mode joined with its directory's) and the quarantine
/// file's: the cache is good while both are.
type FileKey = (Stamp, Stamp);

/// The store, and its last load.
#[derive(Debug)]
pub struct SecretSource {
    store: SecretStore,
    cached: Mutex<Option<(FileKey, Prepared)>>,
}

#[derive(Debug, Clone)]
enum Prepared {
    /// Loaded: the values, why other users can read them (if they can), and why calls
    /// that can send a request are held back (if a secret is quarantined).
    Ready { secrets: Secrets, exposed: Option<String>, held: Option<String> },
    /// Could not be loaded, and why.
    Unreadable(String),
}

impl SecretSource {
    /// The trust path's view of `store`.
    pub fn new(store: SecretStore) -> SecretSource {
        SecretSource { store, cached: Mutex::new(None) }
    }

    /// The store.
    pub fn store(&self) -> &SecretStore {
        &self.store
    }

    fn key(&self) -> FileKey {
        let stamp = |path: &std::path::Path, extra: u32| -> Stamp {
            let m = std::fs::metadata(path).ok()?;
            Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len(), m.mode() ^ extra))
        };
        let store = self.store.store_file();
        let dir = store.parent().and_then(|d| std::fs::metadata(d).ok()).map_or(0, |m| m.mode());
        (stamp(&store, dir), stamp(&self.store.quarantine_file(), 0))
    }

    /// Why calls that can send a request are held back, if they are.
    fn held(&self) -> Option<String> {
        let Some(held) = self.store.quarantined() else {
            return Some("the secret store's quarantine file cannot be read".to_owned());
        };
        held.iter().next().map(|(name, u)| {
            format!(
                "secret {name} is held back since a tool tried to send it to {} at {}; every call that can send a request waits for `bx secret set {name}`",
                u.host, u.at
            )
        })
    }

    fn prepared(&self) -> Prepared {
        let key = self.key();
        let mut cached = self.cached.lock();
        if let Some((k, p)) = cached.as_ref()
            && *k == key
        {
            return p.clone();
        }
        let prepared = match self.store.load() {
            Ok(loaded) => {
                let values =
                    loaded.secrets.into_iter().map(|(name, s)| (name, s.value.expose().to_owned()));
                match Secrets::new(values) {
                    Ok(secrets) => {
                        Prepared::Ready { secrets, exposed: loaded.exposed, held: self.held() }
                    }
                    Err(why) => Prepared::Unreadable(why.to_string()),
                }
            }
            Err(e) => Prepared::Unreadable(e.to_string()),
        };
        *cached = Some((key, prepared.clone()));
        prepared
    }

    /// The secrets a call under `grant` runs with. Refused, with the runbook entry: every
    /// call while the store cannot be read (the leak guard would not know what to look
    /// for), and a call whose grant binds a secret while other users can read the store.
    pub fn for_call(&self, grant: &Grant) -> Result<Secrets, RunError> {
        match self.prepared() {
            Prepared::Unreadable(why) => {
                Err(RunError::Secrets { why, entry: "secrets-unreadable" })
            }
            // A secret a tool tried to send elsewhere holds back every call that can
            // send a request: each refusal would tell the tool one more thing about it.
            Prepared::Ready { held: Some(why), .. } if grant.hosts().len() > 0 => {
                Err(RunError::Secrets { why, entry: "secret-quarantined" })
            }
            Prepared::Ready { exposed: Some(why), .. } if !grant.secrets().is_empty() => {
                Err(RunError::Secrets { why, entry: "secrets-exposed" })
            }
            Prepared::Ready { secrets, .. } => Ok(secrets),
        }
    }

    /// `line` with every secret value the guard finds redacted, or `None` when it finds
    /// none. A store that cannot be read redacts nothing here; its calls are refused.
    pub fn redact_line(&self, line: &str) -> Option<String> {
        let Prepared::Ready { secrets, .. } = self.prepared() else { return None };
        let (clean, found) = secrets.redact_text(line);
        (!found.is_empty()).then_some(clean)
    }

    /// `text` with every secret value the guard finds redacted (as it is when the store
    /// cannot be read: then no value is known).
    pub fn redact_text(&self, text: &str) -> String {
        self.redact_line(text).unwrap_or_else(|| text.to_owned())
    }

    /// `message` with every secret value the guard finds redacted: what the owner typed
    /// or the model wrote goes into the transcript (and the next prompt) without one.
    pub fn redact_message(&self, message: bx_infer::Message) -> bx_infer::Message {
        let Ok(line) = serde_json::to_string(&message) else { return message };
        match self.redact_line(&line).map(|clean| serde_json::from_str(&clean)) {
            Some(Ok(clean)) => clean,
            _ => message,
        }
    }

    /// Holds back each secret a call tried to send to a host it is not bound to.
    pub fn quarantine(&self, leaks: &[bx_runtime::Leak], at: &str) {
        for leak in leaks.iter().filter(|l| l.direction == bx_runtime::Direction::Request) {
            if let Err(e) = self.store.quarantine(&leak.name, &leak.host, at) {
                eprintln!("bx: could not hold back secret {}: {e}", leak.name);
            }
        }
    }

    /// Notes when and where each secret was last sent. A failure is not the call's: the
    /// audit record already holds the use.
    pub fn note_uses(&self, used: &[(String, String)], at: &str) {
        if let Err(e) = self.store.note_uses(used, at) {
            eprintln!("bx: could not note the secrets' last use: {e}");
        }
    }
}
