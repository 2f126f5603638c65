//! One HTTP GET through `wasi:http/outgoing-handler`, shared by the standard-WASI test
//! components (`wasi-files`, `wasi-hostile`): no bx host functions, no raw sockets.
#![deny(missing_docs)]

use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

/// The most body bytes a GET reads; a longer body is an error, not a truncation, so a
/// test cannot mistake a partial body for the whole one.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Bytes asked for per read of the body stream.
const CHUNK_BYTES: u64 = 64 << 10;

/// Sends `GET url` and returns the body as text (invalid UTF-8 replaced), or an error
/// text: `status N` for a status other than 2xx, the `wasi:http` error code otherwise.
pub fn get(url: &str) -> Result<String, String> {
    get_with(url, &[])
}

/// [`get`] with request headers `(name, value)`.
pub fn get_with(url: &str, headers: &[(String, String)]) -> Result<String, String> {
    let (scheme, authority, path) = split_url(url)?;
    let fields: Vec<(String, Vec<u8>)> =
        headers.iter().map(|(n, v)| (n.clone(), v.clone().into_bytes())).collect();
    let fields = Fields::from_list(&fields).map_err(|e| format!("headers refused: {e:?}"))?;
    let request = OutgoingRequest::new(fields);
    request.set_method(&Method::Get).map_err(|()| "method refused".to_string())?;
    request.set_scheme(Some(&scheme)).map_err(|()| "scheme refused".to_string())?;
    request.set_authority(Some(authority)).map_err(|()| "authority refused".to_string())?;
    request.set_path_with_query(Some(&path)).map_err(|()| "path refused".to_string())?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(format!("{code:?}")),
        Some(Err(())) => return Err("response already taken".into()),
        None => return Err("response not ready after its pollable was".into()),
    };
    let status = response.status();
    if !(200..300).contains(&status) {
        return Err(format!("status {status}"));
    }
    let body = response.consume().map_err(|()| "body already taken".to_string())?;
    let text = read_all(&body)?;
    drop(body);
    Ok(text)
}

/// Reads a response body to its end, refusing more than [`MAX_BODY_BYTES`].
fn read_all(body: &wasi::http::types::IncomingBody) -> Result<String, String> {
    let stream = body.stream().map_err(|()| "body stream already taken".to_string())?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(CHUNK_BYTES) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() > MAX_BODY_BYTES {
                    return Err(format!("body larger than {MAX_BODY_BYTES} bytes"));
                }
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => return Err(e.to_debug_string()),
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Splits `http[s]://authority/path?query` into its parts; an empty path is `/`.
fn split_url(url: &str) -> Result<(Scheme, &str, String), String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else {
        return Err(format!("not an http or https URL: {url}"));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() {
        return Err(format!("no host in URL: {url}"));
    }
    Ok((scheme, authority, path))
}
