//! The trust path as OpenTelemetry spans and metrics (docs/telemetry.md): one
//! `execute_tool` span per call, with the broker's decision (`bx.decide`) and the wait
//! for an answer (`bx.approval`) as its children, each carrying what the audit log
//! proves it by (the request record's sequence number). While telemetry is off each
//! step returns at once (no span, no metric, nothing allocated): the trust path is the
//! hot path. Nothing here can refuse or delay a call.

use std::time::{Instant, SystemTime};

use bx_broker::Label;
use bx_telemetry::{SpanKind, SpanStatus, TraceContextExt as _, attr};
use opentelemetry::trace::{Span as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::call::{Finished, Refused};
use crate::settle::Proposal;

/// One call's span, from its proposal to its end.
pub(crate) struct CallSpan {
    cx: Context,
    tool: String,
    started: Instant,
}

impl CallSpan {
    /// `execute_tool {name}`, a child of the current context (the turn, or the MCP
    /// request that asked for the call).
    pub(crate) fn start(p: &Proposal<'_>) -> CallSpan {
        if !bx_telemetry::on() {
            return CallSpan {
                cx: Context::current(),
                tool: String::new(),
                started: Instant::now(),
            };
        }
        let tracer = bx_telemetry::tracer();
        let tool = bx_telemetry::name(p.name);
        let span = tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new(attr::GEN_AI_OPERATION_NAME, "execute_tool"),
                KeyValue::new(attr::GEN_AI_TOOL_NAME, tool.clone()),
                KeyValue::new(attr::GEN_AI_TOOL_CALL_ID, bx_telemetry::name(p.call)),
                KeyValue::new(attr::GEN_AI_TOOL_TYPE, "function"),
                KeyValue::new(attr::GEN_AI_CONVERSATION_ID, bx_telemetry::name(p.session)),
            ])
            .start(&tracer);
        CallSpan { cx: Context::current_with_span(span), tool, started: Instant::now() }
    }

    /// The context the call's steps run in.
    pub(crate) fn context(&self) -> Context {
        self.cx.clone()
    }

    /// The request and decision are on the log (written from `since`): `bx.decide`, and
    /// the metrics of a decided call.
    pub(crate) fn decided(&self, seq: u64, verdict: &'static str, taint: Label, since: SystemTime) {
        if !bx_telemetry::on() {
            return;
        }
        let elapsed = since.elapsed().unwrap_or_default().as_secs_f64();
        let m = bx_telemetry::metrics();
        m.audit_append.record(elapsed, &[]);
        m.calls.add(
            1,
            &[
                KeyValue::new(attr::GEN_AI_TOOL_NAME, self.tool.clone()),
                KeyValue::new(attr::BX_DECISION, verdict),
            ],
        );
        let facts = [
            KeyValue::new(attr::BX_DECISION, verdict),
            KeyValue::new(attr::BX_TAINT, taint.to_string()),
            KeyValue::new(attr::BX_AUDIT_SEQ, i64::try_from(seq).unwrap_or(i64::MAX)),
        ];
        let tracer = bx_telemetry::tracer();
        let mut span = tracer
            .span_builder("bx.decide")
            .with_start_time(since)
            .with_attributes(facts.clone())
            .start_with_context(&tracer, &self.cx);
        span.end();
        self.cx.span().set_attributes(facts);
    }

    /// The call waits for an answer: `bx.approval`, until [`ApprovalSpan::answered`].
    pub(crate) fn approval(&self, id: &str) -> ApprovalSpan {
        if !bx_telemetry::on() {
            return ApprovalSpan { cx: Context::current(), started: Instant::now(), owner: false };
        }
        let tracer = bx_telemetry::tracer();
        let span = tracer
            .span_builder("bx.approval")
            .with_attributes([KeyValue::new(attr::BX_APPROVAL_ID, bx_telemetry::name(id))])
            .start_with_context(&tracer, &self.cx);
        ApprovalSpan { cx: Context::current_with_span(span), started: Instant::now(), owner: false }
    }

    /// The call ended: refused, or run with its result's label. `args` (as it ran) and
    /// the output are exported only as the owner's `[telemetry] content` allows, at
    /// `taint` (what the model had read when it wrote them) and the result's label.
    pub(crate) fn end(self, args: &str, taint: Label, settled: Option<&Result<Finished, Refused>>) {
        if !bx_telemetry::on() {
            return;
        }
        let span = self.cx.span();
        let outcome = match settled {
            None => "failed",
            Some(Err(_)) => "refused",
            Some(Ok(f)) => match f.status {
                bx_audit::CallStatus::Ok => "ok",
                bx_audit::CallStatus::Error => "error",
                bx_audit::CallStatus::Stopped => "stopped",
            },
        };
        bx_telemetry::metrics().call_duration.record(
            self.started.elapsed().as_secs_f64(),
            &[
                KeyValue::new(attr::GEN_AI_TOOL_NAME, self.tool.clone()),
                KeyValue::new(attr::BX_OUTCOME, outcome),
            ],
        );
        {
            span.set_attribute(KeyValue::new(attr::BX_OUTCOME, outcome));
            if let Some(text) = bx_telemetry::content(args, &taint.to_string()) {
                span.set_attribute(KeyValue::new(attr::GEN_AI_TOOL_CALL_ARGUMENTS, text));
            }
            match settled {
                Some(Ok(f)) => {
                    span.set_attribute(KeyValue::new(attr::BX_LABEL, f.label.to_string()));
                    if let Some(text) = bx_telemetry::content(f.for_model(), &f.label.to_string()) {
                        span.set_attribute(KeyValue::new(attr::GEN_AI_TOOL_CALL_RESULT, text));
                    }
                    if f.status != bx_audit::CallStatus::Ok {
                        span.set_attribute(KeyValue::new(attr::ERROR_TYPE, outcome));
                        span.set_status(SpanStatus::error(outcome));
                    }
                }
                Some(Err(_)) => {
                    span.set_attribute(KeyValue::new(attr::ERROR_TYPE, "refused"));
                    span.set_status(SpanStatus::error("refused"));
                }
                None => {
                    span.set_attribute(KeyValue::new(attr::ERROR_TYPE, "audit_unavailable"));
                    span.set_status(SpanStatus::error("the log could not record"));
                }
            }
        }
        span.end();
    }
}

/// A call's wait for its answer.
pub(crate) struct ApprovalSpan {
    cx: Context,
    started: Instant,
    /// Whether it waits for the owner (counted in `bx.approvals.waiting`).
    owner: bool,
}

impl ApprovalSpan {
    /// It now waits for the owner (the reviewer abstained, or there is none).
    pub(crate) fn goes_to_owner(&mut self) {
        if !bx_telemetry::on() {
            return;
        }
        self.owner = true;
        bx_telemetry::metrics().approvals_waiting.add(1, &[]);
    }

    /// It was answered (`approve`, `refuse`, `expired`) by `by` (`owner`, `reviewer`).
    pub(crate) fn answered(self, answer: &'static str, by: &'static str) {
        if !bx_telemetry::on() {
            return;
        }
        let m = bx_telemetry::metrics();
        if self.owner {
            m.approvals_waiting.add(-1, &[]);
        }
        m.approval_wait.record(
            self.started.elapsed().as_secs_f64(),
            &[
                KeyValue::new(attr::BX_APPROVAL_ANSWER, answer),
                KeyValue::new(attr::BX_APPROVAL_BY, by),
            ],
        );
        let span = self.cx.span();
        span.set_attributes([
            KeyValue::new(attr::BX_APPROVAL_ANSWER, answer),
            KeyValue::new(attr::BX_APPROVAL_BY, by),
        ]);
        span.end();
    }
}

/// A turn's span, `invoke_agent bx`: the root of its model requests and calls.
pub(crate) fn turn_context(session: &str) -> Context {
    if !bx_telemetry::on() {
        return Context::current();
    }
    let tracer = bx_telemetry::tracer();
    let span = tracer
        .span_builder("invoke_agent bx")
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, "invoke_agent"),
            KeyValue::new(attr::GEN_AI_AGENT_NAME, "bx"),
            KeyValue::new(attr::GEN_AI_CONVERSATION_ID, bx_telemetry::name(session)),
        ])
        .start(&tracer);
    Context::current_with_span(span)
}

/// Ends a turn's span, with the error that ended the turn, if one did.
/// Its kind is said, not its text: an error's text can name a path or a URL.
pub(crate) fn end_turn<T, E>(cx: &Context, result: &Result<T, E>) {
    if !bx_telemetry::on() {
        return;
    }
    let span = cx.span();
    if result.is_err() {
        span.set_attribute(KeyValue::new(attr::ERROR_TYPE, "turn_failed"));
        span.set_status(SpanStatus::error("the turn failed (its record and bx chat say why)"));
    }
    span.end();
}

/// One request to the model: `chat {model}`, a child of the turn.
pub(crate) struct ChatSpan(Context);

impl ChatSpan {
    pub(crate) fn start() -> ChatSpan {
        if !bx_telemetry::on() {
            return ChatSpan(Context::current());
        }
        let tracer = bx_telemetry::tracer();
        let span = tracer
            .span_builder("chat")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new(attr::GEN_AI_OPERATION_NAME, "chat"),
                KeyValue::new(attr::GEN_AI_PROVIDER_NAME, "llama.cpp"),
            ])
            .start(&tracer);
        ChatSpan(Context::current_with_span(span))
    }

    /// The reply came: the model's name and the tokens it counted.
    pub(crate) fn answered(self, c: &bx_infer::Completion) {
        if !bx_telemetry::on() {
            return;
        }
        let span = self.0.span();
        {
            let model = bx_telemetry::name(&c.model);
            if !model.is_empty() {
                span.update_name(format!("chat {model}"));
                span.set_attribute(KeyValue::new(attr::GEN_AI_REQUEST_MODEL, model.clone()));
                span.set_attribute(KeyValue::new(attr::GEN_AI_RESPONSE_MODEL, model));
            }
            if let Some(u) = c.usage {
                span.set_attributes([
                    KeyValue::new(
                        attr::GEN_AI_USAGE_INPUT_TOKENS,
                        i64::try_from(u.prompt_tokens).unwrap_or(i64::MAX),
                    ),
                    KeyValue::new(
                        attr::GEN_AI_USAGE_OUTPUT_TOKENS,
                        i64::try_from(u.completion_tokens).unwrap_or(i64::MAX),
                    ),
                ]);
            }
            let finish = format!("{:?}", c.finish).to_ascii_lowercase();
            span.set_attribute(KeyValue::new(
                attr::GEN_AI_RESPONSE_FINISH_REASONS,
                opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(finish)].into()),
            ));
        }
        span.end();
    }

    /// The request failed (its kind is said, not its text, which can name a URL).
    pub(crate) fn failed(self) {
        if !bx_telemetry::on() {
            return;
        }
        let span = self.0.span();
        {
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, "inference_failed"));
            span.set_status(SpanStatus::error("the model request failed"));
        }
        span.end();
    }
}

/// A call to the owner's other MCP server: a client span (`tools/call SERVER.TOOL`)
/// whose context goes to the upstream in the request's `_meta`.
pub(crate) struct UpstreamSpan(Context);

impl UpstreamSpan {
    pub(crate) fn start(server: &str, tool: &str) -> UpstreamSpan {
        if !bx_telemetry::on() {
            return UpstreamSpan(Context::current());
        }
        let tracer = bx_telemetry::tracer();
        let name = bx_telemetry::name(&format!("{server}.{tool}"));
        let span = tracer
            .span_builder(format!("tools/call {name}"))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new(attr::MCP_METHOD_NAME, "tools/call"),
                KeyValue::new(attr::GEN_AI_TOOL_NAME, bx_telemetry::name(tool)),
            ])
            .start(&tracer);
        UpstreamSpan(Context::current_with_span(span))
    }

    /// The context the upstream continues, when telemetry is on.
    pub(crate) fn carried(&self) -> Option<bx_gateway::TraceContext> {
        if !bx_telemetry::on() {
            return None;
        }
        bx_telemetry::carried(&self.0)
            .map(|(traceparent, tracestate)| bx_gateway::TraceContext { traceparent, tracestate })
    }

    pub(crate) fn end(self, failed: bool) {
        if !bx_telemetry::on() {
            return;
        }
        let span = self.0.span();
        if failed {
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, "tool_error"));
            span.set_status(SpanStatus::error("the upstream's call failed"));
        }
        span.end();
    }
}
