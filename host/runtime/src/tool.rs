//! A loaded tool and one call of it: a fresh `Store` and instance per call, the limits
//! armed, the whole call a future that its deadline drops, the result classified.

use std::future::Future;
use std::path::PathBuf;

use bx_broker::{CallRequest, Decision, FsAccess, Grant, Label, Policy};
use tokio::time::Instant;
use wasmtime::Store;
use wasmtime::component::Component;

use wasmtime::component::{InstancePre, Val};

use crate::bindings::ToolPre;
use crate::bindings::bx::tool::types::{CallError, Description, Output, ResourceArg, ResourceKind};
use crate::engine::Runtime;
use crate::error::{Limit, RunError, chain};
use crate::secrets::{Direction, Leak, Secrets};
use crate::state::{CallState, LimitTrap};
use crate::wit_json::{self, ArgError, ExportedFn, TypeError};

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
    /// What the host refused while the call ran, and why (at most 16; a standard WASI
    /// component hears only an error code, and may go on as if nothing happened).
    pub refused: Vec<String>,
}

/// What a call did with secrets: the names the host put into requests and the hosts
/// they went to, and what the leak guard found. Never a value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretActivity {
    /// `(secret, host)`, sorted, once each.
    pub used: Vec<(String, String)>,
    /// What the guard found, in order, once each (at most 32).
    pub leaks: Vec<Leak>,
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
    let world = world_names(runtime, component);
    let allowed = |i: &String| ALLOWED_IMPORTS.iter().any(|p| i.starts_with(p));
    if let Some(bad) = world.imports.iter().find(|i| !allowed(i)) {
        return Err(RunError::WrongWorld(format!("imports {bad}, which tools are not given")));
    }
    Ok(world)
}

/// The name a component carries for itself: the own-name subsection of its top-level
/// `component-name` section (what `wasm-tools metadata add --name` writes). Toolchains
/// that name nothing (componentize-py, jco, `cargo build` for wasm32-wasip2) leave it
/// out: `None`, as for bytes that are not a component. Read from the bytes as they are,
/// with every length checked: nothing nested is read.
pub fn component_name(wasm: &[u8]) -> Option<String> {
    /// A component's preamble: `\0asm`, version 0x0d, layer 1.
    const PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
    if wasm.get(..8)? != PREAMBLE {
        return None;
    }
    let mut at = 8;
    while at < wasm.len() {
        let id = wasm[at];
        at += 1;
        let section = take_sized(wasm, &mut at)?;
        if id != 0 {
            continue;
        }
        let mut within = 0;
        if take_sized(section, &mut within)? != b"component-name" {
            continue;
        }
        // The own-name subsection (id 0) comes first when there is one.
        if section.get(within) != Some(&0) {
            continue;
        }
        within += 1;
        let own = take_sized(section, &mut within)?;
        let name = take_sized(own, &mut 0)?;
        return std::str::from_utf8(name).ok().map(str::to_owned);
    }
    None
}

/// A LEB128 length at `*at` in `bytes` and that many bytes after it, moving `*at` past
/// them; `None` when either does not fit.
fn take_sized<'a>(bytes: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let mut len: u64 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        len |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            let end = at.checked_add(usize::try_from(len).ok()?)?;
            let out = bytes.get(*at..end)?;
            *at = end;
            return Some(out);
        }
    }
    None
}

/// A component ready to run: pre-instantiated against the linker, with its description.
pub struct LoadedTool {
    digest: String,
    kind: Kind,
    description: Description,
    world: WorldCheck,
    /// What every call reaches whatever its arguments (a standard component's manifest).
    statics: Vec<(ResourceKind, String)>,
}

/// How a tool's component is called.
enum Kind {
    /// bx's own world: `describe` and `call`.
    Bx(ToolPre<CallState>),
    /// One exported function of a standard WASI component, called with typed values
    /// converted from and to JSON.
    Function { pre: InstancePre<CallState>, function: Box<ExportedFn> },
}

/// What a component is, as bx runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A component of bx's own `bx:tool` world: one tool, that describes itself.
    BxTool,
    /// A standard WASI component: each exported function is a tool.
    Functions(Vec<FunctionInfo>),
}

/// One exported function of a standard WASI component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Its name as a manifest names it: `get-forecast` at the top of the world, or
    /// `interface#name` in an exported interface.
    pub export: String,
    /// Its name as a tool name part: `get-forecast`, or `extra.describe-number` for a
    /// function of interface `extra`.
    pub tool_suffix: String,
    /// The JSON Schema of its arguments object, or why bx cannot call it (a resource
    /// type, say).
    pub schema: Result<String, TypeError>,
    /// Its parameters whose type is a string or a list of strings (either optional):
    /// the ones a manifest may name as paths or URLs (each string of a list is one).
    pub string_params: Vec<String>,
    /// All its parameters.
    pub params: Vec<String>,
}

/// What the store knows of a standard component's function when it loads it as a tool.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// [`FunctionInfo::export`].
    pub export: String,
    /// The installed tool name.
    pub name: String,
    /// Its summary (the component's doc comment, or the store's line).
    pub summary: String,
    /// Parameters that name resources, per call.
    pub resources: Vec<ResourceArg>,
    /// What every call reaches whatever its arguments: paths read or written, and
    /// `https://host/` URLs.
    pub statics: Vec<(ResourceKind, String)>,
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

    /// What every call reaches whatever its arguments (from a standard component's
    /// manifest; empty for a `bx:tool` component, which names its resources itself).
    pub fn statics(&self) -> &[(ResourceKind, String)] {
        &self.statics
    }

    /// For a function of a standard WASI component: its name as the WIT gives it
    /// (`get-forecast`, or `interface#name`).
    pub fn export(&self) -> Option<String> {
        match &self.kind {
            Kind::Bx(_) => None,
            Kind::Function { function, .. } => Some(function.qualified_name()),
        }
    }

    /// Checks a call's arguments against the function's types, before the broker sees
    /// the call: the same conversion the call makes, so what passes here is what runs.
    /// A `bx:tool` component checks its own arguments.
    pub fn check_args(&self, args: &serde_json::Value) -> Result<(), ArgError> {
        match &self.kind {
            Kind::Bx(_) => Ok(()),
            Kind::Function { function, .. } => {
                wit_json::args_to_vals(args, &function.params).map(drop)
            }
        }
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
        let mut store = self.store(empty_grant(digest)?, deadline, Secrets::none());
        let run = async {
            let instance = pre.instantiate_async(&mut store).await?;
            instance.call_describe(&mut store).await
        };
        let description = match tokio::time::timeout_at(deadline, run).await {
            Ok(result) => result.map_err(|e| self.classify(e, &store))?,
            Err(_) => return Err(self.past_deadline()),
        };
        check_description(&description)?;
        let kind = Kind::Bx(pre);
        Ok(LoadedTool { digest: digest.to_owned(), kind, description, world, statics: Vec::new() })
    }

    /// What `component` is: a `bx:tool` component (it exports `describe` and `call`), or
    /// a standard WASI component with its exported functions. A standard component must
    /// import nothing but WASI, and only WASI that bx provides; it is refused naming the
    /// first import that is not.
    pub fn shape(&self, component: &Component) -> Result<Shape, RunError> {
        let ty = component.component_type();
        let exports: Vec<&str> = ty.exports(&self.engine).map(|(n, _)| n).collect();
        if exports.contains(&"describe") && exports.contains(&"call") {
            return Ok(Shape::BxTool);
        }
        self.check_wasi_imports(component)?;
        let functions = wit_json::exported_functions(&self.engine, component)
            .map_err(|e| RunError::WrongWorld(e.to_string()))?;
        if functions.is_empty() {
            return Err(RunError::WrongWorld(
                "exports no function (a tool component exports `describe` and `call`, or plain functions)".into(),
            ));
        }
        // An instance exported under a plain name rather than a package's interface is a
        // toolchain's own (componentize-py leaves `exports`, with the `init` it calls at
        // build time): not a tool.
        let tools =
            functions.iter().filter(|f| f.interface.as_deref().is_none_or(|i| i.contains(':')));
        Ok(Shape::Functions(tools.map(function_info).collect()))
    }

    /// The name a standard component's tools start with when the owner gives none: the
    /// package of the first interface it exports (`bx-test:files/extra@0.1.0` gives
    /// `files`). A component that exports only functions at the top of its world does
    /// not carry its package's name (toolchains write the world as `root:component`):
    /// `None`, and the owner names it.
    pub fn package_name(&self, component: &Component) -> Option<String> {
        let ty = component.component_type();
        let name = ty.exports(&self.engine).map(|(n, _)| n).find(|n| n.contains(':'))?;
        let package = name.split('/').next()?.split(':').nth(1)?;
        let package = package.split('@').next()?;
        (!package.is_empty()).then(|| package.to_owned())
    }

    /// Refuses a standard component that imports anything but WASI, or WASI that the
    /// linker does not hold (an interface or version bx does not provide); pre-instantiates
    /// the rest against it.
    fn check_wasi_imports(
        &self,
        component: &Component,
    ) -> Result<InstancePre<CallState>, RunError> {
        let ty = component.component_type();
        for (name, _) in ty.imports(&self.engine) {
            if !name.starts_with("wasi:") {
                return Err(RunError::WrongWorld(format!(
                    "imports {name}, which bx does not provide (a standard component may import WASI 0.2 only)"
                )));
            }
        }
        self.linker.instantiate_pre(component).map_err(|e| {
            RunError::WrongWorld(format!("imports what bx does not provide: {}", chain(&e)))
        })
    }

    /// Loads function `spec.export` of a standard WASI component as the tool
    /// `spec.name`: its schema derived from its WIT types, its resources from the
    /// manifest the store recorded.
    pub fn load_function(
        &self,
        component: &Component,
        digest: &str,
        spec: FunctionSpec,
    ) -> Result<LoadedTool, RunError> {
        let pre = self.check_wasi_imports(component)?;
        let world = world_names(self, component);
        let functions = wit_json::exported_functions(&self.engine, component)
            .map_err(|e| RunError::WrongWorld(e.to_string()))?;
        let Some(function) = functions.into_iter().find(|f| f.qualified_name() == spec.export)
        else {
            return Err(RunError::WrongWorld(format!("exports no function {}", spec.export)));
        };
        let schema = match &function.schema {
            Ok(schema) => schema.args.clone(),
            Err(e) => return Err(RunError::WrongWorld(format!("{}: {e}", spec.export))),
        };
        let description = Description {
            name: spec.name,
            summary: spec.summary,
            args_schema: schema.to_string(),
            resources: spec.resources,
        };
        check_description(&description)?;
        Ok(LoadedTool {
            digest: digest.to_owned(),
            kind: Kind::Function { pre, function: Box::new(function) },
            description,
            world,
            statics: spec.statics,
        })
    }

    /// [`Runtime::load`] for callers outside an async runtime (see [`block_on`]).
    pub fn load_blocking(
        &self,
        component: &Component,
        digest: &str,
    ) -> Result<LoadedTool, RunError> {
        block_on(self.load(component, digest))?
    }

    /// Runs one call of `tool` with JSON `args` under a grant that reaches nothing (no
    /// file, no host): code that only computes on what it is given, such as an upstream's
    /// guard (docs/gateway.md#guards). The same limits and deadline as any call.
    pub async fn call_sealed(&self, tool: &LoadedTool, args: &str) -> Result<CallReport, RunError> {
        self.call(tool, empty_grant(&tool.digest)?, args).await
    }

    /// Creates a fresh store and instance of `tool` under an empty grant and drops them:
    /// the raw cost every call pays, for benchmarks and warm-up.
    pub async fn instantiate_only(&self, tool: &LoadedTool) -> Result<(), RunError> {
        let deadline = Instant::now() + self.limits.deadline;
        let mut store = self.store(empty_grant(&tool.digest)?, deadline, Secrets::none());
        let made = match &tool.kind {
            Kind::Bx(pre) => pre.instantiate_async(&mut store).await.map(drop),
            Kind::Function { pre, .. } => pre.instantiate_async(&mut store).await.map(drop),
        };
        made.map_err(|e| self.classify(e, &store))
    }

    fn store(&self, grant: Grant, deadline: Instant, secrets: Secrets) -> Store<CallState> {
        let state = CallState::new(grant, self.limits.clone(), deadline, secrets);
        let mut store = Store::new(&self.engine, state);
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

    /// Runs one call of `tool` with JSON `args` under `grant`, in a fresh instance, with
    /// no secrets: [`Runtime::call_with`] with [`Secrets::none`].
    pub async fn call(
        &self,
        tool: &LoadedTool,
        grant: Grant,
        args: &str,
    ) -> Result<CallReport, RunError> {
        self.call_with(tool, grant, args, &Secrets::none()).await.0
    }

    /// Runs one call of `tool` with JSON `args` under `grant`, in a fresh instance.
    ///
    /// The grant must be for this tool's digest. The whole call, host calls included,
    /// ends by the deadline. A limit stops the call with [`RunError::Limit`]; the runtime
    /// is unaffected and the next call starts clean.
    ///
    /// `secrets` holds the store's values: the host puts those the grant binds into the
    /// call's requests, and the leak guard looks for every value in what goes out and
    /// comes back, and in the output, stdout, stderr and error text, which come back
    /// redacted. What it did with secrets comes back whether or not the call finished.
    pub async fn call_with(
        &self,
        tool: &LoadedTool,
        grant: Grant,
        args: &str,
        secrets: &Secrets,
    ) -> (Result<CallReport, RunError>, SecretActivity) {
        if grant.digest() != tool.digest {
            let mismatch = RunError::GrantMismatch {
                granted: grant.digest().to_owned(),
                actual: tool.digest.clone(),
            };
            return (Err(mismatch), SecretActivity::default());
        }
        let deadline = Instant::now() + self.limits.deadline;
        let mut store = self.store(grant, deadline, secrets.clone());
        let result = self.run_call(tool, &mut store, args, deadline).await;
        let state = store.data_mut();
        let result = match result {
            Ok(report) => Ok(redact_report(report, state)),
            Err(e) => Err(redact_stop(e, state)),
        };
        let activity = SecretActivity {
            used: std::mem::take(&mut state.secrets_used).into_iter().collect(),
            leaks: std::mem::take(&mut state.leaks),
        };
        (result, activity)
    }

    async fn run_call(
        &self,
        tool: &LoadedTool,
        store: &mut Store<CallState>,
        args: &str,
        deadline: Instant,
    ) -> Result<CallReport, RunError> {
        let result = match &tool.kind {
            Kind::Bx(pre) => {
                let run = async {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.call_call(&mut *store, args).await
                };
                match tokio::time::timeout_at(deadline, run).await {
                    Ok(result) => result.map_err(|e| self.classify(e, store))?,
                    Err(_) => return Err(self.past_deadline()),
                }
            }
            Kind::Function { pre, function } => {
                store.data_mut().fs.preopens = true;
                match self.call_function(pre, function, store, args, deadline).await? {
                    Ok(output) => Ok(output),
                    Err(e) => Err(with_refusals(e, &store.data().fs)),
                }
            }
        };
        if stdio_full(store) {
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
            refused: match &tool.kind {
                Kind::Bx(_) => Vec::new(),
                Kind::Function { .. } => state.fs.refusals_noted(),
            },
        })
    }

    /// Calls one exported function of a standard component in a fresh instance: the
    /// JSON arguments converted to its parameter types (refused as invalid arguments
    /// when they do not fit), its results rendered as JSON; the `err` of a `result` is
    /// the call's failure.
    async fn call_function(
        &self,
        pre: &InstancePre<CallState>,
        function: &ExportedFn,
        store: &mut Store<CallState>,
        args: &str,
        deadline: Instant,
    ) -> Result<Result<Output, CallError>, RunError> {
        let args: serde_json::Value = match serde_json::from_str(args) {
            Ok(v) => v,
            Err(e) => return Ok(Err(CallError::InvalidArgs(format!("not JSON: {e}")))),
        };
        let params = match wit_json::args_to_vals(&args, &function.params) {
            Ok(p) => p,
            Err(e) => return Ok(Err(CallError::InvalidArgs(e.to_string()))),
        };
        let run = async {
            let instance = pre.instantiate_async(&mut *store).await?;
            let Some(func) = wit_json::lookup(&instance, &mut *store, function) else {
                wasmtime::bail!("the component no longer exports {}", function.qualified_name());
            };
            let mut results = vec![Val::Bool(false); function.results.len()];
            func.call_async(&mut *store, &params, &mut results).await?;
            Ok(results)
        };
        let ran = tokio::time::timeout_at(deadline, run).await;
        if let Some(fetcher) = store.data().http.as_ref().map(|h| h.fetcher().clone()) {
            store.data_mut().gather_http(&fetcher);
        }
        let results = match ran {
            Ok(Ok(results)) => results,
            Ok(Err(e)) => return Err(self.classify(e, store)),
            Err(_) => return Err(self.past_deadline()),
        };
        Ok(wit_json::render(results))
    }

    /// [`Runtime::call_with`] for callers outside an async runtime (see [`block_on`]).
    pub fn call_with_blocking(
        &self,
        tool: &LoadedTool,
        grant: Grant,
        args: &str,
        secrets: &Secrets,
    ) -> Result<(Result<CallReport, RunError>, SecretActivity), RunError> {
        block_on(self.call_with(tool, grant, args, secrets))
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

/// A finished call's report with every secret value redacted from its output, error,
/// stdout and stderr, each find noted as a leak in the call's output.
fn redact_report(mut report: CallReport, state: &mut CallState) -> CallReport {
    if state.secrets.is_empty() {
        return report;
    }
    let mut found = Vec::new();
    let mut text = |t: String| {
        let (clean, hits) = state.secrets.redact_text(&t);
        found.extend(hits);
        clean
    };
    report.result = match report.result {
        Ok(Output::Json(t)) => {
            let clean = text(t);
            // A match inside a JSON escape could break the text; then it is text.
            if serde_json::from_str::<serde_json::Value>(&clean).is_ok() {
                Ok(Output::Json(clean))
            } else {
                Ok(Output::Text(clean))
            }
        }
        Ok(Output::Text(t)) => Ok(Output::Text(text(t))),
        Err(CallError::InvalidArgs(m)) => Err(CallError::InvalidArgs(text(m))),
        Err(CallError::Denied(m)) => Err(CallError::Denied(text(m))),
        Err(CallError::Failed(m)) => Err(CallError::Failed(text(m))),
        Err(CallError::OutputTooLarge(m)) => Err(CallError::OutputTooLarge(text(m))),
    };
    report.refused = report.refused.into_iter().map(&mut text).collect();
    for stream in [&mut report.stdout, &mut report.stderr] {
        let (clean, hits) = state.secrets.redact(stream);
        *stream = clean;
        found.extend(hits);
    }
    for (name, encoding) in found {
        state.leaked(Leak { name, direction: Direction::Output, host: String::new(), encoding });
    }
    report
}

/// A stopped call's error with every secret value redacted (a trap's text carries the
/// guest's panic message).
fn redact_stop(e: RunError, state: &mut CallState) -> RunError {
    let RunError::Trap(text) = e else { return e };
    let (clean, hits) = state.secrets.redact_text(&text);
    for (name, encoding) in hits {
        state.leaked(Leak { name, direction: Direction::Output, host: String::new(), encoding });
    }
    RunError::Trap(clean)
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

/// A standard component's failure, with the host's reasons for what it refused: the
/// guest saw only an error code, the owner and the log see why.
fn with_refusals(e: CallError, fs: &crate::wasi_fs::WasiFs) -> CallError {
    if fs.refusals.is_empty() {
        return e;
    }
    let mut reasons = fs.refusals.join("; ");
    if fs.refusals_more > 0 {
        reasons.push_str(&format!("; and {} more", fs.refusals_more));
    }
    let message = match e {
        CallError::InvalidArgs(m)
        | CallError::Denied(m)
        | CallError::Failed(m)
        | CallError::OutputTooLarge(m) => m,
    };
    CallError::Denied(format!("{message} (the host refused: {reasons})"))
}

/// What install and inspection show of an exported function.
fn function_info(f: &ExportedFn) -> FunctionInfo {
    let tool_suffix = match &f.interface {
        // `bx-test:files/extra@0.1.0` → `extra.`
        Some(interface) => {
            let short = interface.rsplit('/').next().unwrap_or(interface);
            let short = short.split('@').next().unwrap_or(short);
            format!("{short}.{}", f.name)
        }
        None => f.name.clone(),
    };
    let schema = match &f.schema {
        Ok(schema) => Ok(schema.args.to_string()),
        Err(why) => Err(why.clone()),
    };
    use wasmtime::component::Type;
    let strings = |ty: &Type| match ty {
        Type::String => true,
        Type::List(l) => matches!(l.ty(), Type::String),
        _ => false,
    };
    let is_string = |ty: &Type| match ty {
        Type::Option(o) => strings(&o.ty()),
        other => strings(other),
    };
    FunctionInfo {
        export: f.qualified_name(),
        tool_suffix,
        schema,
        string_params: f
            .params
            .iter()
            .filter(|(_, t)| is_string(t))
            .map(|(n, _)| n.clone())
            .collect(),
        params: f.params.iter().map(|(n, _)| n.clone()).collect(),
    }
}

/// The imports and exports of a component by name, unchecked.
fn world_names(runtime: &Runtime, component: &Component) -> WorldCheck {
    let ty = component.component_type();
    WorldCheck {
        imports: ty.imports(&runtime.engine).map(|(n, _)| n.to_owned()).collect(),
        exports: ty.exports(&runtime.engine).map(|(n, _)| n.to_owned()).collect(),
    }
}

fn stdio_full(store: &Store<CallState>) -> bool {
    let cap = store.data().limits.stdio_bytes;
    store.data().stdout.contents().len() >= cap || store.data().stderr.contents().len() >= cap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> wasm_encoder::ComponentNameSection {
        let mut names = wasm_encoder::ComponentNameSection::new();
        names.component(name);
        names
    }

    /// The name a component carries is its top-level own-name subsection: not a nested
    /// component's, not a core module's, and nothing from bytes cut short.
    #[test]
    fn reads_the_name_a_component_carries_and_nothing_else() {
        let mut one = wasm_encoder::Component::new();
        one.section(&named("weather"));
        let one = one.finish();
        assert_eq!(component_name(&one), Some("weather".to_owned()));
        assert_eq!(component_name(&wasm_encoder::Component::new().finish()), None);
        let mut outer = wasm_encoder::Component::new();
        let mut inner = wasm_encoder::Component::new();
        inner.section(&named("inner"));
        outer.section(&wasm_encoder::NestedComponentSection(&inner));
        assert_eq!(component_name(&outer.finish()), None);
        assert_eq!(component_name(&wasm_encoder::Module::new().finish()), None);
        for cut in 8..one.len() {
            assert_eq!(component_name(&one[..cut]), None, "cut at {cut}");
        }
    }
}
