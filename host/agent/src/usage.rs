//! The owner's record of model usage, `usage.jsonl` in the state directory.

use std::io::Write as _;
use std::path::Path;

use crate::approvals::now_ms;

/// Prompt, cached and generated tokens of one request, appended to `path` (the state
/// directory's `usage.jsonl`: a record for the owner's accounting, not for the audit;
/// losing a line costs only that).
pub(crate) fn record(path: &Path, session: &str, c: &bx_infer::Completion) -> (u64, u64, u64) {
    let cached = c.timings.map_or(0, |t| t.cache_n);
    let prompt =
        c.timings.map(|t| t.cache_n + t.prompt_n).or(c.usage.map(|u| u.prompt_tokens)).unwrap_or(0);
    let completion = c.usage.map(|u| u.completion_tokens).unwrap_or(0);
    let line = serde_json::json!({
        "time_ms": now_ms(),
        "session": session,
        "prompt": prompt,
        "cached": cached,
        "completion": completion,
        "timings": c.timings,
        "thinking_capped": c.thinking_capped,
        "slot_wait_ms": c.slot_wait.as_secs_f64() * 1000.0,
    });
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
    (prompt, cached, completion)
}
