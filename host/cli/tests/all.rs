//! Integration tests of the `bx` binary: real processes, real state directories, real
//! components built from `tools/` by `make tools`; and the repository-wide checks
//! (dependency direction, runbook links).
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub, reason = "test helpers")]

mod suite;
