//! `bx serve --web`: the owner's page, served beside the daemon. It shows the calls
//! waiting (answered by typing the id, as at the terminal, or refused with a reason),
//! the sessions with their taint and scoped answers (revocable), the audit log's latest
//! records and whether it verifies, the installed tools, and a picture of each session's
//! calls. It reaches the daemon as `bx approve` does, over the socket with its token:
//! one trust path, whoever answers.
//!
//! Its guards are in [`guard`]; its HTML, with no script, in [`view`].

mod gather;
mod guard;
mod view;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use bx_protocol::{Answer, Body, ErrorCode};
use bx_state::StateDir;

use guard::{Guard, Refused, same_csrf};

/// The most bytes of a form the page accepts (a reason, an id, a seal).
const MAX_FORM_BYTES: usize = 16 << 10;
/// The most bytes of a refusal's reason kept (the model reads it).
const MAX_REASON_BYTES: usize = 1 << 10;
/// How long a connection to the page lives, from its accept: a page and its stylesheet
/// take milliseconds on loopback. Past it the connection is closed, so that a flood of
/// stalled connections (a body sent a byte at a time, a response never read) keeps the
/// owner from the page for about this long at most.
const CONNECTION_LIFE: Duration = Duration::from_secs(20);
/// The most bytes of a call's arguments the page shows whole (and so lets the owner
/// approve there); a bigger call is read with `bx approvals show` and answered with
/// `bx approve`.
const MAX_WHOLE_SHOWN: usize = 1 << 20;

/// The page's stylesheet: colours of the picture, nothing that runs.
const STYLE: &str = include_str!("style.css");

/// How long the page shows a verification of the log before it verifies it again (the
/// whole log is read each time).
const VERIFY_EVERY: Duration = Duration::from_secs(30);

/// The page's server: where state lives, and who may use it.
pub(crate) struct Web {
    state: StateDir,
    guard: Guard,
    /// The latest verification of the log, and when it was made.
    verified: Mutex<Option<(Instant, Arc<gather::Verified>)>>,
}

/// Binds `addr` and makes (or reads) the token: what can fail is found before the daemon
/// starts. An address that is not loopback needs `allow_remote`.
pub(crate) async fn bind(
    state: &StateDir,
    addr: SocketAddr,
    allow_remote: bool,
) -> anyhow::Result<(tokio::net::TcpListener, Arc<Web>)> {
    anyhow::ensure!(
        addr.ip().is_loopback() || allow_remote,
        "--web {addr} is not a loopback address; add --allow-remote to serve the page to other machines, in plain HTTP (see docs/approvals.md#the-page)"
    );
    // The page answers only to the Host a browser sends for the address it opened: for
    // 0.0.0.0 that is no name bx can know.
    anyhow::ensure!(
        !addr.ip().is_unspecified(),
        "--web {addr}: name the address to serve (such as 192.168.1.5:7870), not every address: a request must name it in its Host"
    );
    let token = crate::token::token(state, crate::token::Service::Web)?;
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr()?;
    let guard = Guard::new(token, bound);
    Ok((listener, Arc::new(Web { state: state.clone(), guard, verified: Mutex::default() })))
}

/// Serves the page on `listener` until `stop` ends.
pub(crate) async fn run(
    listener: tokio::net::TcpListener,
    web: Arc<Web>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/", get(overview))
        .route("/login", get(login_page).post(log_in))
        .route("/logout", post(log_out))
        .route("/session/{id}", get(session))
        .route("/approval/{id}", get(whole))
        .route("/approve", post(approve))
        .route("/refuse", post(refuse))
        .route("/revoke", post(revoke))
        .route("/style.css", get(style))
        .fallback(|| async { (StatusCode::NOT_FOUND, "no such page\n") })
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(axum::middleware::map_response(guard::harden))
        .with_state(web.clone());
    errln!(
        "bx serve: the owner's page is at http://{addr}/ (log in with the token in {})",
        web.state.web_token().display()
    );
    crate::serving::serve_bounded(listener, app, stop, Some(CONNECTION_LIFE)).await
}

type Shared = State<Arc<Web>>;

/// Why a request goes no further: refused, or sent to log in first.
enum Turned {
    Refused(Refused),
    ToLogin,
}

impl IntoResponse for Turned {
    fn into_response(self) -> Response {
        match self {
            Turned::Refused(r) => r.into_response(),
            Turned::ToLogin => Redirect::to("/login").into_response(),
        }
    }
}

impl Web {
    /// The login's form token, once the request passed the guards; otherwise why not (a
    /// page asked for without a login is sent to the login page).
    fn enter(&self, headers: &HeaderMap, posting: bool) -> Result<String, Turned> {
        self.guard.same_origin(headers, posting).map_err(Turned::Refused)?;
        match self.guard.login(headers) {
            Some(csrf) => Ok(csrf),
            None if posting => {
                Err(Turned::Refused(Refused(StatusCode::FORBIDDEN, "not logged in")))
            }
            None => Err(Turned::ToLogin),
        }
    }

    /// [`Web::enter`] for a form, which must carry the login's form token too.
    fn enter_form(&self, headers: &HeaderMap, given: &str) -> Result<String, Turned> {
        let csrf = self.enter(headers, true)?;
        if same_csrf(given, &csrf) {
            Ok(csrf)
        } else {
            Err(Turned::Refused(Refused(
                StatusCode::FORBIDDEN,
                "a form without this login's form token",
            )))
        }
    }

    fn token_path(&self) -> String {
        self.state.web_token().display().to_string()
    }
}

/// Runs `work` on a thread that may block (the socket client is synchronous).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(t) => t,
        // The work panicked: the page fails as a panic would have.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE)
}

async fn login_page(State(web): Shared, headers: HeaderMap) -> Response {
    if let Err(r) = web.guard.same_origin(&headers, false) {
        return r.into_response();
    }
    view::login(&web.token_path(), false).into_response()
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

async fn log_in(State(web): Shared, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    if let Err(r) = web.guard.same_origin(&headers, true) {
        return r.into_response();
    }
    match web.guard.log_in(&form.token) {
        Some(cookie) => ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response(),
        None => (StatusCode::FORBIDDEN, view::login(&web.token_path(), true)).into_response(),
    }
}

#[derive(serde::Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn log_out(State(web): Shared, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    match web.enter_form(&headers, &form.csrf) {
        Ok(csrf) => {
            web.guard.log_out(&csrf);
            Redirect::to("/login").into_response()
        }
        Err(r) => r.into_response(),
    }
}

async fn overview(State(web): Shared, headers: HeaderMap) -> Response {
    let csrf = match web.enter(&headers, false) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let state = web.state.clone();
    let cached = web
        .verified
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .filter(|(at, _)| at.elapsed() < VERIFY_EVERY);
    let o = blocking(move || view::Overview {
        approvals: gather::approvals(&state),
        sessions: gather::sessions(&state),
        records: gather::recent_records(&state, gather::RECENT_RECORDS),
        verified: match cached {
            Some(done) => Ok(done),
            None => gather::verify(&state).map(|v| (Instant::now(), Arc::new(v))),
        },
        tools: gather::tools(&state),
    })
    .await;
    if let Ok(done) = &o.verified {
        *web.verified.lock().unwrap_or_else(PoisonError::into_inner) = Some(done.clone());
    }
    view::overview(&csrf, &o).into_response()
}

async fn session(State(web): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let csrf = match web.enter(&headers, false) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let state = web.state.clone();
    let asked = id.clone();
    match blocking(move || gather::session(&state, &asked)).await {
        Ok(s) => view::session(&csrf, &id, &s).into_response(),
        Err(e) => (
            StatusCode::NOT_FOUND,
            view::outcome(&csrf, "no such session", &format!("{e:#}"), false),
        )
            .into_response(),
    }
}

/// A waiting call's whole arguments, with the seal that approves a block shown in part.
async fn whole(State(web): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let csrf = match web.enter(&headers, false) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let state = web.state.clone();
    let wanted = id.trim().to_ascii_lowercase();
    let found = blocking(move || -> anyhow::Result<Result<_, String>> {
        let (items, _) = gather::approvals(&state)?;
        let Some(a) = items.into_iter().find(|a| a.approval == wanted) else {
            return Ok(Err(format!("no approval {wanted} is waiting")));
        };
        // Bounded before the rest is read: a page view must not pull a call's
        // megabytes into memory only to say it shows none of them.
        let read = super::rest::whole_args_within(&state, &a.approval, MAX_WHOLE_SHOWN as u64)?;
        Ok(read.map(|(args, seal)| (a, args, seal)))
    })
    .await;
    match found {
        Ok(Ok((a, args, seal))) => view::whole(&csrf, &a, &args, seal.as_deref()).into_response(),
        Ok(Err(reason)) => {
            (StatusCode::NOT_FOUND, view::outcome(&csrf, "not waiting", &reason, false))
                .into_response()
        }
        Err(e) => view::outcome(&csrf, "not shown", &format!("{e:#}"), false).into_response(),
    }
}

#[derive(serde::Deserialize)]
struct ApproveForm {
    csrf: String,
    approval: String,
    /// The id as the owner typed it.
    typed: String,
    #[serde(default)]
    scope: String,
    /// The seal of a block shown in part, from the page of its whole arguments.
    #[serde(default)]
    seen: String,
}

async fn approve(State(web): Shared, headers: HeaderMap, Form(f): Form<ApproveForm>) -> Response {
    let csrf = match web.enter_form(&headers, &f.csrf) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    // As at the terminal: the id typed, not a click.
    if !f.typed.trim().eq_ignore_ascii_case(f.approval.trim()) || f.approval.trim().is_empty() {
        let message = format!(
            "you typed {:?}, which is not the id {}; nothing was answered, and the call still waits",
            bx_audit::bounded(&f.typed, 64),
            f.approval
        );
        return view::outcome(&csrf, "not approved", &message, false).into_response();
    }
    let scope = (!f.scope.is_empty()).then(|| f.scope.clone());
    let seen = (!f.seen.is_empty()).then(|| f.seen.clone());
    let answer = Answer::Approve { scope: scope.clone(), seen };
    answered(&web, &csrf, &f.approval, answer, "approved", scope).await
}

#[derive(serde::Deserialize)]
struct RefuseForm {
    csrf: String,
    approval: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    scope: String,
}

async fn refuse(State(web): Shared, headers: HeaderMap, Form(f): Form<RefuseForm>) -> Response {
    let csrf = match web.enter_form(&headers, &f.csrf) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let reason = match f.reason.trim() {
        "" => "refused by the owner".to_owned(),
        r => bx_audit::bounded(r, MAX_REASON_BYTES),
    };
    let scope = (!f.scope.is_empty()).then(|| f.scope.clone());
    let answer = Answer::Refuse { reason, scope: scope.clone() };
    answered(&web, &csrf, &f.approval, answer, "refused", scope).await
}

/// Sends `answer` to approval `id`, and shows what the daemon said.
async fn answered(
    web: &Web,
    csrf: &str,
    id: &str,
    answer: Answer,
    verb: &str,
    scope: Option<String>,
) -> Response {
    let state = web.state.clone();
    let body = Body::AnswerApproval { approval: id.to_owned(), answer };
    let (title, message, ok) = match blocking(move || gather::ask(&state, body)).await {
        Ok(Body::Ok {}) => {
            let message = match scope {
                Some(s) => format!(
                    "{verb} {id}, and the session's later calls within scope {s} (its session's page lists it)"
                ),
                None => format!("{verb} {id}"),
            };
            (verb.to_owned(), message, true)
        }
        Ok(Body::Refused { reason }) => ("not answered".to_owned(), reason, false),
        Ok(Body::Error { code: ErrorCode::ApprovalUnseen, .. }) => (
            "read it whole first".to_owned(),
            format!(
                "approval {id} shows its call in part: read its whole arguments (at /approval/{id}) and approve it there; the call still waits"
            ),
            false,
        ),
        Ok(Body::Error { message, runbook, .. }) => {
            ("not answered".to_owned(), format!("{message} (see {runbook})"), false)
        }
        Ok(other) => {
            ("not answered".to_owned(), format!("unexpected reply: {}", other.type_name()), false)
        }
        Err(e) => ("not answered".to_owned(), format!("{e:#}"), false),
    };
    view::outcome(csrf, &title, &message, ok).into_response()
}

#[derive(serde::Deserialize)]
struct RevokeForm {
    csrf: String,
    session: String,
    /// The scoped answer's approval id; empty for all of the session's.
    #[serde(default)]
    answer: String,
}

async fn revoke(State(web): Shared, headers: HeaderMap, Form(f): Form<RevokeForm>) -> Response {
    let csrf = match web.enter_form(&headers, &f.csrf) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let state = web.state.clone();
    let answer = (!f.answer.is_empty()).then(|| f.answer.clone());
    let body = Body::RevokeScopes { session: f.session.clone(), answer };
    let (message, ok) = match blocking(move || gather::ask(&state, body)).await {
        Ok(Body::ScopesEnded { count: 0, .. }) => {
            (format!("session {} holds no such scoped answer", f.session), false)
        }
        Ok(Body::ScopesEnded { count, .. }) => {
            (format!("session {}: {count} scoped answer(s) revoked", f.session), true)
        }
        Ok(Body::Error { message, runbook, .. }) => (format!("{message} (see {runbook})"), false),
        Ok(other) => (format!("unexpected reply: {}", other.type_name()), false),
        Err(e) => (format!("{e:#}"), false),
    };
    view::outcome(&csrf, if ok { "revoked" } else { "not revoked" }, &message, ok).into_response()
}
