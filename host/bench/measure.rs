//! Timing for the `make bench` targets, shared by each crate's bench through `#[path]`:
//! every table reports the same statistics, measured the same way.

use std::time::{Duration, Instant};

/// Median and 90th percentile of a set of timings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) median: Duration,
    pub(crate) p90: Duration,
}

/// Runs `f` a tenth of `samples` times to warm up, then `samples` times timed.
pub(crate) fn measure(samples: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..samples.div_ceil(10) {
        f();
    }
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    Stats { median: times[times.len() / 2], p90: times[times.len() * 9 / 10] }
}

/// A duration in µs below a millisecond, else in ms.
pub(crate) fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 { format!("{us:.1} µs") } else { format!("{:.2} ms", us / 1000.0) }
}
