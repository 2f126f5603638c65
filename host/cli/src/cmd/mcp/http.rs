//! `bx mcp --http`: rmcp's Streamable HTTP service behind a bearer token, served with
//! every wait and every count bounded ([`crate::serving`]), and at most [`MAX_SESSIONS`]
//! MCP sessions alive at once, the longest idle going first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::{
    SessionId, SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};

use super::{Bridge, ServeArgs};
use crate::token::same_token;

/// MCP sessions alive at once (each costs about 52 KB and a task). A new session past
/// it closes the one idle longest; without it sessions grew without bound.
const MAX_SESSIONS: usize = 64;
/// A session nobody has used for this long is closed (rmcp's own idle timer).
const SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// Refuses a request without `Authorization: Bearer <token>`.
async fn authorize(
    axum::extract::State(expected): axum::extract::State<Arc<String>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if same_token(given.as_bytes(), expected.as_bytes()) {
        next.run(request).await
    } else {
        (
            axum::http::StatusCode::UNAUTHORIZED,
            "bx mcp: a bearer token is required (see docs/mcp.md#http)\n",
        )
            .into_response()
    }
}

/// Serves Streamable HTTP at `addr` until SIGINT or SIGTERM.
pub(super) async fn serve(
    bridge: Bridge,
    args: &ServeArgs,
    addr: std::net::SocketAddr,
    token: String,
) -> anyhow::Result<()> {
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    hosts.extend(args.allow_hosts.iter().cloned());
    // No browser page may drive it: any request with an Origin header is refused (DNS
    // rebinding), and the Host must be one of these names.
    let config =
        StreamableHttpServerConfig::default().with_allowed_hosts(hosts).enforce_origin_validation();
    let mut local = LocalSessionManager::default();
    local.session_config.keep_alive = Some(SESSION_IDLE);
    let sessions = Arc::new(BoundedSessions { inner: local, used: Mutex::default() });
    let service = StreamableHttpService::new(move || Ok(bridge.clone()), sessions, config);
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(Arc::new(token), authorize));
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    errln!("bx mcp: serving Streamable HTTP at http://{}/mcp", listener.local_addr()?);
    crate::serving::serve_bounded(listener, app, crate::serving::signalled(), None).await
}

/// rmcp's in-memory sessions, at most [`MAX_SESSIONS`] of them: a new one past the cap
/// closes the session used longest ago.
struct BoundedSessions {
    inner: LocalSessionManager,
    /// When each session was last used.
    used: Mutex<HashMap<SessionId, Instant>>,
}

impl BoundedSessions {
    fn touch(&self, id: &SessionId) {
        self.used.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), Instant::now());
    }

    fn forget(&self, id: &SessionId) {
        self.used.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// The sessions to close so that one more fits: the longest idle first. Sessions
    /// rmcp closed by itself (idle, or the client's DELETE) are forgotten on the way.
    async fn over_cap(&self) -> Vec<SessionId> {
        let live: Vec<SessionId> = self.inner.sessions.read().await.keys().cloned().collect();
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        used.retain(|id, _| live.contains(id));
        let mut by_age: Vec<(Instant, SessionId)> = live
            .into_iter()
            .map(|id| (used.get(&id).copied().unwrap_or(Instant::now()), id))
            .collect();
        by_age.sort_by_key(|(at, _)| *at);
        let excess = (by_age.len() + 1).saturating_sub(MAX_SESSIONS);
        by_age.into_iter().take(excess).map(|(_, id)| id).collect()
    }
}

impl SessionManager for BoundedSessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        for old in self.over_cap().await {
            let _ = self.inner.close_session(&old).await;
            self.forget(&old);
        }
        let (id, transport) = self.inner.create_session().await?;
        self.touch(&id);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.forget(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.resume(id, last_event_id).await
    }
}
