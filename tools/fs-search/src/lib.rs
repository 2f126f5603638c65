//! `fs.search`: a regex over the files under a directory, like `grep -rn`, bounded. A
//! pattern with no upper-case letter matches either case, as ripgrep's `--smart-case`:
//! asked to search notes "for what was decided", a small model searched `decided` and
//! missed `Decided: ship v2 on Friday.`

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, fs, host_error};

/// Files larger than this are skipped rather than read.
const MAX_FILE_BYTES: u64 = 4 << 20;
/// The most matches one call may ask for.
const MAX_RESULTS: usize = 1000;
/// How deep the walk goes below the starting directory.
const MAX_DEPTH: usize = 32;
/// A matched line longer than this is cut in the output.
const MAX_LINE_CHARS: usize = 400;

struct Search;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    pattern: String,
    #[serde(default = "hundred")]
    max_results: usize,
}

fn hundred() -> usize {
    100
}

struct Walk {
    regex: regex::Regex,
    max: usize,
    lines: Vec<String>,
    skipped: usize,
}

impl Walk {
    fn full(&self) -> bool {
        self.lines.len() >= self.max
    }

    fn file(&mut self, path: &str, size: u64) -> Result<(), CallError> {
        if size > MAX_FILE_BYTES {
            self.skipped += 1;
            return Ok(());
        }
        let data = fs::read(path, 0, size.max(1)).map_err(|e| host_error(path, e))?;
        let Ok(text) = std::str::from_utf8(&data) else {
            self.skipped += 1; // binary or not UTF-8: grep would say "binary file matches"
            return Ok(());
        };
        for (n, line) in text.lines().enumerate() {
            if self.full() {
                break;
            }
            if self.regex.is_match(line) {
                let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
                self.lines.push(format!("{path}:{}:{shown}", n + 1));
            }
        }
        Ok(())
    }

    fn dir(&mut self, path: &str, depth: usize) -> Result<(), CallError> {
        for entry in fs::list_dir(path).map_err(|e| host_error(path, e))? {
            if self.full() {
                break;
            }
            let child = format!("{path}/{}", entry.name);
            match entry.kind {
                fs::EntryKind::File => self.file(&child, entry.size)?,
                fs::EntryKind::Directory if depth < MAX_DEPTH => self.dir(&child, depth + 1)?,
                _ => {}
            }
        }
        Ok(())
    }
}

impl Tool for Search {
    const NAME: &'static str = "fs.search";
    const SUMMARY: &'static str = "Search files under a directory (or one file) for a regular expression (all lower case matches either case); prints path:line:text like grep -rn.";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"path":{"type":"string","description":"absolute path of a directory or file"},"pattern":{"type":"string","description":"regular expression (Rust regex syntax); all lower case matches either case"},"max_results":{"type":"integer","minimum":1,"maximum":1000}},"required":["path","pattern"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("path", ResourceKind::PathRead)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: Args = bx_tool_sdk::parse_args(args)?;
        if args.max_results == 0 || args.max_results > MAX_RESULTS {
            return Err(CallError::InvalidArgs(format!("max_results must be 1..={MAX_RESULTS}")));
        }
        let regex = regex::RegexBuilder::new(&args.pattern)
            .case_insensitive(!has_upper_case(&args.pattern))
            .size_limit(1 << 20)
            .build()
            .map_err(|e| CallError::InvalidArgs(format!("pattern: {e}")))?;
        let mut walk = Walk { regex, max: args.max_results, lines: Vec::new(), skipped: 0 };
        let root = args.path.trim_end_matches('/');
        let root = if root.is_empty() { "/" } else { root };
        let stat = fs::stat(root).map_err(|e| host_error(root, e))?;
        match stat.kind {
            fs::EntryKind::Directory => walk.dir(root, 0)?,
            fs::EntryKind::File => walk.file(root, stat.size)?,
            _ => return Err(CallError::Failed(format!("{root} is not a file or directory"))),
        }
        let mut out = walk.lines.join("\n");
        if walk.full() {
            out.push_str(&format!("\n[stopped at {} matches]", walk.max));
        }
        if walk.skipped > 0 {
            out.push_str(&format!("\n[{} binary or oversized files skipped]", walk.skipped));
        }
        Ok(Output::Text(out.trim_start_matches('\n').to_owned()))
    }
}

/// Whether `pattern` has an upper-case letter of its own: one not escaped, so `\S` and
/// `\W` (classes) do not count, and `\p{Lu}` does (its braces are taken as written, which
/// errs towards matching case, as written). A letter written as a code (`\x41`) is not
/// seen: ripgrep, which reads the parsed pattern, would match its case.
fn has_upper_case(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c.is_uppercase() {
            return true;
        }
    }
    false
}

bx_tool_sdk::tool!(Search);
