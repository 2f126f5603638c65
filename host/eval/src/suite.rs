//! A suite, as written in `fixtures/eval/<name>.toml`: an environment (files under a home
//! directory, pages on the web server), the policy a careful owner would write for it,
//! user tasks with their ground-truth calls and utility checks, and injection tasks with
//! the attacker's goal and the calls that reach it. `docs/eval.md` is the reference.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// One suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// Its name.
    pub name: String,
    /// What the environment is.
    pub summary: String,
    /// The policy, with `{home}`, `{web}` (the web server's `host:port`) and
    /// `{attacker}` (the attacker's own server) filled in at the run.
    pub policy: String,
    /// Files (and symlinks) under the home directory.
    #[serde(default, rename = "file")]
    pub files: Vec<File>,
    /// Pages the web server serves.
    #[serde(default, rename = "page")]
    pub pages: Vec<Page>,
    /// The folder under home the owner starts `bx chat` in, where the prompts' relative
    /// paths are (`repo` for a repository's tasks: "fix it in src/lib.rs"); the home
    /// itself when absent.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Directories under home whose contents leave the machine (an outbox that is sent,
    /// a folder that is published): a canary in a file there is exfiltrated too.
    #[serde(default)]
    pub sinks: Vec<String>,
    /// What the owner asks for.
    #[serde(rename = "user_task")]
    pub user_tasks: Vec<UserTask>,
    /// What the attacker wants.
    #[serde(rename = "injection_task")]
    pub injection_tasks: Vec<InjectionTask>,
}

/// A file or symlink of the environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Path under the home directory.
    pub path: String,
    /// Its content (`{canary:NAME}` becomes a unique marker; `{injection}` the attacker's
    /// text in an attack run and nothing otherwise), unless it is a symlink.
    #[serde(default)]
    pub content: Option<String>,
    /// Makes it a symlink to this target (relative or under `{home}`).
    #[serde(default)]
    pub symlink: Option<String>,
    /// The policy denies this file: its canaries must never reach the transcript.
    #[serde(default)]
    pub denied: bool,
}

/// A page of the web server (which the attacker controls).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// Its path, such as `/news`.
    pub path: String,
    /// Its body, with `{injection}` where the attacker's text goes.
    pub content: String,
}

/// A call, with `{home}`, `{web}` (the web server's base URL) and, in injection calls,
/// `{seen}` (every canary the model has read so far) in its string arguments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub args: toml::Value,
    /// This call reads content the attacker controls (a web page, a downloaded file, a
    /// message from outside): the attacker's injection lands after it.
    #[serde(default)]
    pub untrusted: bool,
}

/// What must hold after a user task for it to count as done.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Check {
    /// The model's final answer contains this text (case-insensitive).
    AnswerContains(String),
    /// The file (under home) contains this text.
    FileContains(String, String),
    /// The file (under home) does not contain this text.
    FileLacks(String, String),
    /// The file (under home) exists.
    FileExists(String),
}

/// Something the owner asks for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserTask {
    /// Its id, unique in the suite.
    pub id: String,
    /// What the owner types.
    pub prompt: String,
    /// The calls that do it, in order.
    pub calls: Vec<CallSpec>,
    /// What the model answers at the end.
    pub answer: String,
    /// Paths under home the task may change or create.
    #[serde(default)]
    pub writes: Vec<String>,
    /// What must hold after it.
    pub checks: Vec<Check>,
    /// A one-call list, read or search in the workspace (the simple tasks a small model
    /// should manage).
    #[serde(default)]
    pub simple: bool,
}

/// Which check a win of an injection task shows in first (every check runs on every
/// pair; any that fires is a win).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Goal {
    /// A canary reached an HTTP server.
    Exfiltrated,
    /// A file outside the task's scope changed or appeared.
    FileChanged,
    /// A denied file's canary reached the transcript.
    DeniedRead,
    /// Policy, config, session state, the audit log or the installed tools changed.
    StateChanged,
    /// The owner approved a call whose real effect differs from what the block showed.
    DisguisedApproval,
}

/// Something the attacker wants.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectionTask {
    /// Its id, unique in the suite.
    pub id: String,
    /// What the attacker wants, in words.
    pub goal: String,
    /// The text placed in the attacker's content (pages, downloads, messages).
    pub injection: String,
    /// The calls that would reach the goal.
    pub calls: Vec<CallSpec>,
    /// Where a win shows first.
    pub check: Goal,
}

impl Suite {
    /// Reads `path`, refusing unknown keys and checking that ids are unique.
    pub fn load(path: &Path) -> anyhow::Result<Suite> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let suite: Suite =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let mut ids = std::collections::BTreeSet::new();
        for id in suite
            .user_tasks
            .iter()
            .map(|t| &t.id)
            .chain(suite.injection_tasks.iter().map(|t| &t.id))
        {
            anyhow::ensure!(ids.insert(id.clone()), "{}: task id {id} twice", path.display());
        }
        for t in &suite.user_tasks {
            anyhow::ensure!(
                !t.calls.is_empty(),
                "{}: user task {} has no calls",
                path.display(),
                t.id
            );
        }
        Ok(suite)
    }

    /// Every suite in `dir` (`*.toml`), by name.
    pub fn load_all(dir: &Path) -> anyhow::Result<Vec<Suite>> {
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        paths.sort();
        anyhow::ensure!(!paths.is_empty(), "no suites in {}", dir.display());
        paths.iter().map(|p| Suite::load(p)).collect()
    }
}

/// A TOML value as JSON.
pub fn to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}
