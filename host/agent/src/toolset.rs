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

    /// The definitions as constrained mode tells the model of them (see
    /// [`prompt_text`]): each path argument (a resource the tool's `describe` names as
    /// read or write) described as relative to the workspace, whatever the tool's own
    /// text says ("absolute", from before workspaces).
    pub fn constrained_defs(&self) -> Vec<ToolDef> {
        let mut defs = self.defs.clone();
        for def in &mut defs {
            let Some(tool) = self.tools.get(&def.name) else { continue };
            for r in &tool.description().resources {
                if matches!(r.kind, bx_runtime::ResourceKind::UrlFetch) {
                    continue;
                }
                if let Some(prop) = def.parameters["properties"].get_mut(&r.arg)
                    && let Some(prop) = prop.as_object_mut()
                {
                    prop.insert("description".into(), serde_json::Value::String(PATH_HELP.into()));
                }
            }
        }
        defs
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

/// What a path argument says of itself in constrained mode.
const PATH_HELP: &str = "\".\" for the workspace itself, or a path relative to it";

/// What the model is told of the tools `defs` in constrained mode, where the server sees
/// no tools array (only the reply's grammar): how to reply, and one line per tool with
/// its summary and its arguments (with their descriptions, `?` when optional). The same
/// bytes for a tool epoch.
pub fn prompt_text(defs: &[ToolDef]) -> String {
    let mut out = String::from(
        "Reply with one JSON object: {\"tool\": NAME, \"with\": {ARGUMENTS}} to call a tool, \
         or {\"tool\": \"answer\", \"with\": TEXT} to answer the owner. When the owner asks \
         about files or pages, call a tool first, and answer once you have its result. The \
         tools:",
    );
    for def in defs {
        let required: Vec<&str> = def.parameters["required"]
            .as_array()
            .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let args: Vec<String> = def.parameters["properties"]
            .as_object()
            .map(|props| {
                props
                    .iter()
                    .map(|(k, v)| {
                        let mark = if required.contains(&k.as_str()) { "" } else { "?" };
                        match v["description"].as_str() {
                            Some(d) => format!("{k}{mark} ({d})"),
                            None => format!("{k}{mark}"),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "\n- {}: {} Arguments: {}.",
            def.name,
            def.description.trim_end_matches('.'),
            args.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_each_tool_its_arguments_and_the_reply_shape() {
        let defs = vec![ToolDef {
            name: "fs.list".into(),
            description: "List a directory.".into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": PATH_HELP}, "depth": {"type": "integer"}},
                "required": ["path"],
            }),
        }];
        let text = prompt_text(&defs);
        assert!(
            text.starts_with("Reply with one JSON object: {\"tool\": NAME, \"with\""),
            "{text}"
        );
        assert!(
            text.ends_with("\n- fs.list: List a directory Arguments: depth?, path (\".\" for the workspace itself, or a path relative to it)."),
            "{text}"
        );
    }
}
