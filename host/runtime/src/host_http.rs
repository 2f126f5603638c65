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
use crate::state::CallState;
use crate::tool::Touched;

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
    ) -> Fetcher {
        Fetcher {
            grant: Arc::new(grant.clone()),
            limits: limits.clone(),
            deadline,
            sink: Arc::default(),
        }
    }

    /// When the call's deadline falls.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    fn check_url(&self, raw: &str) -> Result<(url::Url, NetRoute), Error> {
        let url = url::Url::parse(raw).map_err(|e| Error::Invalid(format!("{raw:?}: {e}")))?;
        canonical_ip_spelling(raw, &url)?;
        let route = self.grant.route_url(&url).map_err(|e| Error::Denied(e.to_string()))?;
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
        let touched = Touched::Host { host, label };
        let mut sink = self.sink.lock();
        sink.label = Some(sink.label.map_or(label, |l| l.join(label)));
        if !sink.hosts.contains(&touched) && sink.hosts.len() < crate::state::MAX_TOUCHED {
            sink.hosts.push(touched);
        }
    }

    /// Sends one request, checked against the grant before it is sent and again at every
    /// redirect, with one deadline over every hop and the body, the response bounded.
    pub(crate) async fn fetch(
        &self,
        method: reqwest::Method,
        raw_url: &str,
        headers: reqwest::header::HeaderMap,
        body: Option<Vec<u8>>,
    ) -> Result<Response, Error> {
        let refused = |e: Error| {
            if let Error::Denied(why) = &e {
                self.sink.lock().refused(why);
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
            self.touch(url.host_str().unwrap_or_default().to_owned());
            let mut builder = client.request(method.clone(), url.clone()).headers(headers.clone());
            if let Some(b) = &body {
                builder = builder.body(b.clone());
            }
            let sent = tokio::time::timeout_at(deadline, builder.send()).await;
            let response = sent.map_err(|_| late(&url))?.map_err(|e| match non_public(&e) {
                Some(why) => refused(Error::Denied(why)),
                None => Error::Failed(format!("{url}: {e}")),
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
            let final_url = response.url().to_string();
            let resp_headers = response
                .headers()
                .iter()
                .filter_map(|(n, v)| {
                    v.to_str()
                        .ok()
                        .map(|v| Header { name: n.as_str().to_owned(), value: v.to_owned() })
                })
                .collect();
            let cap = self.limits.response_bytes as usize;
            let mut response = response;
            let mut data = Vec::new();
            let mut truncated = false;
            let read_all = async {
                while let Some(chunk) = response.chunk().await? {
                    let room = (cap + 1).saturating_sub(data.len());
                    data.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if data.len() > cap {
                        truncated = true;
                        data.truncate(cap);
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
            return Ok(Response {
                status: status.as_u16(),
                url: final_url,
                headers: resp_headers,
                body: data,
                truncated,
            });
        }
    }
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
        let fetcher = Fetcher::new(&self.grant, &self.limits, self.deadline);
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
