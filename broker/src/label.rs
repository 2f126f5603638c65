//! Labels: how confidential and how trustworthy data is. A small lattice: results are
//! labelled with the join of what a call touched, and a session's taint is the join of
//! every result it has seen, so it only ever rises.

/// Why a label (`private/untrusted`) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LabelError {
    /// No `/` between the two parts.
    #[error("a label is CONFIDENTIALITY/INTEGRITY, such as private/trusted")]
    Shape,
    /// The first part is not a confidentiality.
    #[error("confidentiality {0:?} is not public, private or secret")]
    Confidentiality(String),
    /// The second part is not an integrity.
    #[error("integrity {0:?} is not trusted or untrusted")]
    Integrity(String),
}

/// How confidential data is: `public` < `private` < `secret`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Confidentiality {
    /// Anyone may see it.
    #[default]
    Public,
    /// The owner's own data.
    Private,
    /// Keys, credentials, anything whose leak is a disaster.
    Secret,
}

/// Whether data can steer the model: `trusted` (the owner's) or `untrusted` (anything an
/// attacker could have written, such as a web page).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Integrity {
    /// Written by the owner or someone the owner trusts.
    #[default]
    Trusted,
    /// Anything else.
    Untrusted,
}

/// A point in the lattice.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(deny_unknown_fields)]
pub struct Label {
    /// Confidentiality.
    pub confidentiality: Confidentiality,
    /// Integrity.
    pub integrity: Integrity,
}

impl Label {
    /// The bottom of the lattice: public and trusted. A clean session has this taint.
    pub const CLEAN: Label =
        Label { confidentiality: Confidentiality::Public, integrity: Integrity::Trusted };

    /// The top: what state that cannot be read counts as.
    pub const TOP: Label =
        Label { confidentiality: Confidentiality::Secret, integrity: Integrity::Untrusted };

    /// The least label above both.
    #[must_use]
    pub fn join(self, other: Label) -> Label {
        Label {
            confidentiality: self.confidentiality.max(other.confidentiality),
            integrity: self.integrity.max(other.integrity),
        }
    }

    /// `self ⊑ other`: data labelled `self` may flow where `other` is allowed.
    pub fn flows_to(self, other: Label) -> bool {
        self.confidentiality <= other.confidentiality && self.integrity <= other.integrity
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = match self.confidentiality {
            Confidentiality::Public => "public",
            Confidentiality::Private => "private",
            Confidentiality::Secret => "secret",
        };
        let i = match self.integrity {
            Integrity::Trusted => "trusted",
            Integrity::Untrusted => "untrusted",
        };
        write!(f, "{c}/{i}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Label> {
        let cs = [Confidentiality::Public, Confidentiality::Private, Confidentiality::Secret];
        let is = [Integrity::Trusted, Integrity::Untrusted];
        cs.iter()
            .flat_map(|c| is.iter().map(|i| Label { confidentiality: *c, integrity: *i }))
            .collect()
    }

    #[test]
    fn join_is_a_least_upper_bound() {
        for a in all() {
            for b in all() {
                let j = a.join(b);
                assert!(a.flows_to(j) && b.flows_to(j));
                assert_eq!(j, b.join(a));
                for c in all() {
                    if a.flows_to(c) && b.flows_to(c) {
                        assert!(j.flows_to(c), "{a} ⊔ {b} = {j} is not below {c}");
                    }
                }
            }
            assert!(Label::CLEAN.flows_to(a) && a.flows_to(Label::TOP));
        }
    }
}
