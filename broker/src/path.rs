//! Path normalisation: the one lexical form every grant check works on.

use std::path::{Component, Path, PathBuf};

/// Why a path was refused before any grant was consulted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// Grants are over absolute paths; a relative path has no meaning to the owner.
    #[error("path is not absolute: {0:?}")]
    NotAbsolute(String),
    /// `..` is refused outright rather than resolved, since resolving it lexically is
    /// wrong in the presence of symlinks and resolving it on disk is a race.
    #[error("path contains '..': {0:?}")]
    ParentComponent(String),
    /// A NUL byte would truncate the path at the system call.
    #[error("path contains a NUL byte")]
    Nul,
    /// Paths must be UTF-8 so that what the owner reads is what is opened.
    #[error("path is not valid UTF-8")]
    NotUtf8,
}

/// Returns the normal form of an absolute path: `.` and repeated or trailing `/` removed.
/// Refuses relative paths, `..` components, NUL bytes and non-UTF-8 paths.
pub fn normalize(path: &Path) -> Result<PathBuf, PathError> {
    let text = path.to_str().ok_or(PathError::NotUtf8)?;
    if text.contains('\0') {
        return Err(PathError::Nul);
    }
    if !path.is_absolute() {
        return Err(PathError::NotAbsolute(text.to_owned()));
    }
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => out.push(part),
            Component::ParentDir => return Err(PathError::ParentComponent(text.to_owned())),
            Component::Prefix(_) => return Err(PathError::NotAbsolute(text.to_owned())),
        }
    }
    Ok(out)
}

/// The components of `path` below `root`, when `root` is `path` or one of its ancestors.
/// Both must already be normalised.
pub(crate) fn strip_root<'p>(path: &'p Path, root: &Path) -> Option<&'p Path> {
    path.strip_prefix(root).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> Result<String, PathError> {
        normalize(Path::new(s)).map(|p| p.to_string_lossy().into_owned())
    }

    #[test]
    fn removes_dots_and_slashes() {
        assert_eq!(norm("/a//b/./c/"), Ok("/a/b/c".to_owned()));
        assert_eq!(norm("/"), Ok("/".to_owned()));
    }

    #[test]
    fn refuses_parent_components() {
        assert_eq!(norm("/a/../etc"), Err(PathError::ParentComponent("/a/../etc".into())));
        assert_eq!(norm("/.."), Err(PathError::ParentComponent("/..".into())));
    }

    #[test]
    fn refuses_relative_and_nul() {
        assert_eq!(norm("a/b"), Err(PathError::NotAbsolute("a/b".into())));
        assert_eq!(norm(""), Err(PathError::NotAbsolute(String::new())));
        assert_eq!(norm("/a\0b"), Err(PathError::Nul));
    }

    #[test]
    fn strip_root_is_component_wise() {
        assert_eq!(strip_root(Path::new("/ab/c"), Path::new("/a")), None);
        assert_eq!(strip_root(Path::new("/a/c"), Path::new("/a")), Some(Path::new("c")));
        assert_eq!(strip_root(Path::new("/a"), Path::new("/a")), Some(Path::new("")));
    }
}
