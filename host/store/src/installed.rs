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
