//! The installed set: tool name → digest, and the tool epoch that changes whenever the
//! set does (the agent keeps its tools array fixed within one epoch).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::StoreError;

/// One installed tool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstalledTool {
    /// `sha256:` digest of the component.
    pub digest: String,
    /// Size of the component in bytes.
    pub size: u64,
    /// Resource kinds its arguments name (`path-read`, `path-write`, `url-fetch`).
    pub resources: Vec<String>,
    /// For a function of a standard WASI component (not `bx:tool`): which function, and
    /// what its manifest asks for. Absent for a `bx:tool` component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<InstalledFunction>,
    /// Where it was installed from, when that was a registry: `oci://…@sha256:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Who signed its manifest, when a pinned key's scope required a signature:
    /// `name (sha256:fingerprint)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// What it declared it may reach when it was installed (the capability lock): what
    /// `bx tool install --replace` compares a new version against.
    #[serde(default)]
    pub declared: Declared,
}

/// What one tool declared it may reach: the capability lock kept with its digest.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// Each argument that names a resource, and its kind (`path-read`, `path-write`,
    /// `url-fetch`).
    #[serde(default)]
    pub args: BTreeMap<String, String>,
    /// What it reaches whatever its arguments (from a standard component's manifest):
    /// `path-read /srv/data`, `url-fetch https://api.example/`.
    #[serde(default)]
    pub statics: Vec<String>,
    /// `sha256:` of its arguments' JSON schema.
    #[serde(default)]
    pub schema: String,
}

impl Declared {
    /// One line per capability of tool `tool`, as the difference shows them.
    pub fn lines(&self, tool: &str) -> Vec<String> {
        let args =
            self.args.iter().map(|(arg, kind)| format!("{tool}: argument {arg:?} is {kind}"));
        let statics = self.statics.iter().map(|s| format!("{tool}: whatever its arguments, {s}"));
        args.chain(statics).collect()
    }
}

/// How a new version's capabilities differ from the installed one's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Difference {
    /// Capabilities the new version declares that the installed one did not.
    pub added: Vec<String>,
    /// Capabilities the installed one declared that the new one does not.
    pub removed: Vec<String>,
    /// Other changes: tools that come or go, argument schemas that changed.
    pub other: Vec<String>,
}

impl Difference {
    /// Between the tools `old` and `new` (name → tool), of one tool or one component.
    pub fn between(
        old: &BTreeMap<String, InstalledTool>,
        new: &BTreeMap<String, InstalledTool>,
    ) -> Difference {
        let lines = |set: &BTreeMap<String, InstalledTool>| -> std::collections::BTreeSet<String> {
            set.iter().flat_map(|(n, t)| t.declared.lines(n)).collect()
        };
        let (before, after) = (lines(old), lines(new));
        let mut other = Vec::new();
        for (name, tool) in new {
            match old.get(name) {
                // Only beside tools it replaces is a tool "new".
                None if old.is_empty() => {}
                None => other.push(format!("{name}: a new tool")),
                Some(was) if was.declared.schema != tool.declared.schema => {
                    other.push(format!("{name}: its argument schema changed"))
                }
                Some(_) => {}
            }
        }
        other.extend(old.keys().filter(|n| !new.contains_key(*n)).map(|n| format!("{n}: gone")));
        Difference {
            added: after.difference(&before).cloned().collect(),
            removed: before.difference(&after).cloned().collect(),
            other,
        }
    }

    /// The difference a line each: `+ …` added, `- …` gone, `~ …` other.
    pub fn lines(&self) -> Vec<String> {
        (self.added.iter().map(|l| format!("+ {l}")))
            .chain(self.removed.iter().map(|l| format!("- {l}")))
            .chain(self.other.iter().map(|l| format!("~ {l}")))
            .collect()
    }
}

/// One exported function of a standard WASI component, installed as a tool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstalledFunction {
    /// The component's name, which its tools' names start with (`weather`).
    pub component: String,
    /// The function as its WIT names it: `get-forecast`, or `interface#name`.
    pub export: String,
    /// Its summary: the component's doc comment for it, or a line of bx's.
    pub summary: String,
    /// Which parameters name resources, per call (from the manifest).
    #[serde(default)]
    pub params: crate::manifest::ParamReach,
    /// What every call reaches whatever its arguments (from the manifest).
    #[serde(default)]
    pub reach: crate::manifest::StaticReach,
}

/// `installed.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Installed {
    /// Starts at 0 and rises by one on every install, replace or removal.
    pub epoch: u64,
    /// Installed tools by name.
    pub tools: BTreeMap<String, InstalledTool>,
    /// The owner's other MCP servers by name (`bx mcp add`), each with its pinned tool
    /// set: their tools are `NAME.TOOL`, in the same epoch as the components'.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstreams: BTreeMap<String, bx_gateway::Upstream>,
}

impl Installed {
    /// Reads `path`; a missing file is the empty set at epoch 0.
    pub fn load(path: &Path) -> Result<Installed, StoreError> {
        let Some(bytes) = bx_state::read_own(path, bx_state::MAX_OWN_FILE_BYTES)? else {
            return Ok(Installed::default());
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            let (line, column) = (e.line(), e.column());
            StoreError::State(bx_state::StateError::Parse {
                path: path.display().to_string(),
                line,
                column,
                message: e.to_string(),
                snippet: String::new(),
            })
        })
    }

    /// Writes `path` atomically (temporary file, sync, rename).
    pub fn save(&self, path: &Path) -> Result<(), StoreError> {
        let mut text = serde_json::to_string_pretty(self).map_err(|e| StoreError::io(path, e))?;
        text.push('\n');
        Ok(bx_state::write_atomically(path, text.as_bytes())?)
    }
}

impl InstalledFunction {
    /// What the runtime needs to load it as tool `tool`: the parameters that name
    /// resources, and what it reaches whatever its arguments (a host as `https://host/`).
    pub fn spec(&self, tool: &str) -> bx_runtime::FunctionSpec {
        use bx_runtime::{ResourceArg, ResourceKind};
        let arg = |kind: ResourceKind| move |p: &String| ResourceArg { arg: p.clone(), kind };
        let p = &self.params;
        let resources = (p.read.iter().map(arg(ResourceKind::PathRead)))
            .chain(p.write.iter().map(arg(ResourceKind::PathWrite)))
            .chain(p.fetch.iter().map(arg(ResourceKind::UrlFetch)))
            .collect();
        let r = &self.reach;
        let statics = (r.read.iter().map(|p| (ResourceKind::PathRead, p.clone())))
            .chain(r.write.iter().map(|p| (ResourceKind::PathWrite, p.clone())))
            .chain(r.hosts.iter().map(|h| (ResourceKind::UrlFetch, format!("https://{h}/"))))
            .collect();
        bx_runtime::FunctionSpec {
            export: self.export.clone(),
            name: tool.to_owned(),
            summary: self.summary.clone(),
            resources,
            statics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A malformed installed set names the file, where in it, and the runbook entry; the
    /// file is left as it was.
    #[test]
    fn a_malformed_installed_set_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("installed.json");
        std::fs::write(&path, "{\"epoch\": 1,\n \"tools\": [}").unwrap();
        let err = Installed::load(&path).unwrap_err();
        assert_eq!(err.runbook(), Some("docs/runbook.md#store-file-invalid"), "{err}");
        let err = err.to_string();
        let at = format!("{}:2:", path.display());
        assert!(err.starts_with(&at), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"epoch\": 1,\n \"tools\": [}");
    }
}
