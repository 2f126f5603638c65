//! The span processor: a bounded queue in front of the OTLP exporter, drained by a
//! thread of its own. Written here rather than the SDK's `BatchSpanProcessor`, whose
//! count of dropped spans is private: the owner is told how many spans were lost
//! (`bx doctor`), and this is where they are counted. A call only ever puts its span in
//! the queue (`try_send`: never a wait); a full queue drops the span and counts it; an
//! export that fails or times out loses its batch and counts it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// Spans sent in one export at most.
const MAX_BATCH: usize = 512;
/// How long a span waits in the queue for others before its batch goes anyway.
const DELAY: Duration = Duration::from_secs(1);
/// How often, at most, the status file is written.
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// The most bytes of an export's error kept.
const MAX_ERROR: usize = 512;

/// What happened to the spans, for `bx doctor` and the status file.
#[derive(Debug, Default)]
pub struct Stats {
    /// Spans the collector took.
    pub exported: AtomicU64,
    /// Spans dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Spans lost in exports that failed or timed out.
    pub failed: AtomicU64,
    /// The last export's error, if it failed.
    pub last_error: Mutex<String>,
}

impl Stats {
    /// The counts as the status file keeps them.
    pub fn snapshot(&self, endpoint: &str) -> Status {
        Status {
            endpoint: endpoint.to_owned(),
            pid: std::process::id(),
            exported: self.exported.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            last_error: self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone(),
        }
    }
}

/// `telemetry.json`: what the daemon's exporter did, read by `bx doctor`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Status {
    /// Where the spans go (`(from OTEL_EXPORTER_OTLP_*)` when the environment says).
    pub endpoint: String,
    /// The process that writes it.
    pub pid: u32,
    /// Spans the collector took.
    pub exported: u64,
    /// Spans dropped because the queue was full.
    pub dropped: u64,
    /// Spans lost in exports that failed or timed out.
    pub failed: u64,
    /// The last failed export's error (empty once one succeeds).
    pub last_error: String,
}

enum Msg {
    Span(Box<SpanData>),
    Flush(mpsc::Sender<()>),
    Resource(Resource),
    Stop(mpsc::Sender<()>),
}

/// How long a shutdown waits for the thread to send what is queued: past it the rest is
/// counted as dropped, and the process goes on ending (a collector that never answers
/// must not hold the daemon's exit for its export deadline, twice).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// The processor the tracer provider is given.
#[derive(Debug)]
pub(crate) struct Bounded {
    tx: SyncSender<Msg>,
    stats: Arc<Stats>,
    /// Spans put in the queue or taken by the thread and not yet counted as exported or
    /// failed: what a shutdown that gives up counts as dropped.
    pending: Arc<AtomicU64>,
    /// How long a flush waits for the thread.
    wait: Duration,
    status: Option<(PathBuf, String)>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl Bounded {
    /// Starts the export thread with `exporter`, a queue of `queue` spans, and the status
    /// file `status` (written by the daemon alone) naming `endpoint`.
    pub(crate) fn start<E: SpanExporter + 'static>(
        exporter: E,
        queue: usize,
        timeout: Duration,
        stats: Arc<Stats>,
        status: Option<(PathBuf, String)>,
    ) -> std::io::Result<Bounded> {
        let (tx, rx) = mpsc::sync_channel(queue);
        let pending = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            exporter,
            stats: Arc::clone(&stats),
            pending: Arc::clone(&pending),
            status: status.clone(),
            written: None,
        };
        std::thread::Builder::new().name("bx-telemetry".into()).spawn(move || worker.run(rx))?;
        // A flush waits for one export, and a little more.
        Ok(Bounded { tx, stats, pending, wait: timeout + Duration::from_secs(1), status })
    }

    /// Sends a control message and waits, within `wait`, for the thread's answer. The
    /// message waits for room in the queue within the same bound.
    fn control(&self, wait: Duration, make: impl FnOnce(mpsc::Sender<()>) -> Msg) -> OTelSdkResult {
        let until = Instant::now() + wait;
        let (done, answered) = mpsc::channel();
        let mut msg = make(done);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return Err(OTelSdkError::AlreadyShutdown),
                Err(TrySendError::Full(m)) if Instant::now() < until => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TrySendError::Full(_)) => return Err(OTelSdkError::Timeout(wait)),
            }
        }
        answered
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .map_err(|_| OTelSdkError::Timeout(wait))
    }
}

impl SpanProcessor for Bounded {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        self.pending.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.pending.fetch_sub(1, Ordering::Relaxed);
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.control(self.wait, Msg::Flush)
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        let stopped = self.control(SHUTDOWN_WAIT, Msg::Stop);
        if stopped.is_err() {
            // What the thread had not sent by now is lost as the process ends: counted,
            // and the owner's status file says so.
            let left = self.pending.swap(0, Ordering::Relaxed);
            self.stats.dropped.fetch_add(left, Ordering::Relaxed);
            if let Some((path, endpoint)) = &self.status {
                write_status(path, &self.stats.snapshot(endpoint));
            }
        }
        stopped
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.tx.send(Msg::Resource(resource.clone()));
    }
}

struct Worker<E> {
    exporter: E,
    stats: Arc<Stats>,
    pending: Arc<AtomicU64>,
    status: Option<(PathBuf, String)>,
    written: Option<Instant>,
}

impl<E: SpanExporter> Worker<E> {
    fn run(mut self, rx: Receiver<Msg>) {
        let mut batch: Vec<SpanData> = Vec::new();
        let mut due = Instant::now() + DELAY;
        loop {
            match rx.recv_timeout(due.saturating_duration_since(Instant::now())) {
                Ok(Msg::Span(span)) => {
                    batch.push(*span);
                    if batch.len() >= MAX_BATCH {
                        self.export(&mut batch);
                    }
                }
                Ok(Msg::Flush(done)) => {
                    self.export(&mut batch);
                    self.write_status(true);
                    let _ = done.send(());
                }
                Ok(Msg::Resource(resource)) => self.exporter.set_resource(&resource),
                Ok(Msg::Stop(done)) => {
                    self.export(&mut batch);
                    let _ = self.exporter.shutdown();
                    self.write_status(true);
                    let _ = done.send(());
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.export(&mut batch);
                    due = Instant::now() + DELAY;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.export(&mut batch);
                    self.write_status(true);
                    return;
                }
            }
        }
    }

    /// Sends `batch` (emptied), counting what it did.
    fn export(&mut self, batch: &mut Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let spans = std::mem::take(batch);
        let sent = futures_executor::block_on(self.exporter.export(spans));
        // Counted once: a shutdown that gave up meanwhile counted these as dropped.
        let counted = self
            .pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| p.checked_sub(n))
            .is_ok();
        if !counted {
            return;
        }
        match sent {
            Ok(()) => {
                self.stats.exported.fetch_add(n, Ordering::Relaxed);
                self.stats.last_error.lock().unwrap_or_else(PoisonError::into_inner).clear();
            }
            Err(e) => {
                self.stats.failed.fetch_add(n, Ordering::Relaxed);
                let mut text = e.to_string();
                if text.len() > MAX_ERROR {
                    let mut cut = MAX_ERROR;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                }
                *self.stats.last_error.lock().unwrap_or_else(PoisonError::into_inner) = text;
            }
        }
        self.write_status(false);
    }

    /// Writes the status file (whole, by rename), at most every [`STATUS_EVERY`] unless
    /// `now`.
    fn write_status(&mut self, now: bool) {
        let Some((path, endpoint)) = &self.status else { return };
        if !now && self.written.is_some_and(|at| at.elapsed() < STATUS_EVERY) {
            return;
        }
        self.written = Some(Instant::now());
        write_status(path, &self.stats.snapshot(endpoint));
    }
}

/// One writer of the status file at a time in this process: the export thread, and a
/// shutdown that gave up waiting for it (the daemon's `serve.lock` makes the process
/// the only one).
static STATUS_WRITER: Mutex<()> = Mutex::new(());

/// Writes the status file whole, by rename.
fn write_status(path: &std::path::Path, status: &Status) {
    let _one = STATUS_WRITER.lock().unwrap_or_else(PoisonError::into_inner);
    let Ok(text) = serde_json::to_vec(status) else { return };
    let temp = path.with_extension("json.new");
    if std::fs::write(&temp, text).is_ok() {
        let _ = std::fs::rename(&temp, path);
    }
}
