//! `http.fetch`: sends one HTTP request (GET by default; a method, headers and a body
//! when given) and returns its status and text, size-capped. The host checks the URL and
//! every redirect against the call's grant; headers and body are data, which the
//! session's taint governs (a tainted session's fetch to a public host asks or is
//! refused by the policy).

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, host_error, http, json_output};

struct Fetch;

/// The most headers one call may set.
const MAX_HEADERS: usize = 16;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
}

#[derive(serde::Serialize)]
struct Reply {
    status: u16,
    /// The URL that answered, after redirects.
    url: String,
    content_type: Option<String>,
    /// True when the host's response cap cut the body.
    truncated: bool,
    text: String,
}

impl Tool for Fetch {
    const NAME: &'static str = "http.fetch";
    const SUMMARY: &'static str = "Send an HTTP request (GET unless a method is given, with optional headers and body) and return its status and body as text (size-capped).";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"url":{"type":"string","description":"http or https URL"},"method":{"enum":["GET","HEAD","POST","PUT","PATCH","DELETE"]},"headers":{"type":"object","additionalProperties":{"type":"string"}},"body":{"type":"string"}},"required":["url"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("url", ResourceKind::UrlFetch)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: Args = bx_tool_sdk::parse_args(args)?;
        let method = args.method.unwrap_or_else(|| "GET".into());
        if !["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
            return Err(CallError::InvalidArgs(format!("method {method:?}")));
        }
        if args.headers.len() > MAX_HEADERS {
            return Err(CallError::InvalidArgs(format!("more than {MAX_HEADERS} headers")));
        }
        let mut headers = vec![http::Header {
            name: "accept".into(),
            value: "text/*, application/json, */*;q=0.5".into(),
        }];
        headers.extend(args.headers.into_iter().map(|(name, value)| http::Header { name, value }));
        let request = http::Request {
            method,
            url: args.url.clone(),
            headers,
            body: args.body.map(String::into_bytes),
        };
        let response = http::send(&request).map_err(|e| host_error(&args.url, e))?;
        let content_type = response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-type"))
            .map(|h| h.value.clone());
        json_output(&Reply {
            status: response.status,
            url: response.url,
            content_type,
            truncated: response.truncated,
            text: String::from_utf8_lossy(&response.body).into_owned(),
        })
    }
}

bx_tool_sdk::tool!(Fetch);
