//! [`StateDir`]: where bx keeps its state, and the one place its layout is spelled. A
//! new file is one method here, and "is this bx's own?" is one question
//! ([`StateDir::own_paths`]).

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::error::StateError;
use crate::policy_file::PolicyFile;

/// bx's state directory.
///
/// | path | what |
/// | --- | --- |
/// | `config.toml` | the configuration ([`Config`]) |
/// | `policy.toml` | the owner's policy ([`PolicyFile`]) |
/// | `core.md` | the owner's notes, in every system prompt |
/// | `sessions/` | each session's state and transcript |
/// | `tools/` | the tool store: blobs, precompiled code and its key, the installed set |
/// | `audit/` | the audit log, unless `[audit] dir` puts it elsewhere |
/// | `bx.sock`, `daemon.json`, `serve.lock`, `serve.log` | the daemon's socket, status, lock, log |
/// | `llama-server.log`, `usage.jsonl` | the launched model server's log, token accounting |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The state directory at `root` (absolute), as it is; nothing is created.
    pub fn at(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    /// `--state-dir`, else `$BX_HOME` (passed as `explicit` by the CLI), else
    /// `$XDG_STATE_HOME/bx`, else `~/.local/state/bx`; made absolute and created with
    /// mode 0700 if missing.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<StateDir, StateError> {
        let dir = match explicit {
            Some(dir) => dir,
            None => match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
                (Some(xdg), _) if !xdg.is_empty() => PathBuf::from(xdg).join("bx"),
                (_, Some(home)) if !home.is_empty() => PathBuf::from(home).join(".local/state/bx"),
                _ => return Err(StateError::NoStateDir),
            },
        };
        let dir = std::path::absolute(&dir).map_err(|e| StateError::io(&dir, e))?;
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| StateError::io(&dir, e))?;
        }
        Ok(StateDir { root: dir })
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.toml`.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// `policy.toml`.
    pub fn policy_file(&self) -> PathBuf {
        self.root.join("policy.toml")
    }

    /// `core.md`: the owner's notes.
    pub fn core_file(&self) -> PathBuf {
        self.root.join("core.md")
    }

    /// `sessions/`.
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// `tools/`: the tool store.
    pub fn tools_dir(&self) -> PathBuf {
        self.root.join("tools")
    }

    /// `usage.jsonl`: token counts of every model request.
    pub fn usage_file(&self) -> PathBuf {
        self.root.join("usage.jsonl")
    }

    /// `bx.sock`: the daemon's socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join("bx.sock")
    }

    /// `daemon.json`: what the daemon tells `bx doctor` about itself.
    pub fn status_file(&self) -> PathBuf {
        self.root.join("daemon.json")
    }

    /// `serve.lock`: held by the one daemon of this directory.
    pub fn serve_lock(&self) -> PathBuf {
        self.root.join("serve.lock")
    }

    /// `serve.log`: the output of a daemon `bx chat` started.
    pub fn serve_log(&self) -> PathBuf {
        self.root.join("serve.log")
    }

    /// `llama-server.log`: the output of a model server bx launched.
    pub fn model_server_log(&self) -> PathBuf {
        self.root.join("llama-server.log")
    }

    /// The audit log's directory: `[audit] dir`, or `audit/`.
    pub fn audit_dir(&self, config: &Config) -> PathBuf {
        config.audit.dir.clone().unwrap_or_else(|| self.root.join("audit"))
    }

    /// Reads `config.toml` (a missing file is the default configuration).
    pub fn config(&self) -> Result<Config, StateError> {
        Config::load(&self.config_file())
    }

    /// Everything bx reads as its own, which no tool reaches in any mode: the state
    /// directory and the audit directory, each as configured and as it resolves on disk
    /// (so a symlink to either is covered too).
    pub fn own_paths(&self, config: &Config) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for path in [self.root.clone(), self.audit_dir(config)] {
            if let Ok(real) = std::fs::canonicalize(&path)
                && !out.contains(&real)
            {
                out.push(real);
            }
            if !out.contains(&path) {
                out.push(path);
            }
        }
        out
    }

    /// The policy file, watched, with bx's own paths out of every grant's reach.
    pub fn watch_policy(&self, config: &Config) -> PolicyFile {
        PolicyFile::open(&self.policy_file(), self.own_paths(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_paths_cover_the_directory_and_the_audit_dir_as_written_and_resolved() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        let dir = StateDir::at(tmp.path().join("link"));
        let config =
            Config::parse(Path::new("c.toml"), "[audit]\ndir = \"/var/log/bx-audit\"\n").unwrap();
        let own = dir.own_paths(&config);
        let real = std::fs::canonicalize(&real).unwrap();
        assert_eq!(own, vec![real, tmp.path().join("link"), PathBuf::from("/var/log/bx-audit")]);
    }
}
