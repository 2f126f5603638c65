//! The agent loop: a session's append-only transcript, the baseline and the tools array
//! the model sees, and turns that take the model's tool calls through the broker, the
//! owner's approval, the runtime and the audit log and back to the model.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod agent;
mod approvals;
mod baseline;
pub mod call;
mod error;
mod guard;
mod kept;
mod ledger;
mod reviewer;
mod route;
mod secrets;
pub mod settle;
mod toolset;
mod traced;
mod transcript;
mod turn;
mod usage;

pub use agent::{Agent, AgentParts, Events, record_pending};
pub use approvals::{Approvals, Waiting, now_ms};
pub use baseline::{Baseline, SYSTEM_PROMPT};
pub use call::{Covered, Decided, Overlay, Trust, check_workspace};
pub use error::{AgentError, GuardLoadError, RateLimited, ReviewerFault, ScopeMisfit};
pub use guard::{Guard, GuardState, guard_of};
pub use ledger::{Ledger, Replayed};
pub use reviewer::{Approvers, Review};
pub use secrets::SecretSource;
pub use settle::{NoOwner, Owner, Proposal};
pub use toolset::{Tool, Toolset, UpstreamTool, prompt_text};
pub use transcript::Transcript;
