//! A generated audit log for the `make bench` targets that open one, shared through
//! `#[path]` as `measure.rs` is: `n` records chained as the writer chains them, written
//! straight to day files (not through fdatasync, which would measure the disk).

use std::io::Write as _;
use std::path::Path;

/// Records per day file: a heavy day.
pub(crate) const PER_DAY: u64 = 10_000;

/// Writes records `1..=n` to the log in `audit`, [`PER_DAY`] to a day file (named and
/// timed for days of 2026, oldest first), record `i` being `entry(i)`; the bytes written.
pub(crate) fn write_days(audit: &Path, n: u64, entry: impl Fn(u64) -> bx_audit::Entry) -> u64 {
    std::fs::create_dir_all(audit).unwrap();
    let mut prev = bx_audit::GENESIS.to_owned();
    let mut size = 0;
    for day in 0..n.div_ceil(PER_DAY) {
        let name = format!("2026-{:02}-{:02}", 1 + day / 28, 1 + day % 28);
        let path = audit.join(format!("{name}.jsonl"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in day * PER_DAY + 1..=((day + 1) * PER_DAY).min(n) {
            let entry = entry(i);
            let record = bx_audit::Record {
                seq: i,
                time: format!("{name}T12:00:00.000Z"),
                prev,
                kind: entry.kind(),
                fields: entry.fields(),
            };
            let line = record.to_line();
            prev = bx_audit::line_hash(line.as_bytes());
            out.write_all(line.as_bytes()).unwrap();
            out.write_all(b"\n").unwrap();
        }
        out.flush().unwrap();
        size += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    }
    size
}
