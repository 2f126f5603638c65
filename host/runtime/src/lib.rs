//! Runs bx tool components: one wasmtime engine, a cache of precompiled components, and a
//! fresh instance per call that reaches the world only through host functions checked
//! against the call's [`bx_broker::Grant`] at every operation.
//!
//! What a tool gets, and nothing else: the `bx:host` interfaces (checked per operation)
//! and the WASI that Rust's std needs (stdout and stderr captured into bounded buffers,
//! clocks, random). No preopened directories, no environment, no arguments, no sockets.
#![deny(missing_docs)]
// Loading a precompiled component is the one unsafe operation; see `cache.rs`.
#![deny(unsafe_code)]

#[allow(missing_docs, reason = "generated from wit/, whose comments are the docs")]
mod bindings;
mod cache;
mod engine;
mod error;
mod host_fs;
mod host_http;
mod limits;
mod mounts;
mod secrets;
mod state;
mod tool;
mod wasi_fs;
mod wasi_http;
mod wit_json;

pub use bindings::bx::tool::types::{CallError, Description, Output, ResourceArg, ResourceKind};
pub use cache::{CacheOutcome, ComponentCache, Native};

/// The name of a resource kind as the owner reads it (`path-read`, `path-write`,
/// `url-fetch`), the same as in the WIT.
pub fn resource_kind_name(kind: ResourceKind) -> &'static str {
    match kind {
        ResourceKind::PathRead => "path-read",
        ResourceKind::PathWrite => "path-write",
        ResourceKind::UrlFetch => "url-fetch",
    }
}
pub use engine::{Runtime, engine_key};
pub use wasmtime::component::Component;

/// The `///` docs a component carries for its exported functions, by `name` or
/// `interface#name` (most toolchains drop them: then empty).
pub fn function_docs(wasm: &[u8]) -> std::collections::BTreeMap<String, String> {
    wit_json::function_docs(wasm)
}

/// A component's imports and exports by name, read from its bytes without compiling it
/// (what `bx tool publish` writes into an artifact's config); an error says why the bytes
/// are not a component.
pub fn world_of(wasm: &[u8]) -> Result<WorldCheck, RunError> {
    let (imports, exports) = wit_json::world_of(wasm)?;
    Ok(WorldCheck { imports, exports })
}
/// The WIT-to-JSON conversion of a component's exported functions, for `bx-fuzz`: each
/// function's parameters made from a JSON arguments object as a call makes them, and the
/// values made back into JSON as a result is.
pub struct Conversions(Vec<wit_json::ExportedFn>);

impl Conversions {
    /// Every exported function of the component `wasm`, read with an engine of its own
    /// that runs nothing (no instance pool, so no address space is reserved: the fuzzer
    /// runs under a 2 GiB limit).
    pub fn of_component(wasm: &[u8]) -> Result<Conversions, RunError> {
        let engine = wasmtime::Engine::default();
        let component =
            Component::new(&engine, wasm).map_err(|e| RunError::Invalid(e.to_string()))?;
        wit_json::exported_functions(&engine, &component)
            .map(Conversions)
            .map_err(|e| RunError::WrongWorld(e.to_string()))
    }

    /// Converts `args` for every function that has a JSON form; the values that convert
    /// are rendered back (whole, and a `result`'s arm) as results are. Returns how many
    /// converted. Errors are expected; only a panic is a finding, and the text a call's
    /// results are written as differing from their JSON value is one.
    pub fn run(&self, args: &serde_json::Value) -> usize {
        let mut converted = 0;
        for f in self.0.iter().filter(|f| f.schema.is_ok()) {
            if let Ok(vals) = wit_json::args_to_vals(args, &f.params) {
                converted += 1;
                let _ = wit_json::vals_to_json(&vals);
                for v in &vals {
                    let one = std::slice::from_ref(v);
                    // A string is its own text; an option of one is not (see render).
                    let stringy = |v: &wasmtime::component::Val| {
                        !matches!(v, wasmtime::component::Val::Option(_))
                    };
                    let by_value = match (v, wit_json::split_result(v)) {
                        (
                            wasmtime::component::Val::Result(Ok(Some(p))),
                            Some(Ok(serde_json::Value::String(s))),
                        ) if stringy(p) => Ok(Output::Text(s)),
                        (_, Some(Ok(ok))) => Ok(Output::Json(ok.to_string())),
                        (_, Some(Err(serde_json::Value::String(m)))) => Err(CallError::Failed(m)),
                        (_, Some(Err(other))) => Err(CallError::Failed(other.to_string())),
                        (v, None) => match wit_json::vals_to_json(one) {
                            serde_json::Value::String(s) if stringy(v) => Ok(Output::Text(s)),
                            json => Ok(Output::Json(json.to_string())),
                        },
                    };
                    // The bindings' types have no `PartialEq`; their `Debug` shows all.
                    let by_text = format!("{:?}", wit_json::render(one.to_vec()));
                    assert_eq!(by_text, format!("{by_value:?}"), "results written as text");
                }
            }
        }
        converted
    }
}

pub use error::{Limit, RunError};
pub use limits::Limits;
pub use secrets::{Direction, Encoding, GuardError, Leak, Secrets};
pub use tool::{
    CallReport, FunctionInfo, FunctionSpec, LoadedTool, SecretActivity, Shape, Touched, WorldCheck,
    block_on, check_world, component_name,
};
pub use wit_json::{ArgError, TypeError};
