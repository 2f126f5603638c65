//! An upstream's guard (docs/gateway.md#guards): a standard WASI component exporting
//! `label-result` and `label-sink` (`wit/guard/guard.wit`), installed by digest with
//! `bx mcp add --guard`, run under a grant that reaches nothing. It labels each result
//! and each sink item by item, where a manifest gives one label per tool. A trap, a call
//! past its deadline, or an answer that is not a label counts as the most restrictive
//! label: the result at the top (`secret/untrusted`), the sink at the bottom
//! (`public/trusted`, which only a clean session flows to).

use bx_broker::{Label, parse_label};
use bx_runtime::{FunctionSpec, LoadedTool, Output, Runtime};
use sha2::Digest as _;

use crate::error::GuardLoadError;

/// A guard, loaded: its two functions, each a tool of the runtime's.
#[derive(Debug)]
pub struct Guard {
    result: LoadedTool,
    sink: LoadedTool,
}

/// An upstream's guard as its tools see it.
#[derive(Debug, Clone)]
pub enum GuardState {
    /// The upstream has none: its manifest labels its tools.
    None,
    /// Loaded.
    Loaded(std::sync::Arc<Guard>),
    /// Recorded but not loadable (its bytes are gone or changed, it is not a guard):
    /// every result and sink of the upstream is labelled the most restrictive.
    Broken(std::sync::Arc<GuardLoadError>),
}

impl Guard {
    /// The guard whose bytes are `wasm`, which must hash to `digest` (`sha256:…`).
    pub fn load(runtime: &Runtime, wasm: &[u8], digest: &str) -> Result<Guard, GuardLoadError> {
        let actual = format!("sha256:{}", hex::encode(sha2::Sha256::digest(wasm)));
        if actual != digest {
            return Err(GuardLoadError::Digest { actual, recorded: digest.to_owned() });
        }
        let component = runtime.compile(wasm)?;
        let function = |export: &str| {
            let spec = FunctionSpec {
                export: export.to_owned(),
                name: format!("guard.{export}"),
                summary: String::new(),
                resources: Vec::new(),
                statics: Vec::new(),
            };
            runtime.load_function(&component, digest, spec)
        };
        Ok(Guard { result: function("label-result")?, sink: function("label-sink")? })
    }

    /// The label of `output`, what `tool` returned for `args`.
    pub async fn label_result(
        &self,
        runtime: &Runtime,
        tool: &str,
        args: &str,
        output: &str,
    ) -> Label {
        let asked = serde_json::json!({"tool": tool, "args": args, "output": output});
        match answer(runtime, &self.result, &asked.to_string()).await {
            Some(serde_json::Value::String(label)) => parse_label(&label).unwrap_or(Label::TOP),
            _ => Label::TOP,
        }
    }

    /// The label of where a call of `tool` with `args` sends, or `None` when it sends
    /// nothing.
    pub async fn label_sink(&self, runtime: &Runtime, tool: &str, args: &str) -> Option<Label> {
        let asked = serde_json::json!({"tool": tool, "args": args});
        match answer(runtime, &self.sink, &asked.to_string()).await {
            Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(label)) => {
                Some(parse_label(&label).unwrap_or(Label::CLEAN))
            }
            _ => Some(Label::CLEAN),
        }
    }
}

/// What one function of the guard answered, as JSON; `None` when it failed.
async fn answer(runtime: &Runtime, function: &LoadedTool, args: &str) -> Option<serde_json::Value> {
    match runtime.call_sealed(function, args).await {
        Ok(report) => match report.result {
            // A string answer (`label-result`'s) is its own text, not JSON.
            Ok(Output::Text(text)) => Some(serde_json::Value::String(text)),
            Ok(Output::Json(text)) => serde_json::from_str(&text).ok(),
            Err(_) => None,
        },
        Err(_) => None,
    }
}

/// The guard of the upstream `up`, if it has one, read from where `gateway` keeps guards.
pub fn guard_of(
    runtime: &Runtime,
    gateway: &bx_gateway::Gateway,
    up: &bx_gateway::Upstream,
) -> GuardState {
    match &up.guard {
        Some(digest) => load_guard(runtime, &bx_gateway::guard_file(gateway.dir(), digest), digest),
        None => GuardState::None,
    }
}

/// The guard of an upstream recorded with digest `digest`, read from `path`.
fn load_guard(runtime: &Runtime, path: &std::path::Path, digest: &str) -> GuardState {
    let loaded = std::fs::read(path)
        .map_err(|source| GuardLoadError::Unreadable { path: path.display().to_string(), source })
        .and_then(|wasm| Guard::load(runtime, &wasm, digest));
    match loaded {
        Ok(guard) => GuardState::Loaded(std::sync::Arc::new(guard)),
        Err(why) => GuardState::Broken(std::sync::Arc::new(why)),
    }
}
