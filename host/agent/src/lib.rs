//! The agent loop: a session's append-only transcript, the baseline and the tools array
//! the model sees, and turns that take the model's tool calls through the broker, the
//! owner's approval, the runtime and the audit log and back to the model.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod approvals;
mod baseline;
pub mod call;
mod error;
mod ledger;
mod toolset;
mod transcript;
mod turn;

pub use approvals::{Approvals, Waiting, now_ms};
pub use baseline::{Baseline, SYSTEM_PROMPT};
pub use call::{Decided, Overlay, Trust};
pub use error::AgentError;
pub use ledger::Ledger;
pub use toolset::{Toolset, prompt_text};
pub use transcript::Transcript;
pub use turn::{Agent, AgentParts, Events, check_workspace};
