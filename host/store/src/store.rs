//! The [`Store`]: install, list, inspect, remove and open tools under a state directory.
//!
//! Layout under the state directory's `tools/`:
//! - `blobs/<hex>.wasm`: component bytes, named by their SHA-256;
//! - `native/<hex>.<engine-key>.cwasm`: precompiled native code, with its `.mac`, and
//!   `native/cache.key`, the key of those MACs;
//! - `installed.json`: the installed set and its epoch;
//! - `.lock`: held while the installed set changes.

use std::path::{Path, PathBuf};

use bx_runtime::{CacheOutcome, ComponentCache, LoadedTool, Runtime};
use bx_state::{Config, StateDir, write_atomically};

use crate::digest::Digest;
use crate::error::StoreError;
use crate::fetch::{self, Progress};
use crate::installed::{Installed, InstalledTool};

/// The largest component the store accepts (64 MiB). Without a bound a hostile URL could
/// stream until the disk or memory is full.
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// Where an install takes its bytes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallSource {
    /// A local file.
    File(PathBuf),
    /// An https URL.
    Url(String),
    /// The digest alone: the local store, then the configured mirrors.
    Digest,
}

impl InstallSource {
    /// Reads the CLI's source argument: `sha256:…`, `https://…`, or a file path.
    pub fn parse(text: &str) -> InstallSource {
        if text.starts_with("sha256:") {
            InstallSource::Digest
        } else if text.contains("://") {
            InstallSource::Url(text.to_owned())
        } else {
            InstallSource::File(PathBuf::from(text))
        }
    }
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOutcome {
    /// The tool's name, from its own `describe`.
    pub name: String,
    /// Its digest.
    pub digest: Digest,
    /// The digest it replaced, if any.
    pub replaced: Option<String>,
    /// False when exactly this digest was already installed under this name.
    pub changed: bool,
    /// The tool epoch after the install.
    pub epoch: u64,
}

/// The tool store under one state directory.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    blobs: PathBuf,
    mirrors: Vec<String>,
    cache: ComponentCache,
}

impl Store {
    /// Opens (creating if needed) the store under `state`, with the mirrors `config`
    /// names.
    pub fn open(state: &StateDir, config: &Config) -> Result<Store, StoreError> {
        let tools = state.tools_dir();
        for dir in [state.blobs_dir(), state.native_dir()] {
            std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        }
        let cache = ComponentCache::new(state.native_dir())?;
        Ok(Store {
            root: tools,
            blobs: state.blobs_dir(),
            mirrors: config.tools.mirrors.clone(),
            cache,
        })
    }

    fn installed_path(&self) -> PathBuf {
        self.root.join("installed.json")
    }

    fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.blobs.join(format!("{}.wasm", digest.hex()))
    }

    /// Takes `tools/.lock` exclusively; held until the returned file is closed.
    fn lock(&self) -> Result<std::fs::File, StoreError> {
        let path = self.root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        file.lock().map_err(|e| StoreError::io(&path, e))?;
        Ok(file)
    }

    /// The installed set as it is on disk now.
    pub fn installed(&self) -> Result<Installed, StoreError> {
        Installed::load(&self.installed_path())
    }

    /// Fetches the bytes for `digest` from `source` and checks them against it.
    fn fetch(
        &self,
        source: &InstallSource,
        digest: &Digest,
        progress: Progress<'_>,
    ) -> Result<Vec<u8>, StoreError> {
        let bytes = match source {
            InstallSource::File(path) => fetch::read_file(path)?,
            InstallSource::Url(url) => fetch::download(url, progress)?,
            InstallSource::Digest => return self.resolve(digest, progress),
        };
        verify(digest, &bytes)?;
        Ok(bytes)
    }

    /// Finds `digest` in the local store, then in each mirror in order; the first copy
    /// whose bytes verify wins.
    fn resolve(&self, digest: &Digest, progress: Progress<'_>) -> Result<Vec<u8>, StoreError> {
        let mut tried = Vec::new();
        let local = self.blob_path(digest);
        let candidates = std::iter::once(local.display().to_string()).chain(
            self.mirrors
                .iter()
                .map(|m| format!("{}/sha256/{}.wasm", m.trim_end_matches('/'), digest.hex())),
        );
        for candidate in candidates {
            let got = if candidate.starts_with("https://") {
                fetch::download(&candidate, progress)
            } else {
                fetch::read_file(Path::new(&candidate))
            };
            match got.and_then(|bytes| verify(digest, &bytes).map(|()| bytes)) {
                Ok(bytes) => return Ok(bytes),
                Err(e) => tried.push(format!("{candidate}: {e}")),
            }
        }
        Err(StoreError::Fetch {
            source_name: digest.to_string(),
            message: format!("not in the local store or any mirror; tried {}", tried.join("; ")),
        })
    }

    /// Installs a tool: fetch, verify the digest, check it is a `bx:tool` component,
    /// precompile, then record name → digest and raise the epoch. Every check happens
    /// before anything is written.
    pub fn install(
        &self,
        runtime: &Runtime,
        source: &InstallSource,
        digest: &Digest,
        replace: bool,
        progress: Progress<'_>,
    ) -> Result<InstallOutcome, StoreError> {
        let bytes = self.fetch(source, digest, progress)?;
        let component = runtime.compile(&bytes)?;
        let tool = runtime.load_blocking(&component, &digest.to_string())?;
        let name = tool.description().name.clone();
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(StoreError::Component(bx_runtime::RunError::WrongWorld(format!(
                "tool name {name:?} must be 1 to 64 characters of a-z, 0-9, '.', '_' or '-'"
            ))));
        }

        let _lock = self.lock()?;
        let mut installed = self.installed()?;
        let previous = installed.tools.get(&name).map(|t| t.digest.clone());
        match &previous {
            Some(d) if *d == digest.to_string() => {
                return Ok(InstallOutcome {
                    name,
                    digest: digest.clone(),
                    replaced: None,
                    changed: false,
                    epoch: installed.epoch,
                });
            }
            Some(d) if !replace => {
                return Err(StoreError::NameClash { name, installed: d.clone() });
            }
            _ => {}
        }
        let blob = self.blob_path(digest);
        if !blob.exists() {
            write_atomically(&blob, &bytes)?;
        }
        self.cache.compile(runtime, &digest.hex(), &bytes)?;
        let resources = tool
            .description()
            .resources
            .iter()
            .map(|r| bx_runtime::resource_kind_name(r.kind).to_owned())
            .collect();
        installed.tools.insert(
            name.clone(),
            InstalledTool { digest: digest.to_string(), size: bytes.len() as u64, resources },
        );
        installed.epoch += 1;
        installed.save(&self.installed_path())?;
        Ok(InstallOutcome {
            name,
            digest: digest.clone(),
            replaced: previous,
            changed: true,
            epoch: installed.epoch,
        })
    }

    /// Removes `name` from the installed set (its bytes stay, so the digest can be
    /// installed again offline) and raises the epoch.
    pub fn remove(&self, name: &str) -> Result<InstalledTool, StoreError> {
        let _lock = self.lock()?;
        let mut installed = self.installed()?;
        let removed = installed
            .tools
            .remove(name)
            .ok_or_else(|| StoreError::NotInstalled(name.to_owned()))?;
        installed.epoch += 1;
        installed.save(&self.installed_path())?;
        Ok(removed)
    }

    /// Loads an installed tool, from precompiled code when the cache has an artifact
    /// whose MAC holds for its digest; otherwise the stored bytes are re-verified
    /// against the digest and compiled. The outcome says which, and why an artifact
    /// was refused (`docs/runbook.md#precompiled-cache`).
    pub fn open_tool(
        &self,
        runtime: &Runtime,
        name: &str,
    ) -> Result<(LoadedTool, CacheOutcome), StoreError> {
        let installed = self.installed()?;
        let entry =
            installed.tools.get(name).ok_or_else(|| StoreError::NotInstalled(name.to_owned()))?;
        let digest = Digest::parse(&entry.digest)?;
        let blob = self.blob_path(&digest);
        let (component, outcome) = self.cache.load(runtime, &digest.hex(), || {
            let bytes = fetch::read_file(&blob)
                .map_err(|e| bx_runtime::RunError::Invalid(e.to_string()))?;
            verify(&digest, &bytes).map_err(|e| bx_runtime::RunError::Invalid(e.to_string()))?;
            Ok(bytes)
        })?;
        Ok((runtime.load_blocking(&component, &digest.to_string())?, outcome))
    }
}

fn verify(expected: &Digest, bytes: &[u8]) -> Result<(), StoreError> {
    let actual = Digest::of(bytes);
    if actual != *expected {
        return Err(StoreError::DigestMismatch {
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}
