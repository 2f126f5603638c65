//! OCI registries: components kept as Wasm OCI artifacts, in the CNCF layout that Wassette,
//! `wkg` and `oras` use: an OCI image manifest whose config has media type
//! `application/vnd.wasm.config.v0+json` and whose one layer (`application/wasm`, or the
//! older `application/vnd.wasm.content.layer.v1+wasm`) is the component.
//!
//! Written on reqwest, which the store already uses for https installs, rather than on the
//! `oci-client` crate: `oci-client` reads every manifest and every error body whole, with
//! no bound (`_pull_manifest_raw` calls `Response::bytes`, in 0.15 through 0.18), so a
//! hostile registry could fill memory before a check runs; and its releases since 0.16
//! bring reqwest 0.13, a second HTTP and TLS stack. Here every body a registry sends is
//! bounded before it is kept, every request has a deadline, and credentials from the
//! owner's auth file are sent only where they belong and never printed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::time::{Duration, Instant};

use crate::digest::Digest;
use crate::error::{ImageManifestError, KeyScopeError, ReferenceError, StoreError};
use crate::fetch::{Progress, error_chain};
use crate::store::MAX_COMPONENT_BYTES;

/// The config media type of a Wasm OCI artifact.
pub const WASM_CONFIG_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of a component.
pub const WASM_LAYER_TYPE: &str = "application/wasm";
/// The older layer media type, still accepted.
const WASM_LAYER_TYPE_OLD: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The OCI empty config, which some clients write for artifacts.
const EMPTY_CONFIG_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// An OCI image manifest.
pub const OCI_MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// A Docker schema 2 manifest (the same shape; some registries and clients write it).
const DOCKER_MANIFEST_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// The largest manifest bx reads (4 MiB, the distribution spec's suggested limit).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The largest token response, error body or auth file bx reads.
const MAX_SMALL_BYTES: u64 = 64 << 10;
/// Bytes of a registry's error text kept in a message.
const MAX_SHOWN_BYTES: usize = 300;
/// How long one read or write may wait.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one whole pull or push of a component may take.
const TRANSFER_DEADLINE: Duration = Duration::from_secs(600);
/// How long a manifest, token or small blob may take.
const SMALL_DEADLINE: Duration = Duration::from_secs(60);

/// `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// `path/to/repo`, lower case.
    pub repository: String,
    /// The tag, when one was given.
    pub tag: Option<String>,
    /// The manifest's digest, when one was given.
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses `oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`: a registry host (with an
    /// optional port), a repository in the distribution spec's grammar, and a tag, a
    /// digest or both.
    pub fn parse(text: &str) -> Result<Reference, StoreError> {
        let bad = |why: ReferenceError| StoreError::BadReference {
            text: crate::error::cut(text, 200),
            why,
        };
        let rest = text.strip_prefix("oci://").ok_or_else(|| bad(ReferenceError::NoScheme))?;
        let (rest, digest) = match rest.split_once('@') {
            Some((r, d)) => {
                let digest = Digest::parse_text(d)
                    .map_err(|why| bad(ReferenceError::Digest { text: d.to_owned(), why }))?;
                (r, Some(digest))
            }
            None => (rest, None),
        };
        let (registry, path) =
            rest.split_once('/').ok_or_else(|| bad(ReferenceError::NoRepository))?;
        check_registry(registry).map_err(bad)?;
        // A tag follows the last ':' after the last '/'.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r, Some(t.to_owned())),
            _ => (path, None),
        };
        check_repository(repository).map_err(bad)?;
        if let Some(t) = &tag {
            check_tag(t).map_err(bad)?;
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad(ReferenceError::NoTagOrDigest));
        }
        Ok(Reference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// `REGISTRY/REPOSITORY`: what a trusted key's scope is matched against.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The manifest reference in a URL: the digest when there is one, else the tag.
    fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_owned(),
        }
    }

    /// Whether the registry is this machine (an address in 127.0.0.0/8, `::1` or
    /// `localhost`): the only registries reached over plain http without a flag.
    pub fn is_loopback(&self) -> bool {
        split_registry(&self.registry).is_ok_and(|(host, _)| is_loopback_host(host))
    }

    /// This reference pinned to manifest `digest`.
    pub fn at(&self, digest: &Digest) -> Reference {
        Reference { digest: Some(digest.clone()), ..self.clone() }
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// A registry is a lower-case host name, an IPv4 address or a bracketed IPv6 address,
/// with an optional port written without leading zeros: one spelling per registry, so a
/// key's scope cannot be stepped around by writing the same one another way.
fn check_registry(registry: &str) -> Result<(), ReferenceError> {
    split_registry(registry).map(drop)
}

/// `(host, port)` of a registry checked by [`check_registry`].
fn split_registry(registry: &str) -> Result<(&str, Option<u16>), ReferenceError> {
    let bad = || ReferenceError::Registry(registry.to_owned());
    let (host, port) = match registry.strip_prefix('[') {
        Some(v6) => {
            let (addr, rest) = v6.split_once(']').ok_or_else(bad)?;
            // An address is written as Rust writes it back: `[fd00::2]`, never `[FD00::2]`
            // or `[fd00:0::2]`, so one address has one spelling.
            let ip = addr.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
            if ip.to_string() != addr || ip.to_ipv4_mapped().is_some() || ip.is_unspecified() {
                return Err(bad());
            }
            let port = match rest {
                "" => None,
                r => Some(r.strip_prefix(':').ok_or_else(bad)?),
            };
            (&registry[..addr.len() + 2], port)
        }
        None => match registry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (registry, None),
        },
    };
    let label_ok = |label: &str| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let host_ok = host.starts_with('[') || (host.len() <= 253 && host.split('.').all(label_ok));
    if !host_ok {
        return Err(bad());
    }
    // A URL reads a host whose last label is a number as an IPv4 address, in decimal,
    // octal or hex and with parts left out (`127.1`, `2130706433`, `0x7f000001`): such a
    // host must be a dotted quad written plainly, and not 0.0.0.0.
    let last = host.rsplit('.').next().unwrap_or("");
    let numeric = last.chars().all(|c| c.is_ascii_digit()) || last.starts_with("0x");
    if !host.starts_with('[') && numeric {
        let ip = host.parse::<std::net::Ipv4Addr>().map_err(|_| bad())?;
        if ip.to_string() != host || ip.is_unspecified() {
            return Err(bad());
        }
    }
    let port = match port {
        None => None,
        Some(p) if p.is_empty() || p.starts_with('0') => return Err(bad()),
        Some(p) => Some(p.parse::<u16>().map_err(|_| bad())?),
    };
    Ok((host, port))
}

/// Whether `host` (a name, or an address in brackets or not) is this machine.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// One name for every name of this machine; other hosts as written (lower case).
fn canonical_host(host: &str) -> String {
    if is_loopback_host(host) { "localhost".to_owned() } else { host.to_owned() }
}

/// A trusted key's scope: a registry (every port of it when the scope names none) or a
/// repository and what is under it, matched on the registry's canonical name: every
/// name of this machine (`localhost`, `127.0.0.1`, `[::1]`) is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    host: String,
    port: Option<u16>,
    repository: Option<String>,
}

impl Scope {
    /// Parses `REGISTRY` or `REGISTRY/REPOSITORY` as a reference writes them: no scheme,
    /// tag, digest or pattern.
    pub fn parse(text: &str) -> Result<Scope, KeyScopeError> {
        let shown = || crate::error::cut(text, 200);
        let trimmed = text.strip_suffix('/').unwrap_or(text);
        let (registry, repository) = match trimmed.split_once('/') {
            Some((r, repo)) => (r, Some(repo)),
            None => (trimmed, None),
        };
        let (host, port) = split_registry(registry)
            .map_err(|why| KeyScopeError::Registry { text: shown(), why })?;
        if let Some(repo) = repository {
            check_repository(repo)
                .map_err(|why| KeyScopeError::Repository { text: shown(), why })?;
        }
        Ok(Scope { host: canonical_host(host), port, repository: repository.map(str::to_owned) })
    }

    /// Whether `reference` is in this scope.
    pub fn covers(&self, reference: &Reference) -> bool {
        let Ok((host, port)) = split_registry(&reference.registry) else { return false };
        let port = port.unwrap_or(if reference.is_loopback() { 80 } else { 443 });
        let repo = &reference.repository;
        canonical_host(host) == self.host
            && self.port.is_none_or(|p| p == port)
            && self.repository.as_ref().is_none_or(|prefix| {
                repo == prefix
                    || repo.strip_prefix(prefix.as_str()).is_some_and(|r| r.starts_with('/'))
            })
    }
}

/// The distribution spec's repository grammar: components of `[a-z0-9]` joined by `.`,
/// `_`, `__` or runs of `-`, separated by `/`.
fn check_repository(repo: &str) -> Result<(), ReferenceError> {
    let component_ok = |c: &str| {
        let b = c.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && c.chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
            && !c.contains("..")
            && !c.contains("___")
            && !c.contains("._")
            && !c.contains("_.")
    };
    if repo.is_empty() || repo.len() > 255 || !repo.split('/').all(component_ok) {
        return Err(ReferenceError::Repository(repo.to_owned()));
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), ReferenceError> {
    let mut chars = tag.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if !first_ok
        || tag.len() > 128
        || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        return Err(ReferenceError::Tag(tag.to_owned()));
    }
    Ok(())
}

/// One descriptor of a manifest.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// What the blob is.
    pub media_type: String,
    /// Its digest.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// Annotations (a signature's signature is one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI image manifest, as much of it as bx reads.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's own media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    pub layers: Vec<Descriptor>,
}

impl ImageManifest {
    /// Reads manifest bytes; refuses anything but a schema-2 image manifest.
    pub fn parse(bytes: &[u8]) -> Result<ImageManifest, ImageManifestError> {
        // What it says it is first, so an index is called an index.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Kind {
            media_type: Option<String>,
        }
        if let Ok(Kind { media_type: Some(t) }) = serde_json::from_slice::<Kind>(bytes)
            && ![OCI_MANIFEST_TYPE, DOCKER_MANIFEST_TYPE].contains(&t.as_str())
        {
            return Err(ImageManifestError::NotAnImage(crate::error::cut(&t, 100)));
        }
        let m: ImageManifest = serde_json::from_slice(bytes).map_err(ImageManifestError::Json)?;
        if m.schema_version != 2 {
            return Err(ImageManifestError::SchemaVersion(m.schema_version));
        }
        match m.media_type.as_deref() {
            None | Some(OCI_MANIFEST_TYPE | DOCKER_MANIFEST_TYPE) => Ok(m),
            Some(other) => Err(ImageManifestError::NotAnImage(crate::error::cut(other, 100))),
        }
    }

    /// The component layer of a Wasm artifact, or why this is not one.
    pub fn component_layer(&self) -> Result<&Descriptor, ImageManifestError> {
        if ![WASM_CONFIG_TYPE, EMPTY_CONFIG_TYPE].contains(&self.config.media_type.as_str()) {
            return Err(ImageManifestError::NotWasm(crate::error::cut(
                &self.config.media_type,
                100,
            )));
        }
        let wasm: Vec<&Descriptor> = self
            .layers
            .iter()
            .filter(|l| [WASM_LAYER_TYPE, WASM_LAYER_TYPE_OLD].contains(&l.media_type.as_str()))
            .collect();
        match wasm.as_slice() {
            [one] if self.layers.len() == 1 => Ok(one),
            _ => Err(ImageManifestError::Layers { layers: self.layers.len(), wasm: wasm.len() }),
        }
    }
}

/// Credentials for one registry, from the owner's docker or podman auth file.
#[derive(Clone)]
struct Credentials {
    user: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret, not even in a debug print.
        f.write_str("Credentials(..)")
    }
}

/// The auth files bx reads, in order: podman's, then docker's.
fn auth_files() -> Vec<std::path::PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let mut files = Vec::new();
    files.extend(env("REGISTRY_AUTH_FILE"));
    files.extend(env("XDG_RUNTIME_DIR").map(|d| d.join("containers/auth.json")));
    if let Some(home) = env("HOME") {
        files.push(home.join(".config/containers/auth.json"));
    }
    files.extend(env("DOCKER_CONFIG").map(|d| d.join("config.json")));
    if let Some(home) = env("HOME") {
        files.push(home.join(".docker/config.json"));
    }
    files
}

/// The first auth file's credentials for `registry` (`auths` entries with `auth`, the
/// base64 of `user:password`). Credential helpers are not run.
fn credentials_for(registry: &str) -> Option<Credentials> {
    use base64::Engine as _;
    for path in auth_files() {
        let Ok(Some(bytes)) = bx_state::read_own(&path, MAX_SMALL_BYTES) else { continue };
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(&bytes) else { continue };
        let Some(auths) = json.get("auths").and_then(|a| a.as_object()) else { continue };
        for (key, entry) in auths {
            let host = key.trim_start_matches("https://").trim_start_matches("http://");
            let host = host.split('/').next().unwrap_or("");
            if host != registry {
                continue;
            }
            let Some(auth) = entry.get("auth").and_then(|a| a.as_str()) else { continue };
            let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(auth.trim()) else {
                continue;
            };
            let Ok(text) = String::from_utf8(decoded) else { continue };
            if let Some((user, password)) = text.split_once(':') {
                return Some(Credentials { user: user.to_owned(), password: password.to_owned() });
            }
        }
    }
    None
}

/// A connection to one repository of one registry.
pub struct Registry {
    client: reqwest::blocking::Client,
    /// `http://host:port` or `https://host`.
    base: String,
    reference: Reference,
    credentials: Option<Credentials>,
    /// The `Authorization` value that worked last (a bearer token or basic).
    authorization: std::sync::Mutex<Option<String>>,
    /// Whether this connection publishes (its errors say so).
    publishing: bool,
    /// Whether the owner allowed plain http off this machine (`--plain-http`).
    plain_http: bool,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the credentials nor the token it holds, not even in a debug print.
        f.debug_struct("Registry")
            .field("base", &self.base)
            .field("reference", &self.reference.to_string())
            .finish_non_exhaustive()
    }
}

/// What [`Registry::pull_component`] got.
#[derive(Debug)]
pub struct Pulled {
    /// The manifest's digest.
    pub manifest: Digest,
    /// The component's bytes, checked against the layer's digest.
    pub bytes: Vec<u8>,
}

impl Registry {
    /// Connects to `reference`'s registry: https, or plain http for a loopback registry
    /// or when `plain_http` says so.
    pub fn connect(reference: &Reference, plain_http: bool) -> Result<Registry, StoreError> {
        let scheme = if plain_http || reference.is_loopback() { "http" } else { "https" };
        let https = scheme == "https";
        // A redirect (registries send blobs from a storage host) may not leave https, and
        // a plain-http one stays on this machine unless the owner said --plain-http.
        let redirect = reqwest::redirect::Policy::custom(move |attempt| {
            let url = attempt.url();
            let local = url.host_str().is_some_and(is_loopback_host);
            if attempt.previous().len() >= 5 {
                attempt.error("more than 5 redirects")
            } else if url.scheme() != "https" && (https || !(plain_http || local)) {
                attempt.error("a redirect to plain http off this machine")
            } else {
                attempt.follow()
            }
        });
        let client = reqwest::blocking::Client::builder()
            .timeout(IO_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(redirect)
            .user_agent(concat!("bx/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| registry_err(reference, &error_chain(&e)))?;
        Ok(Registry {
            client,
            base: format!("{scheme}://{}", reference.registry),
            reference: reference.clone(),
            credentials: credentials_for(&reference.registry),
            authorization: std::sync::Mutex::new(None),
            publishing: false,
            plain_http,
        })
    }

    fn err(&self, message: &str) -> StoreError {
        match registry_err(&self.reference, message) {
            StoreError::Registry { reference, message } if self.publishing => {
                StoreError::Publish { reference, message }
            }
            e => e,
        }
    }

    /// [`Registry::connect`], for a publish: its errors say nothing was published.
    pub fn connect_to_publish(
        reference: &Reference,
        plain_http: bool,
    ) -> Result<Registry, StoreError> {
        Ok(Registry { publishing: true, ..Registry::connect(reference, plain_http)? })
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/v2/{}/{tail}", self.base, self.reference.repository)
    }

    /// Sends a request, answering one authentication challenge: a bearer token from the
    /// realm the registry names (with the owner's credentials when the realm is https or
    /// this machine), or basic credentials.
    fn send(
        &self,
        push: bool,
        build: &dyn Fn(&reqwest::blocking::Client) -> reqwest::blocking::RequestBuilder,
    ) -> Result<reqwest::blocking::Response, StoreError> {
        let with_auth = |auth: Option<&String>| {
            let mut request = build(&self.client);
            if let Some(value) = auth {
                request = request.header(reqwest::header::AUTHORIZATION, value);
            }
            request.send().map_err(|e| self.err(&error_chain(&e)))
        };
        let known = self.authorization.lock().map(|a| a.clone()).unwrap_or(None);
        let response = with_auth(known.as_ref())?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let authorization = self.answer(&challenge, push)?;
        let response = with_auth(Some(&authorization))?;
        if let Ok(mut a) = self.authorization.lock() {
            *a = Some(authorization);
        }
        Ok(response)
    }

    /// The `Authorization` value answering `challenge`.
    fn answer(&self, challenge: &str, push: bool) -> Result<String, StoreError> {
        use base64::Engine as _;
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        let params = auth_params(params);
        let basic = self.credentials.as_ref().map(|c| {
            let raw = format!("{}:{}", c.user, c.password);
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(raw))
        });
        if scheme.eq_ignore_ascii_case("basic") {
            return basic.ok_or_else(|| {
                self.err("the registry asks for credentials, and no auth file has any for it (docs/store.md#registries)")
            });
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(self.err(&format!(
                "the registry answered 401 with no challenge bx can answer ({:?})",
                crate::error::cut(challenge, 100)
            )));
        }
        let realm = params.get("realm").cloned().unwrap_or_default();
        let realm_url = url::Url::parse(&realm).map_err(|_| {
            self.err(&format!("token realm {:?} is not a URL", crate::error::cut(&realm, 100)))
        })?;
        // Over https; or over plain http on this machine, for a registry on this machine
        // (a remote registry cannot aim the owner's credentials at a local port).
        let realm_local = realm_url.host_str().is_some_and(is_loopback_host);
        let realm_is_safe =
            realm_url.scheme() == "https" || (self.reference.is_loopback() && realm_local);
        if realm_url.scheme() != "https" && !realm_local && !self.plain_http {
            return Err(self.err(&format!(
                "the token realm {} is plain http off this machine (pass --plain-http to allow it)",
                crate::error::cut(realm_url.as_str(), 200)
            )));
        }
        let action = if push { "pull,push" } else { "pull" };
        let scope = format!("repository:{}:{action}", self.reference.repository);
        let mut request = self.client.get(realm_url.as_str()).query(&[("scope", scope.as_str())]);
        if let Some(service) = params.get("service") {
            request = request.query(&[("service", service.as_str())]);
        }
        // Credentials go to a token realm only over https or on this machine.
        if let (Some(b), true) = (&basic, realm_is_safe) {
            request = request.header(reqwest::header::AUTHORIZATION, b);
        }
        let response = request.send().map_err(|e| self.err(&error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(self.err(&format!(
                "the token service answered {}{}",
                response.status(),
                if basic.is_none() {
                    " (no auth file has credentials for this registry)"
                } else {
                    ""
                }
            )));
        }
        let body = read_bounded(response, MAX_SMALL_BYTES, Instant::now() + SMALL_DEADLINE, None)
            .map_err(|e| self.err(&format!("the token response: {e}")))?;
        let json: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| self.err("the token response is not JSON"))?;
        let token = json
            .get("token")
            .or_else(|| json.get("access_token"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| self.err("the token response has no token"))?;
        Ok(format!("Bearer {token}"))
    }

    /// A manifest by tag or digest: its bytes (at most [`MAX_MANIFEST_BYTES`]) and their
    /// digest, checked against the reference's digest when it has one. `None` when the
    /// registry has no such manifest.
    pub fn manifest(&self, reference: &str) -> Result<Option<(Vec<u8>, Digest)>, StoreError> {
        let url = self.url(&format!("manifests/{reference}"));
        let accept = format!("{OCI_MANIFEST_TYPE}, {DOCKER_MANIFEST_TYPE}");
        let response =
            self.send(false, &|c| c.get(&url).header(reqwest::header::ACCEPT, &accept))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let response = self.check(response, &format!("manifest {reference}"))?;
        let bytes =
            read_bounded(response, MAX_MANIFEST_BYTES, Instant::now() + SMALL_DEADLINE, None)
                .map_err(|e| self.err(&format!("manifest {reference}: {e}")))?;
        let digest = Digest::of(&bytes);
        if reference.starts_with("sha256:") && digest.to_string() != reference {
            return Err(self.err(&format!(
                "asked for manifest {reference} and got bytes that hash to {digest}"
            )));
        }
        Ok(Some((bytes, digest)))
    }

    /// A blob, at most `max` bytes, checked against its descriptor's digest and size.
    pub fn blob(
        &self,
        descriptor: &Descriptor,
        max: u64,
        progress: Option<Progress<'_>>,
    ) -> Result<Vec<u8>, StoreError> {
        let digest = Digest::parse(&descriptor.digest)
            .map_err(|e| self.err(&format!("a layer's digest: {e}")))?;
        if descriptor.size > max {
            return Err(self.err(&format!(
                "blob {digest} is {} bytes; at most {max} are read",
                descriptor.size
            )));
        }
        let url = self.url(&format!("blobs/{digest}"));
        let response = self.send(false, &|c| c.get(&url))?;
        let response = self.check(response, &format!("blob {digest}"))?;
        // A component may take minutes; a signature payload or a config, no more than a
        // manifest.
        let deadline = Instant::now()
            + if max > MAX_MANIFEST_BYTES { TRANSFER_DEADLINE } else { SMALL_DEADLINE };
        let bytes = read_bounded(response, descriptor.size, deadline, progress)
            .map_err(|e| self.err(&format!("blob {digest}: {e}")))?;
        if bytes.len() as u64 != descriptor.size {
            return Err(self.err(&format!(
                "blob {digest}: got {} of the {} bytes its manifest says",
                bytes.len(),
                descriptor.size
            )));
        }
        let actual = Digest::of(&bytes);
        if actual != digest {
            return Err(self.err(&format!("blob {digest} has bytes that hash to {actual}")));
        }
        Ok(bytes)
    }

    /// Pulls the component at the reference: the manifest, then `check` on it (the
    /// expected component digest, the signature) before the layer is downloaded, then
    /// the layer.
    pub fn pull_component(
        &self,
        check: &mut dyn FnMut(&Digest, &Descriptor) -> Result<(), StoreError>,
        progress: Progress<'_>,
    ) -> Result<Pulled, StoreError> {
        let reference = self.reference.manifest_ref();
        let (bytes, manifest_digest) = self
            .manifest(&reference)?
            .ok_or_else(|| self.err(&format!("the registry has no manifest {reference}")))?;
        let manifest = ImageManifest::parse(&bytes).map_err(|e| self.err(&e.to_string()))?;
        let layer = manifest.component_layer().map_err(|e| self.err(&e.to_string()))?.clone();
        check(&manifest_digest, &layer)?;
        let bytes = self.blob(&layer, MAX_COMPONENT_BYTES, Some(progress))?;
        Ok(Pulled { manifest: manifest_digest, bytes })
    }

    /// Uploads a blob unless the registry has it already; returns its descriptor.
    fn push_blob(&self, media_type: &str, bytes: &[u8]) -> Result<Descriptor, StoreError> {
        let digest = Digest::of(bytes);
        let descriptor = Descriptor {
            media_type: media_type.to_owned(),
            digest: digest.to_string(),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        };
        let head = self.url(&format!("blobs/{digest}"));
        if self.send(true, &|c| c.head(&head))?.status().is_success() {
            return Ok(descriptor);
        }
        let start = self.url("blobs/uploads/");
        let response =
            self.send(true, &|c| c.post(&start).header(reqwest::header::CONTENT_LENGTH, "0"))?;
        let response = self.check(response, "starting an upload")?;
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| self.err("the registry gave no upload location"))?
            .to_owned();
        let mut upload = url::Url::parse(&self.base)
            .and_then(|base| base.join(&location))
            .map_err(|_| self.err("the upload location is not a URL"))?;
        if upload.origin()
            != url::Url::parse(&self.base).map_err(|_| self.err("bad base"))?.origin()
        {
            return Err(self.err("the upload location is on another host"));
        }
        upload.query_pairs_mut().append_pair("digest", &digest.to_string());
        let body = bytes.to_vec();
        let response = self.send(true, &|c| {
            c.put(upload.as_str())
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(body.clone())
        })?;
        self.check(response, &format!("uploading blob {digest}"))?;
        Ok(descriptor)
    }

    /// Puts a manifest under `reference` (a tag, or its own digest); returns its digest.
    pub fn push_manifest(
        &self,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<Digest, StoreError> {
        let url = self.url(&format!("manifests/{reference}"));
        let body = bytes.to_vec();
        let response = self.send(true, &|c| {
            c.put(&url).header(reqwest::header::CONTENT_TYPE, media_type).body(body.clone())
        })?;
        self.check(response, &format!("putting manifest {reference}"))?;
        Ok(Digest::of(bytes))
    }

    /// Pushes a blob of `media_type` (used by tests and by signature tooling too).
    pub fn put_blob(&self, media_type: &str, bytes: &[u8]) -> Result<Descriptor, StoreError> {
        self.push_blob(media_type, bytes)
    }

    /// Publishes `component` as a Wasm artifact under the reference's tag: the layer,
    /// a config naming what the component imports and exports, then the manifest.
    pub fn publish(
        &self,
        component: &[u8],
        imports: &[String],
        exports: &[String],
    ) -> Result<Published, StoreError> {
        let tag = self.reference.tag.clone().ok_or_else(|| self.err("publishing needs a :TAG"))?;
        if self.reference.digest.is_some() {
            return Err(self.err("publish to a tag, not a digest"));
        }
        let layer = self.push_blob(WASM_LAYER_TYPE, component)?;
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer.digest],
            "component": {"imports": imports, "exports": exports},
        });
        let config = self.push_blob(WASM_CONFIG_TYPE, config.to_string().as_bytes())?;
        let manifest = ImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST_TYPE.to_owned()),
            config,
            layers: vec![layer.clone()],
        };
        let bytes = serde_json::to_vec(&manifest).map_err(|e| self.err(&e.to_string()))?;
        let digest = self.push_manifest(&tag, OCI_MANIFEST_TYPE, &bytes)?;
        let component = Digest::parse(&layer.digest).map_err(|e| self.err(&e.to_string()))?;
        Ok(Published { manifest: digest, component })
    }

    /// A response that is a success, or the registry's error: its status and, when it
    /// sent the distribution spec's error body, the first error's code and message, cut.
    fn check(
        &self,
        response: reqwest::blocking::Response,
        what: &str,
    ) -> Result<reqwest::blocking::Response, StoreError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = read_bounded(response, MAX_SMALL_BYTES, Instant::now() + SMALL_DEADLINE, None)
            .unwrap_or_default();
        let detail = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("errors")?.get(0).cloned())
            .map(|e| {
                let code = e.get("code").and_then(|c| c.as_str()).unwrap_or("");
                let message = e.get("message").and_then(|c| c.as_str()).unwrap_or("");
                format!(": {}", crate::error::cut(&format!("{code} {message}"), MAX_SHOWN_BYTES))
            })
            .unwrap_or_default();
        Err(self.err(&format!("{what}: the registry answered {status}{detail}")))
    }
}

/// What [`Registry::publish`] put there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The manifest's digest (`oci://…@` this pins it).
    pub manifest: Digest,
    /// The component layer's digest (what `--digest` names).
    pub component: Digest,
}

fn registry_err(reference: &Reference, message: &str) -> StoreError {
    StoreError::Registry {
        reference: reference.to_string(),
        message: crate::error::cut(message, 1024),
    }
}

/// Why a response body was not read whole.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// Its Content-Length is over the bound.
    #[error("the registry says {announced} bytes; at most {max} are read")]
    Announced {
        /// The length announced.
        announced: u64,
        /// The bound.
        max: u64,
    },
    /// It was not read by its deadline.
    #[error("not done by its deadline, after {0} bytes")]
    Deadline(usize),
    /// The connection failed while it was read.
    #[error(
        "the connection failed after {read} of {} bytes: {}",
        total.map_or_else(|| "?".to_owned(), |t| t.to_string()),
        error_chain(error)
    )]
    Connection {
        /// Bytes read.
        read: usize,
        /// The length announced, if one was.
        total: Option<u64>,
        /// The failure.
        error: std::io::Error,
    },
    /// More bytes came than the bound.
    #[error("more than {0} bytes")]
    TooLong(u64),
    /// Fewer bytes came than announced.
    #[error("the connection ended after {read} of {total} bytes")]
    Short {
        /// Bytes read.
        read: usize,
        /// The length announced.
        total: u64,
    },
}

/// Reads a response body of at most `max` bytes by `deadline`, refusing a longer one
/// (by its Content-Length before reading, or as it arrives).
fn read_bounded(
    response: reqwest::blocking::Response,
    max: u64,
    deadline: Instant,
    mut progress: Option<Progress<'_>>,
) -> Result<Vec<u8>, BodyError> {
    let total = response.content_length();
    if let Some(announced) = total.filter(|t| *t > max) {
        return Err(BodyError::Announced { announced, max });
    }
    let mut reader = response.take(max + 1);
    let mut data = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if Instant::now() > deadline {
            return Err(BodyError::Deadline(data.len()));
        }
        let n = reader.read(&mut buf).map_err(|error| BodyError::Connection {
            read: data.len(),
            total,
            error,
        })?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        if data.len() as u64 > max {
            return Err(BodyError::TooLong(max));
        }
        if let Some(p) = progress.as_mut() {
            p(data.len() as u64, total);
        }
    }
    if let Some(total) = total.filter(|t| *t != data.len() as u64) {
        return Err(BodyError::Short { read: data.len(), total });
    }
    Ok(data)
}

/// `key="value"` pairs of an authentication challenge (values may hold commas).
fn auth_params(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else { break };
        let key = key.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.split_once('"') {
                Some((v, n)) => (v.to_owned(), n),
                None => (quoted.to_owned(), ""),
            },
            None => match after.split_once(',') {
                Some((v, n)) => (v.trim().to_owned(), n),
                None => (after.trim().to_owned(), ""),
            },
        };
        out.insert(key, value);
        rest = next.trim_start_matches(',').trim();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn references_parse_by_the_distribution_grammar() {
        let r = Reference::parse(&format!("oci://127.0.0.1:5000/bx/tools/fs-read:v1@{D}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "bx/tools/fs-read");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.as_ref().map(|d| d.to_string()).as_deref(), Some(D));
        assert!(r.is_loopback());
        assert_eq!(r.to_string(), format!("oci://127.0.0.1:5000/bx/tools/fs-read:v1@{D}"));
        let r = Reference::parse("oci://ghcr.io/acme/weather:1.2.0").unwrap();
        assert!(!r.is_loopback());
        assert_eq!(r.name(), "ghcr.io/acme/weather");
        for bad in [
            "https://ghcr.io/acme/weather:1",
            "oci://ghcr.io/acme/weather",
            "oci://ghcr.io/Acme/weather:1",
            "oci://ghcr.io/acme/../weather:1",
            "oci://ghcr.io/acme/weather:-x",
            "oci://ghcr.io/acme/weather@sha256:abc",
            "oci://ghcr.io:1/",
            "oci://gh cr.io/acme/w:1",
            "oci://127.0.0.1:05055/acme/w:1",
            "oci://LOCALHOST:5000/acme/w:1",
            "oci://127.1:5000/acme/w:1",
            "oci://2130706433:5000/acme/w:1",
            "oci://0x7f000001:5000/acme/w:1",
            "oci://0177.0.0.1:5000/acme/w:1",
            "oci://127.000.000.001:5000/acme/w:1",
            "oci://192.0x0.2.2:5000/acme/w:1",
            "oci://0.0.0.0:5000/acme/w:1",
            "oci://[::ffff:127.0.0.1]:5000/acme/w:1",
            "oci://[fd00:0::2]:5000/acme/w:1",
            "oci://[FD00::2]:5000/acme/w:1",
            "oci://[::]:5000/acme/w:1",
            "oci://ghcr.io:99999/acme/w:1",
            "oci://[::1/acme/w:1",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }

    /// Every name of this machine is one registry to a scope; a port leading zero or an
    /// upper-case host is no way around one, and a malformed scope is an error.
    #[test]
    fn scopes_match_the_registry_however_it_is_named() {
        let r = |t: &str| Reference::parse(t).unwrap();
        let scope = Scope::parse("127.0.0.1:5055/acme").unwrap();
        assert!(scope.covers(&r("oci://127.0.0.1:5055/acme/evil:v1")));
        assert!(scope.covers(&r("oci://localhost:5055/acme/evil:v1")));
        assert!(scope.covers(&r("oci://[::1]:5055/acme:v1")));
        assert!(scope.covers(&r("oci://127.0.0.2:5055/acme/x/y:v1")));
        assert!(!scope.covers(&r("oci://127.0.0.1:5056/acme/evil:v1")));
        assert!(!scope.covers(&r("oci://127.0.0.1:5055/acme-evil/x:v1")));
        let any_port = Scope::parse("ghcr.io").unwrap();
        assert!(any_port.covers(&r("oci://ghcr.io/acme/w:1")));
        assert!(any_port.covers(&r("oci://ghcr.io:443/acme/w:1")));
        assert!(any_port.covers(&r("oci://ghcr.io:5000/acme/w:1")));
        let on_443 = Scope::parse("ghcr.io:443/acme").unwrap();
        assert!(on_443.covers(&r("oci://ghcr.io/acme/w:1")));
        for bad in [
            "127.0.0.1:5055/ACME",
            "oci://127.0.0.1:5055/acme",
            "127.0.0.1:5055/acme/*",
            "127.0.0.1:5055/acme/evil:v1",
            "127.0.0.1:5055/acme/evil@sha256:abc",
            "127.0.0.1:05055/acme",
            "GHCR.io/acme",
            "",
        ] {
            assert!(Scope::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn challenges_are_read_with_commas_in_quotes() {
        let p = auth_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "registry.example");
        assert_eq!(p["scope"], "repository:a/b:pull,push");
    }

    #[test]
    fn only_a_wasm_artifact_has_a_component_layer() {
        let layer = |t: &str| Descriptor {
            media_type: t.into(),
            digest: D.into(),
            size: 3,
            annotations: BTreeMap::new(),
        };
        let mut m = ImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST_TYPE.into()),
            config: layer(WASM_CONFIG_TYPE),
            layers: vec![layer(WASM_LAYER_TYPE)],
        };
        assert!(m.component_layer().is_ok());
        m.layers.push(layer(WASM_LAYER_TYPE_OLD));
        let refused = m.component_layer().unwrap_err();
        assert!(
            matches!(refused, ImageManifestError::Layers { layers: 2, wasm: 2 }),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("2 layers"), "{refused}");
        m.layers.truncate(1);
        m.config = layer("application/vnd.oci.image.config.v1+json");
        assert!(m.component_layer().unwrap_err().to_string().contains("not a Wasm artifact"));
        let text = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(matches!(ImageManifest::parse(text), Err(ImageManifestError::NotAnImage(_))));
    }
}
