//! Where bx keeps its state: `--state-dir`, `BX_HOME`, or the XDG state directory.

use std::path::PathBuf;

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
