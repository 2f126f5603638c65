//! Helpers: fixtures and golden files.

mod approval;
mod decide;
mod names;
mod policy;
mod props;
mod scope;

use std::path::{Path, PathBuf};

use bx_broker::{CallRequest, Resource};

/// A call of `tool` naming `resources`.
pub fn call(tool: &str, resources: Vec<Resource>) -> CallRequest {
    CallRequest { tool: tool.into(), digest: "sha256:00".into(), resources }
}

/// A path the call reads.
pub fn read(p: &str) -> Resource {
    Resource::PathRead(p.into())
}

/// A path the call writes.
pub fn write(p: &str) -> Resource {
    Resource::PathWrite(p.into())
}

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(rel)
}

pub fn read_fixture(rel: &str) -> String {
    let path = fixture(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Compares `actual` with the golden file `rel`; `BX_BLESS=1` rewrites it instead.
pub fn golden(rel: &str, actual: &str) {
    let path = fixture(rel);
    if std::env::var_os("BX_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if expected != actual {
        let first = expected.lines().zip(actual.lines()).position(|(a, b)| a != b);
        panic!(
            "{} differs from what the code produces (first differing line: {first:?})\n--- expected\n{expected}\n--- actual\n{actual}\nIf the change is intended: BX_BLESS=1 cargo test -p bx-broker, then review and commit the fixture.",
            path.display()
        );
    }
}
