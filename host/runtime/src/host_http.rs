//! `bx:host/http`: HTTP requests to the grant's hosts.
//!
//! Each request and each redirect hop is checked against the grant before it is sent.
//! IP literals match only rules the owner wrote as addresses, in canonical dotted form
//! (no decimal, hex or octal spellings); a host granted by name must resolve only to
//! public addresses, checked in the resolver that the connection itself uses, so DNS
//! cannot rebind a granted name onto loopback, a private network or cloud metadata.
//!
//! One whole-request deadline covers every hop and the body: the earlier of the call's
//! deadline and `http_timeout` after the request started. A server that stalls gets the
//! guest a `failed` error at that deadline, never a longer wait.

use std::net::SocketAddr;
use std::sync::Arc;

use bx_broker::{NetRoute, is_public_ip};
use reqwest::Client;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tokio::time::Instant;

use crate::bindings::bx::host::http::{Header, Host, Request, Response};
use crate::bindings::bx::host::types::Error;
use crate::secrets::{Direction, Leak, Secrets};
use crate::state::CallState;
use crate::tool::Touched;

/// Why a request is refused after one of the same call tried to send a secret elsewhere:
/// the guard's refusal must not be asked again and again, one guess at a time.
const LEAKED_BEFORE: &str = "an earlier request of this call carried a secret to a host it is not bound to; no further request of this call is sent (see docs/runbook.md#secret-leak)";

/// Request headers a tool may send, at most (count).
pub(crate) const MAX_REQUEST_HEADERS: usize = 64;
/// Request body a tool may send, at most (bytes).
pub(crate) const MAX_REQUEST_BODY: usize = 1 << 20;
/// Headers the URL and the host decide, never the tool.
pub(crate) const RESERVED_HEADERS: &[&str] =
    &["host", "content-length", "transfer-encoding", "connection"];

/// Resolves names with the system resolver, then refuses the name if any address it
/// resolves to is not public.
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| !is_public_ip(a.ip())) {
                let msg = format!("{host} resolves to non-public address {}", bad.ip());
                return Err(Box::new(NonPublic(msg)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[derive(Debug)]
struct NonPublic(String);

impl std::fmt::Display for NonPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NonPublic {}

/// Finds a [`NonPublic`] refusal anywhere in an error's source chain.
fn non_public(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(np) = e.downcast_ref::<NonPublic>() {
            return Some(np.0.clone());
        }
        cur = e.source();
    }
    None
}

/// Refuses IPv4 hosts spelled any way but canonical dotted decimal (`2130706433`,
/// `0x7f.1`, `0177.0.0.1`): the owner reads one thing, the parser another.
fn canonical_ip_spelling(raw: &str, url: &url::Url) -> Result<(), Error> {
    if let Some(url::Host::Ipv4(v4)) = url.host() {
        let after_scheme = raw.split_once("://").map(|(_, rest)| rest).unwrap_or(raw);
        let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or("");
        let host = authority.rsplit_once('@').map(|(_, h)| h).unwrap_or(authority);
        let host = host.split(':').next().unwrap_or("");
        if host != v4.to_string() {
            return Err(Error::Denied(format!(
                "host {host:?} is an IPv4 address in non-canonical form ({v4}); refused"
            )));
        }
    }
    Ok(())
}

/// Everything one call's HTTP needs, owned, so a request can run in a future of its own
/// (`wasi:http` sends from a spawned future): the grant's hosts, the limits, the call's
/// deadline, and where what it reached and what was refused are kept until the call ends.
#[derive(Clone)]
pub(crate) struct Fetcher {
    grant: Arc<bx_broker::Grant>,
    limits: crate::limits::Limits,
    deadline: Instant,
    secrets: Secrets,
    /// The flow inside the call, shared with its state ([`crate::state::InCall`]): a
    /// fetch sends what the call has read, and brings in its answer.
    flow: crate::state::Flow,
    pub(crate) sink: Arc<parking_lot::Mutex<Reached>>,
}

/// Hosts a call's requests reached, and why some were refused, gathered from futures
/// that do not hold the call's state.
#[derive(Default)]
pub(crate) struct Reached {
    /// Distinct hosts reached, at most [`crate::state::MAX_TOUCHED`].
    pub(crate) hosts: Vec<Touched>,
    /// The join of every host's label, those past the bound included.
    pub(crate) label: Option<bx_broker::Label>,
    /// Why requests were refused, at most [`crate::wasi_fs::MAX_REFUSALS`].
    pub(crate) refusals: Vec<String>,
    /// Requests sent or refused, against the call's host-call cap: a `wasi:http`
    /// request is not one of bx's host calls, and would otherwise be unbounded.
    pub(crate) requests: u64,
    /// Why requests past the cap were refused: said once, whatever the bound on the
    /// other reasons.
    pub(crate) capped: Option<String>,
    /// Secrets the host put into requests, and the hosts they went to.
    pub(crate) used: std::collections::BTreeSet<(String, String)>,
    /// What the leak guard found, at most [`crate::secrets::MAX_LEAKS`].
    pub(crate) leaks: Vec<Leak>,
}

impl Reached {
    fn refused(&mut self, why: &str) {
        if self.refusals.len() < crate::wasi_fs::MAX_REFUSALS {
            self.refusals.push(crate::tool::bounded(why.to_owned(), 512));
        }
    }
}

impl Fetcher {
    pub(crate) fn new(
        grant: &bx_broker::Grant,
        limits: &crate::limits::Limits,
        deadline: Instant,
        secrets: &Secrets,
        flow: &crate::state::Flow,
    ) -> Fetcher {
        Fetcher {
            grant: Arc::new(grant.clone()),
            limits: limits.clone(),
            deadline,
            secrets: secrets.clone(),
            flow: Arc::clone(flow),
            sink: Arc::default(),
        }
    }

    /// Sends one request ([`Fetcher::send_checked`]) and passes every error text through
    /// the leak guard: a server's answer or a redirect's URL can hold a value.
    pub(crate) async fn fetch(
        &self,
        method: reqwest::Method,
        raw_url: &str,
        headers: reqwest::header::HeaderMap,
        body: Option<Vec<u8>>,
    ) -> Result<Response, Error> {
        let result = self.send_checked(method, raw_url, headers, body).await;
        result.map_err(|e| {
            let clean = |m: String| self.secrets.redact_text(&m).0;
            match e {
                Error::Denied(m) => Error::Denied(clean(m)),
                Error::Invalid(m) => Error::Invalid(clean(m)),
                Error::TooLarge(m) => Error::TooLarge(clean(m)),
                Error::NotFound(m) => Error::NotFound(clean(m)),
                Error::AlreadyExists(m) => Error::AlreadyExists(clean(m)),
                Error::Failed(m) => Error::Failed(clean(m)),
            }
        })
    }

    /// When the call's deadline falls.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    fn check_url(&self, raw: &str) -> Result<(url::Url, NetRoute), Error> {
        let url = url::Url::parse(raw).map_err(|e| Error::Invalid(format!("{raw:?}: {e}")))?;
        canonical_ip_spelling(raw, &url)?;
        let route = self.grant.route_url(&url).map_err(|e| Error::Denied(e.to_string()))?;
        let host = url.host_str().unwrap_or_default();
        let target = self.grant.host_label(host).unwrap_or(bx_broker::Label::TOP);
        let what = format!("a fetch from {host}");
        let flow = self.flow.lock();
        // It sends what the call has read, and brings in an answer labelled as its host.
        let refused = flow
            .refuse_send(&self.grant, &what, target)
            .or_else(|| flow.refuse_take(&self.grant, &what, target));
        if let Some(why) = refused {
            return Err(Error::Denied(why));
        }
        Ok((url, route))
    }

    fn client(&self) -> Result<Client, Error> {
        Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.limits.http_timeout.min(std::time::Duration::from_secs(10)))
            .dns_resolver(Arc::new(PublicOnly))
            // Nothing carries over between calls, connections included.
            .pool_max_idle_per_host(0)
            .no_proxy()
            .build()
            .map_err(|e| Error::Failed(format!("http client: {e}")))
    }

    fn touch(&self, host: String) {
        let label = self.grant.host_label(&host).unwrap_or(bx_broker::Label::TOP);
        // What a host answers is read by the call: it holds the call's later writes and
        // fetches as a file read does.
        let mut flow = self.flow.lock();
        flow.read = flow.read.join(label);
        drop(flow);
        let touched = Touched::Host { host, label };
        let mut sink = self.sink.lock();
        sink.label = Some(sink.label.map_or(label, |l| l.join(label)));
        if !sink.hosts.contains(&touched) && sink.hosts.len() < crate::state::MAX_TOUCHED {
            sink.hosts.push(touched);
        }
    }

    /// Sends one request, checked against the grant before it is sent and again at every
    /// redirect, with one deadline over every hop and the body, the response bounded;
    /// each hop's secrets put in by [`Fetcher::with_secrets`], the response redacted.
    async fn send_checked(
        &self,
        method: reqwest::Method,
        raw_url: &str,
        headers: reqwest::header::HeaderMap,
        body: Option<Vec<u8>>,
    ) -> Result<Response, Error> {
        let refused = |e: Error| {
            if let Error::Denied(why) = &e {
                // Redacted before the reason is cut to its bound, never after: a value
                // across the cut would be kept in part.
                self.sink.lock().refused(&self.secrets.redact_text(why).0);
            }
            e
        };
        let sent = {
            let mut sink = self.sink.lock();
            sink.requests += 1;
            sink.requests
        };
        if sent > self.limits.host_calls {
            let cap = self.limits.host_calls;
            let why = format!("more than {cap} requests in one call");
            self.sink.lock().capped = Some(why.clone());
            return Err(Error::Denied(why));
        }
        let (mut url, _) = self.check_url(raw_url).map_err(refused)?;
        let client = self.client()?;
        let deadline = self.deadline.min(Instant::now() + self.limits.http_timeout);
        let timeout = self.limits.http_timeout;
        let late = move |url: &url::Url| {
            Error::Failed(format!(
                "{url}: no complete answer within the request's deadline ({timeout:?} at most, \
                 redirects and body included, and never past the call's deadline)"
            ))
        };
        let mut method = method;
        let mut body = body;
        let mut hops = 0;
        loop {
            let (sent_url, sent_headers, carried) =
                self.with_secrets(&url, &headers, body.as_deref()).map_err(refused)?;
            self.touch(url.host_str().unwrap_or_default().to_owned());
            let mut builder = client.request(method.clone(), sent_url).headers(sent_headers);
            if let Some(b) = &body {
                builder = builder.body(b.clone());
            }
            let sent = tokio::time::timeout_at(deadline, builder.send()).await;
            let response = sent.map_err(|_| late(&url))?.map_err(|e| match non_public(&e) {
                Some(why) => refused(Error::Denied(why)),
                // (Its own text would show the URL sent, with any secret put in.)
                None => Error::Failed(format!("{url}: {}", e.without_url())),
            })?;
            let status = response.status();
            if status.is_redirection()
                && let Some(location) = response.headers().get(reqwest::header::LOCATION)
            {
                hops += 1;
                if hops > self.limits.redirects {
                    return Err(Error::Failed(format!(
                        "more than {} redirects",
                        self.limits.redirects
                    )));
                }
                let location = location
                    .to_str()
                    .map_err(|_| Error::Failed("redirect location is not text".into()))?;
                let next = url
                    .join(location)
                    .map_err(|e| Error::Failed(format!("redirect to {location:?}: {e}")))?;
                let (next, _) = self.check_url(next.as_str()).map_err(|e| match e {
                    Error::Denied(why) => {
                        refused(Error::Denied(format!("redirect from {url} refused: {why}")))
                    }
                    other => other,
                })?;
                // 303, and 301/302 after anything but GET/HEAD, continue as GET without body.
                let code = status.as_u16();
                if code == 303 || ((code == 301 || code == 302) && method != reqwest::Method::HEAD)
                {
                    method = reqwest::Method::GET;
                    body = None;
                }
                url = next;
                continue;
            }
            let host = url.host_str().unwrap_or_default().to_owned();
            let encoded = response
                .headers()
                .get(reqwest::header::CONTENT_ENCODING)
                .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
            if carried && encoded {
                return Err(refused(Error::Denied(format!(
                    "{host} answered a request that carried a secret with a compressed body, which the leak guard cannot look through (see docs/runbook.md#secret-leak)"
                ))));
            }
            let final_url = self.clean(response.url().as_str().as_bytes(), &host);
            let final_url = String::from_utf8_lossy(&final_url).into_owned();
            let resp_headers = response
                .headers()
                .iter()
                .filter_map(|(n, v)| {
                    let v =
                        String::from_utf8_lossy(&self.clean(v.to_str().ok()?.as_bytes(), &host))
                            .into_owned();
                    Some(Header { name: n.as_str().to_owned(), value: v })
                })
                .collect();
            let cap = self.limits.response_bytes as usize;
            // Read past the cap by the longest spelling the guard looks for, and cut
            // where the server's bytes cross the cap (not where the redacted ones do): a
            // value across the cut would otherwise reach the guest in part.
            let read_cap = cap + self.secrets.reach();
            let mut response = response;
            let mut data = Vec::new();
            let mut truncated = false;
            let read_all = async {
                while let Some(chunk) = response.chunk().await? {
                    let room = (read_cap + 1).saturating_sub(data.len());
                    data.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if data.len() > read_cap {
                        break;
                    }
                }
                Ok::<(), reqwest::Error>(())
            };
            match tokio::time::timeout_at(deadline, read_all).await {
                Err(_) => return Err(late(&url)),
                Ok(Err(e)) => {
                    return Err(Error::Failed(format!("{final_url}: reading body: {e}")));
                }
                Ok(Ok(())) => {}
            }
            if data.len() > cap {
                truncated = true;
            }
            let mut body = self.clean_before(&data, cap, &host);
            // A redaction can be longer than the value it replaces.
            body.truncate(cap);
            return Ok(Response {
                status: status.as_u16(),
                url: final_url,
                headers: resp_headers,
                body,
                truncated,
            });
        }
    }
}

impl Fetcher {
    /// `bytes` from `host`'s response with every secret value redacted, each find noted.
    fn clean(&self, bytes: &[u8], host: &str) -> Vec<u8> {
        self.clean_before(bytes, bytes.len(), host)
    }

    /// [`Fetcher::clean`] of what starts before byte `keep` (`Secrets::redact_before`).
    fn clean_before(&self, bytes: &[u8], keep: usize, host: &str) -> Vec<u8> {
        let (out, found) = self.secrets.redact_before(bytes, keep);
        if !found.is_empty() {
            let mut sink = self.sink.lock();
            for (name, encoding) in found {
                let host = host.to_owned();
                crate::secrets::note_leak(
                    &mut sink.leaks,
                    Leak { name, direction: Direction::Response, host, encoding },
                );
            }
        }
        out
    }

    /// The URL and headers one hop is sent with: the guest's request checked by the leak
    /// guard, then the secrets bound to this host put in (docs/runtime.md#secrets).
    ///
    /// Refused: a value (in any spelling the guard knows) going to a host it is not
    /// bound to; a placeholder of a stored secret going to such a host, or anywhere but
    /// a header or the query; a secret going over plain http to anything but a loopback
    /// address; a bound secret that the store does not hold.
    fn with_secrets(
        &self,
        url: &url::Url,
        headers: &reqwest::header::HeaderMap,
        body: Option<&[u8]>,
    ) -> Result<(url::Url, reqwest::header::HeaderMap, bool), Error> {
        let host_text = url.host_str().unwrap_or_default().to_owned();
        if self.sink.lock().leaks.iter().any(|l| l.direction == Direction::Request) {
            return Err(Error::Denied(LEAKED_BEFORE.into()));
        }
        let (Some(host), Some(port)) = (url.host(), url.port_or_known_default()) else {
            return Ok((url.clone(), headers.clone(), false));
        };
        let bindings: Vec<&bx_broker::SecretBinding> =
            self.grant.secrets().iter().filter(|b| b.covers(&host, port)).collect();
        let bound_here = |name: &str| bindings.iter().any(|b| b.name == name);
        // The guest's own bytes: a value it should never hold, in any spelling.
        let mut pieces: Vec<&[u8]> = vec![url.as_str().as_bytes()];
        for (n, v) in headers {
            pieces.push(n.as_str().as_bytes());
            pieces.push(v.as_bytes());
        }
        pieces.extend(body);
        for piece in &pieces {
            if let Some((name, encoding)) =
                self.secrets.find_outgoing(piece).into_iter().find(|(n, _)| !bound_here(n))
            {
                let leak = Leak {
                    name: name.to_owned(),
                    direction: Direction::Request,
                    host: host_text.clone(),
                    encoding,
                };
                let why = leak.to_string();
                crate::secrets::note_leak(&mut self.sink.lock().leaks, leak);
                return Err(Error::Denied(why));
            }
        }
        // Placeholders: of the tool's bindings, and of every stored secret.
        let mut names: Vec<&str> = self.grant.secrets().iter().map(|b| b.name.as_str()).collect();
        names.extend(self.secrets.names());
        names.sort_unstable();
        names.dedup();
        let mut used: Vec<&str> = bindings
            .iter()
            .filter(|b| !b.headers.is_empty() || !b.query.is_empty())
            .map(|b| b.name.as_str())
            .collect();
        for name in names {
            let ph = bx_broker::placeholder(name);
            let misplaced = body.is_some_and(|b| contains(b, ph.as_bytes()))
                || url.path().contains(&ph)
                || url.fragment().is_some_and(|f| f.contains(&ph));
            if misplaced {
                return Err(Error::Denied(format!(
                    "{ph} in a request's path or body: a secret goes only in a header or the query (see docs/runbook.md#secret-misplaced)"
                )));
            }
            let in_headers = headers.values().any(|v| contains(v.as_bytes(), ph.as_bytes()));
            let in_query = url.query().is_some_and(|q| q.contains(&ph));
            if !(in_headers || in_query) {
                continue;
            }
            if !bound_here(name) {
                return Err(Error::Denied(format!(
                    "{ph} in a request to {host_text}, which secret {name} is not bound to for this tool (see docs/runbook.md#secret-unbound)"
                )));
            }
            used.push(name);
        }
        if used.is_empty() {
            return Ok((url.clone(), headers.clone(), false));
        }
        let loopback = match host {
            url::Host::Ipv4(a) => a.is_loopback(),
            url::Host::Ipv6(a) => a.is_loopback(),
            url::Host::Domain(_) => false,
        };
        if url.scheme() != "https" && !loopback {
            return Err(Error::Denied(format!(
                "secret {} goes to {host_text} only over https, and this request is plain {} (see docs/runbook.md#secret-plain-http)",
                used[0],
                url.scheme()
            )));
        }
        let value = |name: &str| {
            self.secrets.value(name).ok_or_else(|| {
                Error::Denied(format!(
                    "secret {name} is bound to {host_text} but not set: `bx secret set {name}` (see docs/runbook.md#secret-missing)"
                ))
            })
        };
        // Placeholders the guest put in headers and the query.
        let mut out_headers = reqwest::header::HeaderMap::new();
        for (n, v) in headers {
            let mut text = String::from_utf8_lossy(v.as_bytes()).into_owned();
            for name in &used {
                let ph = bx_broker::placeholder(name);
                if text.contains(&ph) {
                    text = text.replace(&ph, value(name)?);
                }
            }
            let v = reqwest::header::HeaderValue::from_str(&text)
                .map_err(|_| Error::Invalid(format!("header value for {n:?}")))?;
            out_headers.append(n.clone(), v);
        }
        let mut out_url = url.clone();
        if let Some(query) = url.query() {
            let mut q = query.to_owned();
            for name in &used {
                let ph = bx_broker::placeholder(name);
                if q.contains(&ph) {
                    q = q.replace(&ph, &encode_query(value(name)?));
                }
            }
            out_url.set_query(Some(&q));
        }
        // What the bindings put in themselves.
        for b in &bindings {
            for (header, template) in &b.headers {
                let text = template.replace(&b.placeholder(), value(&b.name)?);
                let name = reqwest::header::HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| Error::Invalid(format!("header name {header:?}")))?;
                let v = reqwest::header::HeaderValue::from_str(&text)
                    .map_err(|_| Error::Invalid(format!("header value for {header:?}")))?;
                out_headers.insert(name, v);
            }
            for (param, template) in &b.query {
                let text = template.replace(&b.placeholder(), value(&b.name)?);
                let kept: Vec<&str> = out_url
                    .query()
                    .unwrap_or("")
                    .split('&')
                    .filter(|p| !p.is_empty() && p.split('=').next() != Some(param.as_str()))
                    .collect();
                let mut q = kept.join("&");
                if !q.is_empty() {
                    q.push('&');
                }
                q.push_str(&format!("{param}={}", encode_query(&text)));
                out_url.set_query(Some(&q));
            }
        }
        // A compressed answer could carry the value past the guard.
        out_headers.insert(
            reqwest::header::ACCEPT_ENCODING,
            reqwest::header::HeaderValue::from_static("identity"),
        );
        let mut sink = self.sink.lock();
        for name in used {
            sink.used.insert((name.to_owned(), host_text.clone()));
        }
        Ok((out_url, out_headers, true))
    }
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// What a query value keeps as it is: RFC 3986's unreserved characters.
const QUERY_VALUE: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `text` percent-encoded for a query value.
fn encode_query(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, QUERY_VALUE).to_string()
}

impl CallState {
    /// Takes what this call's HTTP reached into the call's touched set.
    pub(crate) fn gather_http(&mut self, fetcher: &Fetcher) {
        let reached = std::mem::take(&mut *fetcher.sink.lock());
        for host in reached.hosts {
            self.touch(host);
        }
        if let Some(label) = reached.label {
            self.label = self.label.join(label);
        }
        for why in reached.refusals {
            self.fs.note_refusal(why);
        }
        if let Some(why) = reached.capped {
            self.fs.refusals.push(why);
        }
        self.secrets_used.extend(reached.used);
        for leak in reached.leaks {
            self.leaked(leak);
        }
    }

    async fn http_send(&mut self, req: Request) -> Result<Response, Error> {
        let method = reqwest::Method::from_bytes(req.method.as_bytes())
            .map_err(|_| Error::Invalid(format!("method {:?}", req.method)))?;
        if req.headers.len() > MAX_REQUEST_HEADERS {
            return Err(Error::Invalid(format!("more than {MAX_REQUEST_HEADERS} headers")));
        }
        if req.body.as_ref().is_some_and(|b| b.len() > MAX_REQUEST_BODY) {
            return Err(Error::TooLarge(format!("request body over {MAX_REQUEST_BODY} bytes")));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for h in &req.headers {
            if RESERVED_HEADERS.contains(&h.name.to_ascii_lowercase().as_str()) {
                return Err(Error::Invalid(format!("header {:?} is set by the host", h.name)));
            }
            let name = reqwest::header::HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| Error::Invalid(format!("header name {:?}", h.name)))?;
            let value = reqwest::header::HeaderValue::from_str(&h.value)
                .map_err(|_| Error::Invalid(format!("header value for {:?}", h.name)))?;
            headers.append(name, value);
        }
        if self.leaks.iter().any(|l| l.direction == Direction::Request) {
            return Err(Error::Denied(LEAKED_BEFORE.into()));
        }
        let fetcher =
            Fetcher::new(&self.grant, &self.limits, self.deadline, &self.secrets, &self.flow);
        let result = fetcher.fetch(method, &req.url, headers, req.body).await;
        self.gather_http(&fetcher);
        result
    }
}

impl Host for CallState {
    async fn send(&mut self, req: Request) -> wasmtime::Result<Result<Response, Error>> {
        self.count_host_call()?;
        Ok(self.http_send(req).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_canonical_ipv4_spellings() {
        for raw in
            ["http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/"]
        {
            let url = url::Url::parse(raw).unwrap();
            assert!(canonical_ip_spelling(raw, &url).is_err(), "{raw}");
        }
        for raw in ["http://127.0.0.1:8080/x", "http://u@127.0.0.1/", "https://example.com/"] {
            let url = url::Url::parse(raw).unwrap();
            assert!(canonical_ip_spelling(raw, &url).is_ok(), "{raw}");
        }
    }
}
