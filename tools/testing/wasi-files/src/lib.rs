//! `wasi-files`: a standard WASI 0.2 component for the host's tests, exporting plain typed
//! functions that reach files through `std::fs` (wasi:filesystem) and the network through
//! wasi:http, with no bx-specific imports.
#![deny(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

#[allow(unsafe_code, clippy::too_many_arguments, reason = "generated bindings and exports")]
mod bindings {
    wit_bindgen::generate!({ world: "files", path: "wit" });
    use super::Files;
    export!(Files with_types_in self);
}

use bindings::exports::bx_test::files::extra;
use bindings::{CaseMode, MatchLine, SearchOptions};

struct Files;

impl bindings::Guest for Files {
    fn list_directory(path: String) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&path).map_err(|e| format!("{path}: {e}"))? {
            let entry = entry.map_err(|e| format!("{path}: {e}"))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn read_file(path: String) -> Result<String, String> {
        std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))
    }

    fn search_file(
        path: String,
        needle: String,
        options: Option<SearchOptions>,
    ) -> Result<Vec<MatchLine>, String> {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let (case, max) = match options {
            Some(o) => (o.case, o.max_matches),
            None => (CaseMode::Sensitive, None),
        };
        let needle = match case {
            CaseMode::Sensitive => needle,
            CaseMode::Insensitive => needle.to_lowercase(),
        };
        let mut found = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if max.is_some_and(|m| found.len() >= m as usize) {
                break;
            }
            let hit = match case {
                CaseMode::Sensitive => line.contains(&needle),
                CaseMode::Insensitive => line.to_lowercase().contains(&needle),
            };
            if hit {
                let line_no = u32::try_from(i + 1).map_err(|_| "too many lines".to_string())?;
                found.push(MatchLine { line: line_no, text: line.to_string() });
            }
        }
        Ok(found)
    }

    fn write_file(path: String, content: String) -> Result<u64, String> {
        std::fs::write(&path, content.as_bytes()).map_err(|e| format!("{path}: {e}"))?;
        Ok(content.len() as u64)
    }

    fn fetch(url: String) -> Result<String, String> {
        bx_tool_test_wasi_get::get(&url)
    }
}

impl extra::Guest for Files {
    fn describe_number(n: i32, tag: Option<String>) -> (String, bool) {
        let sign = match n {
            0 => "zero",
            n if n < 0 => "negative",
            _ => "positive",
        };
        let even = n % 2 == 0;
        let parity = if even { "even" } else { "odd" };
        let text = match tag {
            Some(tag) => format!("{tag}: {n} is {sign} and {parity}"),
            None => format!("{n} is {sign} and {parity}"),
        };
        (text, even)
    }
}
