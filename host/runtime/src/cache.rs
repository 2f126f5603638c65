//! The precompiled cache: native code for each component, keyed by the component's
//! digest and the engine's key, so a tool is compiled once per engine version.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use crate::engine::{Runtime, engine_key};
use crate::error::{RunError, chain};

/// Whether a load found native code in the cache or had to compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a cached artifact.
    Hit,
    /// Compiled now (and written to the cache).
    Compiled,
}

/// A directory of precompiled components: `<digest-hex>.<engine-key>.cwasm`, each with a
/// `.sha256` file holding the hash of the artifact as it was written.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
}

fn cache_err(path: &Path, message: impl std::fmt::Display) -> RunError {
    RunError::Cache { path: path.display().to_string(), message: message.to_string() }
}

fn write_atomically(path: &Path, data: &[u8]) -> Result<(), RunError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| cache_err(path, e))?;
    std::io::Write::write_all(&mut tmp, data).map_err(|e| cache_err(path, e))?;
    tmp.as_file().sync_data().map_err(|e| cache_err(path, e))?;
    tmp.persist(path).map_err(|e| cache_err(path, e.error))?;
    Ok(())
}

impl ComponentCache {
    /// A cache in `dir`, created if missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<ComponentCache, RunError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| cache_err(&dir, e))?;
        Ok(ComponentCache { dir })
    }

    /// Where the artifact for `digest_hex` lives under this engine.
    pub fn path(&self, runtime: &Runtime, digest_hex: &str) -> PathBuf {
        self.dir.join(format!("{digest_hex}.{}.cwasm", engine_key(runtime)))
    }

    /// Writes native code for `wasm` (whose digest is `digest_hex`) into the cache.
    pub fn compile(
        &self,
        runtime: &Runtime,
        digest_hex: &str,
        wasm: &[u8],
    ) -> Result<Component, RunError> {
        let native = runtime.precompile(wasm)?;
        let path = self.path(runtime, digest_hex);
        write_atomically(&path, &native)?;
        write_atomically(&sidecar(&path), hex::encode(Sha256::digest(&native)).as_bytes())?;
        load_native(runtime, &native)
    }

    /// Loads the component for `digest_hex`, from the cache when its artifact is present
    /// and intact, else by compiling the bytes `wasm` returns and caching the result.
    pub fn load(
        &self,
        runtime: &Runtime,
        digest_hex: &str,
        wasm: impl FnOnce() -> Result<Vec<u8>, RunError>,
    ) -> Result<(Component, CacheOutcome), RunError> {
        let path = self.path(runtime, digest_hex);
        if let (Ok(native), Ok(expected)) =
            (std::fs::read(&path), std::fs::read_to_string(sidecar(&path)))
        {
            // An artifact that does not hash to what was written (a torn write, a disk
            // error) is recompiled, never loaded.
            if hex::encode(Sha256::digest(&native)) == expected.trim() {
                return Ok((load_native(runtime, &native)?, CacheOutcome::Hit));
            }
        }
        let component = self.compile(runtime, digest_hex, &wasm()?)?;
        Ok((component, CacheOutcome::Compiled))
    }
}

fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

#[allow(unsafe_code, reason = "wasmtime's only way to load precompiled native code")]
fn load_native(runtime: &Runtime, native: &[u8]) -> Result<Component, RunError> {
    // SAFETY: `Component::deserialize` trusts its input to be native code that this
    // wasmtime produced. These bytes are: they were produced by `precompile` on an engine
    // with the same settings (the engine key is in the file name, and wasmtime itself
    // rejects an artifact from another version or configuration), written by this process
    // into the owner's private state directory, and checked against the SHA-256 recorded
    // when they were written. Someone who can write that directory can already replace
    // the bx binary; see docs/runtime.md.
    unsafe { Component::deserialize(&runtime.engine, native) }
        .map_err(|e| RunError::Invalid(format!("precompiled artifact rejected: {}", chain(&e))))
}
