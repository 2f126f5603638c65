//! The audit log: hash-chained JSON-lines records, one file per UTC day, appended with
//! fdatasync before anything that depends on them happens, recovered after a crash and
//! verified end to end.
//!
//! Every record carries its sequence number, its time, the SHA-256 of the previous
//! record's line, its kind and its fields, typed by kind ([`Entry`]). Changing, removing or reordering any record
//! breaks the chain; cutting whole records off the end is caught against the checkpoint
//! of the head. A failed write or sync makes the log unavailable for good (until the
//! owner acts): bx refuses every later call rather than run one unrecorded.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod entry;
mod error;
mod log;
mod record;
mod time;
mod verify;

pub use entry::{
    Approval, Break as BreakEntry, Decision, Entry, MAX_FIELD_BYTES, MAX_ITEM_BYTES,
    MAX_RECORD_BYTES, Outcome, Recovered, Request, Session, bounded, sha256_hex,
};
pub use error::AuditError;
pub use log::{AuditLog, CHECKPOINT_EVERY, Clock, Receipt, SystemClock, day_files};
pub use record::{GENESIS, Kind, Record, line_hash};
pub use time::{day_of, format_rfc3339, is_valid_day, is_valid_time};
pub use verify::{Break, MAX_PROBLEMS, Problem, Report, accept_break, for_each_entry, verify};
