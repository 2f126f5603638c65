//! [`StateDir`]: where bx keeps its state, and the one place its layout is spelled. A
//! new file is one method here, and "is this bx's own?" is one question
//! ([`StateDir::own_paths`]).

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::error::StateError;
use crate::policy_file::PolicyFile;

/// Entries of one of bx's directories looked at for symlinks (a bound on the work when a
/// sessions directory holds very many).
const MAX_OWN_ENTRIES: usize = 100_000;
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
/// | `mcp.token`, `web.token` | the tokens of `bx mcp --http` and `bx serve --web` |
/// | `telemetry.json` | what the daemon's trace exporter sent and lost |
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
        // A `..` in the path would make every path under it unusable in a grant check
        // (the broker refuses `..` rather than resolve it): resolve it here, once.
        let dir = if dir.components().any(|c| c == std::path::Component::ParentDir) {
            std::fs::canonicalize(&dir).map_err(|e| StateError::io(&dir, e))?
        } else {
            dir
        };
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

    /// `secrets/`: the secret store (values mode 0600, never within a tool's reach).
    pub fn secrets(&self) -> crate::SecretStore {
        crate::SecretStore::at(self.root.join("secrets"))
    }

    /// `tools/`: the tool store.
    pub fn tools_dir(&self) -> PathBuf {
        self.root.join("tools")
    }

    /// `tools/native/`: the precompiled code of the installed tools.
    pub fn native_dir(&self) -> PathBuf {
        self.tools_dir().join("native")
    }

    /// `tools/blobs/`: the installed components, by digest.
    pub fn blobs_dir(&self) -> PathBuf {
        self.tools_dir().join("blobs")
    }

    /// `upstreams/`: each stdio upstream's working directory (`NAME/`) and the log of
    /// its stderr (`NAME.log`).
    pub fn upstreams_dir(&self) -> PathBuf {
        self.root.join("upstreams")
    }

    /// `mcp.token`: the bearer token `bx mcp --http` requires.
    pub fn mcp_token(&self) -> PathBuf {
        self.root.join("mcp.token")
    }

    /// `telemetry.json`: what the daemon's trace exporter sent and lost (`bx doctor`
    /// reads it).
    pub fn telemetry_status(&self) -> PathBuf {
        self.root.join("telemetry.json")
    }

    /// `web.token`: the token the page of `bx serve --web` asks for at login.
    pub fn web_token(&self) -> PathBuf {
        self.root.join("web.token")
    }

    /// `usage.jsonl`: token counts of every model request.
    pub fn usage_file(&self) -> PathBuf {
        self.root.join("usage.jsonl")
    }

    /// `bx.sock`: the daemon's socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join("bx.sock")
    }

    /// `bx.sock.token`: the secret every connection to the socket begins with (0600,
    /// made anew by each daemon). What can read the state directory may use the socket;
    /// an upstream MCP server, confined away from it, cannot, though it can reach the
    /// socket itself (Landlock does not govern connecting to one).
    pub fn socket_token(&self) -> PathBuf {
        self.root.join("bx.sock.token")
    }

    /// Makes the daemon's token anew: 32 random bytes, hex, in `bx.sock.token` (0600 from
    /// its first byte, replaced whole).
    pub fn new_socket_token(&self) -> Result<String, StateError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| {
            StateError::io(&self.socket_token(), std::io::Error::other(e.to_string()))
        })?;
        let token = hex::encode(bytes);
        let path = self.socket_token();
        let temp = self.root.join(".bx.sock.token.new");
        let _ = std::fs::remove_file(&temp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| StateError::io(&temp, e))?;
        file.write_all(token.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| StateError::io(&temp, e))?;
        std::fs::rename(&temp, &path).map_err(|e| StateError::io(&path, e))?;
        Ok(token)
    }

    /// The daemon's token, as a client sends it; `None` when there is no readable one.
    pub fn read_socket_token(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.socket_token()).ok()?;
        let token = text.trim();
        (token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| token.to_owned())
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

    /// The key that signs the log's checkpoints: `[audit] key`, else `audit.key` here
    /// when it exists; `None` when the owner made none.
    pub fn audit_key(&self, config: &Config) -> Option<PathBuf> {
        config.audit.key.clone().or_else(|| {
            let default = self.default_audit_key();
            default.exists().then_some(default)
        })
    }

    /// Where `bx audit key init` puts the key unless told otherwise.
    pub fn default_audit_key(&self) -> PathBuf {
        self.root.join("audit.key")
    }

    /// Reads `config.toml` (a missing file is the default configuration).
    pub fn config(&self) -> Result<Config, StateError> {
        Config::load(&self.config_file())
    }

    /// Everything bx reads as its own, which no tool reaches in any mode: the state
    /// directory, the audit directory and the `[approvals]` programs, each as configured
    /// and as it resolves on disk
    /// (so a symlink to either is covered too), and the target of every symlink bx's own
    /// files are kept through (a `policy.toml` or `core.md` linked in from a dotfiles
    /// directory, a `tools/` or `sessions/` on another disk).
    pub fn own_paths(&self, config: &Config) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let add = |p: PathBuf, out: &mut Vec<PathBuf>| {
            if !out.contains(&p) {
                out.push(p);
            }
        };
        let audit = self.audit_dir(config);
        // The signing key (and its verifier key) and the export directories are bx's
        // too: a tool that reached them could forge or remove what anchors the log.
        let mut anchors: Vec<PathBuf> = config.audit.export.clone();
        if let Some(key) = self.audit_key(config).or_else(|| config.audit.key.clone()) {
            let mut public = key.clone().into_os_string();
            public.push(".pub");
            anchors.push(PathBuf::from(public));
            anchors.push(key);
        }
        // The reviewer and notice programs run with the owner's authority, and the
        // reviewer answers for the owner: a tool that could rewrite either would answer
        // its own calls.
        let helpers = [&config.approvals.reviewer, &config.approvals.notify];
        anchors.extend(helpers.into_iter().filter_map(|argv| argv.first()).map(PathBuf::from));
        for path in [self.root.clone(), audit.clone()].into_iter().chain(anchors) {
            if let Some(real) = bx_fs::resolve_leniently(&path) {
                add(real, &mut out);
            }
            add(path, &mut out);
        }
        // Symlinks among bx's own files, one level into the places bx keeps them.
        for dir in
            [self.root.clone(), self.tools_dir(), self.native_dir(), self.sessions_dir(), audit]
        {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten().take(MAX_OWN_ENTRIES) {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_symlink())
                    && let Some(target) = bx_fs::resolve_leniently(&path)
                {
                    add(target, &mut out);
                }
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

    /// Found probing: a tool with a write grant on the reviewer's directory could
    /// rewrite the program that answers for the owner.
    #[test]
    fn the_approvals_programs_and_their_targets_are_own() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::write(base.join("review-v2"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(base.join("review-v2"), base.join("review")).unwrap();
        let text = format!(
            "[approvals]\nreviewer = [\"{}\", \"--x\"]\nnotify = [\"/usr/local/bin/notice\"]\n",
            base.join("review").display()
        );
        let config = Config::parse(Path::new("c.toml"), &text).unwrap();
        let own = StateDir::at(base.join("state")).own_paths(&config);
        for p in
            [base.join("review"), base.join("review-v2"), PathBuf::from("/usr/local/bin/notice")]
        {
            assert!(own.contains(&p), "{} is not own: {own:?}", p.display());
        }
        assert!(!own.contains(&PathBuf::from("--x")), "{own:?}");
    }

    /// Regression (found probing): `--state-dir ../st` made every call refused, since the
    /// broker refuses `..` in bx's own paths rather than resolve it.
    #[test]
    fn a_parent_component_in_the_state_dir_is_resolved() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::resolve(Some(tmp.path().join("a/../st"))).unwrap();
        assert_eq!(dir.root(), std::fs::canonicalize(tmp.path().join("st")).unwrap());
    }

    /// Regression (found probing): policy.toml, config.toml and core.md kept as symlinks
    /// into a dotfiles directory, or tools/ on another disk, were bx's own but not
    /// protected: a grant on the dotfiles directory let a tool rewrite the policy.
    #[test]
    fn the_targets_of_own_files_kept_through_symlinks_are_own_too() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, dot) = (base.join("state"), base.join("dot"));
        std::fs::create_dir_all(state.join("tools")).unwrap();
        std::fs::create_dir_all(dot.join("bx-sessions")).unwrap();
        std::fs::write(dot.join("policy.toml"), "").unwrap();
        std::os::unix::fs::symlink(dot.join("policy.toml"), state.join("policy.toml")).unwrap();
        std::os::unix::fs::symlink(dot.join("core.md"), state.join("core.md")).unwrap();
        std::os::unix::fs::symlink(dot.join("bx-sessions"), state.join("sessions")).unwrap();
        let own = StateDir::at(&state).own_paths(&Config::default());
        for p in [dot.join("policy.toml"), dot.join("core.md"), dot.join("bx-sessions")] {
            assert!(own.contains(&p), "{} is not own: {own:?}", p.display());
        }
        assert!(!own.contains(&dot));
    }
}
