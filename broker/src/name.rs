//! Name patterns: the file names and short relative paths that `[[deny]]` and `[[ask]]`
//! rules match wherever they appear in a path, ASCII case-insensitively, with the backup
//! and copy spellings of each name ([`spelling`]).

mod spelling;

use std::path::{Component, Path};

use spelling::Spellings;

/// Why a name rule (`name = ".env"`) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The rule is empty.
    #[error("a name is not empty")]
    Empty,
    /// The rule has a control character.
    #[error("a name has no control characters")]
    Control,
    /// The rule starts with `/`: names match anywhere; the relative form is given.
    #[error("a name is relative and matches anywhere: write {0:?}, or use path = for one place")]
    Absolute(String),
    /// `//` or a trailing `/`.
    #[error("a name has no empty component (no // and no trailing /)")]
    EmptyComponent,
    /// A `.` or `..` component.
    #[error("a name has no {0:?} component; name the files")]
    Dot(String),
    /// A component of only `*` first or last, which would match every path.
    #[error(
        "a component of only * would match every path; name the files (it may only stand between two named parts)"
    )]
    LoneStar,
    /// A component of only spaces.
    #[error("a name has no component of only spaces")]
    OnlySpaces,
    /// A component with more than one `*`.
    #[error("{0:?}: a component has at most one *")]
    ManyStars(String),
}

/// A file name, or a short relative path of names, that a rule matches wherever it
/// appears in a path: `.env`, `*.pem`, `id_rsa*`, or `.git/config`, `.config/gh`, whose
/// components must appear one after the other (`/a/sub/.git/config` and everything below
/// it match `.git/config`; `/a/.git/x/config` does not).
///
/// Each component is an exact name or has one `*` standing for any run of characters.
/// Matching is ASCII case-insensitive (`*.pem` matches `server.PEM`, `.env` matches
/// `.ENV`): a rule that refuses or asks about more is the safe side, and the file systems
/// of macOS and Windows fold case anyway. Non-ASCII characters compare exactly.
///
/// A component also matches when it is a backup or a copy of a name that matches:
/// `.env` matches `.env~`, `.env.bak`, `.env.swp`, `#.env#`; `.docker/config.json`
/// matches `.docker/config (1).json`; `.ssh` matches `.ssh.bak/id_ed25519` (the
/// spellings are listed in the `spelling` module and the Rules section of `docs/policy.md`). A copy of
/// a secret is the same secret, and an owner who denies a name means its copies too.
///
/// Written by hand rather than with a glob crate: one `*` per component is all these
/// rules need, and no `?`, `[` or `**` means no surprises about what a rule matches.
///
/// Cheap to clone (shared): every call's grant carries the tool's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePattern(std::sync::Arc<Inner>);

#[derive(Debug, PartialEq, Eq)]
struct Inner {
    /// As written, for messages.
    text: String,
    /// The components, at least one.
    parts: Vec<String>,
}

impl NamePattern {
    /// Parses a name rule: one or more components joined by `/`, each non-empty, not `.`
    /// or `..`, with at most one `*` (a component of only `*`, one folder of any name,
    /// only between two others: `.git/modules/*/config`); no leading or trailing `/`, no
    /// control characters, no component of only spaces. Every other character (`?`, `[`,
    /// `\`) is itself.
    pub fn parse(text: &str) -> Result<NamePattern, NameError> {
        if text.is_empty() {
            return Err(NameError::Empty);
        }
        if text.chars().any(char::is_control) {
            return Err(NameError::Control);
        }
        if text.starts_with('/') {
            return Err(NameError::Absolute(text.trim_start_matches('/').to_owned()));
        }
        let mut parts = Vec::new();
        for part in text.split('/') {
            match part {
                "" => return Err(NameError::EmptyComponent),
                "." | ".." => return Err(NameError::Dot(part.to_owned())),
                // Between two named parts it stands for one folder of any name
                // (`.git/modules/*/config`); first or last it would match too much.
                "*" if parts.is_empty() || text.ends_with("/*") => return Err(NameError::LoneStar),
                _ if part.trim().is_empty() => return Err(NameError::OnlySpaces),
                _ if part.matches('*').count() > 1 => {
                    return Err(NameError::ManyStars(part.to_owned()));
                }
                _ => parts.push(part.to_owned()),
            }
        }
        Ok(NamePattern(std::sync::Arc::new(Inner { text: text.to_owned(), parts })))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// Whether `path` has the pattern's components one after the other anywhere: the
    /// named file or directory itself, or anything below it.
    pub fn matches(&self, path: &Path) -> bool {
        self.matches_components(&spelled_components(path))
    }

    fn matches_components(&self, names: &[Spellings<'_>]) -> bool {
        let k = self.0.parts.len();
        names.len() >= k
            && names.windows(k).any(|w| {
                w.iter()
                    .zip(&self.0.parts)
                    .all(|(name, part)| name.any(|n| component_matches(part, n)))
            })
    }
}

/// Whether the component `name` matches `pattern` (one component, at most one `*`),
/// ASCII case-insensitively.
fn component_matches(pattern: &str, name: &str) -> bool {
    let (name, pattern) = (name.as_bytes(), pattern.as_bytes());
    match pattern.iter().position(|b| *b == b'*') {
        None => name.eq_ignore_ascii_case(pattern),
        Some(star) => {
            let (head, tail) = (&pattern[..star], &pattern[star + 1..]);
            name.len() >= head.len() + tail.len()
                && name[..head.len()].eq_ignore_ascii_case(head)
                && name[name.len() - tail.len()..].eq_ignore_ascii_case(tail)
        }
    }
}

/// Each normal component of `path` with the names it may be a copy of.
fn spelled_components(path: &Path) -> Vec<Spellings<'_>> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Spellings::of(n.to_string_lossy())),
            _ => None,
        })
        .collect()
}

impl std::fmt::Display for NamePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "name {}", self.0.text)
    }
}

/// The first of `patterns` that `path` matches. The path's components are split and
/// unwrapped into their spellings once, whatever the number of patterns (the runtime
/// asks this for every listed entry).
pub(crate) fn denied_name<'p>(patterns: &'p [NamePattern], path: &Path) -> Option<&'p NamePattern> {
    if patterns.is_empty() {
        return None;
    }
    let names = spelled_components(path);
    patterns.iter().find(|p| p.matches_components(&names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(pattern: &str, path: &str) -> bool {
        NamePattern::parse(pattern).unwrap().matches(Path::new(path))
    }

    #[test]
    fn one_component_matches_anywhere_ignoring_ascii_case() {
        assert!(hit(".env", "/a/.env"));
        assert!(hit(".env", "/a/.ENV/x"));
        assert!(hit("*.pem", "/a/server.PEM"));
        assert!(hit("*.pem", "/a/.pem"));
        assert!(hit("id_rsa*", "/h/.backup/id_rsa.bak"));
        assert!(hit("Login Data", "/h/.config/chromium/Default/login data"));
        assert!(!hit("*.pem", "/a/pem"));
        assert!(!hit(".env", "/a/.envx"));
        assert!(!hit("ab*ba", "/aba"), "head and tail may not overlap");
        // Non-ASCII compares exactly.
        assert!(!hit("é.key", "/a/É.key"));
    }

    #[test]
    fn several_components_match_one_after_the_other() {
        assert!(hit(".git/config", "/h/proj/sub/.git/config"));
        assert!(hit(".git/config", "/h/.GIT/Config"));
        assert!(hit(".config/gh", "/h/.config/gh/hosts.yml"));
        assert!(hit("Profile */Cookies", "/h/.config/chromium/Profile 2/Cookies"));
        assert!(!hit(".git/config", "/h/.git/x/config"));
        assert!(!hit(".git/config", "/h/config/.git"));
        assert!(!hit(".git/config", "/h/.git"));
        // A lone * stands for one folder between two named parts.
        assert!(hit(".git/modules/*/config", "/h/p/.git/modules/lib/config"));
        assert!(!hit(".git/modules/*/config", "/h/p/.git/modules/config"));
        assert!(!hit(".git/modules/*/config", "/h/p/.git/modules/a/b/config"));
        assert!(!hit(".cargo/credentials.toml", "/h/credentials.toml"));
    }

    #[test]
    fn a_component_matches_as_the_backups_and_copies_of_a_name() {
        assert!(hit(".env", "/a/.env~"));
        assert!(hit(".env", "/a/#.ENV#"));
        assert!(hit(".env", "/a/.env.swp"));
        assert!(hit("*.pem", "/a/server.pem.bak"));
        assert!(hit("*_history", "/h/.bash_history.1"));
        assert!(hit(".ssh", "/h/.ssh.bak/id_ed25519"));
        assert!(hit(".git/config", "/h/p/.git/config.lock"));
        assert!(hit(".git/config", "/h/p/.git.old/config"));
        assert!(hit(".docker/config.json", "/h/.docker/config (1).json"));
        assert!(hit("Login Data", "/h/Default/Login Data-journal"));
        assert!(hit("id_rsa", "/h/.id_rsa.swp"));
        // A name that is no copy is only itself.
        assert!(!hit(".env", "/a/.envx"));
        assert!(!hit(".env", "/a/.env.example"));
        assert!(!hit("*.pem", "/a/server.pem.txt"));
        assert!(!hit(".git/config", "/h/p/.git/config.worktree"));
        assert!(!hit("diary", "/h/diary.md"));
        // Past the bound on spellings, a component matches every rule.
        let piled = format!("/h/x{}", ".bak".repeat(spelling::MAX_SPELLINGS));
        assert!(hit(".env", &piled));
    }

    #[test]
    fn refuses_patterns_that_match_too_much_or_are_malformed() {
        for (bad, why) in [
            ("", NameError::Empty),
            ("*", NameError::LoneStar),
            (".git/*", NameError::LoneStar),
            ("*/config", NameError::LoneStar),
            (".", NameError::Dot(".".into())),
            ("a/../b", NameError::Dot("..".into())),
            ("a//b", NameError::EmptyComponent),
            ("a/", NameError::EmptyComponent),
            ("/etc/passwd", NameError::Absolute("etc/passwd".into())),
            ("*a*", NameError::ManyStars("*a*".into())),
            ("a/*b*", NameError::ManyStars("*b*".into())),
            ("a\nb", NameError::Control),
            (" ", NameError::OnlySpaces),
            ("a/ /b", NameError::OnlySpaces),
        ] {
            assert_eq!(NamePattern::parse(bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn the_first_matching_pattern_is_named() {
        let pats: Vec<NamePattern> =
            [".ssh", "id_*"].iter().map(|p| NamePattern::parse(p).unwrap()).collect();
        let got = denied_name(&pats, Path::new("/h/.ssh/id_ed25519"));
        assert_eq!(got.map(NamePattern::as_str), Some(".ssh"));
        assert_eq!(denied_name(&pats, Path::new("/h/notes")), None);
        assert_eq!(denied_name(&[], Path::new("/h/.ssh")), None);
    }
}
