//! Who may use the page, and from where. The page shows an attacker's text, and answers
//! for the owner, so:
//! - a request must name this server in its `Host` (a page on another name that
//!   resolves here, DNS rebinding, is refused);
//! - a request from a page of another origin (`Origin`, `Sec-Fetch-Site`) is refused,
//!   and every form must carry this login's own form token (cross-site requests);
//! - the page is used only after logging in with the token in `web.token`, posted in a
//!   form, never in a link; the login is a random cookie (`HttpOnly`, `SameSite=Strict`)
//!   that this process alone knows;
//! - every response forbids script, framing and anything from elsewhere (CSP).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::token::same_token;

/// The cookie that holds a login.
const COOKIE: &str = "bx_web";
/// Logins kept at once; a new one past it ends the oldest.
const MAX_LOGINS: usize = 16;
/// How long a login lasts.
const LOGIN_LIFE: Duration = Duration::from_secs(12 * 3600);

/// What every response carries: no script at all, styles from here only, no frames, no
/// forms to elsewhere, nothing cached, no referrer to another origin.
pub(super) const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A request refused, and why (plain text; the page is not shown).
#[derive(Debug)]
pub(super) struct Refused(pub(super) StatusCode, pub(super) &'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (self.0, format!("bx serve --web: {} (see docs/runbook.md#web-refused)\n", self.1))
            .into_response()
    }
}

/// A login: its cookie and its form token.
struct Login {
    cookie: String,
    csrf: String,
    made: Instant,
}

/// The checks, and the logins made so far.
pub(super) struct Guard {
    token: String,
    /// The `Host` values a request may carry: loopback names (or the address served)
    /// with the port.
    hosts: Vec<String>,
    logins: Mutex<Vec<Login>>,
}

fn random_hex() -> String {
    let mut raw = [0u8; 32];
    // The kernel's random source does not fail on any system bx runs on; if it did, a
    // login made of zeros would be guessable, so refuse to make one.
    if getrandom::fill(&mut raw).is_err() {
        return String::new();
    }
    hex::encode(raw)
}

impl Guard {
    pub(super) fn new(token: String, addr: std::net::SocketAddr) -> Guard {
        let port = addr.port();
        let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()];
        let own = match addr.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        if !addr.ip().is_unspecified() && !names.contains(&own) {
            names.push(own);
        }
        let mut hosts: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
        if port == 80 {
            hosts.extend(names);
        }
        Guard { token, hosts, logins: Mutex::default() }
    }

    fn host<'h>(&self, headers: &'h HeaderMap) -> Result<&'h str, Refused> {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            Ok(host)
        } else {
            Err(Refused(
                StatusCode::MISDIRECTED_REQUEST,
                "the Host header does not name this server",
            ))
        }
    }

    /// The request names this server and comes from its own pages (or, for a `GET`,
    /// from no page at all). A form's `POST` must say where it comes from.
    pub(super) fn same_origin(&self, headers: &HeaderMap, posting: bool) -> Result<(), Refused> {
        let host = self.host(headers)?;
        let origin = headers.get(header::ORIGIN).map(|o| o.to_str().unwrap_or("?"));
        match origin {
            Some(o) if !o.eq_ignore_ascii_case(&format!("http://{host}")) => {
                return Err(Refused(StatusCode::FORBIDDEN, "a request from another origin"));
            }
            None if posting => {
                return Err(Refused(StatusCode::FORBIDDEN, "a form sent without its Origin"));
            }
            _ => {}
        }
        let site = headers.get("sec-fetch-site").and_then(|s| s.to_str().ok());
        if matches!(site, Some(s) if s != "same-origin" && s != "none") {
            return Err(Refused(StatusCode::FORBIDDEN, "a request from another site"));
        }
        Ok(())
    }

    /// Whether `given` is the token; a login if it is: its cookie's `Set-Cookie` value
    /// and its form token.
    pub(super) fn log_in(&self, given: &str) -> Option<HeaderValue> {
        if !same_token(given.trim().as_bytes(), self.token.as_bytes()) {
            return None;
        }
        let (cookie, csrf) = (random_hex(), random_hex());
        if cookie.is_empty() || csrf.is_empty() {
            return None;
        }
        let mut logins = self.logins.lock().unwrap_or_else(PoisonError::into_inner);
        logins.retain(|l| l.made.elapsed() < LOGIN_LIFE);
        if logins.len() >= MAX_LOGINS {
            logins.remove(0);
        }
        let set = format!(
            "{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            LOGIN_LIFE.as_secs()
        );
        logins.push(Login { cookie, csrf, made: Instant::now() });
        HeaderValue::from_str(&set).ok()
    }

    /// The form token of the login the request's cookie names; `None` when it names
    /// none (or one that ended).
    pub(super) fn login(&self, headers: &HeaderMap) -> Option<String> {
        let cookies = headers.get_all(header::COOKIE);
        let given: Vec<&str> = cookies
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .collect();
        let logins = self.logins.lock().unwrap_or_else(PoisonError::into_inner);
        logins
            .iter()
            .filter(|l| l.made.elapsed() < LOGIN_LIFE)
            .find(|l| given.iter().any(|g| same_token(g.as_bytes(), l.cookie.as_bytes())))
            .map(|l| l.csrf.clone())
    }

    /// Ends the login with form token `csrf`.
    pub(super) fn log_out(&self, csrf: &str) {
        self.logins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|l| !same_token(l.csrf.as_bytes(), csrf.as_bytes()));
    }
}

/// Whether a form's token is its login's.
pub(super) fn same_csrf(given: &str, expected: &str) -> bool {
    !expected.is_empty() && same_token(given.as_bytes(), expected.as_bytes())
}

/// The headers every response carries.
pub(super) async fn harden(mut response: Response) -> Response {
    let h = response.headers_mut();
    let set = |h: &mut HeaderMap, name: header::HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(h, header::CONTENT_SECURITY_POLICY, CSP);
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    // Not `no-referrer`: under it a browser sends `Origin: null` with the page's own forms.
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::CACHE_CONTROL, "no-store");
    set(h, header::HeaderName::from_static("cross-origin-opener-policy"), "same-origin");
    set(h, header::HeaderName::from_static("cross-origin-resource-policy"), "same-origin");
    response
}
