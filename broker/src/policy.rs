//! The policy file: the owner's grants, deny rules and examples, parsed from hand-edited
//! TOML and validated completely. Every error names the file, line and column, the rule
//! that was broken, and shows the line with a caret under the offending span.

use std::path::{Path, PathBuf};

use crate::label::Label;
use crate::name::NamePattern;
use crate::net::HostRule;
use crate::path::normalize;

mod parse;
pub use parse::parse_label;

/// Which tools a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolMatch {
    /// `"*"`: every tool.
    Any,
    /// One tool by name.
    Named(String),
    /// `"NAME.*"`: every tool whose name starts with `NAME.` (kept with its dot), such
    /// as every tool of one upstream MCP server.
    Prefix(String),
}

impl ToolMatch {
    /// Whether it matches the tool named `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        match self {
            ToolMatch::Any => true,
            ToolMatch::Named(name) => name == tool,
            ToolMatch::Prefix(prefix) => tool.starts_with(prefix.as_str()),
        }
    }

    /// How closely it names a tool, for the grant that covers: a name over a prefix over
    /// `*`.
    pub(crate) fn specificity(&self) -> usize {
        match self {
            ToolMatch::Any => 0,
            ToolMatch::Prefix(_) => 1,
            ToolMatch::Named(_) => 2,
        }
    }
}

/// What a grant lets a call do with its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Read files and list directories under the path.
    Read,
    /// Create, overwrite and append under the path (reading too).
    Write,
    /// Send HTTP requests to the host.
    Fetch,
    /// Call an upstream MCP server's tool (`NAME.TOOL`, docs/gateway.md): the upstream's
    /// manifest labels what it returns and where what it sends goes.
    Call,
}

/// What to do when the session's taint does not flow to the grant's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnTainted {
    /// Run anyway.
    Allow,
    /// Wait for the owner's approval.
    Ask,
    /// Refuse.
    Deny,
}

/// Who may answer a call a grant asks about (`approver` in a `[[grant]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Approver {
    /// The owner's reviewer program first, when `config.toml` names one, then the owner
    /// when it abstains (the default).
    #[default]
    Any,
    /// The owner in person: the reviewer program is not asked.
    Owner,
}

/// The resource a rule names: a path prefix or a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceRule {
    /// An absolute, normalised path prefix (never `/`).
    Path(PathBuf),
    /// A host name or address, optionally with a port.
    Host(HostRule),
    /// `name = ".env"` or `name = [".env", ".git/config", …]` (deny rules only): every
    /// path that has one of these names wherever it lies (see [`NamePattern`]). Never
    /// empty.
    Names(Vec<NamePattern>),
    /// `{workspace}` or `{workspace}/rest`: a path under the session's workspace, kept
    /// as the normalised `rest` (empty for the workspace itself). It covers nothing
    /// until [`Policy::for_workspace`] puts the workspace in.
    InWorkspace(PathBuf),
    /// A call grant's (`mode = "call"`): the tool itself, which names no path or host.
    Call,
}

/// What a policy path starts with to name the session's workspace.
pub const WORKSPACE: &str = "{workspace}";

/// One `[[grant]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRule {
    /// Position among the grants, from 0, for explanations (`grant[3]`).
    pub index: usize,
    /// Line in the policy file.
    pub line: usize,
    /// Which tools.
    pub tool: ToolMatch,
    /// Which resource.
    pub resource: ResourceRule,
    /// How.
    pub mode: Mode,
    /// The label of data that flows in through this grant; also the most a session may
    /// be tainted for the grant to apply without `when_tainted`. A call grant has none
    /// of its own (the upstream's manifest labels each call): it is [`Label::CLEAN`] and
    /// not read.
    pub label: Label,
    /// What happens when the session's taint does not flow to `label`.
    pub when_tainted: OnTainted,
    /// What happens when it does: `Allow` (the default), or `Ask` for a grant whose
    /// every use the owner approves.
    pub when_clean: OnTainted,
    /// Who answers when it asks.
    pub approver: Approver,
}

/// One `[[deny]]`: applies at every taint, whatever the grants say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyRule {
    /// Position among the deny rules, from 0.
    pub index: usize,
    /// Line in the policy file.
    pub line: usize,
    /// Which tools.
    pub tool: ToolMatch,
    /// Which resource.
    pub resource: ResourceRule,
}

/// One `[[ask]]`: a covered resource of the rule's mode asks the owner at every taint,
/// even where a grant would allow it. It never allows anything itself (a resource no
/// grant covers is still refused) and a `[[deny]]` still wins. A call's grant refuses
/// these names in that mode at run time, unless the call declared them and so was asked
/// about them: a write to the workspace never reaches `.git/hooks` through it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskRule {
    /// Position among the ask rules, from 0.
    pub index: usize,
    /// Line in the policy file.
    pub line: usize,
    /// Which tools.
    pub tool: ToolMatch,
    /// The names it covers (never empty).
    pub names: Vec<NamePattern>,
    /// `Read` or `Write` (never `Fetch`).
    pub mode: Mode,
}

/// `name .env` for one name, `names .aws, .netrc` for several.
fn write_names(f: &mut std::fmt::Formatter<'_>, names: &[NamePattern]) -> std::fmt::Result {
    match names {
        [one] => write!(f, "{one}"),
        many => {
            f.write_str("names ")?;
            for (i, n) in many.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(n.as_str())?;
            }
            Ok(())
        }
    }
}

impl std::fmt::Display for ToolMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolMatch::Any => f.write_str("*"),
            ToolMatch::Named(name) => f.write_str(name),
            ToolMatch::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

impl std::fmt::Display for ResourceRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResourceRule::Path(path) => write!(f, "{}", path.display()),
            ResourceRule::Host(host) => write!(f, "{host}"),
            ResourceRule::Names(names) => write_names(f, names),
            ResourceRule::InWorkspace(rest) if rest.as_os_str().is_empty() => {
                f.write_str(WORKSPACE)
            }
            ResourceRule::InWorkspace(rest) => write!(f, "{WORKSPACE}/{}", rest.display()),
            ResourceRule::Call => f.write_str("its calls"),
        }
    }
}

/// One line per grant, in the policy file's words: `grant[0] (line 3): tool * read
/// /home/o/notes, label private/trusted, when tainted allow`.
impl std::fmt::Display for GrantRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.mode {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Fetch => "fetch",
            Mode::Call => "call",
        };
        let tainted = match self.when_tainted {
            OnTainted::Allow => "allow",
            OnTainted::Ask => "ask",
            OnTainted::Deny => "deny",
        };
        match self.resource {
            // A call grant has no resource or label of its own (the manifest labels calls).
            ResourceRule::Call => write!(
                f,
                "grant[{}] (line {}): tool {} call, when tainted {tainted}",
                self.index, self.line, self.tool
            )?,
            _ => write!(
                f,
                "grant[{}] (line {}): tool {} {mode} {}, label {}, when tainted {tainted}",
                self.index, self.line, self.tool, self.resource, self.label
            )?,
        }
        if self.when_clean == OnTainted::Ask {
            f.write_str(", asks always")?;
        }
        if self.approver == Approver::Owner {
            f.write_str(", answered by the owner in person")?;
        }
        Ok(())
    }
}

/// `deny[0] (line 9): tool * /home/o/notes/keys`.
impl std::fmt::Display for DenyRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "deny[{}] (line {}): tool {} {}", self.index, self.line, self.tool, self.resource)
    }
}

/// `ask[0] (line 9): tool * write names .git/hooks, .bashrc`.
impl std::fmt::Display for AskRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = if self.mode == Mode::Read { "read" } else { "write" };
        write!(f, "ask[{}] (line {}): tool {} {mode} ", self.index, self.line, self.tool)?;
        write_names(f, &self.names)
    }
}

/// What an `[[example]]` expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The call runs.
    Allow,
    /// The call waits for the owner.
    Ask,
    /// The call is refused.
    Deny,
}

/// One `[[example]]`: a call and the decision the owner expects, checked at every load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// Position among the examples.
    pub index: usize,
    /// The tool name.
    pub tool: String,
    /// The resources the call declares.
    pub resources: Vec<crate::Resource>,
    /// The session's taint.
    pub taint: Label,
    /// The session's workspace, for rules that name `{workspace}`.
    pub workspace: Option<PathBuf>,
    /// The expected decision.
    pub expect: Expect,
    span: std::ops::Range<usize>,
}

/// A validated policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    pub(crate) grants: Vec<GrantRule>,
    pub(crate) denies: Vec<DenyRule>,
    pub(crate) asks: Vec<AskRule>,
    pub(crate) examples: Vec<Example>,
    /// The `[[secret]]` bindings, in file order.
    pub(crate) secrets: Vec<crate::SecretBinding>,
    /// The `[[limit]]` rules, in file order.
    pub(crate) limits: Vec<LimitRule>,
    /// bx's own state: no call reaches it, whatever the grants say. Not a policy line:
    /// the host sets it from the state directory's layout.
    pub(crate) own: Vec<PathBuf>,
    /// Every path grant's label, indexed once per policy (see [`Policy::index_labels`])
    /// and shared by every grant decided under it.
    pub(crate) labels: std::sync::Arc<[crate::grant::LabelRule]>,
}

/// One thing wrong with a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The file, as given to the parser.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// The rule broken, such as `grant[2].path`.
    pub rule: String,
    /// What is wrong.
    pub message: String,
    /// The source line and a caret line under the span.
    pub snippet: String,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}\n{}",
            self.file, self.line, self.column, self.rule, self.message, self.snippet
        )
    }
}

/// Every error found in a policy file (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl PolicyErrors {
    /// The runbook entry for an invalid policy, which whoever prints these prints with
    /// them.
    pub fn runbook(&self) -> &'static str {
        "docs/runbook.md#policy-invalid"
    }
}

impl std::fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        write!(f, "\n{} error(s); see docs/policy.md", self.0.len())
    }
}

impl Policy {
    /// A policy with no rules: every call is refused.
    pub fn empty() -> Policy {
        Policy::default()
    }

    /// Rebuilds the label index from the grants: every path grant, in any mode, for any
    /// tool (a file has one label, whichever tool touches it); grants on one path with
    /// different labels are joined.
    pub(crate) fn index_labels(&mut self) {
        let mut rules: Vec<crate::grant::LabelRule> = Vec::new();
        let mut at: std::collections::HashMap<PathBuf, usize> = std::collections::HashMap::new();
        for g in &self.grants {
            let ResourceRule::Path(p) = &g.resource else { continue };
            match at.get(p) {
                Some(&i) => rules[i].label = rules[i].label.join(g.label),
                None => {
                    at.insert(p.clone(), rules.len());
                    rules.push(crate::grant::LabelRule { path: p.clone(), label: g.label });
                }
            }
        }
        self.labels = rules.into();
    }

    /// Marks `paths` as bx's own state: no call reaches them or anything below them,
    /// in any mode, through any spelling, whatever the grants say. Each path must be
    /// absolute; pass both the path as configured and its resolved form, so a symlink
    /// to the state directory is covered too (the runtime also checks what it opened
    /// against their resolved forms).
    pub fn protect_own(
        mut self,
        paths: impl IntoIterator<Item = PathBuf>,
    ) -> Result<Policy, crate::PathError> {
        for path in paths {
            let norm = normalize(&path)?;
            if !self.own.contains(&norm) {
                self.own.push(norm);
            }
        }
        Ok(self)
    }

    /// The policy as it applies to a session whose workspace is `workspace`: each rule
    /// that names `{workspace}` gets that directory (normalised; `..` refuses nothing and
    /// drops those rules), and without one those rules are left out, so they grant and
    /// deny nothing. A policy that names no workspace is returned as it is.
    pub fn for_workspace(&self, workspace: Option<&Path>) -> std::borrow::Cow<'_, Policy> {
        let names = |r: &ResourceRule| matches!(r, ResourceRule::InWorkspace(_));
        if !self.grants.iter().any(|g| names(&g.resource))
            && !self.denies.iter().any(|d| names(&d.resource))
        {
            return std::borrow::Cow::Borrowed(self);
        }
        let root = workspace.and_then(|w| normalize(w).ok());
        let put = |r: &ResourceRule| match r {
            // (`join` of an empty rest would add a trailing `/`.)
            ResourceRule::InWorkspace(rest) if rest.as_os_str().is_empty() => {
                root.clone().map(ResourceRule::Path)
            }
            ResourceRule::InWorkspace(rest) => {
                root.as_ref().map(|w| ResourceRule::Path(w.join(rest)))
            }
            other => Some(other.clone()),
        };
        let mut out = self.clone();
        out.grants = self
            .grants
            .iter()
            .filter_map(|g| Some(GrantRule { resource: put(&g.resource)?, ..g.clone() }))
            // A workspace of / would make `{workspace}` a grant of /, which is invalid.
            .filter(|g| g.resource != ResourceRule::Path(PathBuf::from("/")))
            .collect();
        out.denies = self
            .denies
            .iter()
            .filter_map(|d| Some(DenyRule { resource: put(&d.resource)?, ..d.clone() }))
            .collect();
        out.index_labels();
        std::borrow::Cow::Owned(out)
    }

    /// bx's own paths, as set by [`Policy::protect_own`].
    pub fn own(&self) -> &[PathBuf] {
        &self.own
    }

    /// The grants that cover bx's own state or lie inside it: they never reach it
    /// (the fixed rule wins), and `bx policy check` and `bx doctor` say so.
    pub fn grants_over_own(&self) -> Vec<(&GrantRule, &Path)> {
        let mut out = Vec::new();
        for g in &self.grants {
            let ResourceRule::Path(p) = &g.resource else { continue };
            if let Some(own) =
                self.own.iter().find(|o| o.starts_with(p) || p.starts_with(o.as_path()))
            {
                out.push((g, own.as_path()));
            }
        }
        out
    }

    /// The grants, in file order.
    pub fn grants(&self) -> &[GrantRule] {
        &self.grants
    }

    /// The deny rules, in file order.
    pub fn denies(&self) -> &[DenyRule] {
        &self.denies
    }

    /// The ask rules, in file order.
    pub fn asks(&self) -> &[AskRule] {
        &self.asks
    }

    /// The secret bindings, in file order.
    pub fn secrets(&self) -> &[crate::SecretBinding] {
        &self.secrets
    }

    /// The examples, in file order.
    pub fn examples(&self) -> &[Example] {
        &self.examples
    }

    /// The rate limits, in file order.
    pub fn limits(&self) -> &[LimitRule] {
        &self.limits
    }
}

/// One `[[limit]]`: the calls a session may make of the tools it names in any minute.
/// Every rule that matches a call applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRule {
    /// Position among the limits, from 0.
    pub index: usize,
    /// Line in the policy file.
    pub line: usize,
    /// Which tools: a name, `NAME.*`, or `*` (their calls counted together).
    pub tool: ToolMatch,
    /// The most calls in any 60 seconds, per session.
    pub per_minute: u32,
}

/// `limit[0] (line 9): at most 10 calls a minute per session of code.*`.
impl std::fmt::Display for LimitRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "limit[{}] (line {}): at most {} calls a minute per session of {}",
            self.index, self.line, self.per_minute, self.tool
        )
    }
}
