//! One module per subcommand, each with its arguments and `run`.

pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod chat;
pub(crate) mod confine;
pub(crate) mod doctor;
pub(crate) mod mcp;
pub(crate) mod outcome;
pub(crate) mod policy;
pub(crate) mod rest;
pub(crate) mod run;
pub(crate) mod secret;
pub(crate) mod serve;
pub(crate) mod session;
pub(crate) mod tool;
pub(crate) mod web;

/// Success.
pub(crate) const EXIT_OK: u8 = 0;
/// An error: bad input, a refused install, a failed tool.
pub(crate) const EXIT_ERROR: u8 = 1;
/// The broker or the host denied the call.
pub(crate) const EXIT_DENIED: u8 = 3;
/// A runtime limit stopped the tool.
pub(crate) const EXIT_LIMIT: u8 = 4;
/// The audit log or the policy is unavailable: every call is refused.
pub(crate) const EXIT_UNAVAILABLE: u8 = 5;
/// The turn was cancelled, or hit a turn limit.
pub(crate) const EXIT_TURN: u8 = 6;
/// `bx serve`: another daemon holds this state directory (`docs/runbook.md#daemon-running`).
pub(crate) const EXIT_DAEMON_RUNNING: u8 = 7;
