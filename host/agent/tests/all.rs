//! Integration tests of the agent crate.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub, reason = "tests")]

mod suite;
