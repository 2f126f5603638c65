//! `fs.edit`: replaces exactly one occurrence of a string in a file.

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error, json_output};

/// The largest file this tool edits.
const MAX_FILE_BYTES: u64 = 4 << 20;

struct Edit;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    old: String,
    new: String,
}

#[derive(serde::Serialize)]
struct Reply {
    path: String,
    /// 1-based line on which the replaced text started.
    line: usize,
    bytes: u64,
}

impl Tool for Edit {
    const NAME: &'static str = "fs.edit";
    const SUMMARY: &'static str = "Replace one exact occurrence of `old` with `new` in a text file; refuses when `old` is absent or occurs more than once.";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"path":{"type":"string","description":"absolute path of the file"},"old":{"type":"string","minLength":1},"new":{"type":"string"}},"required":["path","old","new"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("path", ResourceKind::PathWrite)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: Args = bx_tool_sdk::parse_args(args)?;
        if args.old.is_empty() {
            return Err(CallError::InvalidArgs("old must not be empty".into()));
        }
        let stat = fs::stat(&args.path).map_err(|e| host_error(&args.path, e))?;
        if stat.kind != fs::EntryKind::File {
            return Err(CallError::Failed(format!("{} is not a regular file", args.path)));
        }
        if stat.size > MAX_FILE_BYTES {
            return Err(CallError::Failed(format!("{} is over {MAX_FILE_BYTES} bytes", args.path)));
        }
        let data =
            fs::read(&args.path, 0, stat.size.max(1)).map_err(|e| host_error(&args.path, e))?;
        let text = String::from_utf8(data)
            .map_err(|_| CallError::Failed(format!("{} is not UTF-8 text", args.path)))?;
        let mut found = text.match_indices(&args.old);
        let Some((at, _)) = found.next() else {
            return Err(CallError::Failed("old text not found in the file".into()));
        };
        let more = found.count();
        if more > 0 {
            return Err(CallError::Failed(format!(
                "old text is ambiguous: {} occurrences; include more context",
                more + 1
            )));
        }
        let line = text[..at].matches('\n').count() + 1;
        let edited = format!("{}{}{}", &text[..at], args.new, &text[at + args.old.len()..]);
        let bytes = fs::write(&args.path, edited.as_bytes(), fs::WriteMode::Overwrite)
            .map_err(|e| host_error(&args.path, e))?;
        json_output(&Reply { path: args.path, line, bytes })
    }
}

bx_tool_sdk::tool!(Edit);
