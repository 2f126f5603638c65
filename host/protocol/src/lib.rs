//! The wire protocol between `bx chat` (and the other clients) and the daemon, over a Unix
//! socket: frames of a 4-byte big-endian length and one UTF-8 JSON object, each an
//! [`Envelope`] with a version, an id and a typed body. Every type refuses unknown fields.
//!
//! With the `codec` feature, `FrameCodec` reads and writes the same frames through
//! tokio-util's `FramedRead`/`FramedWrite`; without it this crate has no async runtime
//! in its tree (a leaf crate, design.md), and [`lines`] reads the newline-delimited
//! messages of `bx mcp`'s stdio transport, bounded.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "codec")]
mod codec;
mod frame;
#[cfg(feature = "codec")]
pub mod lines;
mod message;

#[cfg(feature = "codec")]
pub use codec::FrameCodec;
pub use frame::{FrameError, MAX_FRAME_BYTES, decode, encode, hello, read_frame};
pub use message::{
    Answer, ApprovalSummary, Body, Envelope, ErrorCode, Overlay, RunOutcome, SessionSummary,
    ToolSummary, TurnUsage, VERSION,
};
