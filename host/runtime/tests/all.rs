//! Integration tests of the runtime: real components built from `tools/` by `make tools`,
//! real files, real sockets on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub, reason = "test helpers")]

mod suite;
