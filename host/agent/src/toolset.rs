//! The tools array: every installed tool, loaded, with the definitions the model sees.
//! It is built once per tool epoch, so the request prefix stays the same between
//! installs and removals.

use std::collections::BTreeMap;

use bx_infer::ToolDef;
use bx_runtime::{LoadedTool, Runtime};
use bx_store::Store;

use crate::error::AgentError;

/// The installed tools of one epoch.
#[derive(Debug)]
pub struct Toolset {
    epoch: u64,
    tools: BTreeMap<String, LoadedTool>,
    defs: Vec<ToolDef>,
    problems: Vec<String>,
}

impl Toolset {
    /// Loads every installed tool. A tool that cannot be loaded (its bytes no longer
    /// match its digest, its schema is not JSON) is left out and named in
    /// [`Toolset::problems`]; the others stay usable.
    pub fn load(store: &Store, runtime: &Runtime) -> Result<Toolset, AgentError> {
        let installed = store.installed()?;
        let mut tools = BTreeMap::new();
        let mut defs = Vec::new();
        let mut problems = Vec::new();
        for name in installed.tools.keys() {
            let tool = match store.open_tool(runtime, name) {
                Ok((tool, bx_runtime::CacheOutcome::Replaced(why))) => {
                    problems.push(format!(
                        "{name}: its precompiled code was refused and compiled again ({why}; see docs/runbook.md#precompiled-cache)"
                    ));
                    tool
                }
                Ok((tool, _)) => tool,
                Err(e) => {
                    problems.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let d = tool.description();
            let parameters = match serde_json::from_str(&d.args_schema) {
                Ok(schema) => schema,
                Err(e) => {
                    problems.push(format!("{name}: its argument schema is not JSON: {e}"));
                    continue;
                }
            };
            defs.push(ToolDef { name: name.clone(), description: d.summary.clone(), parameters });
            tools.insert(name.clone(), tool);
        }
        Ok(Toolset { epoch: installed.epoch, tools, defs, problems })
    }

    /// The tool epoch this set belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The definitions, sorted by name: the request's tools array.
    pub fn defs(&self) -> &[ToolDef] {
        &self.defs
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&LoadedTool> {
        self.tools.get(name)
    }

    /// Tools that are installed but could not be loaded, or whose precompiled code was
    /// refused, and why.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}
