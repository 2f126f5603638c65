//! The gateway: the owner's other MCP servers (a process over stdio, or a remote server
//! over streamable HTTP) as bx tools named `NAME.TOOL`. This crate has each upstream's
//! shape as the installed set keeps it, its tool set pinned at add (a later change keeps
//! the changed tools off until the owner accepts it), and a client that
//! starts and calls an upstream within deadlines and size bounds. Deciding a call is
//! the broker's, recording it the audit log's, through the one trust path; see
//! `docs/gateway.md`.
#![deny(missing_docs)]
// Unsafe in one place only, with its reason: `confine::close_inherited` sets
// close-on-exec on descriptors no Rust object of `bx confine` knows (what the daemon's own
// launcher left open), which has no safe API.
#![deny(unsafe_code)]

mod client;
mod confine;
mod error;
mod http;
mod pool;
mod upstream;

pub use client::{CallOutput, Connection, Limits, result_text, server_line, take_tools};
pub use confine::{Confine, all_but, confine_self};
pub use error::{GatewayError, SecretError};
pub use http::check_url;
pub use pool::Gateway;

/// A caller's W3C Trace Context, carried to an upstream in a call's `_meta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `traceparent`.
    pub traceparent: String,
    /// `tracestate`, when there is one.
    pub tracestate: Option<String>,
}
pub use upstream::{
    Changes, ListedTool, MAX_DESCRIPTION_BYTES, MAX_SCHEMA_BYTES, MAX_TOOL_NAME, MAX_TOOLS,
    PinnedTool, SecretLookup, ToolLabels, Transport, Upstream, UpstreamManifest, fill, guard_file,
    secrets_named, store_secrets, valid_name, valid_tool_name,
};
