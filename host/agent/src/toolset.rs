//! The tools array: every installed tool, loaded, with the definitions the model sees.
//! It is built once per tool epoch, so the request prefix stays the same between
//! installs and removals. A tool is a component bx runs, or a tool of one of the owner's
//! other MCP servers (an upstream, `NAME.TOOL`), which the gateway calls: both are
//! decided, recorded and labelled on the one trust path.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use bx_broker::{Label, Resource, parse_label};
use bx_gateway::{Gateway, Upstream};
use bx_infer::{Message, ToolCall, ToolDef};
use bx_runtime::{LoadedTool, Runtime};
use bx_store::Store;

use crate::error::AgentError;
use crate::guard::GuardState;

/// The installed tools of one epoch.
#[derive(Debug)]
pub struct Toolset {
    epoch: u64,
    tools: BTreeMap<String, LoadedTool>,
    upstream: BTreeMap<String, UpstreamTool>,
    defs: Vec<ToolDef>,
    problems: Vec<String>,
}

/// A tool the model may call: a component, or an upstream MCP server's tool.
#[derive(Debug, Clone, Copy)]
pub enum Tool<'t> {
    /// A WebAssembly component bx runs.
    Component(&'t LoadedTool),
    /// A tool of an upstream MCP server.
    Upstream(&'t UpstreamTool),
}

impl Tool<'_> {
    /// The digest grants and scoped answers are tied to: the component's, or the
    /// upstream tool's pin (its name, description and schema).
    pub fn digest(&self) -> &str {
        match self {
            Tool::Component(t) => t.digest(),
            Tool::Upstream(t) => &t.digest,
        }
    }
}

/// The label of what a tool no manifest entry describes returns: untrusted, and taken as
/// private (nothing says it is not).
pub(crate) const UNLABELLED_RESULT: &str = "private/untrusted";
/// Where what such a tool sends is taken to go: the lowest label, so anything above it
/// read before asks (and the tool asks before every use anyway).
pub(crate) const UNLABELLED_SINK: &str = "public/untrusted";

/// An upstream MCP server's tool, as pinned and labelled when the owner added it.
#[derive(Debug)]
pub struct UpstreamTool {
    /// The upstream's name (`NAME` of `NAME.TOOL`).
    pub server: String,
    /// The tool's name, as the upstream spells it.
    pub tool: String,
    /// The upstream as installed (how it is reached, its pins).
    pub upstream: Upstream,
    /// The pin's digest.
    pub digest: String,
    /// The label of what it returns.
    pub result: Label,
    /// Where what it sends goes, when it acts on the world.
    pub sink: Option<Label>,
    /// No manifest entry describes it.
    pub unlabelled: bool,
    /// The running upstreams, shared by every epoch's toolset.
    pub(crate) gateway: Arc<Gateway>,
    /// Its upstream's guard, if it has one: it labels each result and sink.
    pub guard: GuardState,
}

impl UpstreamTool {
    /// The tool `tool` of the upstream `server` as installed (`up`), called through
    /// `gateway`, with what is wrong with its labels, if anything (it is then taken as
    /// unlabelled).
    pub fn new(
        server: &str,
        up: &Upstream,
        tool: &str,
        gateway: &Arc<Gateway>,
        guard: GuardState,
    ) -> (UpstreamTool, Option<String>) {
        let parsed = up.labels.get(tool).map(|l| {
            let result = parse_label(&l.result);
            let sink = l.sink.as_deref().map(parse_label).transpose();
            (result, sink)
        });
        let (result, sink, unlabelled, problem) = match parsed {
            Some((Ok(result), Ok(sink))) => (result, sink, false, None),
            Some(_) => {
                let (result, sink, unlabelled) = unlabelled();
                let why = format!(
                    "{server}.{tool}: its manifest labels do not parse; it is taken as unlabelled"
                );
                (result, sink, unlabelled, Some(why))
            }
            None => {
                let (result, sink, unlabelled) = unlabelled();
                (result, sink, unlabelled, None)
            }
        };
        let made = UpstreamTool {
            server: server.to_owned(),
            tool: tool.to_owned(),
            upstream: up.clone(),
            digest: up.tools.get(tool).map(|p| p.digest.clone()).unwrap_or_default(),
            result,
            sink,
            unlabelled,
            gateway: Arc::clone(gateway),
            guard,
        };
        (made, problem)
    }

    /// The one resource a call of it with `args` (JSON text) names, for the broker: its
    /// sink as its guard places it, else as its manifest says.
    pub async fn resource(&self, runtime: &Runtime, args: &str) -> Resource {
        match &self.guard {
            GuardState::None => Resource::Call { sink: self.sink, unlabelled: self.unlabelled },
            GuardState::Loaded(guard) => Resource::Call {
                sink: guard.label_sink(runtime, &self.tool, args).await,
                unlabelled: false,
            },
            GuardState::Broken(_) => Resource::Call { sink: Some(Label::CLEAN), unlabelled: false },
        }
    }

    /// The label of what a call with `args` returned (`output`): its guard's, else its
    /// manifest's.
    pub async fn result_label(&self, runtime: &Runtime, args: &str, output: &str) -> Label {
        match &self.guard {
            GuardState::None => self.result,
            GuardState::Loaded(guard) => {
                guard.label_result(runtime, &self.tool, args, output).await
            }
            GuardState::Broken(_) => Label::TOP,
        }
    }
}

/// `text` with every control character but newline and tab replaced: an upstream's
/// description goes to the model and to terminals as the server wrote it.
fn tame(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\n' && c != '\t' { '\u{fffd}' } else { c })
        .collect()
}

impl Toolset {
    /// Loads every installed tool. A tool that cannot be loaded (its bytes no longer
    /// match its digest, its schema is not JSON) is left out and named in
    /// [`Toolset::problems`]; the others stay usable. An upstream's pinned tools are
    /// offered as `NAME.TOOL`, called through `gateway`.
    pub fn load(
        store: &Store,
        runtime: &Runtime,
        gateway: &Arc<Gateway>,
    ) -> Result<Toolset, AgentError> {
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
        let mut upstream = BTreeMap::new();
        for (server, up) in &installed.upstreams {
            let guard = crate::guard::guard_of(runtime, gateway, up);
            if let GuardState::Broken(why) = &guard {
                problems.push(format!(
                    "{server}: its guard cannot be loaded ({why}); its results are labelled secret/untrusted and its sinks public/trusted"
                ));
            }
            for (tool, pin) in &up.tools {
                let name = format!("{server}.{tool}");
                if tools.contains_key(&name) {
                    problems.push(format!("{name}: an installed component has the same name"));
                    continue;
                }
                let (made, problem) = UpstreamTool::new(server, up, tool, gateway, guard.clone());
                problems.extend(problem);
                defs.push(ToolDef {
                    name: name.clone(),
                    description: tame(&pin.description),
                    parameters: pin.schema.clone(),
                });
                upstream.insert(name, made);
            }
        }
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Toolset { epoch: installed.epoch, tools, upstream, defs, problems })
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

    /// [`Toolset::constrained_defs`] as a small model in constrained mode is offered
    /// them: less each optional argument that is an open map (an object whose keys the
    /// model would invent, such as http.fetch's `headers`). The grammar cannot bound a
    /// map's size (llama-server ignores `maxProperties`), and asked what a page says, the
    /// 0.5B model wrote browser headers until its 512 tokens ran out. A tool still gets
    /// a call its own schema accepts: the argument is optional.
    pub fn small_defs(&self) -> Vec<ToolDef> {
        let mut defs = self.constrained_defs();
        for def in &mut defs {
            let required: Vec<String> = def.parameters["required"]
                .as_array()
                .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            if let Some(props) = def.parameters["properties"].as_object_mut() {
                props.retain(|name, schema| required.contains(name) || !is_open_map(schema));
            }
        }
        defs
    }

    /// One worked exchange for constrained mode, in the model's own reply shape (the
    /// messages go between the system prompt and the session's history). The owner asks
    /// what a folder holds, and the model lists it and answers from the listing. Then the
    /// owner asks about a file without naming its path; the model reads a path it guessed, is told it
    /// is not there with the hint every failed path call gets ([`Toolset::recovery`]), lists the folder with a tool of directories, reads the file it found
    /// there with a tool of files (each needing one path and nothing else), and answers
    /// from what it read. With no tool of
    /// directories, the owner names the path and the model reads it. Empty when no tool
    /// of files is installed. The same for a tool epoch.
    pub fn example(&self) -> Vec<Message> {
        let Some((reader, path)) = self.reader() else {
            return Vec::new();
        };
        let call = |n: usize, def: &ToolDef, arguments: serde_json::Value| {
            let id = format!("example-{n}");
            let call = ToolCall { id: id.clone(), name: def.name.clone(), arguments };
            Message::Assistant { content: String::new(), tool_calls: vec![call] }
        };
        let result = |n: usize, content: &str| Message::Tool {
            tool_call_id: format!("example-{n}"),
            content: content.to_owned(),
        };
        let mut out = Vec::new();
        let flight = "When is my flight to Rome?";
        match self.finder() {
            Some((lister, dir, args)) => {
                // A folder listed and answered from, then a file found and read.
                out.push(Message::User { content: "What is in my trips folder?".into() });
                out.push(call(3, lister, serde_json::json!({ dir: "trips" })));
                out.push(result(
                    3,
                    r#"{"entries":[{"path":"trips/rome.txt","kind":"file"},{"path":"trips/oslo.txt","kind":"file"}]}"#,
                ));
                out.push(Message::Assistant {
                    content: "rome.txt and oslo.txt are in it.".into(),
                    tool_calls: Vec::new(),
                });
                out.push(Message::User { content: flight.into() });
                // A guessed path first, and the way out of its error (the hint every
                // failed path call gets): list, then read.
                out.push(call(0, reader, serde_json::json!({ path: "rome.txt" })));
                let hint = recovery_text(lister, &args);
                out.push(result(0, &format!("error: rome.txt: not found\n{hint}")));
                out.push(call(1, lister, args));
                // The listing, and the entry the owner's words point at.
                let listing = r#"{"entries":[{"path":"trips","kind":"dir"},{"path":"trips/rome.txt","kind":"file"},{"path":"trips/oslo.txt","kind":"file"}]}"#;
                let entries = self.listed(&lister.name, listing).unwrap_or_default();
                let shown = match self.pointer(flight, &entries) {
                    Some(pointer) => format!("{listing}\n{}", pointer.line),
                    None => listing.to_owned(),
                };
                out.push(result(1, &shown));
            }
            None => out.push(Message::User { content: "What does trips/rome.txt say?".into() }),
        }
        out.push(call(2, reader, serde_json::json!({ path: "trips/rome.txt" })));
        out.push(result(2, "Flight to Rome on 3 May at 9:40, back on 9 May.\n"));
        out.push(Message::Assistant {
            content: "Your flight to Rome is on 3 May at 9:40 (trips/rome.txt).".into(),
            tool_calls: Vec::new(),
        });
        // A count computed by the tool that runs code, over the file it names.
        if let Some((coder, code, reads)) = self.coder() {
            out.push(Message::User { content: "How many lines does trips/oslo.txt have?".into() });
            let args = serde_json::json!({
                code: "len(open('trips/oslo.txt').read().splitlines())",
                reads: ["trips/oslo.txt"],
            });
            out.push(call(4, coder, args));
            // What a standard component's string result looks like: its JSON.
            out.push(result(4, "\"4\""));
            out.push(Message::Assistant {
                content: "trips/oslo.txt has 4 lines.".into(),
                tool_calls: Vec::new(),
            });
        }
        out
    }

    /// The tool that runs code over files: a required text argument that names no
    /// resource (its code) and a list argument of paths it reads, as py.run's `code`
    /// and `reads`. Found by what the tool declares, not by its name.
    fn coder(&self) -> Option<(&ToolDef, &str, &str)> {
        let is_list = |schema: &serde_json::Value| {
            schema["type"] == "array"
                || schema["anyOf"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|s| s["type"] == "array"))
        };
        self.defs.iter().find_map(|def| {
            let tool = self.tools.get(&def.name)?;
            let resources = &tool.description().resources;
            let props = &def.parameters["properties"];
            let reads = resources.iter().find(|r| {
                matches!(r.kind, bx_runtime::ResourceKind::PathRead) && is_list(&props[&r.arg])
            })?;
            let code = def.parameters["required"].as_array()?.iter().find_map(|a| {
                let a = a.as_str()?;
                (props[a]["type"] == "string" && !resources.iter().any(|r| r.arg == a)).then_some(a)
            })?;
            Some((def, code, reads.arg.as_str()))
        })
    }

    /// What a small model is told after a path tool's call fails (constrained mode):
    /// the call that lists the whole folder, in its reply shape, to copy. Without it,
    /// the 0.5B model sent the failed call again, unchanged, in most of the simple tasks
    /// it failed (`docs/agent.md#small-models`). `None` with no tool of directories.
    pub fn recovery(&self) -> Option<String> {
        let (lister, _, args) = self.finder()?;
        Some(recovery_text(lister, &args))
    }

    /// [`Toolset::recovery`]'s call as the loop keys calls: the tool's name and its
    /// arguments' JSON text.
    pub fn recovery_key(&self) -> Option<(String, String)> {
        let (lister, _, args) = self.finder()?;
        Some((lister.name.clone(), args.to_string()))
    }

    /// What a small model is told after a listing by the tool of directories: the call
    /// that reads (a file) or lists (a folder) the entry the owner's `request` points at
    /// (`crate::route::pointed`), in its reply shape, to copy, as `{"next": CALL}`. After a
    /// listing, the 0.5B model answered from the names, "your grocery list is in your home
    /// directory", where the next step was to read `notes/groceries.md`. Written as a
    /// sentence ("The owner's words point at …"), the hint became the model's answers'
    /// first words, even where no entry was pointed at. `None` when
    /// the request points at no entry of the listing (`entries`, from [`Toolset::listed`]). Only tools that read are named; the call goes through the broker as any.
    pub fn pointer(&self, request: &str, entries: &[(String, bool)]) -> Option<Next> {
        let (path, is_dir) = crate::route::pointed(request, entries)?;
        let (_, def, args) = self.opening(path, *is_dir)?;
        Some(Next::of(def, args))
    }

    /// What a small model is told after a listing (the call `listing`, by the tool of
    /// directories) that points at no entry, when the owner's `request` gives a name
    /// (`crate::route::a_name`): the call that searches the listed folder for it, to copy,
    /// as `{"next": CALL}`. Asked "What is Luis's phone number? It is in docs.", the 0.5B
    /// model listed `docs`, saw no file named after Luis (he is in `contacts.txt`), and
    /// answered from the names. `None` without a tool that searches
    /// ([`Toolset::searcher`]) or a name.
    pub fn search_pointer(&self, request: &str, listing: &ToolCall) -> Option<Next> {
        let name = crate::route::a_name(request)?;
        let (lister, dir, _) = self.finder()?;
        if listing.name != lister.name {
            return None;
        }
        let folder = listing.arguments[dir].as_str().unwrap_or(".");
        let (searcher, path, pattern) = self.searcher()?;
        Some(Next::of(searcher, serde_json::json!({ path: folder, pattern: name })))
    }

    /// What a small model is told after a result, when the owner's request gives a web
    /// address (`urls`, from `crate::route::urls`) that no call of the turn fetched (`proposed`: the
    /// turn's calls as the loop keys them): the call that fetches the first such, to
    /// copy, as `{"next": CALL}`. Asked "Is Foo up, and what changed last? URL1 and
    /// URL2", the 0.5B model fetched the first and answered from it alone; asked to read
    /// a note "then check URL", it read the note and answered. The address is the
    /// owner's, never a result's, and the call goes through the broker as any. `None`
    /// without a tool that fetches ([`Toolset::fetcher`]) or an address left.
    pub fn fetch_pointer(
        &self,
        urls: &[String],
        proposed: &HashSet<(String, String)>,
    ) -> Option<Next> {
        let (fetcher, arg) = self.fetcher()?;
        let fetched = |url: &str| {
            proposed.iter().any(|(name, args)| {
                name == &fetcher.name
                    && serde_json::from_str::<serde_json::Value>(args)
                        .is_ok_and(|a| a[arg].as_str() == Some(url))
            })
        };
        let url = urls.iter().find(|u| !fetched(u))?;
        Some(Next::of(fetcher, serde_json::json!({ arg: url })))
    }

    /// What a small model is told after `search`, by the tool that searches, found no
    /// line (`result` empty): the call that lists the folder it searched, to copy, as
    /// `{"next": CALL}`; the listing then points at the entry the owner's words name
    /// ([`Toolset::pointer`]). Asked "Search my notes for the research topic.", the 0.5B
    /// model searched `notes` for `research`, a word of a file's name (`research.md`) and
    /// not of its text, and answered that the notes hold no topic. `None` for any other
    /// call or result, or without a tool of directories.
    pub fn empty_search_pointer(&self, search: &ToolCall, result: &str) -> Option<Next> {
        let (searcher, path, _) = self.searcher()?;
        if search.name != searcher.name || !result.trim().is_empty() {
            return None;
        }
        let folder = search.arguments[path].as_str()?;
        let (lister, dir, _) = self.finder()?;
        Some(Next::of(lister, serde_json::json!({ dir: folder })))
    }

    /// The tool that fetches a web address: its one required argument is a URL it
    /// fetches (a `UrlFetch` resource), as http.fetch's `url`. Its definition and
    /// argument.
    fn fetcher(&self) -> Option<(&ToolDef, &str)> {
        self.defs.iter().find_map(|def| {
            let tool = self.tools.get(&def.name)?;
            let [arg] = def.parameters["required"].as_array()?.as_slice() else { return None };
            let arg = arg.as_str()?;
            let fetches = tool
                .description()
                .resources
                .iter()
                .any(|r| r.arg == arg && matches!(r.kind, bx_runtime::ResourceKind::UrlFetch));
            fetches.then_some((def, arg))
        })
    }

    /// The tool that searches a folder: two required arguments, a path it reads and a
    /// string (the pattern), the tool's description naming a search. Its definition,
    /// path argument and pattern argument.
    fn searcher(&self) -> Option<(&ToolDef, &str, &str)> {
        self.defs.iter().find_map(|def| {
            let tool = self.tools.get(&def.name)?;
            if !def.description.to_lowercase().contains("search") {
                return None;
            }
            let required = def.parameters["required"].as_array()?;
            let [a, b] = required.as_slice() else { return None };
            let (a, b) = (a.as_str()?, b.as_str()?);
            let reads = |arg: &str| reads_path(tool, arg);
            let string = |arg: &str| def.parameters["properties"][arg]["type"] == "string";
            match (reads(a), reads(b)) {
                (true, false) if string(b) => Some((def, a, b)),
                (false, true) if string(a) => Some((def, b, a)),
                _ => None,
            }
        })
    }

    /// The entries of `result` as `(path, is a folder)`, when it is a listing by the tool
    /// of directories (`tool`).
    pub fn listed(&self, tool: &str, result: &str) -> Option<Vec<(String, bool)>> {
        let (lister, _, _) = self.finder()?;
        if lister.name != tool {
            return None;
        }
        let listing: serde_json::Value = serde_json::from_str(result).ok()?;
        Some(
            listing["entries"]
                .as_array()?
                .iter()
                .filter_map(|e| {
                    Some((e["path"].as_str()?.to_owned(), e["kind"].as_str()? == "dir"))
                })
                .collect(),
        )
    }

    /// The call that opens `path`, in the reply shape, and its verb: the tool of
    /// directories for a folder, the tool of files for a file.
    fn opener(&self, path: &str, is_dir: bool) -> Option<(&'static str, String)> {
        let (verb, def, args) = self.opening(path, is_dir)?;
        Some((verb, reply_shape(def, &args)))
    }

    /// The verb, tool and arguments of the call that opens `path`: the tool of
    /// directories for a folder, the tool of files for a file.
    fn opening(
        &self,
        path: &str,
        is_dir: bool,
    ) -> Option<(&'static str, &ToolDef, serde_json::Value)> {
        let (lister, dir, _) = self.finder()?;
        let (def, arg, verb) = if is_dir {
            (lister, dir, "list")
        } else {
            let (reader, arg) = self.reader()?;
            (reader, arg, "read")
        };
        Some((verb, def, serde_json::json!({ arg: path })))
    }

    /// What a small model is told after `call`, to a path tool, failed, when its path is
    /// a web address the owner's request gives (`urls`, from `crate::route::urls`): the call that
    /// fetches it, to copy, as `{"next": CALL}`. Asked "What licence is fastcount under?
    /// See URL.", the 0.5B model gave the URL to fs.read. Written as a sentence ("URL is
    /// a web address. To fetch it: …"), the line became the answer after the fetch. Only
    /// the owner's addresses: one a file or a page put in the model's call gets the
    /// line any failed path call gets ([`Toolset::recovery_after`]).
    pub fn url_as_path(&self, call: &ToolCall, urls: &[String]) -> Option<Next> {
        let (_, arg) = self.readers().into_iter().find(|(d, _)| d.name == call.name)?;
        let path = call.arguments[arg].as_str()?;
        if !urls.iter().any(|u| u == path) {
            return None;
        }
        let (fetcher, url) = self.fetcher()?;
        Some(Next::of(fetcher, serde_json::json!({ url: path })))
    }

    /// What a small model is told after `call`, to a path tool, failed, given what the
    /// turn's listings showed (`seen`: path to whether it is a folder): a folder given to
    /// the tool of files, or a file given to the tool of directories, gets the call that
    /// opens it (the 0.5B model listed a file it had just seen listed, was told it is not
    /// a directory, and listed the whole folder again); any other failure gets
    /// [`Toolset::recovery`].
    pub fn recovery_after(&self, call: &ToolCall, seen: &HashMap<String, bool>) -> Option<String> {
        let (lister, dir, _) = self.finder()?;
        let readers = self.readers();
        let arg = if call.name == lister.name {
            Some(dir)
        } else {
            readers.iter().find(|(d, _)| d.name == call.name).map(|(_, a)| *a)
        };
        let path = arg.and_then(|a| call.arguments[a].as_str());
        if let Some((path, &is_dir)) = path.and_then(|p| seen.get_key_value(p)) {
            let wrong_tool = is_dir != (call.name == lister.name);
            if wrong_tool && let Some((verb, open)) = self.opener(path, is_dir) {
                let kind = if is_dir { "a folder" } else { "a file" };
                return Some(format!("{path} is {kind}. To {verb} it: {open}"));
            }
        }
        self.recovery()
    }

    /// Whether `name` is a tool with a path argument (one it reads or writes): the
    /// tools whose failures get [`Toolset::recovery`].
    pub fn takes_paths(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|t| {
            t.description().resources.iter().any(|r| {
                matches!(
                    r.kind,
                    bx_runtime::ResourceKind::PathRead | bx_runtime::ResourceKind::PathWrite
                )
            })
        })
    }

    /// The tool of directories among [`Toolset::readers`], its path argument, and the
    /// arguments that list the whole folder two levels deep (when it takes a depth).
    fn finder(&self) -> Option<(&ToolDef, &str, serde_json::Value)> {
        let (lister, dir) = self.readers().into_iter().find(|(d, _)| of_dirs(d))?;
        let mut args = serde_json::json!({ dir: "." });
        if lister.parameters["properties"].get("depth").is_some() {
            args["depth"] = 2.into();
        }
        Some((lister, dir, args))
    }

    /// The tool of files among [`Toolset::readers`] (the first that is not of
    /// directories), and its path argument.
    fn reader(&self) -> Option<(&ToolDef, &str)> {
        self.readers().into_iter().find(|(d, _)| !of_dirs(d))
    }

    /// Tools whose one required argument is a path they read: (definition, argument).
    fn readers(&self) -> Vec<(&ToolDef, &str)> {
        self.defs
            .iter()
            .filter_map(|def| {
                let tool = self.tools.get(&def.name)?;
                let required = def.parameters["required"].as_array()?;
                let [arg] = required.as_slice() else { return None };
                let arg = arg.as_str()?;
                reads_path(tool, arg).then_some((def, arg))
            })
            .collect()
    }

    /// What the router reads of each tool (`crate::route`), in the order of the
    /// definitions.
    pub(crate) fn cues(&self) -> Vec<crate::route::Cues> {
        self.defs
            .iter()
            .map(|def| {
                let fetches = self.tools.get(&def.name).is_some_and(|t| {
                    t.description()
                        .resources
                        .iter()
                        .any(|r| matches!(r.kind, bx_runtime::ResourceKind::UrlFetch))
                });
                crate::route::Cues::of(def, fetches)
            })
            .collect()
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<Tool<'_>> {
        match self.tools.get(name) {
            Some(t) => Some(Tool::Component(t)),
            None => self.upstream.get(name).map(Tool::Upstream),
        }
    }

    /// A component by name.
    pub fn component(&self, name: &str) -> Option<&LoadedTool> {
        self.tools.get(name)
    }

    /// Tools that are installed but could not be loaded, or whose precompiled code was
    /// refused, and why.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

/// A call a small model is shown to make next (`{"next": CALL}`): after a listing, a
/// search that found nothing, a result while a web address the owner gave is unfetched,
/// or a path call given such an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Next {
    /// The call as the loop keys calls: the tool's name and its arguments' JSON text.
    pub key: (String, String),
    /// The line the model is shown, the call in its reply shape.
    pub line: String,
}

impl Next {
    fn of(def: &ToolDef, args: serde_json::Value) -> Next {
        let call = reply_shape(def, &args);
        Next { key: (def.name.clone(), args.to_string()), line: format!("{{\"next\":{call}}}") }
    }
}

/// The call of `def` with `args` as a constrained reply writes it, its arguments in the
/// grammar's order (`bx_infer::ArgOrder`), for the model to copy.
fn reply_shape(def: &ToolDef, args: &serde_json::Value) -> String {
    bx_infer::ArgOrder::of(std::slice::from_ref(def)).call(&def.name, args)
}

/// Whether `tool` reads the path its argument `arg` names (a `PathRead` resource).
fn reads_path(tool: &LoadedTool, arg: &str) -> bool {
    tool.description()
        .resources
        .iter()
        .any(|r| r.arg == arg && matches!(r.kind, bx_runtime::ResourceKind::PathRead))
}

/// The labels of a tool no manifest entry describes: `(result, sink, unlabelled)`.
fn unlabelled() -> (Label, Option<Label>, bool) {
    let label = |text| parse_label(text).unwrap_or(Label::TOP);
    (label(UNLABELLED_RESULT), Some(label(UNLABELLED_SINK)), true)
}

/// Whether `def` is a tool of directories (its description says so), among the tools
/// that read one path.
fn of_dirs(def: &ToolDef) -> bool {
    def.description.to_lowercase().contains("director")
}

/// [`Toolset::recovery`]'s text: the call of `lister` with `args`, in the reply shape.
fn recovery_text(lister: &ToolDef, args: &serde_json::Value) -> String {
    format!("To find where it is, list the whole folder: {}", reply_shape(lister, args))
}

/// What a path argument says of itself in constrained mode.
const PATH_HELP: &str =
    "relative to the owner's folder, as the owner writes it (\".\" is the folder)";

/// A listing of the tool of directories without its entries' sizes (`,"size":N`). In
/// JSON text that sequence can only be a key: inside a string its quote would be escaped.
pub(crate) fn without_sizes(listing: &str) -> String {
    const KEY: &str = ",\"size\":";
    let mut out = String::with_capacity(listing.len());
    let mut rest = listing;
    while let Some(at) = rest.find(KEY) {
        out.push_str(&rest[..at]);
        let after = &rest[at + KEY.len()..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            out.push_str(KEY);
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// Whether `schema` may be an open map: an object whose keys are not all listed, either
/// because it lists none (only what each value must be, `additionalProperties`, or
/// nothing at all) or because it takes keys by pattern (`patternProperties`). An object
/// among the types of a list (`["object", "null"]`), and an open map as one of the
/// alternatives of `anyOf` or `oneOf` (pydantic's `Optional[dict]`), count.
fn is_open_map(schema: &serde_json::Value) -> bool {
    let alternatives = ["anyOf", "oneOf"].iter().filter_map(|k| schema[*k].as_array()).flatten();
    if alternatives.into_iter().any(is_open_map) {
        return true;
    }
    let typed = &schema["type"];
    let object = typed == "object"
        || typed.as_array().is_some_and(|t| t.iter().any(|t| t == "object"))
        || (typed.is_null()
            && (schema["additionalProperties"].is_object()
                || schema.get("patternProperties").is_some()));
    let listed = schema["properties"].as_object().is_some_and(|p| !p.is_empty());
    object
        && (schema.get("patternProperties").is_some()
            || (!listed && schema["additionalProperties"] != false))
}

/// What the model is told of the tools `defs` in constrained mode, where the server sees
/// no tools array (only the reply's grammar; how to reply is in
/// [`crate::baseline::SMALL_PROMPT`]): one line per tool with its summary and its arguments (with their descriptions, `?` when optional). The same
/// bytes for a tool epoch.
pub fn prompt_text(defs: &[ToolDef]) -> String {
    let mut out = String::from("The tools:");
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
            "\n- {}: {}. Arguments: {}.",
            def.name,
            def.description.trim_end_matches('.'),
            args.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_listing_is_shown_without_its_sizes() {
        let listing = r#"{"entries":[{"path":"a.md","kind":"file","size":60},{"path":"b,\"size\":7","kind":"dir","size":4096}],"truncated":false}"#;
        assert_eq!(
            super::without_sizes(listing),
            r#"{"entries":[{"path":"a.md","kind":"file"},{"path":"b,\"size\":7","kind":"dir"}],"truncated":false}"#
        );
        assert_eq!(super::without_sizes(r#"{"x":1,"size":"big"}"#), r#"{"x":1,"size":"big"}"#);
    }

    #[test]
    fn an_open_map_is_told_from_an_object_of_listed_keys() {
        use serde_json::json;
        for open in [
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            json!({"type": "object"}),
            json!({"type": ["object", "null"]}),
            json!({"anyOf": [{"type": "object", "additionalProperties": true}, {"type": "null"}]}),
            json!({"oneOf": [{"type": "string"}, {"type": "object"}]}),
            json!({"additionalProperties": {"type": "integer"}}),
            json!({"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {}}, "additionalProperties": false}),
        ] {
            assert!(super::is_open_map(&open), "{open}");
        }
        for closed in [
            json!({"type": "string"}),
            json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            json!({"type": "object", "additionalProperties": false}),
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
            json!({"type": "array", "items": {"type": "object"}}),
        ] {
            assert!(!super::is_open_map(&closed), "{closed}");
        }
    }

    use super::*;

    #[test]
    fn the_prompt_names_each_tool_and_its_arguments() {
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
        assert_eq!(
            text,
            format!(
                "The tools:\n- fs.list: List a directory. Arguments: depth?, path ({PATH_HELP})."
            )
        );
    }
}
