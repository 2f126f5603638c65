//! The tools' argument schemas, compiled once each: arguments that do not fit are refused
//! before they reach the daemon.

use std::collections::HashMap;
use std::sync::Arc;

use bx_protocol::ToolSummary;
use parking_lot::Mutex;
use rmcp::ErrorData;

/// Compiled schemas kept (one per installed tool); past it the cache starts afresh.
const MAX_COMPILED_SCHEMAS: usize = 256;

/// Each tool's argument schema, compiled, by its text.
#[derive(Default)]
pub(super) struct Schemas(Mutex<HashMap<String, Arc<jsonschema::Validator>>>);

/// Refuses arguments that do not fit the tool's schema, as a JSON-RPC error naming
/// where, before anything reaches the daemon (the tool would refuse them too, but as a
/// call on the log).
pub(super) fn fits(
    tool: &ToolSummary,
    arguments: &serde_json::Value,
    compiled: &Schemas,
) -> Result<(), ErrorData> {
    let cached = compiled.0.lock().get(&tool.parameters).cloned();
    let validator = match cached {
        Some(v) => v,
        None => {
            let schema: serde_json::Value = serde_json::from_str(&tool.parameters)
                .unwrap_or_else(|_| serde_json::json!({"type": "object"}));
            let v = Arc::new(jsonschema::validator_for(&schema).map_err(|e| {
                ErrorData::internal_error(
                    format!("bx: the schema of {} is not valid: {e}", tool.name),
                    None,
                )
            })?);
            let mut compiled = compiled.0.lock();
            if compiled.len() >= MAX_COMPILED_SCHEMAS {
                compiled.clear();
            }
            compiled.insert(tool.parameters.clone(), Arc::clone(&v));
            v
        }
    };
    validator.validate(arguments).map_err(|e| {
        let at = e.instance_path().to_string();
        let at = if at.is_empty() { "the arguments".to_owned() } else { at };
        ErrorData::invalid_params(
            format!(
                "arguments of {} do not fit its schema at {at}: {}",
                tool.name,
                bx_audit::bounded(&e.to_string(), 512)
            ),
            None,
        )
    })
}
