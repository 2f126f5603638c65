//! A loaded tool and one call of it: a fresh `Store` and instance per call, the limits
//! armed, the result classified.

use std::path::PathBuf;

use bx_broker::{CallRequest, Decision, FsAccess, Grant, Label, Policy};
use wasmtime::component::Component;
use wasmtime::{Store, Trap};

use crate::bindings::bx::tool::types::{CallError, Description, Output};
use crate::bindings::{Tool as Bindings, ToolPre};
use crate::engine::Runtime;
use crate::error::{Limit, RunError, chain};
use crate::state::{CallState, LimitTrap};

/// Something a call actually reached, reported so the broker can label the result.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Touched {
    /// A granted root, and how it was used.
    Path {
        /// The grant's root (not the file below it).
        root: PathBuf,
        /// Read or write.
        access: FsAccess,
    },
    /// A host that a request (or a redirect hop) was sent to.
    Host(String),
}

/// What one call produced.
#[derive(Debug)]
pub struct CallReport {
    /// The tool's own answer: its output, or its typed error.
    pub result: Result<Output, CallError>,
    /// What the tool wrote to stdout (bounded).
    pub stdout: Vec<u8>,
    /// What the tool wrote to stderr (bounded).
    pub stderr: Vec<u8>,
    /// Host calls made.
    pub host_calls: u64,
    /// What the call reached, in order.
    pub touched: Vec<Touched>,
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
    /// describe itself (under a grant that reaches nothing).
    pub fn load(&self, component: &Component, digest: &str) -> Result<LoadedTool, RunError> {
        let world = check_world(self, component)?;
        let instance_pre =
            self.linker.instantiate_pre(component).map_err(|e| RunError::WrongWorld(chain(&e)))?;
        let pre = ToolPre::new(instance_pre).map_err(|e| RunError::WrongWorld(chain(&e)))?;
        let grant = empty_grant(digest)?;
        let (mut store, instance) = self.instantiate(&pre, grant)?;
        let description =
            instance.call_describe(&mut store).map_err(|e| self.classify(e, &store))?;
        Ok(LoadedTool { digest: digest.to_owned(), pre, description, world })
    }

    /// Creates a fresh store and instance of `tool` under an empty grant and drops them:
    /// the raw cost every call pays, for benchmarks and warm-up.
    pub fn instantiate_only(&self, tool: &LoadedTool) -> Result<(), RunError> {
        let grant = empty_grant(&tool.digest)?;
        self.instantiate(&tool.pre, grant).map(drop)
    }

    fn instantiate(
        &self,
        pre: &ToolPre<CallState>,
        grant: Grant,
    ) -> Result<(Store<CallState>, Bindings), RunError> {
        let mut store = Store::new(&self.engine, CallState::new(grant, self.limits.clone()));
        store.limiter(|state| state as &mut dyn wasmtime::ResourceLimiter);
        // Without a deadline an epoch-interrupted store traps at once; with one, a guest
        // that never returns is stopped when the ticker passes it.
        store.set_epoch_deadline(self.deadline_ticks());
        store.epoch_deadline_trap();
        let instance = pre.instantiate(&mut store).map_err(|e| self.classify(e, &store))?;
        Ok((store, instance))
    }

    fn classify(&self, err: wasmtime::Error, store: &Store<CallState>) -> RunError {
        if let Some(LimitTrap(limit, detail)) = err.downcast_ref::<LimitTrap>() {
            return RunError::Limit { limit: *limit, detail: detail.clone() };
        }
        if let Some(detail) = &store.data().memory_hit {
            return RunError::Limit { limit: Limit::Memory, detail: detail.clone() };
        }
        if err.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            let detail = format!("ran past {:?}", self.limits.deadline);
            return RunError::Limit { limit: Limit::Deadline, detail };
        }
        if stdio_full(store) {
            return RunError::Limit { limit: Limit::Stdio, detail: self.stdio_detail() };
        }
        RunError::Trap(chain(&err))
    }

    fn stdio_detail(&self) -> String {
        format!("stdout or stderr reached {} bytes", self.limits.stdio_bytes)
    }

    /// Runs one call of `tool` with JSON `args` under `grant`, in a fresh instance.
    ///
    /// The grant must be for this tool's digest. A limit stops the call with
    /// [`RunError::Limit`]; the runtime is unaffected and the next call starts clean.
    pub fn call(
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
        let (mut store, instance) = self.instantiate(&tool.pre, grant)?;
        let result = instance.call_call(&mut store, args).map_err(|e| self.classify(e, &store))?;
        if stdio_full(&store) {
            return Err(RunError::Limit { limit: Limit::Stdio, detail: self.stdio_detail() });
        }
        if let Ok(Output::Json(text) | Output::Text(text)) = &result
            && text.len() > self.limits.output_bytes
        {
            let detail = format!("{} bytes, cap {}", text.len(), self.limits.output_bytes);
            return Err(RunError::Limit { limit: Limit::Output, detail });
        }
        let state = store.data();
        Ok(CallReport {
            result,
            stdout: state.stdout.contents().to_vec(),
            stderr: state.stderr.contents().to_vec(),
            host_calls: state.host_calls,
            touched: state.touched.iter().cloned().collect(),
        })
    }
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
