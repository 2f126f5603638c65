//! What one call's `Store` holds: its grant, its WASI context, its counters, the label of
//! what it read and what it touched. Dropped with the store when the call ends.

use std::collections::BTreeSet;

use bx_broker::{Grant, Label};
use tokio::time::Instant;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::error::Limit;
use crate::host_fs::Roots;
use crate::limits::Limits;
use crate::tool::Touched;

/// Distinct things a call reached that its report keeps by name (the audit record lists
/// them). Every operation still counts toward the result's label; past this many only a
/// count of the rest is kept, so a search over a million files makes a bounded record.
pub(crate) const MAX_TOUCHED: usize = 64;

/// The error a host function raises as a trap when a limit stops the guest; the call
/// finds it again by downcasting, so the owner sees which limit, not a bare trap.
#[derive(Debug)]
pub(crate) struct LimitTrap(pub(crate) Limit, pub(crate) String);

impl std::fmt::Display for LimitTrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} exceeded: {}", self.0, self.1)
    }
}

impl std::error::Error for LimitTrap {}

/// Per-call state.
pub(crate) struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) grant: Grant,
    pub(crate) limits: Limits,
    pub(crate) roots: Roots,
    /// When the call's deadline falls; host calls that wait bound their waits by it.
    pub(crate) deadline: Instant,
    pub(crate) host_calls: u64,
    /// Set by the memory limiter, so a growth failure reports as a limit.
    pub(crate) memory_hit: Option<String>,
    /// The join of the label of everything the call read or fetched.
    pub(crate) label: Label,
    /// What the call has read and where it has written so far, shared with its HTTP
    /// (which runs in futures of its own): the flow inside the call, held to what it was
    /// decided at ([`InCall`]).
    pub(crate) flow: Flow,
    pub(crate) touched: BTreeSet<Touched>,
    /// Touched things past [`MAX_TOUCHED`], counted but not kept.
    pub(crate) touched_more: u64,
    pub(crate) stdout: MemoryOutputPipe,
    pub(crate) stderr: MemoryOutputPipe,
    /// What a standard WASI guest's filesystem needs: its preopens, its descriptors'
    /// paths, and the reasons of what was refused.
    pub(crate) fs: crate::wasi_fs::WasiFs,
    /// A standard WASI guest's `wasi:http` state, made at its first request.
    pub(crate) http: Option<crate::wasi_http::WasiHttp>,
    /// The values the host may put into this call's requests, and the leak guard.
    pub(crate) secrets: crate::secrets::Secrets,
    /// Secrets put into requests, with the host each went to.
    pub(crate) secrets_used: BTreeSet<(String, String)>,
    /// What the leak guard found, at most [`crate::secrets::MAX_LEAKS`].
    pub(crate) leaks: Vec<crate::secrets::Leak>,
}

impl CallState {
    pub(crate) fn new(
        grant: Grant,
        limits: Limits,
        deadline: Instant,
        secrets: crate::secrets::Secrets,
    ) -> CallState {
        let stdout = MemoryOutputPipe::new(limits.stdio_bytes);
        let stderr = MemoryOutputPipe::new(limits.stdio_bytes);
        // Defaults of the builder, restated: stdin closed, no environment, no arguments,
        // no preopens, every socket address denied, name lookup denied.
        let mut builder = WasiCtx::builder();
        builder
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        // The one exception to "no environment": a binding's variables, each holding its
        // placeholder, never a value (docs/runtime.md#secrets).
        for binding in grant.secrets() {
            for var in &binding.env {
                builder.env(var, binding.placeholder());
            }
        }
        let roots = Roots::new(&grant);
        CallState {
            wasi: builder.build(),
            table: ResourceTable::new(),
            grant,
            limits,
            roots,
            deadline,
            host_calls: 0,
            memory_hit: None,
            label: Label::CLEAN,
            flow: Flow::default(),
            touched: BTreeSet::new(),
            touched_more: 0,
            stdout,
            stderr,
            fs: crate::wasi_fs::WasiFs::default(),
            http: None,
            secrets,
            secrets_used: BTreeSet::new(),
            leaks: Vec::new(),
        }
    }

    /// Notes what the leak guard found (once each, at most [`crate::secrets::MAX_LEAKS`]).
    pub(crate) fn leaked(&mut self, leak: crate::secrets::Leak) {
        crate::secrets::note_leak(&mut self.leaks, leak);
    }

    /// Counts one host call; past the cap the guest traps with [`LimitTrap`].
    pub(crate) fn count_host_call(&mut self) -> wasmtime::Result<()> {
        self.host_calls += 1;
        if self.host_calls > self.limits.host_calls {
            let detail = format!("more than {} host calls", self.limits.host_calls);
            return Err(wasmtime::Error::new(LimitTrap(Limit::HostCalls, detail)));
        }
        Ok(())
    }

    /// Records that the call reached `what`: its label joins the result's, and it is
    /// kept by name while fewer than [`MAX_TOUCHED`] distinct things were.
    pub(crate) fn touch(&mut self, what: Touched) {
        self.label = self.label.join(what.label());
        match &what {
            Touched::Path { access: bx_broker::FsAccess::Read, label, .. } => {
                let mut flow = self.flow.lock();
                flow.read = flow.read.join(*label);
            }
            Touched::Path { access: bx_broker::FsAccess::Write, label, .. } => {
                let mut flow = self.flow.lock();
                if !flow.written.contains(label) {
                    flow.written.push(*label);
                }
            }
            Touched::Host { .. } => {}
        }
        if self.touched.len() < MAX_TOUCHED {
            self.touched.insert(what);
        } else if !self.touched.contains(&what) {
            self.touched_more += 1;
        }
    }
}

/// The flow inside one call, shared by its filesystem and its HTTP.
pub(crate) type Flow = std::sync::Arc<parking_lot::Mutex<InCall>>;

/// What one call has read so far (files, and the answers of what it fetched) and the
/// labels of where it has opened files for writing. A call's writes and fetches were
/// decided at [`Grant::flow`]; what it reads since may reach higher (a hard link, a
/// symlink out of a folder it named), and then:
/// - a write or a fetch is refused where what was read does not flow to its target;
/// - a read (or a fetch, which reads its answer) is refused where it would carry the
///   call past what flows to a file it has opened for writing: that descriptor takes
///   what the guest writes to it without another check.
#[derive(Debug, Default)]
pub(crate) struct InCall {
    /// The join of the labels of what the call has read.
    pub(crate) read: Label,
    /// The distinct labels of the files it has opened for writing (a handful).
    pub(crate) written: Vec<Label>,
}

impl InCall {
    /// Why `what` (a write, or a fetch's request) may not send what the call has read to
    /// where data labelled `target` goes; `None` when it may.
    pub(crate) fn refuse_send(&self, grant: &Grant, what: &str, target: Label) -> Option<String> {
        let now = grant.undecided_flow(self.read, target)?;
        Some(undecided(what, grant.flow(), now, target))
    }

    /// Why `what` (a read, or a fetch's answer) may not bring data labelled `label` into
    /// a call that has files open for writing; `None` when it may.
    pub(crate) fn refuse_take(&self, grant: &Grant, what: &str, label: Label) -> Option<String> {
        let read = self.read.join(label);
        self.written.iter().find_map(|target| {
            let now = grant.undecided_flow(read, *target)?;
            Some(undecided(&format!("{what} after a write was opened"), grant.flow(), now, *target))
        })
    }
}

/// Why `what` is refused: the call read data labelled `now`, past what it was decided at
/// (`decided`), and that does not flow to `target`.
fn undecided(what: &str, decided: Label, now: Label, target: Label) -> String {
    format!(
        "{what} after this call read data labelled {now} (its writes and fetches were decided at {decided}; {now} does not flow to {target}): the owner was not asked about that, so it is refused; name the files it reads, or read and write in separate calls (see docs/runbook.md#read-above-decided)"
    )
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl wasmtime::ResourceLimiter for CallState {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.memory_bytes {
            let detail =
                format!("grow from {current} to {desired} bytes, cap {}", self.limits.memory_bytes);
            self.memory_hit = Some(detail.clone());
            return Err(wasmtime::Error::new(LimitTrap(Limit::Memory, detail)));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a tool has no reason for a huge one.
        Ok(desired <= 100_000)
    }
}
