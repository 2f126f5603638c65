//! Streams a tiny model cannot produce on demand, through the real parser.

use bx_infer::{
    Completion, FinishReason, InferError, StreamEvent, ThinkingCap, ToolCall, parse_sse_bytes,
    replay_sse,
};
use serde_json::json;

use super::*;

#[test]
fn recorded_reply_assembles() {
    let c = parse_sse_bytes(&fixture("recorded-reply.sse")).unwrap();
    assert_eq!(c.finish, FinishReason::Length);
    assert!(!c.content.is_empty());
    assert!(c.tool_calls.is_empty());
    assert_eq!(c.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((34, 24)));
    assert_eq!(c.timings.map(|t| t.predicted_n), Some(24));
    // The model's name, as llama-server reports it (what the `chat` span is named by).
    assert_eq!(c.model, "SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn parallel_tool_calls_assemble_by_index() {
    let c = parse_sse_bytes(&fixture("parallel-tool-calls.sse")).unwrap();
    assert_eq!(
        c,
        Completion {
            content: String::new(),
            reasoning: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "fs.read".into(),
                    arguments: json!({"path": "/home/o/a.txt"})
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "http.fetch".into(),
                    arguments: json!({"url": "https://docs.rs"})
                },
            ],
            finish: FinishReason::ToolCalls,
            usage: Some(bx_infer::Usage { prompt_tokens: 120, completion_tokens: 30 }),
            timings: Some(bx_infer::Timings {
                cache_n: 100,
                prompt_n: 20,
                prompt_ms: 12.5,
                predicted_n: 30,
                predicted_ms: 300.0
            }),
            thinking_capped: false,
            slot_wait: std::time::Duration::ZERO,
            model: String::new(),
        }
    );
}

#[test]
fn tool_calls_without_index_key_by_id() {
    let c = parse_sse_bytes(&fixture("tool-call-by-id.sse")).unwrap();
    assert_eq!(
        c.tool_calls,
        vec![ToolCall {
            id: "x1".into(),
            name: "fs.list".into(),
            arguments: json!({"path": "/srv"})
        }]
    );
}

#[test]
fn bad_arguments_are_an_error_never_empty() {
    let e = parse_sse_bytes(&fixture("bad-arguments.sse")).unwrap_err();
    assert!(matches!(&e, InferError::Protocol(m) if m.contains("not JSON")), "{e}");
}

#[test]
fn length_inside_a_tool_call_is_a_truncated_call() {
    let e = parse_sse_bytes(&fixture("length-in-tool-call.sse")).unwrap_err();
    assert!(matches!(&e, InferError::Truncated(m) if m.contains("tool call")), "{e}");
}

#[test]
fn error_line_ends_with_that_error() {
    let e = parse_sse_bytes(&fixture("error-event.sse")).unwrap_err();
    assert!(matches!(&e, InferError::Server(m) if m.contains("context shift is disabled")), "{e}");
}

#[test]
fn close_before_finish_is_truncated() {
    let e = parse_sse_bytes(&fixture("truncated.sse")).unwrap_err();
    assert_eq!(e, InferError::Truncated("connection closed".into()));
}

#[test]
fn reasoning_under_both_names_and_crlf() {
    let c = parse_sse_bytes(&fixture("reasoning-crlf.sse")).unwrap();
    assert_eq!(
        (c.reasoning.as_str(), c.content.as_str(), c.finish),
        ("Let me think. Two plus two.", "4", FinishReason::Stop)
    );
}

/// Where a cap of `limit` fires in a stream: the index of each event it fired on, and
/// the events as they came.
fn cap_fires(name: &str, limit: u32) -> (Vec<usize>, Vec<StreamEvent>) {
    let mut cap = ThinkingCap::new(limit);
    let mut seen = Vec::new();
    let mut fired = Vec::new();
    replay_sse(&fixture(name), |e| {
        if cap.observe(e) {
            fired.push(seen.len());
        }
        seen.push(e.clone());
    })
    .unwrap();
    (fired, seen)
}

#[test]
fn thinking_cap_fires_once_on_the_reasoning_token_that_reaches_it() {
    // Recorded with the cap ended live at 8 reasoning tokens: one more was in flight,
    // then the server closed the block and the model answered.
    let reasoning_at = |events: &[StreamEvent]| -> Vec<usize> {
        events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, StreamEvent::Reasoning(_)))
            .map(|(i, _)| i)
            .collect()
    };
    let (fired, events) = cap_fires("reasoning-capped.sse", 8);
    let reasoning = reasoning_at(&events);
    assert_eq!(reasoning.len(), 9, "{events:?}");
    assert_eq!(fired, vec![reasoning[7]], "fires on the 8th reasoning delta and only there");
    let after_thinking = &events[reasoning[8] + 1..];
    assert!(
        after_thinking.iter().any(|e| matches!(e, StreamEvent::Content(t) if !t.trim().is_empty()))
    );
    assert!(!after_thinking.iter().any(|e| matches!(e, StreamEvent::Reasoning(_))));

    // A cap the stream never reaches never fires, nor does one on a stream with no
    // thinking at all (content is not counted).
    assert_eq!(cap_fires("reasoning-capped.sse", 10).0, Vec::<usize>::new());
    assert_eq!(cap_fires("recorded-reply.sse", 1).0, Vec::<usize>::new());
    // A cap of 1 fires on the first reasoning delta.
    assert_eq!(cap_fires("reasoning-capped.sse", 1).0, vec![reasoning[0]]);
}

#[test]
fn a_recorded_capped_stream_assembles_thinking_then_answer() {
    let c = parse_sse_bytes(&fixture("reasoning-capped.sse")).unwrap();
    assert!(c.reasoning.starts_with("\nThe sky is blue"), "{:?}", c.reasoning);
    assert!(!c.content.trim().is_empty());
    assert!(!c.thinking_capped, "parsing alone marks nothing: the client marks a cap it set");
}

/// Regression (found fuzzing): a stream starting with a UTF-8 byte-order mark panicked
/// inside `eventsource-stream` (it sliced the 3-byte mark off at one byte). The SSE
/// standard strips one leading mark; the reply then reads as without it.
#[test]
fn a_leading_byte_order_mark_is_stripped_not_a_panic() {
    let plain = parse_sse_bytes(&fixture("recorded-reply.sse")).unwrap();
    let mut marked = b"\xEF\xBB\xBF".to_vec();
    marked.extend(fixture("recorded-reply.sse"));
    assert_eq!(parse_sse_bytes(&marked).unwrap(), plain);
    let tiny = std::panic::catch_unwind(|| parse_sse_bytes(b"\xEF\xBB\xBFdata: {}\n\n"));
    assert!(tiny.is_ok(), "the 13 bytes the fuzzer found panic");
}
