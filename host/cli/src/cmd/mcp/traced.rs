//! `bx mcp`'s server spans (docs/telemetry.md): one per request it handles, named
//! `{method} {tool}`, continuing the client's trace when its `_meta` carries a W3C
//! `traceparent` (SEP-414), with the MCP attributes of the semantic conventions. A call's
//! span goes on in the daemon: its `traceparent` travels with the call.

use bx_telemetry::{SpanKind, SpanStatus, TraceContextExt as _, attr};
use opentelemetry::trace::Tracer as _;
use opentelemetry::{Context, KeyValue};
use rmcp::RoleServer;
use rmcp::service::RequestContext;

/// One request's span.
pub(super) struct RequestSpan(Context);

impl RequestSpan {
    /// `method` (and `tool`, for `tools/call`) of the request `context` names, in MCP
    /// session `session`, over `transport` (`pipe` or `tcp`).
    pub(super) fn start(
        method: &'static str,
        tool: Option<&str>,
        context: &RequestContext<RoleServer>,
        session: &str,
        transport: &'static str,
    ) -> RequestSpan {
        if !bx_telemetry::on() {
            return RequestSpan(Context::current());
        }
        let meta = &context.meta.0;
        let parent = bx_telemetry::continued(meta.get_traceparent(), meta.get_tracestate());
        let tracer = bx_telemetry::tracer();
        let mut attributes = vec![
            KeyValue::new(attr::MCP_METHOD_NAME, method),
            KeyValue::new(attr::MCP_SESSION_ID, bx_telemetry::name(session)),
            KeyValue::new(attr::JSONRPC_REQUEST_ID, bx_telemetry::name(&context.id.to_string())),
            KeyValue::new(attr::NETWORK_TRANSPORT, transport),
        ];
        let name = match tool {
            Some(tool) => {
                let tool = bx_telemetry::name(tool);
                attributes.push(KeyValue::new(attr::GEN_AI_TOOL_NAME, tool.clone()));
                attributes.push(KeyValue::new(attr::GEN_AI_OPERATION_NAME, "execute_tool"));
                format!("{method} {tool}")
            }
            None => method.to_owned(),
        };
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        RequestSpan(parent.with_span(span))
    }

    /// The `traceparent` the daemon's span of the call continues.
    pub(super) fn traceparent(&self) -> Option<String> {
        bx_telemetry::on().then(|| bx_telemetry::carried(&self.0)).flatten().map(|(p, _)| p)
    }

    /// The request was answered; `failed` when with an error.
    pub(super) fn end(self, failed: bool) {
        if !bx_telemetry::on() {
            return;
        }
        let span = self.0.span();
        if failed {
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, "tool_error"));
            span.set_status(SpanStatus::error("the call ended in an error"));
        }
        span.end();
    }
}
