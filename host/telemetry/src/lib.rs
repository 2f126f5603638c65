//! bx in the owner's tracing tools: OpenTelemetry spans for turns (`invoke_agent`),
//! model requests (`chat`), tool calls (`execute_tool`), the broker's decision
//! (`bx.decide`), approval waits (`bx.approval`) and MCP requests, and metrics, exported
//! over OTLP/HTTP protobuf (docs/telemetry.md). Off unless `[telemetry] endpoint` or the
//! standard `OTEL_EXPORTER_OTLP_*` variables name a collector.
//!
//! The audit log stays the record; this is a view of it. Nothing here waits for the
//! collector: spans go through a bounded queue to a thread of their own
//! ([`export`]), and what is lost is counted. Arguments and results are exported only
//! when the owner turns `content` on, bounded, and replaced by their label above the
//! level the owner allows ([`content`]).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod attr;
mod export;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bx_state::TelemetryConfig;
use opentelemetry::metrics::{Counter, Histogram, UpDownCounter};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue, global};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;

pub use export::{Stats, Status};
pub use opentelemetry::context::FutureExt;
pub use opentelemetry::trace::{
    Span as _, SpanKind, Status as SpanStatus, TraceContextExt, Tracer as _,
};

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter could not be built from the endpoint given.
    #[error(
        "telemetry: the OTLP exporter for {endpoint} could not be built: {why} (see docs/runbook.md#telemetry-dropped)"
    )]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// Why.
        why: String,
    },
    /// The export thread could not start.
    #[error("telemetry: the export thread could not start: {0}")]
    Thread(#[from] std::io::Error),
}

/// Whether spans are exported: attributes that cost something to make are made only
/// then.
static ON: AtomicBool = AtomicBool::new(false);
/// The content rule, when the owner turned content on.
static CONTENT: OnceLock<Content> = OnceLock::new();
/// The metric instruments (no-ops while telemetry is off).
static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Whether telemetry is on in this process.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// bx's tracer.
pub fn tracer() -> global::BoxedTracer {
    global::tracer("bx")
}

/// The running pipeline; ending it (drop) exports what is queued, within its bound.
#[derive(Debug, Default)]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    stats: Option<Arc<Stats>>,
}

impl Telemetry {
    /// What became of the spans so far; `None` while telemetry is off.
    pub fn stats(&self) -> Option<Arc<Stats>> {
        self.stats.clone()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(t) = self.tracer.take() {
            let _ = t.shutdown();
        }
        if let Some(m) = self.meter.take() {
            let _ = m.shutdown();
        }
    }
}

/// The collector to export to, from the config or the environment; `None` when
/// telemetry is off (`OTEL_SDK_DISABLED=true` turns it off whatever else says).
fn endpoint(config: &TelemetryConfig) -> Option<String> {
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    if let Some(e) = &config.endpoint {
        return Some(e.trim_end_matches('/').to_owned());
    }
    set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .map(|e| format!("{e} (from OTEL_EXPORTER_OTLP_*)"))
}

/// Starts telemetry for this process (`process`: `daemon` or `mcp`) as `config` says;
/// a no-op [`Telemetry`] when it is off. `status` is the file the export counts are
/// written to (the daemon's `telemetry.json`; one writer).
pub fn init(
    config: &TelemetryConfig,
    process: &'static str,
    status: Option<PathBuf>,
) -> Result<Telemetry, TelemetryError> {
    let Some(shown) = endpoint(config) else { return Ok(Telemetry::default()) };
    let timeout = Duration::from_secs(config.timeout_secs.get());
    let built = |e: opentelemetry_otlp::ExporterBuildError| TelemetryError::Exporter {
        endpoint: shown.clone(),
        why: e.to_string(),
    };
    let mut spans = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(timeout);
    let mut metrics = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(timeout);
    if let Some(base) = &config.endpoint {
        let base = base.trim_end_matches('/');
        spans = spans.with_endpoint(format!("{base}/v1/traces"));
        metrics = metrics.with_endpoint(format!("{base}/v1/metrics"));
    }
    // No headers from here: a collector that needs them gets them from
    // OTEL_EXPORTER_OTLP_HEADERS, never from a file a tool could read.
    let spans = spans.with_headers(HashMap::new()).build().map_err(built)?;
    let metrics = metrics.with_headers(HashMap::new()).build().map_err(built)?;
    let resource = Resource::builder()
        .with_service_name(std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "bx".into()))
        .with_attributes([
            KeyValue::new(attr::BX_PROCESS, process),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    let stats = Arc::new(Stats::default());
    let processor = export::Bounded::start(
        spans,
        config.queue.get(),
        timeout,
        Arc::clone(&stats),
        status.map(|p| (p, shown.clone())),
    )?;
    let tracer = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.clone())
        .build();
    let meter = SdkMeterProvider::builder()
        .with_reader(
            PeriodicReader::builder(metrics).with_interval(Duration::from_secs(10)).build(),
        )
        .with_resource(resource)
        .build();
    global::set_text_map_propagator(TraceContextPropagator::new());
    global::set_tracer_provider(tracer.clone());
    global::set_meter_provider(meter.clone());
    if config.content {
        let _ = CONTENT.set(Content {
            bytes: config.content_bytes.get(),
            highest: rank(&config.content_label).unwrap_or((0, 1)),
        });
    }
    ON.store(true, Ordering::Relaxed);
    // A tracer made before the provider was set would be a no-op: none is.
    let _ = tracer.tracer("bx");
    Ok(Telemetry { tracer: Some(tracer), meter: Some(meter), stats: Some(stats) })
}

/// The owner's rule for arguments and results.
#[derive(Debug)]
struct Content {
    bytes: usize,
    /// The highest label exported as it is, as (confidentiality, integrity) ranks.
    highest: (u8, u8),
}

/// `conf/integrity` as ranks, `None` for what is not a label.
fn rank(label: &str) -> Option<(u8, u8)> {
    let (c, i) = label.split_once('/')?;
    let c = ["public", "private", "secret"].iter().position(|x| *x == c)?;
    let i = ["trusted", "untrusted"].iter().position(|x| *x == i)?;
    Some((c as u8, i as u8))
}

/// `text`, labelled `label`, as a span may carry it: `None` unless the owner turned
/// content on; the label in brackets when the label is above the owner's highest (or
/// is no label); else `text` cut at the owner's bound. The caller redacts secrets first.
pub fn content(text: &str, label: &str) -> Option<String> {
    let rule = CONTENT.get()?;
    match rank(label) {
        Some((c, i)) if c <= rule.highest.0 && i <= rule.highest.1 => {
            let mut cut = rule.bytes.min(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            Some(text[..cut].to_owned())
        }
        _ => Some(format!("[{label}]")),
    }
}

/// The most bytes of a name exported.
const MAX_NAME_BYTES: usize = 128;

/// A tool, session or model name as an attribute or span name: every control, bidi,
/// zero-width or other hidden character replaced by U+FFFD (it comes from the model, a
/// tool, a client or a server), then cut at 128 bytes on a character boundary.
pub fn name(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = if bx_broker::is_hidden(c) || c.is_control() { '\u{fffd}' } else { c };
        if out.len() + c.len_utf8() > MAX_NAME_BYTES {
            break;
        }
        out.push(c);
    }
    out
}

/// The longest `traceparent` read (version 00 has 55 bytes).
const MAX_TRACEPARENT: usize = 128;
/// W3C Trace Context's bounds on `tracestate`: 32 list members, 512 bytes.
const MAX_TRACESTATE: usize = 512;
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// `tracestate` as W3C Trace Context allows it, else nothing: at most 32 members and 512
/// bytes, each `key=value` of printable ASCII (a value has no `,` or `=`). A client's
/// list goes on to the collector and to upstream servers, so one that is not is dropped
/// whole, never passed on.
fn valid_tracestate(state: &str) -> Option<&str> {
    let members: Vec<&str> = state.split(',').map(str::trim).filter(|m| !m.is_empty()).collect();
    let ok = state.len() <= MAX_TRACESTATE
        && members.len() <= MAX_TRACESTATE_MEMBERS
        && members.iter().all(|m| {
            m.split_once('=').is_some_and(|(k, v)| {
                !k.is_empty()
                    && !v.is_empty()
                    && k.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b)
                    })
                    && v.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
            })
        });
    ok.then_some(state)
}

/// The context a W3C `traceparent` (and `tracestate`) continues; the current one when
/// there is none or it is not valid.
pub fn continued(traceparent: Option<&str>, tracestate: Option<&str>) -> Context {
    if !on() {
        return Context::current();
    }
    let Some(parent) = traceparent.filter(|p| p.len() <= MAX_TRACEPARENT) else {
        return Context::current();
    };
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_owned(), parent.to_owned());
    if let Some(state) = tracestate.and_then(valid_tracestate) {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx =
        global::get_text_map_propagator(|p| p.extract_with_context(&Context::current(), &carrier));
    if cx.span().span_context().is_valid() { cx } else { Context::current() }
}

/// The W3C `traceparent` and `tracestate` that continue `cx`, when it has a span.
pub fn carried(cx: &Context) -> Option<(String, Option<String>)> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    global::get_text_map_propagator(|p| p.inject_context(cx, &mut carrier));
    let parent = carrier.remove("traceparent")?;
    Some((parent, carrier.remove("tracestate").filter(|s| !s.is_empty())))
}

/// The instruments an operator puts on a dashboard.
#[derive(Debug)]
pub struct Metrics {
    /// Calls decided, by `gen_ai.tool.name` and `bx.decision`.
    pub calls: Counter<u64>,
    /// Calls waiting for the owner now.
    pub approvals_waiting: UpDownCounter<i64>,
    /// How long approvals waited, seconds, by answer.
    pub approval_wait: Histogram<f64>,
    /// Calls' time through the trust path, seconds, by tool and outcome.
    pub call_duration: Histogram<f64>,
    /// Writing and syncing a call's request and decision records, seconds.
    pub audit_append: Histogram<f64>,
}

/// The instruments (made on first use, from the meter provider then set).
pub fn metrics() -> &'static Metrics {
    METRICS.get_or_init(|| {
        let meter = global::meter("bx");
        Metrics {
            calls: meter
                .u64_counter(attr::METRIC_CALLS)
                .with_description("Tool calls decided, by tool and verdict")
                .build(),
            approvals_waiting: meter
                .i64_up_down_counter(attr::METRIC_APPROVALS_WAITING)
                .with_description("Calls waiting for the owner's answer")
                .build(),
            approval_wait: meter
                .f64_histogram(attr::METRIC_APPROVAL_WAIT)
                .with_unit("s")
                .with_description("How long a call waited for its answer")
                .build(),
            call_duration: meter
                .f64_histogram(attr::METRIC_CALL_DURATION)
                .with_unit("s")
                .with_description("A tool call's time through the trust path")
                .build(),
            audit_append: meter
                .f64_histogram(attr::METRIC_AUDIT_APPEND)
                .with_unit("s")
                .with_description("Writing and syncing a call's request and decision records")
                .build(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_order_the_labels_and_refuse_what_is_none() {
        assert_eq!(rank("public/trusted"), Some((0, 0)));
        assert_eq!(rank("secret/untrusted"), Some((2, 1)));
        assert_eq!(rank("public"), None);
        assert_eq!(rank("top/trusted"), None);
    }

    #[test]
    fn a_name_is_bounded_in_bytes_and_shows_no_hidden_character() {
        assert_eq!(name("fs.read\u{202e}\n"), "fs.read\u{fffd}\u{fffd}");
        assert_eq!(
            name("a\u{200b}\u{feff}\u{2028}\u{e0041}b"),
            "a\u{fffd}\u{fffd}\u{fffd}\u{fffd}b"
        );
        assert_eq!(name(&"x".repeat(500)).len(), 128);
        // Four bytes a character: cut at 128 bytes, on a boundary.
        let wide = name(&"\u{1f600}".repeat(200));
        assert_eq!(wide.len(), 128);
        assert!(name(&"\u{e9}".repeat(300)).len() <= 128);
    }

    #[test]
    fn a_tracestate_outside_w3cs_bounds_or_characters_is_dropped_whole() {
        assert_eq!(
            valid_tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(valid_tracestate(&many.join(",")), None);
        assert_eq!(valid_tracestate(&format!("k={}", "v".repeat(600))), None);
        assert_eq!(valid_tracestate("evil=MARK\u{202e}\n\u{0}x"), None);
        assert_eq!(valid_tracestate("Upper=v"), None);
        assert_eq!(valid_tracestate("k=v=w"), None);
    }
}
