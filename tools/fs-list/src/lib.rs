//! `fs.list`: lists a directory, recursively down to a depth bound.

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error, json_output};

/// The deepest recursion a call may ask for.
const MAX_DEPTH: u32 = 16;
/// The most entries one call may return.
const MAX_ENTRIES: usize = 10_000;

struct List;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    #[serde(default = "one")]
    depth: u32,
    #[serde(default = "thousand")]
    max_entries: usize,
}

fn one() -> u32 {
    1
}

fn thousand() -> usize {
    1000
}

#[derive(serde::Serialize)]
struct Item {
    path: String,
    kind: &'static str,
    size: u64,
}

#[derive(serde::Serialize)]
struct Reply {
    entries: Vec<Item>,
    /// True when `max_entries` cut the listing short.
    truncated: bool,
}

fn kind_name(kind: fs::EntryKind) -> &'static str {
    match kind {
        fs::EntryKind::File => "file",
        fs::EntryKind::Directory => "dir",
        fs::EntryKind::Symlink => "symlink",
        fs::EntryKind::Other => "other",
    }
}

impl Tool for List {
    const NAME: &'static str = "fs.list";
    const SUMMARY: &'static str =
        "List a directory. depth > 1 recurses (symlinks are not followed).";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"path":{"type":"string","description":"absolute path of the directory"},"depth":{"type":"integer","minimum":1,"maximum":16},"max_entries":{"type":"integer","minimum":1,"maximum":10000}},"required":["path"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("path", ResourceKind::PathRead)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: Args = bx_tool_sdk::parse_args(args)?;
        if args.depth == 0 || args.depth > MAX_DEPTH {
            return Err(CallError::InvalidArgs(format!("depth must be 1..={MAX_DEPTH}")));
        }
        if args.max_entries == 0 || args.max_entries > MAX_ENTRIES {
            return Err(CallError::InvalidArgs(format!("max_entries must be 1..={MAX_ENTRIES}")));
        }
        let root = args.path.trim_end_matches('/').to_owned();
        let mut entries = Vec::new();
        let mut truncated = false;
        // Depth-first with an explicit stack, so output order is stable and sorted.
        let mut stack = vec![(root, 1u32)];
        while let Some((dir, depth)) = stack.pop() {
            let listed = fs::list_dir(&dir).map_err(|e| host_error(&dir, e))?;
            let mut subdirs = Vec::new();
            for entry in listed {
                if entries.len() == args.max_entries {
                    truncated = true;
                    break;
                }
                let path = format!("{dir}/{}", entry.name);
                if entry.kind == fs::EntryKind::Directory && depth < args.depth {
                    subdirs.push(path.clone());
                }
                entries.push(Item { path, kind: kind_name(entry.kind), size: entry.size });
            }
            if truncated {
                break;
            }
            stack.extend(subdirs.into_iter().rev().map(|d| (d, depth + 1)));
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        json_output(&Reply { entries, truncated })
    }
}

bx_tool_sdk::tool!(List);
