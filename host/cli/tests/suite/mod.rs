//! Helpers to run `bx` against a state directory and to look at what it left there.

mod anchor;
mod approvers;
mod bounds;
mod chat;
mod components;
mod eval;
mod gateway;
mod hardening;
mod history;
mod install;
mod layering;
mod mcp;
mod oci;
mod py_run;
mod reach;
mod run;
mod runbook;
mod scopes;
mod secrets;
mod settle;
mod small;
mod telemetry;
mod trust;
mod web;
mod workspace;

// Helpers shared with the `verify-device` target.
#[path = "../common/mod.rs"]
mod common;
pub use common::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

/// Installs standard component `wasm` by its digest as `name`, with the manifest at
/// `manifest`.
pub fn install_with_manifest(state: &Path, wasm: &Path, manifest: &Path, name: &str) -> Run {
    let digest = digest_file(wasm);
    bx(
        state,
        &[
            "tool",
            "install",
            wasm.to_str().unwrap(),
            "--digest",
            &digest,
            "--manifest",
            manifest.to_str().unwrap(),
            "--name",
            name,
        ],
    )
}

/// The first line of `bx session show SESSION`: `SESSION: TAINT`, with its newline.
pub fn session_taint(state: &Path, session: &str) -> String {
    let shown = bx(state, &["session", "show", session]).stdout;
    format!("{}\n", shown.lines().next().unwrap_or_default())
}

/// Every file under `dir` with the hash of its content, for before/after comparisons.
pub fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, hex::encode(sha2::Sha256::digest(std::fs::read(&path).unwrap())));
            }
        }
    }
    out
}
