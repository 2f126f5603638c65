//! `AllowList`: a policy built from command-line flags (`bx tool run --allow-read …`),
//! for trying a tool by hand. Paths are labelled `private/trusted`, hosts
//! `public/untrusted`, and tainted sessions are allowed: the owner is at the keyboard.

use std::path::Path;

use crate::label::{Confidentiality, Integrity, Label};
use crate::net::HostRule;
use crate::path::normalize;
use crate::policy::{DenyRule, GrantRule, Mode, OnTainted, Policy, ResourceRule, ToolMatch};

/// Label of what flows in through an allow-list path.
const PATH_LABEL: Label =
    Label { confidentiality: Confidentiality::Private, integrity: Integrity::Trusted };
/// Label of what flows in from an allow-list host.
const HOST_LABEL: Label =
    Label { confidentiality: Confidentiality::Public, integrity: Integrity::Untrusted };

/// Why an allow-list flag was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllowError {
    /// The path is not one a grant can name.
    #[error(transparent)]
    Path(#[from] crate::PathError),
    /// A grant of `/` reaches everything.
    #[error("a grant of / is invalid: name the directories the tool needs")]
    Root,
    /// The host rule does not parse.
    #[error(transparent)]
    Host(#[from] crate::HostRuleError),
}

/// Builds a [`Policy`] one flag at a time, on top of an existing policy or of nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    policy: Policy,
}

impl AllowList {
    /// An allow-list that reaches nothing.
    pub fn new() -> AllowList {
        AllowList::default()
    }

    /// Adds to `policy` (its deny rules keep applying).
    pub fn on_top_of(policy: Policy) -> AllowList {
        AllowList { policy }
    }

    fn root(path: &str) -> Result<std::path::PathBuf, AllowError> {
        let norm = normalize(Path::new(path))?;
        if norm == Path::new("/") {
            return Err(AllowError::Root);
        }
        Ok(norm)
    }

    fn push(mut self, resource: ResourceRule, mode: Mode, label: Label) -> AllowList {
        let index = self.policy.grants.len();
        self.policy.grants.push(GrantRule {
            index,
            line: 0,
            tool: ToolMatch::Any,
            resource,
            mode,
            label,
            when_tainted: OnTainted::Allow,
            when_clean: OnTainted::Allow,
            approver: crate::policy::Approver::Any,
        });
        self.policy.index_labels();
        self
    }

    /// Allows reading under `path` (absolute; `/` is refused).
    pub fn read(self, path: &str) -> Result<AllowList, AllowError> {
        Ok(self.push(ResourceRule::Path(Self::root(path)?), Mode::Read, PATH_LABEL))
    }

    /// Allows reading and writing under `path` (absolute; `/` is refused). A write root
    /// also serves reads, so it is granted in both modes.
    pub fn write(self, path: &str) -> Result<AllowList, AllowError> {
        let root = Self::root(path)?;
        Ok(self.push(ResourceRule::Path(root.clone()), Mode::Write, PATH_LABEL).push(
            ResourceRule::Path(root),
            Mode::Read,
            PATH_LABEL,
        ))
    }

    /// Never reaches `path` or anything below it, whatever the roots say.
    pub fn deny(mut self, path: &str) -> Result<AllowList, AllowError> {
        let path = normalize(Path::new(path))?;
        let index = self.policy.denies.len();
        self.policy.denies.push(DenyRule {
            index,
            line: 0,
            tool: ToolMatch::Any,
            resource: ResourceRule::Path(path),
        });
        Ok(self)
    }

    /// Marks `paths` as bx's own state, as [`Policy::protect_own`] does.
    pub fn protect_own(
        self,
        paths: impl IntoIterator<Item = std::path::PathBuf>,
    ) -> Result<AllowList, crate::PathError> {
        Ok(AllowList { policy: self.policy.protect_own(paths)? })
    }

    /// Allows requests to `rule` (see [`HostRule::parse`]).
    pub fn host(self, rule: &str) -> Result<AllowList, AllowError> {
        Ok(self.push(ResourceRule::Host(HostRule::parse(rule)?), Mode::Fetch, HOST_LABEL))
    }

    /// The policy built so far.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// One resource for each thing this allow-list names (a root as read or write, a
    /// host as a URL), so that a call declaring them is granted all of it: for a tool
    /// tried by hand, and for tests of the runtime's own per-operation checks.
    pub fn resources(&self) -> Vec<crate::Resource> {
        self.policy
            .grants
            .iter()
            .filter_map(|g| match (&g.resource, g.mode) {
                (ResourceRule::Path(p), Mode::Write) => {
                    Some(crate::Resource::PathWrite(p.display().to_string()))
                }
                (ResourceRule::Path(p), _) => {
                    Some(crate::Resource::PathRead(p.display().to_string()))
                }
                (ResourceRule::Host(h), _) => Some(crate::Resource::Url(format!("http://{h}/"))),
                // An allow-list names no workspace; a policy under it may.
                (ResourceRule::InWorkspace(_) | ResourceRule::Names(_) | ResourceRule::Call, _) => {
                    None
                }
            })
            .collect()
    }
}
