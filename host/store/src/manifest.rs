//! What a standard WASI component asks to reach: its manifest.
//!
//! A `bx:tool` component says which of its arguments name resources (`describe`). A
//! standard component exports plain functions and says nothing, so the owner (or its
//! publisher) writes it down beside the component, and `bx tool install --manifest FILE`
//! records it. Two forms are read:
//!
//! - bx's own, TOML (`*.toml`):
//!   ```toml
//!   [reach]                      # reached whatever the arguments
//!   read = ["/srv/data"]         # paths read; relative ones join the session's workspace
//!   write = ["out"]              # paths written
//!   hosts = ["api.weather.gov"]  # hosts fetched from (host or host:port)
//!
//!   [functions.get-forecast]     # which parameters name resources, per call
//!   read = ["path"]
//!   write = []
//!   fetch = ["url"]
//!   ```
//! - Wassette's `policy.yaml` (`*.yaml`, `*.yml`): `permissions.storage.allow[]` (`uri:
//!   fs://PATH`, with a trailing `/**` or `/*` meaning the directory, and `access` of
//!   `read` and `write`) and `permissions.network.allow[].host` become the static reach.
//!   What bx cannot take from it is said, not dropped silently: address ranges (`cidr`),
//!   environment variables (bx gives tools no environment) and deny lists (the owner's
//!   policy decides what is refused).
//!
//! A manifest only asks. Every call's resources, static ones included, are decided by
//! the owner's policy before the call runs; a function with no manifest reaches nothing.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{ManifestError, StoreError};

/// Bytes of a manifest file read, at most.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 64 << 10;
/// Entries of one list in a manifest, at most.
const MAX_ENTRIES: usize = 64;
/// Notes on what a Wassette policy asked for that bx does not take, at most.
const MAX_NOTES: usize = 16;
/// Bytes of one entry (a path, a host, a parameter name).
const MAX_ENTRY_BYTES: usize = 1024;

/// What a component reaches whatever a call's arguments are.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticReach {
    /// Paths read (absolute, or relative to the session's workspace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Paths written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    /// Hosts fetched from, as `host` or `host:port`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

impl StaticReach {
    /// Whether it reaches nothing.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty() && self.write.is_empty() && self.hosts.is_empty()
    }
}

/// Which parameters of one function name resources.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamReach {
    /// Parameters whose values are paths the function reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Parameters whose values are paths it writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    /// Parameters whose values are URLs it fetches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fetch: Vec<String>,
    /// What the function is for, as the model reads it: used when the component carries
    /// no doc comment for it (componentize-py and jco drop them), else the doc comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A standard component's manifest, in bx's form.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Reached by every function whatever its arguments.
    #[serde(default)]
    pub reach: StaticReach,
    /// Per function (by its WIT name, `get-forecast`, or `interface#name` for one in an
    /// exported interface): which parameters name resources.
    #[serde(default)]
    pub functions: BTreeMap<String, ParamReach>,
}

/// A manifest as read, with what bx could not take from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadManifest {
    /// What it asks for, in bx's form.
    pub manifest: Manifest,
    /// What the file asked for that bx does not grant this way, for the owner.
    pub notes: Vec<String>,
}

/// `text` cut to 128 bytes for a message (a manifest's entries are the publisher's).
fn cut(text: &str) -> String {
    let mut end = text.len().min(128);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn invalid(path: &Path, why: ManifestError) -> StoreError {
    StoreError::Manifest { path: path.display().to_string(), why }
}

impl Manifest {
    /// Reads the manifest at `path`: TOML for `.toml`, Wassette's policy for `.yaml` or
    /// `.yml`. Bounded in size, every list and entry bounded, every entry checked.
    pub fn read(path: &Path) -> Result<ReadManifest, StoreError> {
        let bytes = crate::fetch::read_bounded(path, MAX_MANIFEST_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| invalid(path, ManifestError::NotUtf8))?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        let read = match ext {
            "toml" => ReadManifest {
                manifest: toml::from_str(&text)
                    .map_err(|e| invalid(path, ManifestError::Toml(e)))?,
                notes: Vec::new(),
            },
            "yaml" | "yml" => from_wassette(&text).map_err(|m| invalid(path, m))?,
            _ => return Err(invalid(path, ManifestError::UnknownForm)),
        };
        read.manifest.check().map_err(|m| invalid(path, m))?;
        Ok(read)
    }

    /// Bounds and shapes: lists of at most 64 entries of at most 1 KiB, no control
    /// characters, hosts that are names or addresses with an optional port.
    pub fn check(&self) -> Result<(), ManifestError> {
        let lists = [("reach.read", &self.reach.read), ("reach.write", &self.reach.write)]
            .into_iter()
            .chain([("reach.hosts", &self.reach.hosts)])
            .map(|(n, l)| (n.to_owned(), l))
            .chain(self.functions.iter().flat_map(|(f, p)| {
                [("read", &p.read), ("write", &p.write), ("fetch", &p.fetch)]
                    .map(|(n, l)| (format!("functions.{f}.{n}"), l))
            }));
        for (name, list) in lists {
            if list.len() > MAX_ENTRIES {
                return Err(ManifestError::TooManyEntries {
                    list: name,
                    count: list.len(),
                    max: MAX_ENTRIES,
                });
            }
            for entry in list.iter() {
                if entry.is_empty() || entry.len() > MAX_ENTRY_BYTES {
                    return Err(ManifestError::EntrySize { list: name, bytes: entry.len() });
                }
                if entry.chars().any(char::is_control) {
                    return Err(ManifestError::ControlCharacter { list: name, entry: cut(entry) });
                }
            }
        }
        if self.functions.len() > MAX_ENTRIES * 4 {
            return Err(ManifestError::TooManyFunctions {
                count: self.functions.len(),
                max: MAX_ENTRIES * 4,
            });
        }
        for host in &self.reach.hosts {
            let url = format!("https://{host}/");
            match url::Url::parse(&url) {
                Ok(u) if u.host_str().is_some() && u.path() == "/" && u.username().is_empty() => {}
                _ => return Err(ManifestError::NotAHost(cut(host))),
            }
        }
        Ok(())
    }
}

/// Wassette's `policy.yaml`, as far as it asks for what bx grants.
#[derive(serde::Deserialize)]
struct WassettePolicy {
    #[serde(default)]
    permissions: WassettePermissions,
}

#[derive(serde::Deserialize, Default)]
struct WassettePermissions {
    #[serde(default)]
    storage: Option<WassetteLists<WassetteStorage>>,
    #[serde(default)]
    network: Option<WassetteLists<WassetteNetwork>>,
    #[serde(default)]
    environment: Option<WassetteLists<serde::de::IgnoredAny>>,
}

#[derive(serde::Deserialize)]
struct WassetteLists<T> {
    #[serde(default = "Vec::new")]
    allow: Vec<T>,
    #[serde(default)]
    deny: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct WassetteStorage {
    uri: String,
    #[serde(default)]
    access: Vec<String>,
}

#[derive(serde::Deserialize)]
struct WassetteNetwork {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    cidr: Option<String>,
}

/// The deepest flow nesting (`[` and `{`) a Wassette policy may have; its own is 2 or 3.
const MAX_FLOW_DEPTH: usize = 64;

/// Refuses YAML text whose brackets and braces nest deeper than [`MAX_FLOW_DEPTH`]:
/// 41,219 unclosed `[` in 41 KB took the parser 2 s (`make fuzz`), and nothing a manifest
/// says needs more than a few. Every bracket counts, in quotes and comments too (a scan
/// that skipped quoted text was led past the brackets by a stray apostrophe, and no
/// manifest holds 64 unclosed brackets in its text). A linear scan: no YAML library
/// offers a depth bound before it parses.
fn check_flow_depth(text: &str) -> Result<(), ManifestError> {
    let mut depth = 0usize;
    for (at, b) in text.bytes().enumerate() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(ManifestError::TooDeep { max: MAX_FLOW_DEPTH, at });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// A Wassette policy as bx's manifest, with notes on what bx does not take from it.
fn from_wassette(text: &str) -> Result<ReadManifest, ManifestError> {
    check_flow_depth(text)?;
    let policy: WassettePolicy = yaml_serde::from_str(text).map_err(ManifestError::Yaml)?;
    let mut reach = StaticReach::default();
    let mut notes = Vec::new();
    let p = policy.permissions;
    if let Some(storage) = p.storage {
        for s in storage.allow {
            let Some(rest) = s.uri.strip_prefix("fs://") else {
                return Err(ManifestError::NotAFileUri(cut(&s.uri)));
            };
            let path = rest.strip_suffix("/**").or_else(|| rest.strip_suffix("/*")).unwrap_or(rest);
            if path.contains(['*', '?', '[']) {
                return Err(ManifestError::Pattern(cut(&s.uri)));
            }
            for access in &s.access {
                match access.as_str() {
                    "read" => reach.read.push(path.to_owned()),
                    "write" => reach.write.push(path.to_owned()),
                    other => {
                        return Err(ManifestError::Access { uri: cut(&s.uri), access: cut(other) });
                    }
                }
            }
        }
        if storage.deny.is_some() {
            notes.push("storage deny rules are not taken: the owner's policy decides".into());
        }
    }
    if let Some(network) = p.network {
        for n in network.allow {
            match (n.host, n.cidr) {
                (Some(host), None) => {
                    if host.contains('*') {
                        let host = cut(&host);
                        notes.push(format!(
                            "network host {host:?} is a pattern; bx asks for named hosts only"
                        ));
                    } else {
                        reach.hosts.push(host);
                    }
                }
                (None, Some(cidr)) => notes
                    .push(format!("network cidr {cidr:?} is not taken: bx grants hosts by name")),
                _ => return Err(ManifestError::NetworkEntry),
            }
        }
        if network.deny.is_some() {
            notes.push("network deny rules are not taken: the owner's policy decides".into());
        }
    }
    if p.environment.is_some_and(|e| !e.allow.is_empty()) {
        notes.push("environment variables are not given: bx gives tools no environment".into());
    }
    // One note per entry of a 64 KiB file could run to thousands of lines.
    if notes.len() > MAX_NOTES {
        let more = notes.len() - MAX_NOTES;
        notes.truncate(MAX_NOTES);
        notes.push(format!("and {more} more entries not taken"));
    }
    Ok(ReadManifest { manifest: Manifest { reach, functions: BTreeMap::new() }, notes })
}

#[cfg(test)]
mod tests {
    #[test]
    fn deep_brackets_are_refused_before_the_yaml_parser_wherever_they_are() {
        let deep = format!("permissions:\n  storage:\n    allow: {}", "[".repeat(41_000));
        match from_wassette(&deep) {
            Err(ManifestError::TooDeep { max: 64, at }) => assert_eq!(at, 35 + 64),
            other => panic!("{other:?}"),
        }
        // Closed ones, however many, are not deep; nor is a stray quote a way past them.
        let closed = format!("version: \"{}\"\n", "[]".repeat(10_000));
        assert!(check_flow_depth(&closed).is_ok());
        let hidden = format!("a: it's\nversion: {}", "[".repeat(100));
        assert!(check_flow_depth(&hidden).is_err());
        let seed = include_str!("../../../fixtures/manifests/regressions/deep-brackets.yaml");
        assert!(matches!(from_wassette(seed), Err(ManifestError::TooDeep { .. })));
    }
    use super::*;

    #[test]
    fn reads_a_wassette_policy_and_says_what_it_leaves() {
        let text = "version: \"1.0\"\ndescription: weather\npermissions:\n  storage:\n    allow:\n    - uri: \"fs:///srv/data/**\"\n      access: [\"read\", \"write\"]\n    deny:\n    - uri: \"fs:///etc/**\"\n      access: [\"read\"]\n  network:\n    allow:\n    - host: \"api.weather.gov\"\n    - host: \"*.example.com\"\n    - cidr: \"10.0.0.0/8\"\n  environment:\n    allow:\n    - key: \"API_KEY\"\n";
        let read = from_wassette(text).unwrap();
        assert_eq!(read.manifest.reach.read, ["/srv/data"]);
        assert_eq!(read.manifest.reach.write, ["/srv/data"]);
        assert_eq!(read.manifest.reach.hosts, ["api.weather.gov"]);
        assert_eq!(read.notes.len(), 4, "{:?}", read.notes);
        assert!(read.notes.iter().any(|n| n.contains("cidr")));
        assert!(read.notes.iter().any(|n| n.contains("environment")));
        // A publisher's thousand address ranges make a bounded list of notes.
        let many: String = (0..1000).map(|i| format!("    - cidr: \"10.0.{i}.0/24\"\n")).collect();
        let read = from_wassette(&format!("permissions:\n  network:\n    allow:\n{many}")).unwrap();
        assert_eq!(read.notes.len(), MAX_NOTES + 1, "{:?}", read.notes.last());
        assert!(read.notes[MAX_NOTES].contains("984 more"), "{:?}", read.notes.last());
        assert!(matches!(
            from_wassette("permissions:\n  storage:\n    allow:\n    - uri: \"http://x\"\n      access: [read]\n"),
            Err(ManifestError::NotAFileUri(uri)) if uri == "http://x"
        ));
        assert!(matches!(
            from_wassette(
                "permissions:\n  storage:\n    allow:\n    - uri: \"fs:///a/*.txt\"\n      access: [read]\n"
            ),
            Err(ManifestError::Pattern(_))
        ));
    }

    /// The manifests under `fixtures/manifests/` read as their comments say.
    #[test]
    fn the_fixture_manifests_read_as_documented() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/manifests");
        let files = Manifest::read(&dir.join("files.toml")).unwrap();
        assert!(files.notes.is_empty() && files.manifest.reach.is_empty());
        assert_eq!(files.manifest.functions["write-file"].write, ["path"]);
        assert_eq!(files.manifest.functions["fetch"].fetch, ["url"]);
        let wassette = Manifest::read(&dir.join("policy.yaml")).unwrap();
        let reach = &wassette.manifest.reach;
        assert_eq!(
            (reach.read.as_slice(), reach.write.as_slice()),
            (&["/var/cache/weather".to_owned()][..], &["/var/cache/weather".to_owned()][..])
        );
        assert_eq!(reach.hosts, ["api.weather.gov"]);
        assert_eq!(wassette.notes.len(), 4, "{:?}", wassette.notes);
        // Neither TOML nor YAML by name: refused, saying which forms are read.
        let err = Manifest::read(&dir.join("../README.md")).unwrap_err().to_string();
        assert!(err.contains(".toml") && err.contains(".yaml"), "{err}");
    }

    #[test]
    fn bounds_and_shapes_are_checked() {
        let mut m = Manifest::default();
        m.reach.hosts.push("api.example.com:8443".into());
        assert!(m.check().is_ok());
        m.reach.hosts.push("user@host".into());
        assert!(matches!(m.check(), Err(ManifestError::NotAHost(h)) if h == "user@host"));
        let mut m = Manifest::default();
        m.reach.read = vec!["/a".into(); MAX_ENTRIES + 1];
        assert_eq!(
            m.check().unwrap_err().to_string(),
            format!("reach.read: {} entries, at most {MAX_ENTRIES}", MAX_ENTRIES + 1)
        );
        let mut m = Manifest::default();
        m.functions.insert(
            "f".into(),
            ParamReach { read: vec!["a\u{1b}[2J".into()], ..Default::default() },
        );
        assert_eq!(
            m.check().unwrap_err().to_string(),
            "functions.f.read: \"a\\u{1b}[2J\" holds a control character"
        );
    }
}
