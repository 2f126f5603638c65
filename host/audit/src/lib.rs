//! The audit log: hash-chained JSON-lines records, one file per UTC day, appended with
//! fdatasync before anything that depends on them happens, recovered after a crash and
//! verified end to end.
//!
//! Every record carries its sequence number, its time, the SHA-256 of the previous
//! record's line, its kind and its fields, typed by kind ([`Entry`]). Changing, removing or reordering any record
//! breaks the chain; cutting whole records off the end is caught against the checkpoint
//! of the head. A failed write or sync makes the log unavailable for good (until the
//! owner acts): bx refuses every later call rather than run one unrecorded.
//!
//! A chain can only prove that the log agrees with itself. Alongside it the records form
//! an RFC 6962 Merkle tree ([`Tree`]); with the owner's key ([`Anchor`]) the writer signs
//! checkpoints of it and exports them off the host, and [`verify_against`] proves the log
//! consistent with them, naming the first record where they part. [`prove`] writes a
//! C2SP `tlog-proof` of one record that anyone with the public key can check offline.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod anchor;
mod anchored;
mod checked;
mod consistent;
mod entry;
mod error;
mod file;
mod log;
mod prove;
mod record;
mod time;
mod tree;
mod verify;

pub use anchor::{
    Anchor, SignedCheckpoint, init_key, is_valid_origin, newest_exported, newest_signed, open_note,
    origin_dir, prepare_export, read_verifier, verifier_path,
};
pub use anchored::{Against, AnchorReport};
pub use entry::{
    AnsweredBy, Approval, Break as BreakEntry, CallStatus, Decision, Entry, ExportFailed,
    LeakFound, MAX_FIELD_BYTES, MAX_ITEM_BYTES, MAX_RECORD_BYTES, Outcome, OwnerAnswer, Recovered,
    Request, ReviewerId, ScopeRecord, SecretUse, Session, Settled, ToolChange, Verdict, bounded,
    sha256_hex,
};
pub use error::{AuditError, CheckpointError, ProofError};
pub use log::{
    AuditLog, CHECKPOINT_EVERY, Clock, Exported, Receipt, Redactor, SystemClock, day_files,
};
pub use prove::{MAX_PROOF_BYTES, Proof, check_proof, prove};
pub use record::{GENESIS, Kind, Record, line_hash};
pub use time::{day_of, format_rfc3339, is_valid_day, is_valid_time};
pub use tree::{FullTree, Hash, Tree, check_inclusion, leaf_hash};
pub use verify::{
    Break, Lacks, MAX_PROBLEMS, OpenCall, Position, Problem, Report, Resumed, accept_break,
    for_each_entry, for_each_entry_after, verify, verify_against,
};
