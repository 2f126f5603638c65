//! The running upstreams of one bx process: a connection per upstream, started at its
//! first call, checked against its pins each time it starts, stopped and restarted with
//! back-off when it fails. One upstream's failure is its own: each has its own lock, so
//! a hung or crashed upstream holds up only its own calls.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{CallOutput, Connection, Limits};
use crate::confine::Confine;
use crate::error::GatewayError;
use crate::upstream::SecretLookup;
use crate::upstream::{Changes, Upstream};

/// The wait before an upstream that failed twice in a row is started again (after one
/// failure it starts at the next call); it doubles with each further failure, up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two starts of a failing upstream.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One upstream's connection, if it runs, and how its starts have gone.
#[derive(Default)]
struct Slot {
    /// The running connection, and the upstream it was started as (its pins).
    running: Option<(Arc<Connection>, Upstream)>,
    /// Pinned tools whose description or schema now differ: off until accepted.
    off: BTreeSet<String>,
    /// Failures in a row (a start that failed, a call that broke the connection).
    failures: u32,
    /// No start before this, after a failure.
    not_before: Option<Instant>,
}

impl Slot {
    fn failed(&mut self) {
        self.running = None;
        self.failures = self.failures.saturating_add(1);
        self.not_before = (self.failures > 1).then(|| {
            let wait = FIRST_BACKOFF.saturating_mul(1 << (self.failures - 2).min(16));
            Instant::now() + wait.min(MAX_BACKOFF)
        });
    }
}

/// Every upstream this process has called, by name.
pub struct Gateway {
    /// `upstreams/` in the state directory: each upstream's home and log.
    dir: PathBuf,
    limits: Limits,
    confine: Confine,
    secrets: SecretLookup,
    slots: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Gateway {
    /// Upstreams started with `limits` through `confine`, each in `dir/NAME` with its
    /// stderr in `dir/NAME.log`, and the secrets bound to them read through `secrets`.
    pub fn new(dir: PathBuf, limits: Limits, confine: Confine, secrets: SecretLookup) -> Gateway {
        Gateway { dir, limits, confine, secrets, slots: std::sync::Mutex::new(BTreeMap::new()) }
    }

    /// `upstreams/` in the state directory, where each upstream's home, log and guard are.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    fn slot(&self, name: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(slots.entry(name.to_owned()).or_default())
    }

    /// Calls `tool` of the upstream `name` (as `upstream` is installed now) with `args`.
    /// The upstream is started if it does not run (or runs as an older pin), and its
    /// tool list compared with the pins: a tool that changed is refused until the owner
    /// accepts it. A call that times out or breaks the connection stops the upstream;
    /// the next call starts it again, no sooner than its back-off allows.
    pub async fn call(
        &self,
        name: &str,
        upstream: &Upstream,
        tool: &str,
        args: serde_json::Map<String, Value>,
        trace: Option<crate::TraceContext>,
    ) -> Result<CallOutput, GatewayError> {
        let slot = self.slot(name);
        let connection = {
            let mut slot = slot.lock().await;
            if slot.running.as_ref().is_some_and(|(c, pinned)| c.is_closed() || pinned != upstream)
            {
                slot.running = None;
            }
            if slot.running.is_none() {
                if let Some(at) = slot.not_before
                    && let Some(left) = at.checked_duration_since(Instant::now())
                {
                    return Err(GatewayError::Backoff {
                        name: name.into(),
                        millis: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                    });
                }
                match self.start(name, upstream).await {
                    Ok((connection, off)) => {
                        slot.running = Some((Arc::new(connection), upstream.clone()));
                        slot.off = off;
                    }
                    Err(e) => {
                        slot.failed();
                        return Err(e);
                    }
                }
            }
            if slot.off.contains(tool) {
                return Err(GatewayError::Changed { name: name.into(), tool: tool.into() });
            }
            match &slot.running {
                Some((connection, _)) => Arc::clone(connection),
                None => return Err(GatewayError::Unknown(name.into())),
            }
        };
        let result = connection.call(tool, args, trace).await;
        let mut slot = slot.lock().await;
        let same = slot.running.as_ref().is_some_and(|(c, _)| Arc::ptr_eq(c, &connection));
        match &result {
            // A hung upstream is stopped; a broken one is gone. Either starts again later
            // (an error the upstream answered with leaves it running).
            Err(GatewayError::Timeout { .. }) if same => slot.failed(),
            Err(GatewayError::Failed { .. }) if same && connection.is_closed() => slot.failed(),
            Err(_) => {}
            Ok(_) if same => {
                slot.failures = 0;
                slot.not_before = None;
            }
            Ok(_) => {}
        }
        result
    }

    /// Starts `upstream` and lists its tools: the pinned ones that now differ, or that it
    /// no longer lists (or lists twice), are off.
    async fn start(
        &self,
        name: &str,
        upstream: &Upstream,
    ) -> Result<(Connection, BTreeSet<String>), GatewayError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| GatewayError::io(&self.dir, e))?;
        let home = self.dir.join(name);
        let log = self.dir.join(format!("{name}.log"));
        let mut limits = self.limits.clone();
        if let Some(secs) = upstream.timeout_secs {
            limits.call = Duration::from_secs(secs);
        }
        let connection =
            Connection::start(name, upstream, &home, &log, limits, &self.confine, &self.secrets)
                .await?;
        let (listed, _problems) = connection.list().await?;
        let changes = Changes::between(upstream, &listed);
        Ok((connection, changes.changed.into_iter().chain(changes.gone).collect()))
    }

    /// Stops every upstream (their process groups are killed as their connections go).
    pub async fn stop_all(&self) {
        let slots: Vec<_> = {
            let slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            slots.values().cloned().collect()
        };
        for slot in slots {
            slot.lock().await.running = None;
        }
    }
}
