//! `config.toml` in the state directory, six tables: `[inference]` (the model server),
//! `[loop]` (limits of a turn), `[tools]` (where tools come from), `[audit]` (where the
//! log lives), `[approvals]` (who else answers, and who is told) and `[telemetry]`
//! (where traces go). Unknown keys are refused, and every error names the file, line
//! and column.
//! Every field has a default, so a missing file is a valid configuration.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::Path;

use crate::error::StateError;
use crate::read::{MAX_CONFIG_BYTES, read_own};

/// The state directory's configuration file.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The `[inference]` table.
    #[serde(default)]
    pub inference: InferenceConfig,
    /// The `[loop]` table.
    #[serde(default, rename = "loop")]
    pub turn: LoopConfig,
    /// The `[tools]` table.
    #[serde(default)]
    pub tools: ToolsConfig,
    /// The `[audit]` table.
    #[serde(default)]
    pub audit: AuditConfig,
    /// The `[approvals]` table.
    #[serde(default)]
    pub approvals: ApprovalsConfig,
    /// The `[telemetry]` table.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
}

/// The `[telemetry]` table: OpenTelemetry spans and metrics over OTLP/HTTP
/// (docs/telemetry.md). Off unless `endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` names a
/// collector.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`): traces go to
    /// `/v1/traces`, metrics to `/v1/metrics`. None: the standard `OTEL_EXPORTER_OTLP_*`
    /// variables, and off when they name none.
    pub endpoint: Option<String>,
    /// Export calls' arguments and results as span attributes (bounded, secrets
    /// redacted, and replaced by their label above `content_label`). Default false.
    pub content: bool,
    /// The most bytes of one argument or result exported (default 1024).
    pub content_bytes: NonZeroUsize,
    /// The highest label whose values are exported as they are (default
    /// `public/untrusted`): a value labelled above it is replaced by its label.
    pub content_label: String,
    /// Spans held for export at once (default 2048); past it a span is dropped and
    /// counted (`bx doctor` shows the count).
    pub queue: NonZeroUsize,
    /// Seconds one export may take before it is given up (default 5).
    pub timeout_secs: NonZeroU64,
}

impl Default for TelemetryConfig {
    fn default() -> TelemetryConfig {
        TelemetryConfig {
            endpoint: None,
            content: false,
            content_bytes: NonZeroUsize::new(1024).unwrap_or(NonZeroUsize::MIN),
            content_label: "public/untrusted".to_owned(),
            queue: NonZeroUsize::new(2048).unwrap_or(NonZeroUsize::MIN),
            timeout_secs: NonZeroU64::new(5).unwrap_or(NonZeroU64::MIN),
        }
    }
}

/// The most spans `[telemetry] queue` may hold: its slots are made when telemetry starts.
const MAX_TELEMETRY_QUEUE: usize = 1_000_000;

/// The labels a telemetry `content_label` may name.
pub(crate) const LABELS: [&str; 6] = [
    "public/trusted",
    "public/untrusted",
    "private/trusted",
    "private/untrusted",
    "secret/trusted",
    "secret/untrusted",
];

/// The `[approvals]` table: a program that answers before the owner, and one that tells
/// the owner a call waits (docs/approvals.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// The reviewer, as argv with an absolute program path: run for each call the policy
    /// asks about (unless its grant says `approver = "owner"`), it reads the approval
    /// block as JSON on stdin and answers approve, refuse or abstain on stdout. Empty:
    /// no reviewer, the owner answers every call.
    pub reviewer: Vec<String>,
    /// Seconds the reviewer may take before it is stopped and the call refused
    /// (default 30).
    pub reviewer_secs: NonZeroU64,
    /// A command, as argv with an absolute program path, run when a call starts to wait
    /// for the owner: the call's id, session, tool and a one-line summary in its
    /// environment and on stdin. Nothing waits for it. Empty: no notice.
    pub notify: Vec<String>,
    /// Seconds a notice may run before it is stopped (default 10).
    pub notify_secs: NonZeroU64,
    /// A loopback address where the daemon serves the owner's page, however it was
    /// started (`bx serve --web ADDR` does the same for one run). None: no page.
    pub web: Option<std::net::SocketAddr>,
}

impl Default for ApprovalsConfig {
    fn default() -> ApprovalsConfig {
        ApprovalsConfig {
            reviewer: Vec::new(),
            reviewer_secs: NonZeroU64::new(30).unwrap_or(NonZeroU64::MIN),
            notify: Vec::new(),
            notify_secs: NonZeroU64::new(10).unwrap_or(NonZeroU64::MIN),
            web: None,
        }
    }
}

/// The `[inference]` table: which llama-server to talk to, or how to start one.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceConfig {
    /// Base URL of a running server; ignored when `launch` is set. With neither, no
    /// model is configured: the daemon serves tools (`bx tool run`, MCP) and refuses
    /// chat turns (`docs/runbook.md#no-model`).
    pub url: Option<String>,
    /// A command that starts llama-server, as argv; `{port}` is replaced by a free
    /// loopback port that bx then connects to. The daemon stops it when it exits.
    pub launch: Vec<String>,
    /// How tool calls are obtained.
    pub tool_mode: ToolModeName,
    /// In constrained mode, the first reply of a turn may call only the tools the owner's
    /// words point at (every tool when they point at none; docs/agent.md#small-models).
    pub route_tools: bool,
    /// Seconds to wait at start for a server that is not there yet (default 60).
    pub connect_secs: u64,
    /// Seconds a request keeps retrying a server that went away (default 30); then the
    /// turn fails with `inference-unreachable`.
    pub retry_secs: u64,
    /// Sampling temperature; unset leaves the server's default.
    pub temperature: Option<f32>,
    /// Fixed sampling seed; unset leaves the server's default.
    pub seed: Option<u64>,
    /// How a thinking block that reached `[loop] max_thinking_tokens` is ended.
    pub end_thinking: EndThinkingName,
    /// Turns that may wait for a slot of the server, in all, before a new one is refused
    /// with `inference-busy` (default 64). A turn whose tool calls ran always waits for
    /// its next request, within the turn's deadline, and never counts against this.
    pub queue_bound: NonZeroUsize,
}

impl Default for InferenceConfig {
    fn default() -> InferenceConfig {
        InferenceConfig {
            url: None,
            launch: Vec::new(),
            tool_mode: ToolModeName::Auto,
            route_tools: false,
            connect_secs: 60,
            retry_secs: 30,
            temperature: None,
            seed: None,
            end_thinking: EndThinkingName::Control,
            queue_bound: NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN),
        }
    }
}

/// `[inference] tool_mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolModeName {
    /// Native when the server's chat template takes tools, else constrained (default).
    #[default]
    Auto,
    /// The server's own tool calling.
    Native,
    /// A JSON-schema constrained reply.
    Constrained,
}

/// `[inference] end_thinking`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndThinkingName {
    /// Live, through llama-server's control endpoint; a re-issue where it is refused
    /// (default).
    #[default]
    Control,
    /// Stop the request and send it again with the thinking switched off.
    Reissue,
}

/// The `[loop]` table: limits of one turn. Without them a model that keeps calling tools
/// (or keeps talking) would run, and hold its slot, for ever.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    /// Tool calls per turn (default 8).
    pub max_tool_calls: NonZeroU32,
    /// Tokens the model may generate per turn, over all its requests (default 4096).
    pub max_tokens: NonZeroU32,
    /// Wall-clock seconds per turn, approvals included (default 600).
    pub max_turn_secs: NonZeroU64,
    /// Seconds an approval waits before it counts as a refusal (default 300).
    pub approval_secs: NonZeroU64,
    /// Client connections the daemon serves at once (default 16); more wait.
    pub max_connections: NonZeroUsize,
    /// Thinking tokens per model request before the thinking block is ended and the
    /// model made to answer (default: no cap; the request's token limit still holds).
    pub max_thinking_tokens: Option<NonZeroU32>,
}

impl Default for LoopConfig {
    fn default() -> LoopConfig {
        LoopConfig {
            max_tool_calls: NonZeroU32::new(8).unwrap_or(NonZeroU32::MIN),
            max_tokens: NonZeroU32::new(4096).unwrap_or(NonZeroU32::MIN),
            max_turn_secs: NonZeroU64::new(600).unwrap_or(NonZeroU64::MIN),
            approval_secs: NonZeroU64::new(300).unwrap_or(NonZeroU64::MIN),
            max_connections: NonZeroUsize::new(16).unwrap_or(NonZeroUsize::MIN),
            max_thinking_tokens: None,
        }
    }
}

/// The `[audit]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Directory of the log, absolute; default `audit/` in the state directory.
    pub dir: Option<std::path::PathBuf>,
    /// The key that signs the log's checkpoints (made by `bx audit key init`), absolute;
    /// default `audit.key` in the state directory when that file exists. Its verifier
    /// key is beside it, as `KEY.pub`.
    pub key: Option<std::path::PathBuf>,
    /// Directories (another disk, a synced folder, a mounted device), absolute, where
    /// the writer exports each signed checkpoint at close and every 1,000 records.
    pub export: Vec<std::path::PathBuf>,
}

/// The `[tools]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Where `bx tool install sha256:HEX` looks, in order: a directory, or an https base
    /// URL, holding `sha256/<hex>.wasm`.
    #[serde(default)]
    pub mirrors: Vec<String>,
    /// Publishers' public keys: an install from a registry or repository in a key's
    /// scope needs a signature of its manifest by one of the keys pinned for it.
    #[serde(default)]
    pub trusted_keys: Vec<TrustedKey>,
}

/// One `[[tools.trusted_keys]]`: a publisher's cosign public key and where it signs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedKey {
    /// Who the key is, as `bx tool inspect` shows the signer.
    pub name: String,
    /// The public key: PEM text (`-----BEGIN PUBLIC KEY-----`, an ECDSA P-256 key as
    /// cosign writes `cosign.pub`), or the path of a file holding it (relative paths
    /// are under the state directory).
    pub key: String,
    /// Registries (`ghcr.io`) or repositories and their prefixes (`ghcr.io/acme`,
    /// `127.0.0.1:5000/bx/tools`) the key signs for.
    pub scopes: Vec<String>,
}

impl Config {
    /// Whether a model server is configured (a URL or a command to launch one).
    pub fn has_model(&self) -> bool {
        self.inference.url.is_some() || !self.inference.launch.is_empty()
    }

    /// Reads `path` (a regular file of at most 64 KiB); a missing file is the default
    /// configuration.
    pub fn load(path: &Path) -> Result<Config, StateError> {
        let Some(bytes) = read_own(path, MAX_CONFIG_BYTES)? else {
            return Ok(Config::default());
        };
        let text = String::from_utf8(bytes)
            .map_err(|e| StateError::parse_at(path, "", 0, format!("not UTF-8: {e}")))?;
        Config::parse(path, &text)
    }

    /// Parses configuration text read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Config, StateError> {
        bx_broker::toml_shape::check(text)
            .map_err(|(at, why)| StateError::parse_at(path, text, at, why))?;
        let config: Config = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            StateError::parse_span(path, text, span, e.message().to_owned())
        })?;
        // Points at the line that sets `key` (not a comment or value that mentions it).
        let at = |key: &str, message: String| {
            let mut offset = 0;
            for line in text.split_inclusive('\n') {
                let rest = line.trim_start();
                if rest.strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('=')) {
                    offset += line.len() - rest.len();
                    return StateError::parse_at(path, text, offset, message);
                }
                offset += line.len();
            }
            StateError::parse_at(path, text, 0, message)
        };
        if let Some(url) = &config.inference.url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(at("url", "inference.url: must be an http:// or https:// URL".into()));
        }
        if !config.inference.launch.is_empty()
            && !config.inference.launch.iter().any(|a| a.contains("{port}"))
        {
            return Err(at(
                "launch",
                "inference.launch: no argument contains {port}, so bx cannot know where the \
                 server listens"
                    .into(),
            ));
        }
        if let Some(dir) = &config.audit.dir
            && !dir.is_absolute()
        {
            return Err(at("dir", "audit.dir: must be an absolute path".into()));
        }
        if let Some(key) = &config.audit.key
            && !key.is_absolute()
        {
            return Err(at("key", "audit.key: must be an absolute path".into()));
        }
        if config.audit.export.iter().any(|d| !d.is_absolute()) {
            return Err(at(
                "export",
                "audit.export: every directory must be an absolute path".into(),
            ));
        }
        for (key, argv) in
            [("reviewer", &config.approvals.reviewer), ("notify", &config.approvals.notify)]
        {
            if argv.first().is_some_and(|program| !Path::new(program).is_absolute()) {
                return Err(at(
                    key,
                    format!(
                        "approvals.{key}: the program must be an absolute path (what runs, and \
                         what its answers are recorded under, must not depend on PATH)"
                    ),
                ));
            }
        }
        if let Some(addr) = config.approvals.web
            && !addr.ip().is_loopback()
        {
            return Err(at(
                "web",
                format!(
                    "approvals.web: {addr} is not a loopback address (the page is plain HTTP; \
                     `bx serve --web ADDR --allow-remote` serves another address for one run)"
                ),
            ));
        }
        if !LABELS.contains(&config.telemetry.content_label.as_str()) {
            return Err(at(
                "content_label",
                format!("telemetry.content_label: must be one of {}", LABELS.join(", ")),
            ));
        }
        if config.telemetry.queue.get() > MAX_TELEMETRY_QUEUE {
            return Err(at(
                "queue",
                format!("telemetry.queue: at most {MAX_TELEMETRY_QUEUE} spans (each slot is kept)"),
            ));
        }
        if let Some(endpoint) = &config.telemetry.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(at(
                "endpoint",
                "telemetry.endpoint: an http:// or https:// URL (the collector's OTLP/HTTP base)"
                    .into(),
            ));
        }
        for (i, mirror) in config.tools.mirrors.iter().enumerate() {
            let is_url = mirror.starts_with("https://");
            if !is_url && !Path::new(mirror).is_absolute() {
                let offset = text.find(mirror.as_str()).unwrap_or(0);
                return Err(StateError::parse_at(
                    path,
                    text,
                    offset,
                    format!("tools.mirrors[{i}]: must be an absolute directory or an https:// URL"),
                ));
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unknown_keys_with_location() {
        let text = "[tools]\nmirrors = []\nmirors = [\"/x\"]\n";
        let err = Config::parse(Path::new("config.toml"), text).unwrap_err().to_string();
        assert!(err.starts_with("config.toml:3:1: unknown field `mirors`"), "{err}");
    }

    #[test]
    fn refuses_relative_and_http_mirrors() {
        for bad in ["mirrors = [\"rel/dir\"]", "mirrors = [\"http://m.example/\"]"] {
            let text = format!("[tools]\n{bad}\n");
            let err = Config::parse(Path::new("c.toml"), &text).unwrap_err().to_string();
            assert!(err.starts_with("c.toml:2:"), "{err}");
        }
    }

    #[test]
    fn refuses_bad_values_in_each_table_with_location() {
        for (text, want) in [
            ("[inference]\ntool_mode = \"magic\"\n", "c.toml:2:13: unknown variant `magic`"),
            ("[inference]\nurl = \"localhost:8080\"\n", "c.toml:2:1: inference.url"),
            ("[inference]\nlaunch = [\"llama-server\"]\n", "c.toml:2:1: inference.launch"),
            ("[loop]\nmax_tool_calls = 0\n", "c.toml:2:18: invalid value: integer `0`"),
            ("[audit]\ndir = \"rel\"\n", "c.toml:2:1: audit.dir"),
            ("[approvals]\nreviewer = [\"review\"]\n", "c.toml:2:1: approvals.reviewer"),
            ("[approvals]\nnotify = [\"ntfy\", \"x\"]\n", "c.toml:2:1: approvals.notify"),
            ("[approvals]\nreviewer_secs = 0\n", "c.toml:2:17: invalid value: integer `0`"),
            (
                "[approvals]\nweb = \"0.0.0.0:80\"\n",
                "c.toml:2:1: approvals.web: 0.0.0.0:80 is not a loopback",
            ),
            ("[approvals]\nweb = \"localhost\"\n", "c.toml:2:7: invalid socket address"),
            (
                "[telemetry]\ncontent_label = \"top\"\n",
                "c.toml:2:1: telemetry.content_label: must be one of",
            ),
            (
                "[telemetry]\nendpoint = \"localhost:4318\"\n",
                "c.toml:2:1: telemetry.endpoint: an http://",
            ),
            ("[telemetry]\nqueue = 0\n", "c.toml:2:9: invalid value: integer `0`"),
            ("[telemetry]\nqueue = 100000000000\n", "c.toml:2:1: telemetry.queue: at most 1000000"),
            // A comment that mentions the key does not take the location.
            (
                "# launch it yourself\n[inference]\n  launch = [\"x\"]\n",
                "c.toml:3:3: inference.launch",
            ),
            ("[loop]\nmax_tokens = -1\n", "c.toml:2:14: invalid value"),
            ("[loop]\nmax_thinking_tokens = 0\n", "c.toml:2:23: invalid value: integer `0`"),
            ("[inference]\nend_thinking = \"never\"\n", "c.toml:2:16: unknown variant `never`"),
            ("[inferense]\n", "c.toml:1:2: unknown field `inferense`"),
        ] {
            let err = Config::parse(Path::new("c.toml"), text).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn parses_all_four_tables() {
        let text = "[inference]\nlaunch = [\"srv\", \"--port\", \"{port}\"]\ntemperature = 0.0\n\
                    end_thinking = \"reissue\"\nqueue_bound = 128\n\
                    [loop]\nmax_tool_calls = 2\nmax_thinking_tokens = 512\n[tools]\nmirrors = []\n[audit]\ndir = \"/var/bx\"\n";
        let c = Config::parse(Path::new("c.toml"), text).unwrap();
        assert_eq!(c.inference.launch.len(), 3);
        assert_eq!(c.inference.temperature, Some(0.0));
        let two = NonZeroU32::new(2).unwrap();
        assert_eq!(c.inference.end_thinking, EndThinkingName::Reissue);
        assert_eq!(c.inference.queue_bound.get(), 128);
        assert_eq!(
            c.turn,
            LoopConfig {
                max_tool_calls: two,
                max_thinking_tokens: NonZeroU32::new(512),
                ..LoopConfig::default()
            }
        );
        assert_eq!(c.audit.dir.as_deref(), Some(Path::new("/var/bx")));
    }

    #[test]
    fn deep_dotted_keys_are_refused_before_they_are_parsed() {
        let text: String =
            (0..100).map(|i| format!("k{i}.{} = 1\n", ["a"; 60].join("."))).collect();
        let err = Config::parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(err.starts_with("c.toml:17:") && err.contains("dotted keys"), "{err}");
    }

    /// Regression (issue 24): config errors named a line and column but showed no caret
    /// snippet, while policy errors did (and each computed line and column its own way).
    #[test]
    fn an_error_shows_its_line_with_carets_under_the_place() {
        let text = "[inference]\ntool_mode = \"magic\"\n";
        let err = Config::parse(Path::new("c.toml"), text).unwrap_err();
        let StateError::Parse { line, column, snippet, .. } = &err else {
            panic!("a parse error: {err:?}")
        };
        assert_eq!(
            (*line, *column, snippet.as_str()),
            (2, 13, "  |\n2 | tool_mode = \"magic\"\n  |             ^^^^^^^")
        );
        let shown = err.to_string();
        assert_eq!(shown.lines().skip(1).collect::<Vec<_>>().join("\n"), *snippet);
    }

    #[test]
    fn the_approvals_fixture_parses_as_docs_approvals_md_shows_it() {
        let text = include_str!("../../../fixtures/config/approvals.toml");
        let c = Config::parse(Path::new("approvals.toml"), text).unwrap();
        assert_eq!(c.approvals.web, Some("127.0.0.1:7870".parse().unwrap()));
        assert_eq!(c.approvals.reviewer[0], "/home/owner/bin/review");
    }

    #[test]
    fn the_telemetry_fixture_parses_as_docs_telemetry_md_shows_it() {
        let text = include_str!("../../../fixtures/config/telemetry.toml");
        let c = Config::parse(Path::new("telemetry.toml"), text).unwrap();
        assert_eq!(c.telemetry.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert!(c.telemetry.content);
        assert_eq!(c.telemetry.content_label, "public/untrusted");
        assert_eq!(Config::default().telemetry, TelemetryConfig::default());
        assert!(Config::default().telemetry.endpoint.is_none(), "off by default");
    }

    #[test]
    fn parses_mirrors() {
        let text = "[tools]\nmirrors = [\"/srv/bx\", \"https://m.example/bx\"]\n";
        let c = Config::parse(Path::new("c.toml"), text).unwrap();
        assert_eq!(c.tools.mirrors, vec!["/srv/bx".to_owned(), "https://m.example/bx".to_owned()]);
    }
}
