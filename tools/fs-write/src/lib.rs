//! `fs.write`: creates a file, overwrites one only when asked, or appends.

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error, json_output};

struct Write;

#[derive(serde::Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Mode {
    #[default]
    Create,
    Overwrite,
    Append,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
    #[serde(default)]
    mode: Mode,
}

#[derive(serde::Serialize)]
struct Reply {
    path: String,
    bytes: u64,
}

impl Tool for Write {
    const NAME: &'static str = "fs.write";
    const SUMMARY: &'static str = "Write a text file. mode: create (default, refuses an existing file), overwrite, or append.";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"path":{"type":"string","description":"absolute path of the file"},"content":{"type":"string"},"mode":{"enum":["create","overwrite","append"]}},"required":["path","content"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("path", ResourceKind::PathWrite)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: Args = bx_tool_sdk::parse_args(args)?;
        let mode = match args.mode {
            Mode::Create => fs::WriteMode::Create,
            Mode::Overwrite => fs::WriteMode::Overwrite,
            Mode::Append => fs::WriteMode::Append,
        };
        let bytes = fs::write(&args.path, args.content.as_bytes(), mode)
            .map_err(|e| host_error(&args.path, e))?;
        json_output(&Reply { path: args.path, bytes })
    }
}

bx_tool_sdk::tool!(Write);
