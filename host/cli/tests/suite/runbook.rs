//! Every error that names a runbook entry finds it, and every entry is named by some error.

use std::collections::BTreeSet;

use super::*;

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target" || n == "tests") {
                continue;
            }
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn runbook_entries_and_errors_name_each_other() {
    let root = repo();
    let mut files = Vec::new();
    for dir in ["broker", "host"] {
        rust_sources(&root.join(dir), &mut files);
    }
    assert!(files.len() > 10, "found only {} source files under {}", files.len(), root.display());
    let marker = "docs/runbook.md#";
    let mut named = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices(marker) {
            let anchor: String = text[at + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            assert!(!anchor.is_empty(), "empty runbook anchor in {}", file.display());
            named.insert(anchor);
        }
    }
    let runbook = std::fs::read_to_string(root.join("docs/runbook.md")).unwrap();
    let entries: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_lowercase().replace(' ', "-"))
        .collect();
    let missing: Vec<_> = named.difference(&entries).collect();
    assert!(missing.is_empty(), "errors name runbook entries that do not exist: {missing:?}");
    let unnamed: Vec<_> = entries.difference(&named).collect();
    assert!(unnamed.is_empty(), "runbook entries no error names: {unnamed:?}");
}
