//! The broker: decides what a tool call may reach and builds the [`Grant`] that says so.
//!
//! Everything here is a pure function over values: no files, no sockets, no clocks. The
//! runtime cannot run a call without a [`Grant`], and only [`decide`] builds one.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod allow;
mod grant;
mod net;
mod path;

pub use allow::{AllowList, CallRequest, Decision, DenyReason, Resource, decide};
pub use grant::{FsAccess, FsRoute, Grant, NetRoute, RootKind};
pub use net::{HostRule, is_public_ip};
pub use path::{PathError, normalize};
