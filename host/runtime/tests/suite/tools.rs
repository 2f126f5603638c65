//! Each first-party tool, run as a component in the real runtime.

use bx_broker::AllowList;
use serde_json::{Value, json};

use super::*;

fn json_of(report: Result<bx_runtime::CallReport, RunError>) -> Value {
    serde_json::from_str(&ok_text(report)).unwrap()
}

fn failed(report: Result<bx_runtime::CallReport, RunError>) -> String {
    match report.unwrap().result {
        Err(CallError::Failed(m)) => m,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn invalid(report: Result<bx_runtime::CallReport, RunError>) -> String {
    match report.unwrap().result {
        Err(CallError::InvalidArgs(m)) => m,
        other => panic!("expected invalid arguments, got {other:?}"),
    }
}

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (name, content) in files {
        let path = tmp.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    tmp
}

#[test]
fn every_tool_describes_itself() {
    let names: Vec<(String, Vec<String>)> =
        ["fs_read", "fs_write", "fs_list", "fs_search", "fs_edit", "http_fetch"]
            .iter()
            .map(|c| {
                let d = tool(c).description();
                serde_json::from_str::<Value>(&d.args_schema).expect("schema is JSON");
                (
                    d.name.clone(),
                    d.resources.iter().map(|r| format!("{}:{:?}", r.arg, r.kind)).collect(),
                )
            })
            .collect();
    let expected: Vec<(String, Vec<String>)> = vec![
        ("fs.read".into(), vec!["path:ResourceKind::PathRead".into()]),
        ("fs.write".into(), vec!["path:ResourceKind::PathWrite".into()]),
        ("fs.list".into(), vec!["path:ResourceKind::PathRead".into()]),
        ("fs.search".into(), vec!["path:ResourceKind::PathRead".into()]),
        ("fs.edit".into(), vec!["path:ResourceKind::PathWrite".into()]),
        ("http.fetch".into(), vec!["url:ResourceKind::UrlFetch".into()]),
    ];
    assert_eq!(names, expected);
}

#[test]
fn fs_read_reads_and_pages() {
    let d = dir_with(&[("a.txt", "0123456789")]);
    let allow = || AllowList::new().read(&s(d.path())).unwrap();
    let path = s(&d.path().join("a.txt"));
    assert_eq!(ok_text(call(tool("fs_read"), allow(), json!({"path": path}))), "0123456789");
    assert_eq!(
        ok_text(call(tool("fs_read"), allow(), json!({"path": path, "offset": 3, "limit": 4}))),
        "3456\n[fs.read: showed bytes 3..7; the file goes on, pass offset=7 to continue]"
    );
    assert_eq!(
        ok_text(call(tool("fs_read"), allow(), json!({"path": path, "offset": 7, "limit": 4}))),
        "789"
    );
    let dir = failed(call(tool("fs_read"), allow(), json!({"path": s(d.path())})));
    assert!(dir.contains("directory"), "{dir}");
    assert!(
        invalid(call(tool("fs_read"), allow(), json!({"path": path, "limit": 0})))
            .contains("limit")
    );
    assert!(
        invalid(call(tool("fs_read"), allow(), json!({"path": path, "extra": 1})))
            .contains("unknown field")
    );
    let missing =
        failed(call(tool("fs_read"), allow(), json!({"path": s(&d.path().join("nope"))})));
    assert!(missing.contains("not found"), "{missing}");
}

#[test]
fn fs_read_never_splits_a_character_between_windows() {
    // Regression: a window ending inside a multi-byte character used to come back as
    // U+FFFD; the host now leaves the partial character for the next window.
    let d = dir_with(&[("u.txt", "a€b")]); // 1 + 3 + 1 bytes
    let allow = || AllowList::new().read(&s(d.path())).unwrap();
    let path = s(&d.path().join("u.txt"));
    let read = |offset: u64, limit: u64| {
        ok_text(call(
            tool("fs_read"),
            allow(),
            json!({"path": path, "offset": offset, "limit": limit}),
        ))
    };
    assert_eq!(
        read(0, 2),
        "a\n[fs.read: showed bytes 0..1; the file goes on, pass offset=1 to continue]"
    );
    assert_eq!(
        read(1, 3),
        "€\n[fs.read: showed bytes 1..4; the file goes on, pass offset=4 to continue]"
    );
    assert_eq!(read(4, 3), "b");
    // Invalid UTF-8 is replaced, not refused.
    std::fs::write(d.path().join("bin"), [b'o', b'k', 0xff]).unwrap();
    assert_eq!(
        ok_text(call(tool("fs_read"), allow(), json!({"path": s(&d.path().join("bin"))}))),
        "ok\u{fffd}"
    );
}

#[test]
fn fs_write_creates_refuses_overwrites_appends() {
    let d = dir_with(&[]);
    let allow = || AllowList::new().write(&s(d.path())).unwrap();
    let path = s(&d.path().join("out.txt"));
    let w = |mode: &str, content: &str| {
        call(tool("fs_write"), allow(), json!({"path": path, "content": content, "mode": mode}))
    };
    assert_eq!(json_of(w("create", "one")), json!({"path": path, "bytes": 3}));
    assert!(failed(w("create", "two")).contains("already exists"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "one");
    json_of(w("append", "+more"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "one+more");
    json_of(w("overwrite", "fresh"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "fresh");
    // The default mode is create.
    let r = call(tool("fs_write"), allow(), json!({"path": path, "content": "x"}));
    assert!(failed(r).contains("already exists"));
}

#[test]
fn fs_list_recurses_to_depth_and_bounds_entries() {
    let d = dir_with(&[("a.txt", "1"), ("sub/b.txt", "22"), ("sub/deeper/c.txt", "333")]);
    let allow = || AllowList::new().read(&s(d.path())).unwrap();
    let root = s(d.path());
    let paths = |v: Value| -> Vec<String> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().trim_start_matches(&root).to_owned())
            .collect()
    };
    let one = json_of(call(tool("fs_list"), allow(), json!({"path": root})));
    assert_eq!(paths(one), vec!["/a.txt", "/sub"]);
    let all = json_of(call(tool("fs_list"), allow(), json!({"path": root, "depth": 3})));
    assert_eq!(all["truncated"], json!(false));
    assert_eq!(
        paths(all),
        vec!["/a.txt", "/sub", "/sub/b.txt", "/sub/deeper", "/sub/deeper/c.txt"]
    );
    let cut = json_of(call(
        tool("fs_list"),
        allow(),
        json!({"path": root, "depth": 3, "max_entries": 2}),
    ));
    assert_eq!(cut["truncated"], json!(true));
    assert_eq!(cut["entries"].as_array().unwrap().len(), 2);
    assert!(
        invalid(call(tool("fs_list"), allow(), json!({"path": root, "depth": 0})))
            .contains("depth")
    );
}

#[test]
fn fs_search_prints_path_line_text_and_bounds_results() {
    let d = dir_with(&[
        ("a.rs", "fn main() {}\nlet x = 1;\nfn helper() {}\n"),
        ("sub/b.rs", "nothing\nfn deep() {}\n"),
    ]);
    let allow = || AllowList::new().read(&s(d.path())).unwrap();
    let root = s(d.path());
    let out = ok_text(call(tool("fs_search"), allow(), json!({"path": root, "pattern": "^fn "})));
    let expected = format!(
        "{root}/a.rs:1:fn main() {{}}\n{root}/a.rs:3:fn helper() {{}}\n{root}/sub/b.rs:2:fn deep() {{}}"
    );
    assert_eq!(out, expected);
    let bounded = ok_text(call(
        tool("fs_search"),
        allow(),
        json!({"path": root, "pattern": "fn", "max_results": 2}),
    ));
    assert_eq!(bounded.lines().filter(|l| l.contains(":fn")).count(), 2);
    assert!(bounded.ends_with("[stopped at 2 matches]"), "{bounded}");
    let bad = invalid(call(tool("fs_search"), allow(), json!({"path": root, "pattern": "("})));
    assert!(bad.contains("pattern"), "{bad}");
}

/// A pattern with no upper-case letter of its own matches either case (ripgrep's
/// `--smart-case`); one with an upper-case letter, or a class escape such as `\S`, matches
/// as written.
#[test]
fn fs_search_matches_either_case_only_for_a_lower_case_pattern() {
    let d = dir_with(&[("notes.md", "Meeting.\nDecided: ship v2.\ndecided twice\nSHIP\n")]);
    let allow = || AllowList::new().read(&s(d.path())).unwrap();
    let root = s(d.path());
    // The numbers of the lines that `pattern` matched.
    let lines = |pattern: &str| {
        let out =
            ok_text(call(tool("fs_search"), allow(), json!({"path": root, "pattern": pattern})));
        out.lines()
            .map(|l| l.split(':').nth(1).unwrap().parse::<u32>().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(lines("decided"), [2, 3]);
    assert_eq!(lines("Decided"), [2]);
    assert_eq!(lines("ship"), [2, 4]);
    assert_eq!(lines("SHIP"), [4]);
    // Escaped letters are not the pattern's own: `\s` and `\S` are classes.
    assert_eq!(lines(r"^\S+ ship"), [2]);
    assert_eq!(lines(r"\bship\b"), [2, 4]);
}

#[test]
fn fs_edit_replaces_exactly_one_occurrence() {
    let d = dir_with(&[("f.txt", "alpha\nbeta\ngamma beta\n")]);
    let allow = || AllowList::new().write(&s(d.path())).unwrap();
    let path = s(&d.path().join("f.txt"));
    let edit = |old: &str, new: &str| {
        call(tool("fs_edit"), allow(), json!({"path": path, "old": old, "new": new}))
    };
    assert!(failed(edit("delta", "x")).contains("not found"));
    assert!(failed(edit("beta", "x")).contains("ambiguous: 2 occurrences"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "alpha\nbeta\ngamma beta\n");
    assert_eq!(
        json_of(edit("gamma beta", "gamma delta")),
        json!({"path": path, "line": 3, "bytes": 23})
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "alpha\nbeta\ngamma delta\n");
}

#[test]
fn first_party_digests_match_the_lock() {
    let lock = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/digests.lock"),
    )
    .expect("tools/digests.lock");
    let mut checked = 0;
    for line in lock.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (name, digest) = line.split_once(' ').unwrap();
        // py.run's bytes differ per build (componentize-py#247): its source is pinned.
        if let Some(pinned) = digest.strip_prefix("source ") {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/py-run");
            let mut wits: Vec<PathBuf> = std::fs::read_dir(dir.join("wit"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "wit"))
                .collect();
            wits.sort();
            let mut source = Vec::new();
            for p in [dir.join("app.py"), dir.join("manifest.toml")].into_iter().chain(wits) {
                source.extend(std::fs::read(&p).unwrap());
            }
            assert_eq!(
                digest_of(&source),
                pinned,
                "{name}'s source is not the locked one; run `make tools-lock`"
            );
            checked += 1;
            continue;
        }
        let built = components_dir().join(format!("{name}.wasm"));
        let bytes = std::fs::read(&built)
            .unwrap_or_else(|e| panic!("{}: {e}; run `make tools`", built.display()));
        assert_eq!(
            digest_of(&bytes),
            digest,
            "{name} does not build to its locked digest; run `make tools-lock` if the source changed"
        );
        checked += 1;
    }
    assert!(checked >= 6, "lock lists only {checked} components");
}
