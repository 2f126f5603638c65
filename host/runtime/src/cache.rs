//! The precompiled cache: native code for each component, keyed by the component's
//! digest and the engine's key, so a tool is compiled once per engine version.
//!
//! Loading native code is the one thing that can run arbitrary instructions in the host,
//! so an artifact is loaded only if it carries a MAC that binds it to the digest being
//! run and to this engine: HMAC-SHA256 under a key only bx holds (`cache.key`, 0600, in
//! the cache directory, which no tool can reach). A swapped `.cwasm`, one copied from
//! another tool's entry, or one written with a recomputed checksum fails the MAC and is
//! recompiled from the stored component; it is never loaded.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use wasmtime::component::Component;

use crate::engine::{Runtime, engine_key};
use crate::error::{RunError, chain};

/// Whether a load found native code in the cache or had to compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a cached artifact whose MAC holds.
    Hit,
    /// Compiled now: there was no artifact (and one is written).
    Compiled,
    /// An artifact was there but refused (the reason says why: no MAC, a MAC that does
    /// not hold for this digest and engine); compiled again and replaced
    /// (`docs/runbook.md#precompiled-cache`).
    Replaced(String),
}

/// Bytes of the MAC key.
const KEY_BYTES: usize = 32;
/// What the MAC covers besides the artifact, so a MAC made for one purpose never
/// verifies another.
const MAC_CONTEXT: &[u8] = b"bx precompiled component v1\n";

/// A directory of precompiled components: `<digest-hex>.<engine-key>.cwasm`, each with a
/// `.mac` file holding its MAC.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    key: [u8; KEY_BYTES],
}

/// Reads a cache file whole, refusing anything but a regular file (a FIFO in its place
/// must not hang every call) without waiting on it.
fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().read(true).custom_flags(0o4000).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

fn cache_err(path: &Path, message: impl std::fmt::Display) -> RunError {
    RunError::Cache { path: path.display().to_string(), message: message.to_string() }
}

fn write_atomically(path: &Path, data: &[u8]) -> Result<(), RunError> {
    bx_fs::write_atomically(path, data).map_err(|e| cache_err(path, e))
}

/// Reads the cache's key, creating it (0600, from the OS's randomness) on first use.
///
/// The key is written whole to a temporary file and linked into place only if no key is
/// there yet, so a process that starts beside this one reads either no key or all of it.
fn load_key(dir: &Path) -> Result<[u8; KEY_BYTES], RunError> {
    let path = dir.join("cache.key");
    let mut key = [0u8; KEY_BYTES];
    match read_regular(&path) {
        Ok(bytes) if bytes.len() == KEY_BYTES => {
            key.copy_from_slice(&bytes);
            return Ok(key);
        }
        Ok(bytes) => {
            return Err(cache_err(
                &path,
                format!("{} bytes, not a {KEY_BYTES}-byte key", bytes.len()),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(cache_err(&path, e)),
    }
    getrandom::fill(&mut key).map_err(|e| cache_err(&path, format!("no randomness: {e}")))?;
    // tempfile creates its files 0600.
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| cache_err(&path, e))?;
    tmp.write_all(&key).map_err(|e| cache_err(&path, e))?;
    tmp.as_file().sync_all().map_err(|e| cache_err(&path, e))?;
    match tmp.persist_noclobber(&path) {
        Ok(_) => Ok(key),
        // Another process put its key there first: use theirs.
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => load_key(dir),
        Err(e) => Err(cache_err(&path, e.error)),
    }
}

/// A component compiled to native code in memory: the component, and the bytes the cache
/// would keep for it.
pub struct Native {
    /// The loaded component.
    pub component: Component,
    bytes: Vec<u8>,
}

impl Native {
    /// Compiles `wasm` to native code and loads it, writing nothing.
    pub fn compile(runtime: &Runtime, wasm: &[u8]) -> Result<Native, RunError> {
        let bytes = runtime.precompile(wasm)?;
        let component = load_native(runtime, &bytes)?;
        Ok(Native { component, bytes })
    }
}

impl ComponentCache {
    /// A cache in `dir`, created if missing, with its key.
    pub fn new(dir: impl Into<PathBuf>) -> Result<ComponentCache, RunError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| cache_err(&dir, e))?;
        let key = load_key(&dir)?;
        Ok(ComponentCache { dir, key })
    }

    /// Where the artifact for `digest_hex` lives under this engine.
    pub fn path(&self, runtime: &Runtime, digest_hex: &str) -> PathBuf {
        self.dir.join(format!("{digest_hex}.{}.cwasm", engine_key(runtime)))
    }

    /// The MAC of `native` as the artifact of `digest_hex` under this engine.
    fn mac(&self, runtime: &Runtime, digest_hex: &str, native: &[u8]) -> String {
        // A key of any length is accepted by HMAC; this cannot fail.
        let mut mac = <Hmac<Sha256>>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(MAC_CONTEXT);
        mac.update(digest_hex.as_bytes());
        mac.update(b"\n");
        mac.update(engine_key(runtime).as_bytes());
        mac.update(b"\n");
        mac.update(native);
        hex::encode(mac.finalize().into_bytes())
    }

    /// Writes native code for `wasm` (whose digest is `digest_hex`) into the cache.
    pub fn compile(
        &self,
        runtime: &Runtime,
        digest_hex: &str,
        wasm: &[u8],
    ) -> Result<Component, RunError> {
        let native = Native::compile(runtime, wasm)?;
        self.put(runtime, digest_hex, &native)?;
        Ok(native.component)
    }

    /// Writes native code compiled before ([`Native::compile`]) into the cache as the
    /// artifact of `digest_hex`, with its MAC: an install compiles once, decides, and
    /// only then writes (a refused install leaves nothing behind).
    pub fn put(
        &self,
        runtime: &Runtime,
        digest_hex: &str,
        native: &Native,
    ) -> Result<(), RunError> {
        let path = self.path(runtime, digest_hex);
        write_atomically(&path, &native.bytes)?;
        write_atomically(&sidecar(&path), self.mac(runtime, digest_hex, &native.bytes).as_bytes())
    }

    /// Loads the component for `digest_hex`, from the cache when its artifact is present
    /// and its MAC holds, else by compiling the bytes `wasm` returns (which the caller
    /// verifies against the digest) and caching the result.
    pub fn load(
        &self,
        runtime: &Runtime,
        digest_hex: &str,
        wasm: impl FnOnce() -> Result<Vec<u8>, RunError>,
    ) -> Result<(Component, CacheOutcome), RunError> {
        let path = self.path(runtime, digest_hex);
        let outcome = match read_regular(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheOutcome::Compiled,
            Err(e) => CacheOutcome::Replaced(format!("unreadable: {e}")),
            Ok(native) => match read_regular(&sidecar(&path))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
            {
                Err(e) => CacheOutcome::Replaced(format!("no MAC beside it ({e})")),
                // The MAC is over the bytes in memory, and those bytes are what is
                // loaded: a file changed after the check changes nothing.
                Ok(mac)
                    if constant_time_eq(mac.trim(), &self.mac(runtime, digest_hex, &native)) =>
                {
                    return Ok((load_native(runtime, &native)?, CacheOutcome::Hit));
                }
                Ok(_) => CacheOutcome::Replaced(format!(
                    "its MAC does not hold for {digest_hex} under this engine"
                )),
            },
        };
        let component = self.compile(runtime, digest_hex, &wasm()?)?;
        Ok((component, outcome))
    }
}

/// Whether two MACs are equal, in time that does not depend on where they first differ.
fn constant_time_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".mac");
    PathBuf::from(s)
}

#[allow(unsafe_code, reason = "wasmtime's only way to load precompiled native code")]
fn load_native(runtime: &Runtime, native: &[u8]) -> Result<Component, RunError> {
    // SAFETY: `Component::deserialize` trusts its input to be native code that this
    // wasmtime produced. These bytes are: either `precompile` produced them just now, or
    // they carry a MAC under the cache key (which only bx reads, in a directory no tool
    // reaches) over this digest, this engine key and these very bytes, and such a MAC is
    // only ever written beside bytes `precompile` produced. wasmtime itself also rejects
    // an artifact from another version or configuration. See docs/runtime.md.
    unsafe { Component::deserialize(&runtime.engine, native) }
        .map_err(|e| RunError::Invalid(format!("precompiled artifact rejected: {}", chain(&e))))
}
