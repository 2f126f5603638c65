//! Integration tests of the audit log: real files, real fsync, a real child process killed
//! with SIGKILL.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub, reason = "test helpers")]

mod suite;
