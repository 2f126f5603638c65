//! Integration tests of the inference client: recorded and hand-written streams through
//! the real parser, and a real llama-server (xllamacpp's build, SmolLM2-135M) on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub, reason = "test helpers")]

mod suite;
