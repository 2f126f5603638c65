//! The inference client: talks to llama.cpp's llama-server over its OpenAI-compatible
//! chat API, keeping the server's contract.
//!
//! llama-server queues a request pinned (`id_slot`) to a busy slot silently and then
//! evicts the other conversation's prompt cache, and wraps an out-of-range `id_slot`
//! around. So the client learns the slot count from `/props`, keeps each session on its
//! slot, and never has two requests in flight on one slot ([`SlotGate`]). Replies stream
//! over SSE; deltas are assembled into one message with tool calls; a server that went
//! away before answering is retried, never one that already sent a byte.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod client;
mod error;
mod gate;
mod request;
mod stream;

pub use client::{Client, EndThinking, InferConfig, RetryPolicy, SelfTest, ToolMode};
pub use error::InferError;
pub use gate::{SlotGate, SlotGuard};
pub use request::{
    ArgOrder, ChatRequest, History, Message, ToolCall, ToolChoice, ToolDef, call_in_text,
    constrained_schema, parse_constrained,
};
pub use stream::{
    Assembler, Completion, FinishReason, MAX_CALLS_PER_REPLY, StreamEvent, ThinkingCap, Timings,
    Usage, parse_sse_bytes, replay_sse,
};
