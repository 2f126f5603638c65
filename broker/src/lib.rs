//! The broker: decides what a tool call may reach and builds the [`Grant`] that says so.
//!
//! Everything here is a pure function over values: no files, no sockets, no clocks of its
//! own. The runtime cannot run a call without a [`Grant`], and only the broker builds one.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod allow;
mod approval;
mod credentials;
mod decide;
mod grant;
mod label;
mod name;
mod net;
mod path;
mod policy;
mod scope;
mod secret;
mod snippet;
pub mod toml_shape;

pub use allow::{AllowError, AllowList};
pub use approval::{
    Answered, ApprovalTable, Pending, REST_PART_BYTES, args_whole, escape_untrusted, is_hidden,
    new_approval_id, render_block, rest_parts, shown_in_part, typed_answer,
};
pub use credentials::{CREDENTIAL_STORES, CredentialGap, CredentialStore};
pub use decide::{
    Answer, AskRequest, CallRequest, Decision, DenyReason, Matched, Resource, ScopedAnswer, decide,
    decide_scoped, redecide,
};
pub use grant::{FsAccess, FsRoute, Grant, NetRoute, Refusal, RootKind, RouteError};
pub use label::{Confidentiality, Integrity, Label, LabelError};
pub use name::{NameError, NamePattern};
pub use net::{HostRule, HostRuleError, is_public_ip};
pub use path::{PathError, normalize};
pub use policy::{
    Approver, AskRule, DenyRule, Example, Expect, GrantRule, LimitRule, Mode, OnTainted, Policy,
    PolicyError, PolicyErrors, ResourceRule, ToolMatch, WORKSPACE, parse_label,
};
pub use scope::{
    Bearing, Cover, Scope, ScopeError, ScopeKind, args_digest, cover_for, offers, scoped_answer,
};
pub use secret::{MAX_SECRET_NAME, SecretBinding, placeholder, valid_secret_name};
pub use snippet::{Located, SourceLines};

/// The commented example policy that `bx policy init` writes (also a test fixture, so it
/// always parses and its examples always hold).
pub const EXAMPLE_POLICY: &str = include_str!("../../fixtures/policy/example.toml");
