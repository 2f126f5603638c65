//! The [`Store`]: install, list, inspect, remove and open tools under a state directory.
//!
//! Layout under the state directory's `tools/`:
//! - `blobs/<hex>.wasm`: component bytes, named by their SHA-256;
//! - `native/<hex>.<engine-key>.cwasm`: precompiled native code, with its `.mac`, and
//!   `native/cache.key`, the key of those MACs;
//! - `installed.json`: the installed set and its epoch;
//! - `.lock`: held while the installed set changes.

use std::path::{Path, PathBuf};

use bx_runtime::{CacheOutcome, ComponentCache, FunctionInfo, LoadedTool, Runtime, Shape};
use bx_state::{Config, StateDir, write_atomically};

use crate::digest::Digest;
use crate::error::{ManifestError, StaticRefused, StoreError};
use crate::fetch::{self, Progress};
use crate::installed::{Declared, Difference, Installed, InstalledFunction, InstalledTool};
use crate::manifest::Manifest;
use crate::oci::{Reference, Registry};

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
    /// A Wasm OCI artifact in a registry, by tag or manifest digest.
    Oci(Reference),
}

impl InstallSource {
    /// Reads the CLI's source argument: `sha256:…`, `oci://…`, `https://…`, or a file
    /// path.
    pub fn parse(text: &str) -> Result<InstallSource, StoreError> {
        Ok(if text.starts_with("sha256:") {
            InstallSource::Digest
        } else if text.starts_with("oci://") {
            InstallSource::Oci(Reference::parse(text)?)
        } else if text.contains("://") {
            InstallSource::Url(text.to_owned())
        } else {
            InstallSource::File(PathBuf::from(text))
        })
    }
}

/// Bytes fetched for an install, and where from.
struct Fetched {
    bytes: Vec<u8>,
    /// `oci://…@sha256:…` for a registry.
    source: Option<String>,
    /// Who signed the manifest, when a pinned key's scope asked for a signature.
    signer: Option<String>,
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOutcome {
    /// The tool's name, from its own `describe`; for a standard component, the
    /// component's name.
    pub name: String,
    /// Where that name came from.
    pub named_by: NamedBy,
    /// Its digest.
    pub digest: Digest,
    /// The digest it replaced, if any.
    pub replaced: Option<String>,
    /// False when exactly this digest was already installed under this name.
    pub changed: bool,
    /// The tool epoch after the install.
    pub epoch: u64,
    /// The tools it installed: the one tool of a `bx:tool` component, or one per
    /// function of a standard component.
    pub tools: Vec<String>,
    /// A standard component's functions bx cannot call, and why.
    pub skipped: Vec<String>,
    /// Where it came from when that was a registry, by manifest digest.
    pub source: Option<String>,
    /// Who signed it, when a pinned key's scope asked for a signature.
    pub signer: Option<String>,
    /// How what it declares differs from what it replaced, a line each (`+`, `-`, `~`).
    pub difference: Vec<String>,
}

/// The tool store under one state directory.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    blobs: PathBuf,
    mirrors: Vec<String>,
    trusted: Vec<bx_state::TrustedKey>,
    state_root: PathBuf,
    native: PathBuf,
    /// The precompiled cache, made (with its key) the first time it is used: reading
    /// the store writes nothing.
    cache: std::sync::OnceLock<ComponentCache>,
}

impl Store {
    /// Opens (creating if needed) the store under `state`, with the mirrors `config`
    /// names.
    pub fn open(state: &StateDir, config: &Config) -> Result<Store, StoreError> {
        Ok(Store {
            root: state.tools_dir(),
            blobs: state.blobs_dir(),
            mirrors: config.tools.mirrors.clone(),
            trusted: config.tools.trusted_keys.clone(),
            state_root: state.root().to_path_buf(),
            native: state.native_dir(),
            cache: std::sync::OnceLock::new(),
        })
    }

    /// The precompiled cache, made with its directory and key on first use.
    fn cache(&self) -> Result<&ComponentCache, StoreError> {
        if let Some(cache) = self.cache.get() {
            return Ok(cache);
        }
        let made = ComponentCache::new(&self.native)?;
        Ok(self.cache.get_or_init(|| made))
    }

    fn installed_path(&self) -> PathBuf {
        self.root.join("installed.json")
    }

    fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.blobs.join(format!("{}.wasm", digest.hex()))
    }

    /// Takes `tools/.lock` exclusively; held until the returned file is closed.
    /// Waits up to [`LOCK_WAIT`] for another command's change to finish.
    fn lock(&self) -> Result<std::fs::File, StoreError> {
        let path = self.root.join(".lock");
        std::fs::create_dir_all(&self.root).map_err(|e| StoreError::io(&self.root, e))?;
        match bx_fs::lock_waiting(&path, LOCK_WAIT) {
            Ok(Some(file)) => Ok(file),
            Ok(None) => Err(StoreError::io(
                &path,
                format!(
                    "another bx command has held the tool store's lock for {} s; nothing was changed",
                    LOCK_WAIT.as_secs()
                ),
            )),
            Err(e) => Err(StoreError::io(&path, e)),
        }
    }

    fn pending_path(&self) -> PathBuf {
        self.root.join("pending.jsonl")
    }

    /// Writes one change record (JSON, one line, with the `epoch` the change makes)
    /// ahead of the change, under the store's lock: the journal the audit log is fed
    /// from. Records of changes that never completed (the process died, a write failed)
    /// are dropped first: their epoch is past the installed set's, which only a
    /// completed change raises.
    fn journal(&self, installed_epoch: u64, record: &str) -> Result<(), StoreError> {
        let path = self.pending_path();
        if record.contains('\n') || record.len() > MAX_PENDING_RECORD_BYTES {
            return Err(StoreError::Unrecorded(format!(
                "a change record of {} bytes cannot be kept",
                record.len()
            )));
        }
        let kept = self.read_journal(installed_epoch)?;
        let mut text: String = kept.iter().map(|l| format!("{l}\n")).collect();
        text.push_str(record);
        text.push('\n');
        if text.len() as u64 > MAX_JOURNAL_BYTES {
            return Err(StoreError::Unrecorded(format!(
                "{} earlier tool changes wait in tools/pending.jsonl for the daemon that holds the audit log; make one call through it (or stop it) so it writes them, then change the tools again",
                kept.len()
            )));
        }
        // Whole or not at all: the records before this one may not be on the log yet.
        Ok(write_atomically(&path, text.as_bytes())?)
    }

    /// The journal's records of completed changes (epoch at most `installed_epoch`), in
    /// order; lines that are not a record (a torn write) are moved to
    /// `tools/pending.rejected` for the owner. Records of changes that never completed are
    /// left out.
    fn read_journal(&self, installed_epoch: u64) -> Result<Vec<String>, StoreError> {
        let Some(bytes) = bx_state::read_own(&self.pending_path(), MAX_JOURNAL_BYTES)? else {
            return Ok(Vec::new());
        };
        let (kept, rejected) = parse_journal(&String::from_utf8_lossy(&bytes), installed_epoch);
        if !rejected.is_empty() {
            use std::io::Write as _;
            let bad = self.root.join("pending.rejected");
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&bad)
                .map_err(|e| StoreError::io(&bad, e))?;
            let text: String = rejected.iter().map(|l| format!("{l}\n")).collect();
            file.write_all(text.as_bytes()).map_err(|e| StoreError::io(&bad, e))?;
        }
        Ok(kept)
    }

    /// Hands the journal's records of completed changes to `write` (bx puts each on the
    /// audit log), in order, and empties it once all are written; records of changes
    /// that never completed are dropped. A failure leaves the journal as it was, and the
    /// caller's calls stop (`docs/runbook.md#audit-unavailable`).
    pub fn drain_pending(
        &self,
        write: &mut dyn FnMut(&str) -> Result<(), StoreError>,
    ) -> Result<usize, StoreError> {
        let path = self.pending_path();
        if !path.exists() {
            return Ok(0);
        }
        let _lock = self.lock()?;
        let epoch = self.installed()?.epoch;
        let kept = self.read_journal(epoch)?;
        for line in &kept {
            write(line)?;
        }
        std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        Ok(kept.len())
    }

    /// How many records wait in the journal for the log (read without the lock, and
    /// writing nothing, for `bx audit verify`).
    pub fn pending_count(&self) -> usize {
        let epoch = self.installed().map_or(u64::MAX, |i| i.epoch);
        match bx_state::read_own(&self.pending_path(), MAX_JOURNAL_BYTES) {
            Ok(Some(bytes)) => parse_journal(&String::from_utf8_lossy(&bytes), epoch).0.len(),
            _ => 0,
        }
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
        plain_http: bool,
        progress: Progress<'_>,
    ) -> Result<Fetched, StoreError> {
        let bytes = match source {
            InstallSource::File(path) => fetch::read_file(path)?,
            InstallSource::Url(url) => fetch::download(url, progress)?,
            InstallSource::Digest => self.resolve(digest, progress)?,
            InstallSource::Oci(reference) => {
                return self.pull(reference, digest, plain_http, progress);
            }
        };
        verify(digest, &bytes)?;
        Ok(Fetched { bytes, source: None, signer: None })
    }

    /// Pulls a component from a registry: the manifest first, whose component layer must
    /// be `digest` and which, when a pinned key's scope covers the repository, must be
    /// signed by such a key; only then the layer, checked against `digest` again.
    fn pull(
        &self,
        reference: &Reference,
        digest: &Digest,
        plain_http: bool,
        progress: Progress<'_>,
    ) -> Result<Fetched, StoreError> {
        let keys = crate::signature::load_keys(&self.trusted, &self.state_root)?;
        let pinned: Vec<&crate::signature::PinnedKey> =
            keys.iter().filter(|k| k.covers(reference)).collect();
        let registry = Registry::connect(reference, plain_http)?;
        let mut signer = None;
        let mut check = |manifest: &Digest, layer: &crate::oci::Descriptor| {
            if layer.digest != digest.to_string() {
                return Err(match &reference.digest {
                    None => StoreError::TagMoved {
                        reference: reference.to_string(),
                        manifest: manifest.to_string(),
                        expected: digest.to_string(),
                        actual: crate::error::cut(&layer.digest, 80),
                    },
                    Some(_) => StoreError::DigestMismatch {
                        expected: digest.to_string(),
                        actual: crate::error::cut(&layer.digest, 80),
                    },
                });
            }
            if !pinned.is_empty() {
                signer = Some(crate::signature::verify(&registry, reference, manifest, &pinned)?);
            }
            Ok(())
        };
        let pulled = registry.pull_component(&mut check, progress)?;
        verify(digest, &pulled.bytes)?;
        Ok(Fetched {
            bytes: pulled.bytes,
            source: Some(Reference { tag: None, ..reference.at(&pulled.manifest) }.to_string()),
            signer,
        })
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

    /// Installs a tool: fetch, verify the digest, check it is a `bx:tool` component or a
    /// standard WASI component, precompile, then record name → digest and raise the
    /// epoch. Every check happens before anything is written.
    ///
    /// A standard component installs one tool per exported function, named
    /// `COMPONENT.FUNCTION` (`COMPONENT` from `options.name`, else [`NamedBy`]); what
    /// each may reach comes from `options.manifest`, and `options.check` is asked about
    /// every static resource before anything is written (the owner's policy refusing one
    /// refuses the install).
    pub fn install(
        &self,
        runtime: &Runtime,
        source: &InstallSource,
        digest: &Digest,
        options: &InstallOptions<'_>,
        progress: Progress<'_>,
    ) -> Result<InstallOutcome, StoreError> {
        let source_kind = source;
        let Fetched { bytes, source, signer } =
            self.fetch(source, digest, options.plain_http, progress)?;
        // Compiled once: the native code is kept and written to the cache only if the
        // install goes through.
        let native = bx_runtime::Native::compile(runtime, &bytes)?;
        let component = &native.component;
        let entries = match runtime.shape(component)? {
            Shape::BxTool => {
                if options.manifest.is_some() || options.name.is_some() {
                    return Err(StoreError::Component(bx_runtime::RunError::WrongWorld(
                        "a bx:tool component names itself and its resources: --name and --manifest are for standard WASI components".into(),
                    )));
                }
                let tool = runtime.load_blocking(component, &digest.to_string())?;
                let name = tool.description().name.clone();
                check_tool_name(&name)?;
                let resources = tool
                    .description()
                    .resources
                    .iter()
                    .map(|r| bx_runtime::resource_kind_name(r.kind).to_owned())
                    .collect();
                let entry = InstalledTool {
                    digest: digest.to_string(),
                    size: bytes.len() as u64,
                    resources,
                    function: None,
                    source: source.clone(),
                    signer: signer.clone(),
                    declared: declared_by(&tool),
                };
                Planned {
                    component: None,
                    named_by: NamedBy::Describe,
                    tools: vec![(name, entry)],
                    skipped: Vec::new(),
                }
            }
            Shape::Functions(functions) => {
                let named = name_component(runtime, component, &bytes, source_kind, options)?;
                let mut planned = Self::plan_functions(
                    runtime, component, &bytes, digest, options, named, &functions,
                )?;
                for (_, entry) in &mut planned.tools {
                    entry.source = source.clone();
                    entry.signer = signer.clone();
                }
                planned
            }
        };
        let Some((first, _)) = entries.tools.first() else {
            return Err(StoreError::Component(bx_runtime::RunError::WrongWorld(format!(
                "no exported function bx can call ({})",
                entries.skipped.join("; ")
            ))));
        };
        let name = entries.component.clone().unwrap_or_else(|| first.clone());
        let named_by = entries.named_by;

        let _lock = self.lock()?;
        let mut installed = self.installed()?;
        let same = |t: &InstalledTool| t.digest == digest.to_string();
        let mut entries = entries;
        for (tool, entry) in &mut entries.tools {
            match installed.tools.get(tool) {
                Some(t) if !same(t) && !options.replace => {
                    return Err(StoreError::NameClash {
                        name: tool.clone(),
                        installed: t.digest.clone(),
                    });
                }
                // The same bytes again, from a file or an unsigned copy: they keep the
                // provenance they were installed with (a signature holds for the bytes).
                Some(t) if same(t) && entry.signer.is_none() && t.signer.is_some() => {
                    entry.source.clone_from(&t.source);
                    entry.signer.clone_from(&t.signer);
                }
                _ => {}
            }
        }
        // A component's earlier tools that its new version no longer has go with it.
        let stale: Vec<String> = match &entries.component {
            Some(component) => installed
                .tools
                .iter()
                .filter(|(n, t)| {
                    t.function.as_ref().is_some_and(|f| f.component == *component)
                        && !entries.tools.iter().any(|(e, _)| e == *n)
                })
                .map(|(n, _)| n.clone())
                .collect(),
            None => Vec::new(),
        };
        if !stale.is_empty() && !options.replace {
            let t = &installed.tools[&stale[0]];
            return Err(StoreError::NameClash {
                name: stale[0].clone(),
                installed: t.digest.clone(),
            });
        }
        let unchanged = stale.is_empty()
            && entries.tools.iter().all(|(n, e)| installed.tools.get(n) == Some(e));
        let tools: Vec<String> = entries.tools.iter().map(|(n, _)| n.clone()).collect();
        if unchanged {
            return Ok(InstallOutcome {
                name,
                named_by,
                digest: digest.clone(),
                replaced: None,
                changed: false,
                epoch: installed.epoch,
                tools,
                skipped: entries.skipped,
                source,
                signer,
                difference: Vec::new(),
            });
        }
        // The capability lock: what the tools it replaces declared, against what these
        // declare. More needs the owner's --accept-widening, whatever the digests. A first
        // install's difference is all it declares, recorded and shown, never refused.
        let old: std::collections::BTreeMap<String, InstalledTool> = (entries.tools.iter())
            .map(|(n, _)| n)
            .chain(&stale)
            .filter_map(|n| Some((n.clone(), installed.tools.get(n)?.clone())))
            .collect();
        let difference = Difference::between(&old, &entries.tools.iter().cloned().collect());
        if !old.is_empty() && !difference.added.is_empty() && !options.accept_widening {
            return Err(StoreError::Widening { name, lines: difference.lines() });
        }
        let replaced = old.values().map(|t| t.digest.clone()).find(|d| *d != digest.to_string());
        let replaced = replaced.or_else(|| old.values().next().map(|t| t.digest.clone()));
        for n in &stale {
            installed.tools.remove(n);
        }
        for (n, entry) in entries.tools {
            installed.tools.insert(n, entry);
        }
        installed.epoch += 1;
        let outcome = InstallOutcome {
            name,
            named_by,
            digest: digest.clone(),
            replaced,
            changed: true,
            epoch: installed.epoch,
            tools,
            skipped: entries.skipped,
            source,
            signer,
            difference: difference.lines(),
        };
        // In the journal before anything is written: a change that cannot be recorded is
        // not made, and leaves the state directory as it was.
        if let Some(record) = options.record {
            let line = record(&Change::Install(&outcome))?;
            self.journal(installed.epoch - 1, &line)?;
        }
        let blob = self.blob_path(digest);
        if !blob.exists() {
            std::fs::create_dir_all(&self.blobs).map_err(|e| StoreError::io(&self.blobs, e))?;
            write_atomically(&blob, &bytes)?;
        }
        self.cache()?.put(runtime, &digest.hex(), &native)?;
        installed.save(&self.installed_path())?;
        Ok(outcome)
    }

    /// The tools a standard component installs as: one per function bx can call, each
    /// loaded once here (so a schema or summary out of bounds refuses the install), with
    /// what its manifest asks for; the functions it cannot call, and why.
    fn plan_functions(
        runtime: &Runtime,
        component: &bx_runtime::Component,
        bytes: &[u8],
        digest: &Digest,
        options: &InstallOptions<'_>,
        (name, named_by): (String, NamedBy),
        functions: &[FunctionInfo],
    ) -> Result<Planned, StoreError> {
        let manifest = options.manifest.clone().unwrap_or_default();
        let refuse = |why: ManifestError| StoreError::Manifest {
            path: options.manifest_path.clone().unwrap_or_else(|| "(none)".into()),
            why,
        };
        let docs = bx_runtime::function_docs(bytes);
        for f in manifest.functions.keys() {
            if !functions.iter().any(|i| i.export == *f) {
                return Err(refuse(ManifestError::NoSuchFunction(f.clone())));
            }
        }
        let mut tools = Vec::new();
        let mut skipped = Vec::new();
        for f in functions {
            if let Err(why) = &f.schema {
                skipped.push(format!("{}: {why}", f.export));
                continue;
            }
            let params = manifest.functions.get(&f.export).cloned().unwrap_or_default();
            for p in params.read.iter().chain(&params.write).chain(&params.fetch) {
                if !f.string_params.contains(p) {
                    let (function, param) = (f.export.clone(), p.clone());
                    return Err(refuse(if f.params.contains(p) {
                        ManifestError::NotAString { function, param }
                    } else {
                        ManifestError::NoSuchParameter { function, param }
                    }));
                }
            }
            let tool = format!("{name}.{}", f.tool_suffix);
            // A name no tool may have (a resource's `[static]r.f`, a name over 64
            // characters) leaves that function out, said; the rest install.
            if let Err(e) = check_tool_name(&tool) {
                skipped.push(format!("{}: {e}", f.export));
                continue;
            }
            let function = InstalledFunction {
                component: name.clone(),
                export: f.export.clone(),
                summary: summary_of(&docs, &f.export, params.description.as_deref()),
                params,
                reach: manifest.reach.clone(),
            };
            // What is recorded is what loads: the spec comes from the record, here as
            // in `open_tool`.
            let spec = function.spec(&tool);
            if let Some(check) = options.check {
                check(&tool, &spec.statics).map_err(|e| refuse(ManifestError::Refused(e)))?;
            }
            let loaded = runtime.load_function(component, &digest.to_string(), spec)?;
            let mut kinds: Vec<String> = loaded
                .description()
                .resources
                .iter()
                .map(|r| r.kind)
                .chain(loaded.statics().iter().map(|(k, _)| *k))
                .map(|k| bx_runtime::resource_kind_name(k).to_owned())
                .collect();
            kinds.sort();
            kinds.dedup();
            let entry = InstalledTool {
                digest: digest.to_string(),
                size: bytes.len() as u64,
                resources: kinds,
                function: Some(function),
                source: None,
                signer: None,
                declared: declared_by(&loaded),
            };
            tools.push((tool, entry));
        }
        // One install puts every function into every prompt's tools array and every
        // listing: bounded as a whole, not only one schema at a time.
        let schemas: usize =
            functions.iter().filter_map(|f| f.schema.as_ref().ok()).map(String::len).sum();
        if tools.len() > MAX_TOOLS_PER_COMPONENT || schemas > MAX_SCHEMAS_PER_COMPONENT {
            return Err(StoreError::Component(bx_runtime::RunError::WrongWorld(format!(
                "{} functions with {schemas} bytes of schema; a component installs at most {MAX_TOOLS_PER_COMPONENT} tools and {MAX_SCHEMAS_PER_COMPONENT} bytes",
                tools.len()
            ))));
        }
        Ok(Planned { component: Some(name), named_by, tools, skipped })
    }

    /// Removes `name` from the installed set (its bytes stay, so the digest can be
    /// installed again offline) and raises the epoch.
    pub fn remove(
        &self,
        name: &str,
        record: Option<&RecordHook<'_>>,
    ) -> Result<InstalledTool, StoreError> {
        let _lock = self.lock()?;
        let mut installed = self.installed()?;
        let removed = installed
            .tools
            .remove(name)
            .ok_or_else(|| StoreError::NotInstalled(name.to_owned()))?;
        installed.epoch += 1;
        if let Some(record) = record {
            let line = record(&Change::Remove(name, &removed, installed.epoch))?;
            self.journal(installed.epoch - 1, &line)?;
        }
        installed.save(&self.installed_path())?;
        Ok(removed)
    }

    /// Adds, replaces (`bx mcp accept`) or removes (`None`) the upstream `name`, and
    /// raises the epoch; `action` names the change in its record. An upstream may not
    /// take a name whose tools an installed component already has (`NAME.…`).
    pub fn set_upstream(
        &self,
        name: &str,
        upstream: Option<bx_gateway::Upstream>,
        action: UpstreamAction,
        record: Option<&RecordHook<'_>>,
    ) -> Result<Option<bx_gateway::Upstream>, StoreError> {
        let _lock = self.lock()?;
        let mut installed = self.installed()?;
        let previous = installed.upstreams.get(name).cloned();
        match (&upstream, &previous, action) {
            (Some(_), Some(_), UpstreamAction::Add) => {
                return Err(StoreError::Upstream(bx_gateway::GatewayError::Exists(name.into())));
            }
            (_, None, UpstreamAction::Accept | UpstreamAction::Remove) => {
                return Err(StoreError::Upstream(bx_gateway::GatewayError::Unknown(name.into())));
            }
            _ => {}
        }
        let prefix = format!("{name}.");
        if let Some(clash) = installed.tools.keys().find(|t| t.starts_with(&prefix)) {
            return Err(StoreError::NameTaken(format!(
                "{name}: the installed tool {clash} already has that name; give the upstream another"
            )));
        }
        match &upstream {
            Some(u) => {
                installed.upstreams.insert(name.to_owned(), u.clone());
            }
            None => {
                installed.upstreams.remove(name);
            }
        }
        installed.epoch += 1;
        if let Some(record) = record {
            let change = Change::Upstream {
                action,
                name,
                upstream: upstream.as_ref().or(previous.as_ref()),
                previous: previous.as_ref(),
                epoch: installed.epoch,
            };
            let line = record(&change)?;
            self.journal(installed.epoch - 1, &line)?;
        }
        installed.save(&self.installed_path())?;
        Ok(previous)
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
        let (component, outcome) = self.cache()?.load(runtime, &digest.hex(), || {
            let bytes = fetch::read_file(&blob)
                .map_err(|e| bx_runtime::RunError::Invalid(e.to_string()))?;
            verify(&digest, &bytes).map_err(|e| bx_runtime::RunError::Invalid(e.to_string()))?;
            Ok(bytes)
        })?;
        let tool = match &entry.function {
            None => runtime.load_blocking(&component, &digest.to_string())?,
            Some(f) => runtime.load_function(&component, &digest.to_string(), f.spec(name))?,
        };
        Ok((tool, outcome))
    }
}

/// Asked about one tool's static resources (its name, and each resource's kind and
/// path or URL): a refusal refuses the install.
pub type StaticCheck<'a> =
    dyn Fn(&str, &[(bx_runtime::ResourceKind, String)]) -> Result<(), StaticRefused> + 'a;

/// A change to the installed set, as the record hook is shown it.
#[derive(Debug)]
pub enum Change<'a> {
    /// An install or a replacement.
    Install(&'a InstallOutcome),
    /// The removal of one tool, and the epoch it makes.
    Remove(&'a str, &'a InstalledTool, u64),
    /// An upstream MCP server added, accepted or removed.
    Upstream {
        /// Which.
        action: UpstreamAction,
        /// Its name.
        name: &'a str,
        /// It as it is now (as it was, for a removal).
        upstream: Option<&'a bx_gateway::Upstream>,
        /// It as it was before an accept or a removal.
        previous: Option<&'a bx_gateway::Upstream>,
        /// The epoch the change makes.
        epoch: u64,
    },
}

/// What is done to an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamAction {
    /// `bx mcp add`.
    Add,
    /// `bx mcp accept`: its tool set pinned again as it lists it now.
    Accept,
    /// `bx mcp remove`.
    Remove,
}

impl UpstreamAction {
    /// As its record names it.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamAction::Add => "mcp-add",
            UpstreamAction::Accept => "mcp-accept",
            UpstreamAction::Remove => "mcp-remove",
        }
    }
}

/// Asked, after every check and before anything is written, for the change's record: a
/// JSON object on one line with the `epoch` the change makes. The store journals it
/// ahead of the change ([`Store::drain_pending`] feeds the audit log from the journal);
/// an error ([`StoreError::Unrecorded`], when the log cannot take it) stops the change.
pub type RecordHook<'a> = dyn Fn(&Change<'_>) -> Result<String, StoreError> + 'a;

/// Where an installed component's name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedBy {
    /// A `bx:tool` component's own `describe`.
    Describe,
    /// The owner's `--name`.
    Given,
    /// The WIT package of an interface it exports (`bx-test:files/extra` gives `files`).
    Package,
    /// The name it carries in its `component-name` section (what `wasm-tools metadata
    /// add --name` writes), made fit for a tool name.
    Component,
    /// The name of the file it was installed from (its stem), made fit for a tool name:
    /// it carries no name of its own.
    File,
    /// The last part of the URL's path it was installed from (its stem), made fit for a
    /// tool name.
    Url,
    /// The last part of the registry repository it was installed from, made fit for a
    /// tool name.
    Repository,
}

/// The name a standard component's tools start with: `--name`, else the WIT package of
/// an interface it exports, else the name it carries, else the name of the file, URL or
/// repository it came from; the last two made fit for a tool name by [`default_name`].
/// Refused when none gives a valid name.
fn name_component(
    runtime: &Runtime,
    component: &bx_runtime::Component,
    bytes: &[u8],
    source: &InstallSource,
    options: &InstallOptions<'_>,
) -> Result<(String, NamedBy), StoreError> {
    let (name, by) = if let Some(name) = &options.name {
        (name.clone(), NamedBy::Given)
    } else if let Some(package) = runtime.package_name(component) {
        (package, NamedBy::Package)
    } else if let Some(own) = bx_runtime::component_name(bytes).as_deref().and_then(default_name) {
        (own, NamedBy::Component)
    } else {
        let (text, from, by) = match source {
            InstallSource::File(path) => {
                let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
                (stem, "the file name", NamedBy::File)
            }
            InstallSource::Url(url) => (url_stem(url), "the URL", NamedBy::Url),
            InstallSource::Oci(reference) => {
                let last = reference.repository.rsplit('/').next().map(str::to_owned);
                (last, "the repository", NamedBy::Repository)
            }
            InstallSource::Digest => {
                return Err(StoreError::Unnamed { from: "its digest alone".to_owned() });
            }
        };
        let shown = match &text {
            // Debug-quoted (control characters escaped), cut; the CLI escapes the rest.
            Some(t) => format!("{from} {:?}", t.chars().take(80).collect::<String>()),
            None => from.to_owned(),
        };
        let name = text.as_deref().and_then(default_name);
        (name.ok_or(StoreError::Unnamed { from: shown })?, by)
    };
    check_tool_name(&name)?;
    Ok((name, by))
}

/// The stem of a URL's last path segment (`https://h/tools/weather.wasm` gives
/// `weather`), percent-decoding left aside: what is not a tool name's is replaced anyway.
fn url_stem(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let last = url.path_segments()?.next_back().filter(|s| !s.is_empty())?;
    let stem = Path::new(last).file_stem()?.to_string_lossy().into_owned();
    Some(stem)
}

/// Characters of a name made from a component's own name or its source, at most: room
/// for `.FUNCTION` within a tool name's 64.
const MAX_DEFAULT_NAME: usize = 32;

/// `text` made fit for a tool name, for a name the owner did not type: ASCII letters
/// lower-cased; every run of other characters than `a-z`, `0-9`, `_` and `-` (a `.`, a
/// space, anything not ASCII) one `-`; `-` trimmed from both ends; cut to
/// [`MAX_DEFAULT_NAME`] characters. `None` when nothing is left.
pub(crate) fn default_name(text: &str) -> Option<String> {
    let mut out = String::new();
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-');
    let out = out[..out.len().min(MAX_DEFAULT_NAME)].trim_end_matches('-');
    (!out.is_empty()).then(|| out.to_owned())
}

/// How an install names a standard component's tools, and what they may reach.
#[derive(Default)]
pub struct InstallOptions<'a> {
    /// Replace tools of the same names that have another digest.
    pub replace: bool,
    /// The component's name, which its tools' names start with (default: the WIT
    /// package of an interface it exports, else the name it carries, else the name of
    /// the file, URL or repository it came from; see [`NamedBy`]). For a standard WASI
    /// component only.
    pub name: Option<String>,
    /// What its functions may reach. For a standard WASI component only.
    pub manifest: Option<Manifest>,
    /// Where the manifest was read from, for messages.
    pub manifest_path: Option<String>,
    /// Asked about each tool's static resources before anything is written; an error
    /// refuses the install with its text (the owner's policy refusing a resource).
    pub check: Option<&'a StaticCheck<'a>>,
    /// Install a version that declares more than the one it replaces.
    pub accept_widening: bool,
    /// Reach the registry over plain http even when it is not this machine.
    pub plain_http: bool,
    /// Records the change before it is made.
    pub record: Option<&'a RecordHook<'a>>,
}

/// What a loaded tool declares: its resource arguments and their kinds, what it reaches
/// whatever its arguments, and the hash of its argument schema.
fn declared_by(tool: &LoadedTool) -> Declared {
    let d = tool.description();
    let args = (d.resources.iter())
        .map(|r| (r.arg.clone(), bx_runtime::resource_kind_name(r.kind).to_owned()))
        .collect();
    let mut statics: Vec<String> = (tool.statics().iter())
        .map(|(k, what)| format!("{} {what}", bx_runtime::resource_kind_name(*k)))
        .collect();
    statics.sort();
    statics.dedup();
    Declared { args, statics, schema: Digest::of(d.args_schema.as_bytes()).to_string() }
}

/// The tools one install adds.
struct Planned {
    /// A standard component's name; `None` for a `bx:tool` component.
    component: Option<String>,
    /// Where the name came from.
    named_by: NamedBy,
    tools: Vec<(String, InstalledTool)>,
    /// Functions not installed, and why.
    skipped: Vec<String>,
}

/// How long a change waits for another command's to finish.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Bytes of the journal of tool changes, at most: room for 64 records of the largest
/// size. Past it a change is refused (the daemon has not taken the waiting ones), rather
/// than grow a file the daemon must read whole before its next call.
const MAX_JOURNAL_BYTES: u64 = 64 * MAX_PENDING_RECORD_BYTES as u64;

/// The journal's lines: the records of completed changes (epoch at most
/// `installed_epoch`), in order, and the lines that are not a record. Records of changes
/// that never completed (their epoch is past it) are in neither.
fn parse_journal(text: &str, installed_epoch: u64) -> (Vec<String>, Vec<String>) {
    #[derive(serde::Deserialize)]
    struct Epoch {
        epoch: u64,
    }
    let mut kept = Vec::new();
    let mut rejected = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Epoch>(line) {
            Ok(e) if e.epoch <= installed_epoch => kept.push(line.to_owned()),
            Ok(_) => {}
            Err(_) => rejected.push(line.to_owned()),
        }
    }
    (kept, rejected)
}

/// Bytes of one change record waiting for the log, at most.
const MAX_PENDING_RECORD_BYTES: usize = 64 << 10;

/// Tools one standard component installs as, at most.
const MAX_TOOLS_PER_COMPONENT: usize = 64;
/// Bytes of argument schema of one standard component's tools together, at most.
const MAX_SCHEMAS_PER_COMPONENT: usize = 256 << 10;

/// Bytes of a summary taken from a component's doc comment.
const MAX_SUMMARY_BYTES: usize = 1024;

/// A function's summary: the component's doc comment for it, else the manifest's
/// description, on one line and cut to [`MAX_SUMMARY_BYTES`], or a line saying which
/// function it is.
fn summary_of(
    docs: &std::collections::BTreeMap<String, String>,
    export: &str,
    described: Option<&str>,
) -> String {
    match docs.get(export).filter(|d| !d.trim().is_empty()).map(String::as_str).or(described) {
        Some(doc) if !doc.trim().is_empty() => {
            let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut end = doc.len().min(MAX_SUMMARY_BYTES);
            while !doc.is_char_boundary(end) {
                end -= 1;
            }
            doc[..end].to_owned()
        }
        _ => format!("The function {export} of a WebAssembly component (it has no description)."),
    }
}

/// A tool name is 1 to 64 characters of `a-z`, `0-9`, `.`, `_` or `-`.
fn check_tool_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty()
        || name.len() > 64
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(StoreError::BadName(name.to_owned()));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A name made from what the owner did not type is a tool name, or nothing.
    #[test]
    fn default_names_are_tool_names_or_nothing() {
        let long = "a".repeat(40);
        for (text, want) in [
            ("py-files", Some("py-files")),
            ("Other World.v2", Some("other-world-v2")),
            ("files_1", Some("files_1")),
            ("--x..y--", Some("x-y")),
            ("Ärger-tool", Some("rger-tool")),
            (long.as_str(), Some(&long[..MAX_DEFAULT_NAME])),
            ("★", None),
            ("...", None),
            ("", None),
        ] {
            let got = default_name(text);
            assert_eq!(got.as_deref(), want, "{text:?}");
            if let Some(name) = got {
                assert!(check_tool_name(&name).is_ok(), "{name}");
            }
        }
        assert_eq!(default_name(&format!("{}.x", "b".repeat(31))), Some("b".repeat(31)));
    }

    #[test]
    fn a_url_names_by_the_stem_of_its_last_segment() {
        for (url, want) in [
            ("https://example.com/tools/weather.wasm", Some("weather")),
            ("https://example.com/tools/weather.wasm?v=2#x", Some("weather")),
            ("https://example.com/a.b.wasm", Some("a.b")),
            ("https://example.com/", None),
            ("not a url", None),
        ] {
            assert_eq!(url_stem(url).as_deref(), want, "{url}");
        }
    }
}
