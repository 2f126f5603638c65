//! `fs.read`: reads a file, or a window of it (offset and limit), as text.
//!
//! The output is the text itself. When the window stops before the end of the file, a
//! last line says which bytes were shown and the offset to continue from.

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error};

/// The largest window one call reads; a model pages through bigger files.
const MAX_LIMIT: u64 = 4 << 20;
/// The window read when the call names none.
const DEFAULT_LIMIT: u64 = 256 << 10;

struct Read;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    #[serde(default)]
    offset: u64,
    limit: Option<u64>,
}

impl Tool for Read {
    const NAME: &'static str = "fs.read";
    const SUMMARY: &'static str =
        "Read a text file. Use offset and limit (bytes) to page through large files.";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"path":{"type":"string","description":"absolute path of the file"},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1,"maximum":4194304}},"required":["path"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("path", ResourceKind::PathRead)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: Args = bx_tool_sdk::parse_args(args)?;
        let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 || limit > MAX_LIMIT {
            return Err(CallError::InvalidArgs(format!("limit must be 1..={MAX_LIMIT}")));
        }
        // The host decodes the text natively; a character cut by the window's end is left
        // for the next window, so `end` is always a character boundary.
        let chunk =
            fs::read_text(&args.path, args.offset, limit).map_err(|e| host_error(&args.path, e))?;
        let end = args.offset.saturating_add(chunk.bytes);
        let mut text = chunk.text;
        if !chunk.eof {
            text.push_str(&format!(
                "\n[fs.read: showed bytes {}..{end}; the file goes on, pass offset={end} to continue]",
                args.offset
            ));
        }
        Ok(Output::Text(text))
    }
}

bx_tool_sdk::tool!(Read);
