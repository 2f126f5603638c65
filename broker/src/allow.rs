//! The minimal allow-list decision: the owner names roots, hosts and denied sub-paths,
//! and a call is allowed when every resource it declares is covered.

use std::path::{Path, PathBuf};

use crate::grant::{FsAccess, Grant, RootGrant};
use crate::net::HostRule;
use crate::path::normalize;

/// What the owner allows, before any call is made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    roots: Vec<RootGrant>,
    denied: Vec<PathBuf>,
    hosts: Vec<HostRule>,
}

impl AllowList {
    /// An allow-list that reaches nothing.
    pub fn new() -> AllowList {
        AllowList::default()
    }

    fn root(path: &str) -> Result<PathBuf, String> {
        let norm = normalize(Path::new(path)).map_err(|e| e.to_string())?;
        if norm == Path::new("/") {
            return Err("a grant of / is invalid: name the directories the tool needs".into());
        }
        Ok(norm)
    }

    /// Allows reading under `path` (absolute; `/` is refused).
    pub fn read(mut self, path: &str) -> Result<AllowList, String> {
        let path = Self::root(path)?;
        self.roots.push(RootGrant { path, access: FsAccess::Read });
        Ok(self)
    }

    /// Allows reading and writing under `path` (absolute; `/` is refused).
    pub fn write(mut self, path: &str) -> Result<AllowList, String> {
        let path = Self::root(path)?;
        self.roots.push(RootGrant { path, access: FsAccess::Write });
        Ok(self)
    }

    /// Never reaches `path` or anything below it, whatever the roots say.
    pub fn deny(mut self, path: &str) -> Result<AllowList, String> {
        let path = normalize(Path::new(path)).map_err(|e| e.to_string())?;
        self.denied.push(path);
        Ok(self)
    }

    /// Allows requests to `rule` (see [`HostRule::parse`]).
    pub fn host(mut self, rule: &str) -> Result<AllowList, String> {
        self.hosts.push(HostRule::parse(rule)?);
        Ok(self)
    }
}

/// A resource a call declares through its arguments, as the tool's `describe` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A path the tool reads.
    PathRead(String),
    /// A path the tool writes.
    PathWrite(String),
    /// A URL the tool fetches.
    Url(String),
}

/// One proposed call, as the broker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRequest {
    /// The tool's installed name.
    pub tool: String,
    /// The `sha256:` digest of the tool's component.
    pub digest: String,
    /// The resources its arguments name.
    pub resources: Vec<Resource>,
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DenyReason {
    /// What was refused and by which rule.
    pub message: String,
}

/// The broker's answer to a call.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The call runs under this grant.
    Allow(Grant),
    /// The call does not run.
    Deny(DenyReason),
}

/// Decides a call against an allow-list: every declared resource must be covered (paths
/// by a root of the right access and no denied sub-path, URLs by a host rule). The grant
/// reaches what the allow-list names, and the runtime checks each operation against it.
pub fn decide(allow: &AllowList, call: &CallRequest) -> Decision {
    let grant = Grant {
        tool: call.tool.clone(),
        digest: call.digest.clone(),
        roots: allow.roots.clone(),
        denied: allow.denied.clone(),
        hosts: allow.hosts.clone(),
    };
    for resource in &call.resources {
        let checked = match resource {
            Resource::PathRead(p) => grant.route_path(p, FsAccess::Read).map(drop),
            Resource::PathWrite(p) => grant.route_path(p, FsAccess::Write).map(drop),
            Resource::Url(u) => url::Url::parse(u)
                .map_err(|e| format!("{u:?} is not a URL: {e}"))
                .and_then(|url| grant.route_url(&url).map(drop)),
        };
        if let Err(why) = checked {
            return Decision::Deny(DenyReason { message: why });
        }
    }
    Decision::Allow(grant)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(resources: Vec<Resource>) -> CallRequest {
        CallRequest { tool: "fs.read".into(), digest: "sha256:ab".into(), resources }
    }

    #[test]
    fn refuses_root_grant() {
        assert!(AllowList::new().read("/").is_err());
        assert!(AllowList::new().write("//").is_err());
        assert!(AllowList::new().read("relative").is_err());
    }

    #[test]
    fn allows_covered_resources_only() {
        let allow = AllowList::new().read("/data").unwrap().host("example.com").unwrap();
        let ok = call(vec![
            Resource::PathRead("/data/a.txt".into()),
            Resource::Url("https://example.com/x".into()),
        ]);
        match decide(&allow, &ok) {
            Decision::Allow(g) => assert_eq!(g.tool(), "fs.read"),
            Decision::Deny(r) => panic!("denied: {r}"),
        }
        for bad in [
            Resource::PathWrite("/data/a.txt".into()),
            Resource::PathRead("/etc/passwd".into()),
            Resource::PathRead("/data/../etc/passwd".into()),
            Resource::Url("https://evil.com/".into()),
            Resource::Url("not a url".into()),
        ] {
            match decide(&allow, &call(vec![bad.clone()])) {
                Decision::Allow(_) => panic!("{bad:?} allowed"),
                Decision::Deny(_) => {}
            }
        }
    }
}
