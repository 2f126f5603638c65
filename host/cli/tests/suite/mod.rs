//! Helpers to run `bx` against a state directory and to look at what it left there.

mod chat;
mod install;
mod layering;
mod run;
mod runbook;
mod trust;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::Digest as _;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A built component's path; fails (never skips) when `make tools` has not run.
pub fn component(crate_name: &str) -> PathBuf {
    let path = repo().join(format!("tools/target/wasm32-wasip2/release/bx_tool_{crate_name}.wasm"));
    assert!(path.exists(), "{} is missing; run `make tools` before the tests", path.display());
    path
}

pub fn digest_file(path: &Path) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap())))
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn bx(state: &Path, args: &[&str]) -> Run {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_bx"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("BX_HOME")
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Installs a built component by file and digest, asserting success.
pub fn install(state: &Path, crate_name: &str) -> String {
    let path = component(crate_name);
    let digest = digest_file(&path);
    let r = bx(state, &["tool", "install", path.to_str().unwrap(), "--digest", &digest]);
    assert_eq!(r.code, 0, "install {crate_name}: {}", r.stderr);
    digest
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
