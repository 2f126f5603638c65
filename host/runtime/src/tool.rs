//! A loaded tool and one call of it: a fresh `Store` and instance per call, the limits
//! armed, the whole call a future that its deadline drops, the result classified.

use std::future::Future;
use std::path::PathBuf;

use bx_broker::{CallRequest, Decision, FsAccess, Grant, Label, Policy};
use tokio::time::Instant;
use wasmtime::Store;
use wasmtime::component::Component;

use crate::bindings::ToolPre;
use crate::bindings::bx::tool::types::{CallError, Description, Output};
use crate::engine::Runtime;
use crate::error::{Limit, RunError, chain};
use crate::state::{CallState, LimitTrap};

/// Bytes of a tool's summary that `describe` may return. Without a bound a tool could put
/// megabytes into every prompt's tools array and every listing.
const MAX_SUMMARY_BYTES: usize = 4 << 10;
/// Bytes of a tool's argument schema.
const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// Resource arguments a tool may declare.
const MAX_RESOURCE_ARGS: usize = 16;

/// Something a call actually reached, with the label of what flowed in through it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Touched {
    /// A file or directory, as the host resolved it (through any symlink).
    Path {
        /// The path actually opened, normalised: the granted root joined with where the
        /// kernel says the opened object lies below it.
        path: PathBuf,
        /// Read or write.
        access: FsAccess,
        /// The label of the most specific grant covering `path`.
        label: Label,
    },
    /// A host that a request (or a redirect hop) was sent to.
    Host {
        /// The host name or address.
        host: String,
        /// The label of the grant that matched it.
        label: Label,
    },
}

/// Sorted by what was touched (paths before hosts), for a stable report. Labels are not
/// ordered as a lattice here; they only make the order total.
impl Ord for Touched {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        fn key(t: &Touched) -> (u8, &str, u8, bx_broker::Confidentiality, bx_broker::Integrity) {
            let l = t.label();
            match t {
                Touched::Path { path, access, .. } => (
                    0,
                    path.to_str().unwrap_or_default(),
                    u8::from(*access == FsAccess::Write),
                    l.confidentiality,
                    l.integrity,
                ),
                Touched::Host { host, .. } => (1, host, 0, l.confidentiality, l.integrity),
            }
        }
        key(self).cmp(&key(other)).then_with(|| match (self, other) {
            (Touched::Path { path: a, .. }, Touched::Path { path: b, .. }) => a.cmp(b),
            _ => std::cmp::Ordering::Equal,
        })
    }
}

impl PartialOrd for Touched {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Touched {
    /// The label of what flowed in through this.
    pub fn label(&self) -> Label {
        match self {
            Touched::Path { label, .. } | Touched::Host { label, .. } => *label,
        }
    }
}

impl std::fmt::Display for Touched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Touched::Path { path, access, label } => {
                write!(f, "{access} {} ({label})", path.display())
            }
            Touched::Host { host, label } => write!(f, "fetch {host} ({label})"),
        }
    }
}

/// What one call produced.
#[derive(Debug)]
pub struct CallReport {
    /// The tool's own answer: its output, or its typed error (cut at the error cap).
    pub result: Result<Output, CallError>,
    /// What the tool wrote to stdout (bounded).
    pub stdout: Vec<u8>,
    /// What the tool wrote to stderr (bounded).
    pub stderr: Vec<u8>,
    /// Host calls made.
    pub host_calls: u64,
    /// The label of the result: the join over everything the call read or fetched, each
    /// labelled by the most specific grant covering it.
    pub label: Label,
    /// What the call reached, sorted, at most 64 distinct things.
    pub touched: Vec<Touched>,
    /// How many more distinct things it reached than `touched` lists.
    pub touched_more: u64,
}

/// The imports and exports of a component, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldCheck {
    /// Imported interfaces.
    pub imports: Vec<String>,
    /// Exported functions and interfaces.
    pub exports: Vec<String>,
}

/// Import prefixes a tool may have. Everything else is refused at load: a tool reaches
/// the world through `bx:host` alone, and gets no sockets or HTTP of its own.
const ALLOWED_IMPORTS: &[&str] = &[
    "bx:host/",
    // Types only: the world uses them in its exports.
    "bx:tool/types",
    "wasi:io/",
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:random/",
    // std imports the filesystem interfaces; with no preopens they reach nothing.
    "wasi:filesystem/",
];

/// Lists a component's imports and exports, and refuses imports outside the tool world.
pub fn check_world(runtime: &Runtime, component: &Component) -> Result<WorldCheck, RunError> {
    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(&runtime.engine).map(|(n, _)| n.to_owned()).collect();
    let exports: Vec<String> = ty.exports(&runtime.engine).map(|(n, _)| n.to_owned()).collect();
    if let Some(bad) = imports.iter().find(|i| !ALLOWED_IMPORTS.iter().any(|p| i.starts_with(p))) {
        return Err(RunError::WrongWorld(format!("imports {bad}, which tools are not given")));
    }
    Ok(WorldCheck { imports, exports })
}

/// A component ready to run: pre-instantiated against the linker, with its description.
pub struct LoadedTool {
    digest: String,
    pre: ToolPre<CallState>,
    description: Description,
    world: WorldCheck,
}

impl std::fmt::Debug for LoadedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedTool")
            .field("digest", &self.digest)
            .field("name", &self.description.name)
            .finish_non_exhaustive()
    }
}

impl LoadedTool {
    /// The `sha256:` digest of the component.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What the tool says about itself.
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// Its imports and exports.
    pub fn world(&self) -> &WorldCheck {
        &self.world
    }
}

impl Runtime {
    /// Compiles a component from its bytes (no cache). Refuses core modules and garbage.
    pub fn compile(&self, wasm: &[u8]) -> Result<Component, RunError> {
        Component::new(&self.engine, wasm).map_err(|e| RunError::Invalid(chain(&e)))
    }

    /// Checks `component` against the `bx:tool` world, pre-instantiates it and asks it to
    /// describe itself (under a grant that reaches nothing, and the call deadline).
    pub async fn load(&self, component: &Component, digest: &str) -> Result<LoadedTool, RunError> {
        let world = check_world(self, component)?;
        let instance_pre =
            self.linker.instantiate_pre(component).map_err(|e| RunError::WrongWorld(chain(&e)))?;
        let pre = ToolPre::new(instance_pre).map_err(|e| RunError::WrongWorld(chain(&e)))?;
        let deadline = Instant::now() + self.limits.deadline;
        let mut store = self.store(empty_grant(digest)?, deadline);
        let run = async {
            let instance = pre.instantiate_async(&mut store).await?;
            instance.call_describe(&mut store).await
        };
        let description = match tokio::time::timeout_at(deadline, run).await {
            Ok(result) => result.map_err(|e| self.classify(e, &store))?,
            Err(_) => return Err(self.past_deadline()),
        };
        check_description(&description)?;
        Ok(LoadedTool { digest: digest.to_owned(), pre, description, world })
    }

    /// [`Runtime::load`] for callers outside an async runtime (see [`block_on`]).
    pub fn load_blocking(
        &self,
        component: &Component,
        digest: &str,
    ) -> Result<LoadedTool, RunError> {
        block_on(self.load(component, digest))?
    }

    /// Creates a fresh store and instance of `tool` under an empty grant and drops them:
    /// the raw cost every call pays, for benchmarks and warm-up.
    pub async fn instantiate_only(&self, tool: &LoadedTool) -> Result<(), RunError> {
        let deadline = Instant::now() + self.limits.deadline;
        let mut store = self.store(empty_grant(&tool.digest)?, deadline);
        tool.pre.instantiate_async(&mut store).await.map(drop).map_err(|e| self.classify(e, &store))
    }

    fn store(&self, grant: Grant, deadline: Instant) -> Store<CallState> {
        let mut store =
            Store::new(&self.engine, CallState::new(grant, self.limits.clone(), deadline));
        store.limiter(|state| state as &mut dyn wasmtime::ResourceLimiter);
        // The guest yields to the executor at every epoch tick, so the deadline (a timer
        // around the whole call) is checked while wasm runs, not only in host calls.
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        store
    }

    fn past_deadline(&self) -> RunError {
        let detail = format!("ran past {:?}", self.limits.deadline);
        RunError::Limit { limit: Limit::Deadline, detail }
    }

    fn classify(&self, err: wasmtime::Error, store: &Store<CallState>) -> RunError {
        if let Some(LimitTrap(limit, detail)) = err.downcast_ref::<LimitTrap>() {
            return RunError::Limit { limit: *limit, detail: detail.clone() };
        }
        if let Some(detail) = &store.data().memory_hit {
            return RunError::Limit { limit: Limit::Memory, detail: detail.clone() };
        }
        if stdio_full(store) {
            return RunError::Limit { limit: Limit::Stdio, detail: self.stdio_detail() };
        }
        RunError::Trap(bounded(chain(&err), self.limits.error_bytes))
    }

    fn stdio_detail(&self) -> String {
        format!("stdout or stderr reached {} bytes", self.limits.stdio_bytes)
    }

    /// Runs one call of `tool` with JSON `args` under `grant`, in a fresh instance.
    ///
    /// The grant must be for this tool's digest. The whole call, host calls included,
    /// ends by the deadline. A limit stops the call with [`RunError::Limit`]; the runtime
    /// is unaffected and the next call starts clean.
    pub async fn call(
        &self,
        tool: &LoadedTool,
        grant: Grant,
        args: &str,
    ) -> Result<CallReport, RunError> {
        if grant.digest() != tool.digest {
            return Err(RunError::GrantMismatch {
                granted: grant.digest().to_owned(),
                actual: tool.digest.clone(),
            });
        }
        let deadline = Instant::now() + self.limits.deadline;
        let mut store = self.store(grant, deadline);
        let run = async {
            let instance = tool.pre.instantiate_async(&mut store).await?;
            instance.call_call(&mut store, args).await
        };
        let result = match tokio::time::timeout_at(deadline, run).await {
            Ok(result) => result.map_err(|e| self.classify(e, &store))?,
            Err(_) => return Err(self.past_deadline()),
        };
        if stdio_full(&store) {
            return Err(RunError::Limit { limit: Limit::Stdio, detail: self.stdio_detail() });
        }
        let result = match result {
            Ok(Output::Json(text) | Output::Text(text))
                if text.len() > self.limits.output_bytes =>
            {
                let detail = format!("{} bytes, cap {}", text.len(), self.limits.output_bytes);
                return Err(RunError::Limit { limit: Limit::Output, detail });
            }
            Ok(output) => Ok(output),
            Err(e) => Err(bound_error(e, self.limits.error_bytes)),
        };
        let state = store.data();
        Ok(CallReport {
            result,
            stdout: state.stdout.contents().to_vec(),
            stderr: state.stderr.contents().to_vec(),
            host_calls: state.host_calls,
            label: state.label,
            touched: state.touched.iter().cloned().collect(),
            touched_more: state.touched_more,
        })
    }

    /// [`Runtime::call`] for callers outside an async runtime (see [`block_on`]).
    pub fn call_blocking(
        &self,
        tool: &LoadedTool,
        grant: Grant,
        args: &str,
    ) -> Result<CallReport, RunError> {
        block_on(self.call(tool, grant, args))?
    }
}

/// Runs `future` to its end on a thread of its own with a single-threaded tokio runtime,
/// for synchronous callers (one-shot commands, the tool store). It never nests inside a
/// caller's runtime, so it may be called from anywhere, though from async code it blocks
/// that worker for as long as the future runs (bounded by the call deadline).
pub fn block_on<F>(future: F) -> Result<F::Output, RunError>
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| RunError::Engine(format!("cannot start a call's runtime: {e}")))?;
                Ok(rt.block_on(future))
            })
            .join()
            .map_err(|_| RunError::Engine("a call's thread panicked".into()))?
    })
}

/// `text` cut to at most `max` bytes on a character boundary, with a note of how much
/// was cut.
pub(crate) fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..end], text.len() - end)
}

fn bound_error(e: CallError, max: usize) -> CallError {
    match e {
        CallError::InvalidArgs(m) => CallError::InvalidArgs(bounded(m, max)),
        CallError::Denied(m) => CallError::Denied(bounded(m, max)),
        CallError::Failed(m) => CallError::Failed(bounded(m, max)),
        CallError::OutputTooLarge(m) => CallError::OutputTooLarge(bounded(m, max)),
    }
}

/// Refuses a description too large to put in every prompt and listing.
fn check_description(d: &Description) -> Result<(), RunError> {
    let too_big = |what: &str, len: usize, max: usize| {
        Err(RunError::WrongWorld(format!("describe returned a {what} of {len} (at most {max})")))
    };
    if d.summary.len() > MAX_SUMMARY_BYTES {
        return too_big("summary", d.summary.len(), MAX_SUMMARY_BYTES);
    }
    if d.args_schema.len() > MAX_SCHEMA_BYTES {
        return too_big("schema", d.args_schema.len(), MAX_SCHEMA_BYTES);
    }
    if d.resources.len() > MAX_RESOURCE_ARGS || d.resources.iter().any(|r| r.arg.len() > 64) {
        return too_big("resource list", d.resources.len(), MAX_RESOURCE_ARGS);
    }
    Ok(())
}

/// A grant that reaches nothing, from the broker's decision on a call that declares no
/// resources under an empty policy: what `describe` and warm-up instances run under.
fn empty_grant(digest: &str) -> Result<Grant, RunError> {
    let nothing = CallRequest { tool: String::new(), digest: digest.to_owned(), resources: vec![] };
    match bx_broker::decide(&Policy::empty(), Label::CLEAN, &nothing) {
        Decision::Allow(grant) => Ok(grant),
        Decision::Ask(_) | Decision::Deny(_) => {
            Err(RunError::Engine("the broker refused a grant that reaches nothing".into()))
        }
    }
}

fn stdio_full(store: &Store<CallState>) -> bool {
    let cap = store.data().limits.stdio_bytes;
    store.data().stdout.contents().len() >= cap || store.data().stderr.contents().len() >= cap
}
