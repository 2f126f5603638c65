//! `make eval`: bx's agent benchmark, shaped like AgentDojo. Suites of user tasks and
//! injection tasks over real environments (files, web pages served on loopback, a notes
//! store, a code repository), run through the real daemon, components and audit log,
//! with a model that is entirely the attacker's ([`model`]) and an owner who approves
//! only what the benign task needs. Nothing in the shipped `bx` binary depends on this
//! crate.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod agentdojo;
pub mod attacker;
pub mod env;
pub mod model;
pub mod report;
pub mod run;
pub mod suite;
