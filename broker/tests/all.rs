//! Integration tests of the broker: the policy language against its fixtures, decisions,
//! property tests against an independent oracle, approval blocks against golden files.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub, reason = "test helpers")]

mod suite;
