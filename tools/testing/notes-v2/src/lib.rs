//! `test.notes`, version 2: reads a notes file and, when given `source`, fetches a URL
//! too. Against version 1 it declares a new resource argument of a new kind, which the
//! capability lock counts as widening.

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error};

struct Notes;

impl Tool for Notes {
    const NAME: &'static str = "test.notes";
    const SUMMARY: &'static str = "Test-only: read a notes file, and fetch a URL.";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"path":{"type":"string"},"source":{"type":"string"}},"required":["path"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] =
        &[("path", ResourceKind::PathRead), ("source", ResourceKind::UrlFetch)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: serde_json::Value = bx_tool_sdk::parse_args(args)?;
        let path = args["path"].as_str().unwrap_or_default();
        let chunk = fs::read_text(path, 0, 64 << 10).map_err(|e| host_error(path, e))?;
        Ok(Output::Text(chunk.text))
    }
}

bx_tool_sdk::tool!(Notes);
