//! A connection to one upstream MCP server, as rmcp's client speaks to it, with every
//! wait bounded by a deadline and every answer by a size. A stdio upstream is a process
//! of bx's own starting: no inherited environment beyond what the owner declared, its
//! own process group (stopped whole when the connection ends), its own working
//! directory, and its stderr kept, bounded, in a log beside the upstreams file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientConfig, ContentBlock, PaginatedRequestParams};
use rmcp::service::RunningService;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;
use tokio::io::AsyncReadExt as _;

use crate::confine::Confine;
use crate::error::GatewayError;
use crate::upstream::{
    ListedTool, MAX_SCHEMA_BYTES, MAX_TOOLS, SecretLookup, Transport, Upstream, valid_tool_name,
};

/// The bounds one connection keeps.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long starting and `initialize` may take.
    pub start: Duration,
    /// How long one `tools/list` (all its pages) may take.
    pub list: Duration,
    /// How long one call may take.
    pub call: Duration,
    /// The largest message bx reads from the upstream: a longer line is dropped, and
    /// the call it answered ends at its deadline.
    pub max_message_bytes: usize,
    /// The largest result handed on (its text or JSON).
    pub max_result_bytes: usize,
    /// The most of its stderr kept in its log per start; the rest is read and dropped.
    pub max_log_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            start: Duration::from_secs(20),
            list: Duration::from_secs(20),
            call: Duration::from_secs(60),
            max_message_bytes: 8 << 20,
            max_result_bytes: 1 << 20,
            max_log_bytes: 1 << 20,
        }
    }
}

/// The most pages of `tools/list` read before the list counts as endless.
const MAX_PAGES: usize = 32;

/// The client bx is to an upstream: no sampling, no elicitation, no roots. A server
/// that asks the client to sample or elicit is answered with an error by rmcp's
/// defaults (bx never hands its model or its owner to an upstream).
fn client_config() -> ClientConfig {
    let mut info = ClientConfig::default();
    info.client_info.name = "bx".into();
    info.client_info.version = env!("CARGO_PKG_VERSION").into();
    info
}

/// A running connection to one upstream.
pub struct Connection {
    name: String,
    limits: Limits,
    service: RunningService<RoleClient, ClientConfig>,
    /// The process group of a stdio upstream, stopped whole when the connection ends.
    group: Option<rustix::process::Pid>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("name", &self.name).finish_non_exhaustive()
    }
}

/// A call's result, as bx takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutput {
    /// The text handed on: the text blocks joined (other blocks named by kind), or the
    /// structured content's JSON where the result has no block.
    pub text: String,
    /// Whether the upstream said the call failed (`isError`).
    pub is_error: bool,
}

impl Connection {
    /// Starts `upstream` (named `name`) and completes `initialize`. A stdio upstream's
    /// stderr goes to `log`, it runs in `home` unless it names a directory, and it is
    /// started through `confine` (it writes only there and in the shared temporary
    /// directories, and reaches nothing of bx's own).
    pub async fn start(
        name: &str,
        upstream: &Upstream,
        home: &Path,
        log: &Path,
        limits: Limits,
        confine: &Confine,
        secrets: &SecretLookup,
    ) -> Result<Connection, GatewayError> {
        let (command, args, cwd, env, writes) = match &upstream.transport {
            Transport::Stdio { command, args, cwd, env, writes, secret_env } => {
                let mut env = env.clone();
                for (var, secret) in secret_env {
                    let value = secrets(secret)
                        .map_err(|why| GatewayError::Secret { name: name.into(), why })?;
                    env.insert(var.clone(), value);
                }
                (command, args, cwd, env, writes)
            }
            Transport::Http { url, allow_private, secret_headers } => {
                let mut headers = Vec::new();
                for (header, template) in secret_headers {
                    let value = crate::upstream::fill(template, secrets)
                        .map_err(|why| GatewayError::Secret { name: name.into(), why })?;
                    headers.push((header.clone(), value));
                }
                return Connection::connect(name, url, *allow_private, &headers, limits).await;
            }
        };
        // The command is run by `bx confine`, after it confined itself: one that is not
        // there is said here, as a start that failed.
        if command.contains('/')
            && let Err(source) = std::fs::metadata(command)
        {
            return Err(GatewayError::Spawn {
                name: name.into(),
                command: command.clone(),
                source,
            });
        }
        let cwd = cwd.as_ref().map_or_else(|| home.to_path_buf(), PathBuf::from);
        std::fs::create_dir_all(&cwd).map_err(|e| GatewayError::io(&cwd, e))?;
        std::fs::create_dir_all(home).map_err(|e| GatewayError::io(home, e))?;
        let mut writable: Vec<&Path> = writes.iter().map(Path::new).collect();
        if cwd != home {
            writable.push(&cwd);
        }
        let mut cmd = tokio::process::Command::new(&confine.exe);
        cmd.args(confine.argv(home, &writable, command, args))
            .env_clear()
            .envs(&env)
            .current_dir(&cwd)
            .process_group(0)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| GatewayError::Spawn {
            name: name.into(),
            command: command.clone(),
            source,
        })?;
        let group = child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32));
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(GatewayError::Failed {
                name: name.into(),
                step: "start".into(),
                why: "its standard streams could not be opened".into(),
            });
        };
        keep_log(stderr, log.to_path_buf(), limits.max_log_bytes)?;
        // The child is reaped (and its leader killed) with the task that owns it.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let transport = AsyncRwTransport::new_client(stdout, stdin)
            .with_max_line_length(limits.max_message_bytes);
        let started = tokio::time::timeout(limits.start, client_config().serve(transport)).await;
        let stop = |e: GatewayError| {
            if let Some(group) = group {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            e
        };
        let service = match started {
            Err(_) => return Err(stop(timeout(name, "initialize", limits.start))),
            Ok(Err(e)) => return Err(stop(failed(name, "initialize", &e.to_string()))),
            Ok(Ok(service)) => service,
        };
        Ok(Connection { name: name.into(), limits, service, group })
    }

    /// Connects to the streamable HTTP upstream at `url` and completes `initialize`.
    async fn connect(
        name: &str,
        url: &str,
        allow_private: bool,
        headers: &[(String, String)],
        limits: Limits,
    ) -> Result<Connection, GatewayError> {
        use rmcp::transport::streamable_http_client::{
            StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
        };
        let checked = crate::http::check_url(name, url, allow_private)?;
        let client = crate::http::client(name, allow_private, limits.start)?;
        let mut config = StreamableHttpClientTransportConfig::with_uri(checked.as_str());
        config.max_json_response_size = limits.max_message_bytes;
        config.max_sse_event_size = limits.max_message_bytes;
        for (header, value) in headers {
            let bad = || GatewayError::Secret {
                name: name.into(),
                why: crate::SecretError::BadHeader(cut_shown(header, 64)),
            };
            let header_name =
                reqwest013::header::HeaderName::from_bytes(header.as_bytes()).map_err(|_| bad())?;
            let mut value = reqwest013::header::HeaderValue::from_str(value).map_err(|_| bad())?;
            value.set_sensitive(true);
            config.custom_headers.insert(header_name, value);
        }
        let transport = StreamableHttpClientTransport::with_client(client, config);
        let service =
            match tokio::time::timeout(limits.start, client_config().serve(transport)).await {
                Err(_) => return Err(timeout(name, "initialize", limits.start)),
                Ok(Err(e)) => return Err(failed(name, "initialize", &e.to_string())),
                Ok(Ok(service)) => service,
            };
        Ok(Connection { name: name.into(), limits, service, group: None })
    }

    /// Whether the connection has ended (the process exited, the stream closed).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.is_transport_closed()
    }

    /// The server's name and version as it gave them (bounded; not trusted).
    pub fn server(&self) -> String {
        self.service.peer_info().map_or_else(String::new, |info| server_line(&info))
    }

    /// Every tool it lists (all pages, by the list deadline), each checked: a name
    /// outside the MCP spec's set or a schema that is not a bounded JSON object is
    /// left out and named in the second list.
    pub async fn list(&self) -> Result<(Vec<ListedTool>, Vec<String>), GatewayError> {
        let pages = async {
            let mut tools = Vec::new();
            let mut cursor = None;
            for _ in 0..MAX_PAGES {
                let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
                let page = self.service.list_tools(params).await.map_err(|e| e.to_string())?;
                tools.extend(page.tools);
                if tools.len() > MAX_TOOLS {
                    return Err(format!("it lists more than {MAX_TOOLS} tools"));
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(tools),
                }
            }
            Err(format!("its list runs past {MAX_PAGES} pages"))
        };
        let tools = match tokio::time::timeout(self.limits.list, pages).await {
            Err(_) => return Err(timeout(&self.name, "tools/list", self.limits.list)),
            Ok(Err(why)) => return Err(failed(&self.name, "tools/list", &why)),
            Ok(Ok(tools)) => tools,
        };
        Ok(take_tools(tools))
    }

    /// Calls `tool` with `args`, by the call deadline; the result is bounded.
    pub async fn call(
        &self,
        tool: &str,
        args: serde_json::Map<String, Value>,
        trace: Option<crate::TraceContext>,
    ) -> Result<CallOutput, GatewayError> {
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        // The caller's trace goes on in the upstream's own spans (W3C Trace Context in
        // `_meta`, SEP-414).
        if let Some(trace) = trace {
            let mut meta = rmcp::model::MetaObject::new();
            meta.set_traceparent(trace.traceparent);
            if let Some(state) = trace.tracestate {
                meta.set_tracestate(state);
            }
            params.meta = Some(rmcp::model::RequestMetaObject(meta));
        }
        let step = format!("the call of {tool}");
        let result =
            match tokio::time::timeout(self.limits.call, self.service.call_tool(params)).await {
                Err(_) => return Err(timeout(&self.name, &step, self.limits.call)),
                Ok(Err(e)) => return Err(failed(&self.name, &step, &e.to_string())),
                Ok(Ok(result)) => result,
            };
        let text = result_text(&result);
        if text.len() > self.limits.max_result_bytes {
            return Err(GatewayError::TooLarge {
                name: self.name.clone(),
                step,
                max: self.limits.max_result_bytes,
            });
        }
        Ok(CallOutput { text, is_error: result.is_error == Some(true) })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

/// What bx hands on of a call's result: the content blocks, as the server means them to
/// be read (a block that is not text named by its kind); its structured content only
/// where it gave no block.
pub fn result_text(result: &rmcp::model::CallToolResult) -> String {
    match &result.structured_content {
        Some(value) if result.content.is_empty() => value.to_string(),
        _ => {
            let parts: Vec<String> = result
                .content
                .iter()
                .map(|block| match block {
                    ContentBlock::Text(t) => t.text.clone(),
                    other => format!("[{} content]", kind_of(other)),
                })
                .collect();
            parts.join("\n")
        }
    }
}

/// The server's name and version as its `initialize` answer gives them, bounded and with
/// control characters replaced (shown, never trusted).
pub fn server_line(info: &rmcp::model::ServerPeerInfo) -> String {
    info.server_info
        .as_ref()
        .map_or_else(String::new, |i| cut_shown(&format!("{} {}", i.name, i.version), 200))
}

/// The tools of a `tools/list` answer as bx takes them: a name outside the MCP spec's set,
/// a schema over its bound or that refers outside itself, and a name listed twice (both
/// copies) are left out and named in the second list.
pub fn take_tools(tools: Vec<rmcp::model::Tool>) -> (Vec<ListedTool>, Vec<String>) {
    let mut listed = Vec::new();
    let mut problems = Vec::new();
    for tool in tools {
        let shown = cut_shown(&tool.name, 80);
        if !valid_tool_name(&tool.name) {
            problems.push(format!("a tool named {shown:?}: not a name bx takes"));
            continue;
        }
        let schema = Value::Object((*tool.input_schema).clone());
        if schema.to_string().len() > MAX_SCHEMA_BYTES {
            problems.push(format!("{shown}: its input schema is over {MAX_SCHEMA_BYTES} bytes"));
            continue;
        }
        // MCP's input schemas are objects (the arguments are an object's members); a
        // server that says otherwise has lied about its tool.
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            problems.push(format!("{shown}: its input schema is not of type object"));
            continue;
        }
        if let Some(at) = remote_ref(&schema) {
            problems.push(format!(
                "{shown}: its input schema refers outside itself ({}); only \"#...\" is taken",
                cut_shown(&at, 120)
            ));
            continue;
        }
        listed.push(ListedTool {
            name: tool.name.to_string(),
            description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
            schema,
        });
    }
    // A name listed twice is left out whole: which copy the server means is its own
    // to say, and either may be the one the owner did not see.
    let mut twice: Vec<String> = Vec::new();
    for (i, t) in listed.iter().enumerate() {
        if listed[..i].iter().any(|u| u.name == t.name) && !twice.contains(&t.name) {
            twice.push(t.name.clone());
        }
    }
    for name in &twice {
        problems.push(format!("{}: listed twice", cut_shown(name, 80)));
    }
    listed.retain(|t| !twice.contains(&t.name));
    (listed, problems)
}

/// The first `$ref` in `schema` that points outside it (anything but `#…`): a schema that
/// names a file or a URL is not one bx or a client should resolve.
fn remote_ref(schema: &Value) -> Option<String> {
    match schema {
        Value::Object(map) => map.iter().find_map(|(k, v)| match v {
            Value::String(at) if (k == "$ref" || k == "$dynamicRef") && !at.starts_with('#') => {
                Some(at.clone())
            }
            _ => remote_ref(v),
        }),
        Value::Array(items) => items.iter().find_map(remote_ref),
        _ => None,
    }
}

fn kind_of(block: &ContentBlock) -> &'static str {
    match block {
        ContentBlock::Text(_) => "text",
        ContentBlock::Image(_) => "image",
        ContentBlock::Audio(_) => "audio",
        ContentBlock::ResourceLink(_) => "resource link",
        ContentBlock::Resource(_) => "resource",
        #[allow(unreachable_patterns, reason = "the content kinds grow with the spec")]
        _ => "other",
    }
}

fn timeout(name: &str, step: &str, after: Duration) -> GatewayError {
    GatewayError::Timeout { name: name.into(), step: step.into(), seconds: after.as_secs() }
}

fn failed(name: &str, step: &str, why: &str) -> GatewayError {
    GatewayError::Failed { name: name.into(), step: step.into(), why: cut_shown(why, 1000) }
}

/// `text` with control characters replaced and cut at `max` bytes: what an upstream
/// said, fit for an error message (escaped again where it is printed).
fn cut_shown(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if out.len() + c.len_utf8() > max {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { '\u{fffd}' } else { c });
    }
    out
}

/// Copies `stderr` into `log` (appended), at most `max` bytes per start; the rest is read
/// and dropped, so a flooding upstream neither blocks on its pipe nor fills the disk.
fn keep_log(
    mut stderr: tokio::process::ChildStderr,
    log: PathBuf,
    max: u64,
) -> Result<(), GatewayError> {
    // One writer at a time, across processes (the daemon and `bx mcp list` may start the
    // same upstream at once): the start that holds `NAME.log.lock` rotates and writes the
    // log; another start's stderr is read and dropped.
    let mut lock_path = log.clone().into_os_string();
    lock_path.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| GatewayError::io(Path::new(&lock_path), e))?;
    let mut file = match lock.try_lock() {
        Ok(()) => {
            // The last start's log is kept as `NAME.log.1`: at most two starts' worth on
            // disk, so a server that floods and crashes at every start does not fill it.
            let mut previous = log.clone().into_os_string();
            previous.push(".1");
            match std::fs::rename(&log, &previous) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(GatewayError::io(&log, e)),
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| GatewayError::io(&log, e))?;
            Some(tokio::fs::File::from_std(file))
        }
        Err(std::fs::TryLockError::WouldBlock) => None,
        Err(std::fs::TryLockError::Error(e)) => return Err(GatewayError::io(&log, e)),
    };
    tokio::spawn(async move {
        // Held until the server's stderr ends.
        let _lock = lock;
        use tokio::io::AsyncWriteExt as _;
        let mut kept = 0u64;
        let mut buf = vec![0u8; 8 << 10];
        loop {
            let n = match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let room = max.saturating_sub(kept).min(n as u64) as usize;
            if let Some(file) = file.as_mut()
                && room > 0
                && file.write_all(&buf[..room]).await.is_ok()
            {
                kept += room as u64;
            }
        }
        if let Some(file) = file.as_mut() {
            let _ = file.flush().await;
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_that_lie_about_their_schema_or_are_listed_twice_are_left_out() {
        let tool = |name: &str, schema: Value| {
            let schema: serde_json::Map<String, Value> = serde_json::from_value(schema).unwrap();
            rmcp::model::Tool::new(name.to_owned(), "d", std::sync::Arc::new(schema))
        };
        let object = serde_json::json!({"type": "object"});
        let (listed, problems) = take_tools(vec![
            tool("fine", object.clone()),
            tool("string", serde_json::json!({"type": "string"})),
            tool("untyped", serde_json::json!({"properties": {}})),
            tool("remote", serde_json::json!({"type": "object", "$ref": "file:///etc/passwd"})),
            tool("twice", object.clone()),
            tool("twice", serde_json::json!({"type": "object", "properties": {"x": {}}})),
            tool("bad name!", object),
        ]);
        let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["fine"]);
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("twice: listed twice")), "{problems:?}");
    }

    #[test]
    fn a_schema_that_refers_outside_itself_is_found_wherever_it_does() {
        let inside =
            serde_json::json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}});
        assert_eq!(remote_ref(&inside), None);
        for at in ["file:///etc/passwd", "http://127.0.0.1:9/s.json", "other.json#/x"] {
            let deep = serde_json::json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"$ref": at}]}}});
            assert_eq!(remote_ref(&deep).as_deref(), Some(at));
        }
    }
}
