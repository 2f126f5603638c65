//! `http.fetch`: GETs a URL and returns its status and text, size-capped.

use bx_tool_sdk::{CallError, Output, ResourceKind, Tool, host_error, http, json_output};

struct Fetch;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    url: String,
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
    const SUMMARY: &'static str =
        "Fetch a URL with GET and return its status and body as text (size-capped).";
    const SCHEMA: &'static str = r#"{"type":"object","properties":{"url":{"type":"string","description":"http or https URL"}},"required":["url"],"additionalProperties":false}"#;
    const RESOURCES: &'static [(&'static str, ResourceKind)] = &[("url", ResourceKind::UrlFetch)];

    fn run(args: &str) -> Result<Output, CallError> {
        let args: Args = bx_tool_sdk::parse_args(args)?;
        let request = http::Request {
            method: "GET".into(),
            url: args.url.clone(),
            headers: vec![http::Header {
                name: "accept".into(),
                value: "text/*, application/json, */*;q=0.5".into(),
            }],
            body: None,
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
