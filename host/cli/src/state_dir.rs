//! Where bx keeps its state: `--state-dir`, `BX_HOME`, or the XDG state directory.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// Resolves and creates (mode 0700) the state directory.
pub(crate) fn resolve(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match explicit {
        Some(dir) => dir,
        None => match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
            (Some(xdg), _) if !xdg.is_empty() => PathBuf::from(xdg).join("bx"),
            (_, Some(home)) if !home.is_empty() => PathBuf::from(home).join(".local/state/bx"),
            _ => bail!("no state directory: pass --state-dir or set BX_HOME"),
        },
    };
    let dir =
        std::path::absolute(&dir).with_context(|| format!("state directory {}", dir.display()))?;
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating state directory {}", dir.display()))?;
    }
    Ok(dir)
}

/// The audit log's directory as `config.toml` says (`[audit] dir`, default `audit/`): every
/// command that reads or writes the log goes through here, so they all see the same one.
pub(crate) fn audit_dir(state_dir: &Path) -> anyhow::Result<PathBuf> {
    Ok(crate::daemon::load_config(state_dir)?.audit_dir(state_dir))
}
