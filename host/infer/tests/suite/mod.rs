//! The test harness: a real llama-server in a child process.

mod fixtures;
mod hostile;
mod live;
// Shared with the CLI's end-to-end tests, which include the same file.
mod server;

pub use server::*;

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn fixture(name: &str) -> Vec<u8> {
    let path = repo().join("fixtures/sse").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
