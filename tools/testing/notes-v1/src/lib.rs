//! `test.notes`, version 1: reads a notes file. It declares one resource argument, a
//! path it reads. Version 2 (`notes-v2`) adds a URL it fetches: a widening that
//! `bx tool install --replace` refuses without `--accept-widening`.

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error};

struct Notes;

impl Tool for Notes {
    const NAME: &'static str = "test.notes";
    const SUMMARY: &'static str = "Test-only: read a notes file.";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("path", ResourceKind::PathRead)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: serde_json::Value = bx_tool_sdk::parse_args(args)?;
        let path = args["path"].as_str().unwrap_or_default();
        let chunk = fs::read_text(path, 0, 64 << 10).map_err(|e| host_error(path, e))?;
        Ok(Output::Text(chunk.text))
    }
}

bx_tool_sdk::tool!(Notes);
