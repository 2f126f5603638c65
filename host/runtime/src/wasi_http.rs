//! `wasi:http` for standard WASI components, through bx's checked HTTP.
//!
//! wasmtime-wasi-http holds the guest's side of the interface (requests, fields, bodies
//! as streams); the one place a request leaves the host, its `send_request` hook, is
//! bx's: the request goes through [`Fetcher::fetch`], the same code as `bx:host/http`.
//! So the host allow-list is the grant's, a name never matches an IP literal or resolves
//! to a private address, each redirect is checked, one deadline covers the whole request
//! and its body, and both bodies are bounded. The guest's body is read whole (at most
//! 1 MiB) before anything is sent; the response is read whole (at most the response
//! bound) and handed back; a response cut at the bound is an error, not a short body.

use std::future::Future;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

use crate::bindings::bx::host::types::Error;
use crate::host_http::{Fetcher, MAX_REQUEST_BODY, MAX_REQUEST_HEADERS, RESERVED_HEADERS};
use crate::state::CallState;

/// A call's `wasi:http` state: wasmtime-wasi-http's context and bx's hooks.
pub(crate) struct WasiHttp {
    ctx: WasiHttpCtx,
    hooks: CheckedHttp,
}

impl WasiHttp {
    /// What the call's requests reached and what was refused.
    pub(crate) fn fetcher(&self) -> &Fetcher {
        &self.hooks.fetcher
    }
}

/// The hooks: every request is sent by bx's checked fetch.
struct CheckedHttp {
    fetcher: Fetcher,
}

/// The future a sent request's response arrives on, as wasmtime-wasi-http wants it.
type Sent = Box<
    dyn Future<
            Output = Result<
                (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>),
                HttpError,
            >,
        > + Send,
>;

/// bx's refusal of a request, as the guest's `wasi:http` error code.
fn http_error(e: Error) -> HttpError {
    match e {
        Error::Denied(_) => HttpError::HttpRequestDenied,
        Error::Invalid(_) => HttpError::HttpRequestUriInvalid,
        Error::TooLarge(_) => HttpError::HttpResponseBodySize(None),
        Error::NotFound(m) | Error::AlreadyExists(m) | Error::Failed(m) => {
            HttpError::InternalError(Some(m))
        }
    }
}

impl WasiHttpHooks for CheckedHttp {
    fn set_host_header(&mut self) -> bool {
        // The URL decides the host, never the guest.
        false
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Sent {
        let fetcher = self.fetcher.clone();
        Box::new(async move {
            let (parts, body) = request.into_parts();
            let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes())
                .map_err(|_| HttpError::HttpRequestMethodInvalid)?;
            let mut headers = reqwest::header::HeaderMap::new();
            for (name, value) in &parts.headers {
                if RESERVED_HEADERS.contains(&name.as_str()) {
                    continue; // the host sets these from the URL and the body
                }
                headers.append(name.clone(), value.clone());
            }
            if headers.len() > MAX_REQUEST_HEADERS {
                return Err(HttpError::HttpRequestHeaderSectionSize(None));
            }
            let collected = tokio::time::timeout_at(
                fetcher.deadline(),
                Limited::new(body, MAX_REQUEST_BODY).collect(),
            )
            .await
            .map_err(|_| HttpError::ConnectionTimeout)?
            .map_err(|_| HttpError::HttpRequestBodySize(None))?
            .to_bytes();
            let body = (!collected.is_empty()).then(|| collected.to_vec());
            let url = parts.uri.to_string();
            let response = fetcher.fetch(method, &url, headers, body).await.map_err(http_error)?;
            if response.truncated {
                return Err(HttpError::HttpResponseBodySize(Some(response.body.len() as u64)));
            }
            let mut builder = http::Response::builder().status(response.status);
            for h in &response.headers {
                let name = h.name.to_ascii_lowercase();
                if matches!(name.as_str(), "content-length" | "transfer-encoding" | "connection") {
                    continue; // the body handed back is whole, its length is its own
                }
                builder = builder.header(h.name.as_str(), h.value.as_str());
            }
            let full = Full::new(Bytes::from(response.body)).map_err(|never| match never {});
            let response = builder
                .body(full.boxed_unsync())
                .map_err(|e| HttpError::InternalError(Some(e.to_string())))?;
            let done: Box<dyn Future<Output = Result<(), HttpError>> + Send> =
                Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        // Made on first use: most calls never send a request.
        let (grant, limits, deadline) = (&self.grant, &self.limits, self.deadline);
        let (secrets, flow) = (&self.secrets, &self.flow);
        let http = self.http.get_or_insert_with(|| WasiHttp {
            ctx: WasiHttpCtx::new(),
            hooks: CheckedHttp { fetcher: Fetcher::new(grant, limits, deadline, secrets, flow) },
        });
        WasiHttpCtxView { ctx: &mut http.ctx, table: &mut self.table, hooks: &mut http.hooks }
    }
}
