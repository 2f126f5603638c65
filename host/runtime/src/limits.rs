//! The bounds every call runs under. Each one says what a hostile tool could do without it.

use std::time::Duration;

/// Per-call limits. The defaults are written down here and in `docs/runtime.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory one instance may grow to (default 64 MiB). Without it a tool could
    /// allocate until the host is out of memory.
    pub memory_bytes: usize,
    /// Wall time one call may run (default 10 s), host calls included: the call is a
    /// future dropped at the deadline, and the guest yields to it at every epoch tick and
    /// in every host call. Without it a tool that loops, sleeps or waits on a stalled
    /// server holds its turn forever. `describe` at load runs under it too.
    pub deadline: Duration,
    /// Bytes of output (the returned text) one call may produce (default 4 MiB). Without
    /// it a tool could flood the model's context and the audit log.
    pub output_bytes: usize,
    /// Bytes of a tool's error text kept (default 64 KiB); the rest is cut, with a note
    /// of how much. Without it a tool could put megabytes into the audit record and the
    /// owner's terminal through an error instead of an output.
    pub error_bytes: usize,
    /// Bytes each of stdout and stderr may hold (default 64 KiB). Without it a tool could
    /// fill host memory through its diagnostics.
    pub stdio_bytes: usize,
    /// Host calls one call may make (default 100,000). Without it a tool could keep the
    /// host busy (and its checks) for the whole deadline with tiny requests.
    pub host_calls: u64,
    /// Bytes one `fs.read` host call may return (default 8 MiB).
    pub read_bytes: u64,
    /// Bytes one `fs.write` host call may write (default 8 MiB).
    pub write_bytes: u64,
    /// Bytes of HTTP response body kept (default 4 MiB); more is cut and marked truncated.
    pub response_bytes: u64,
    /// Whole-request deadline for one HTTP request, every redirect hop and the body
    /// included (default 30 s), measured from the first byte sent; the call's own
    /// deadline cuts it shorter. Without it a server that stalls each hop just under a
    /// per-hop timeout could hold the call for hops times that timeout.
    pub http_timeout: Duration,
    /// Redirects followed per request, each one checked against the grant (default 5).
    pub redirects: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(10),
            output_bytes: 4 << 20,
            error_bytes: 64 << 10,
            stdio_bytes: 64 << 10,
            host_calls: 100_000,
            read_bytes: 8 << 20,
            write_bytes: 8 << 20,
            response_bytes: 4 << 20,
            http_timeout: Duration::from_secs(30),
            redirects: 5,
        }
    }
}
