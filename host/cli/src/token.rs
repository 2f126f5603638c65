//! The tokens of bx's HTTP services: `mcp.token` (`bx mcp --http`) and `web.token`
//! (`bx serve --web`) in the state directory, each made on first use and refused when
//! others can read it.

use anyhow::Context as _;
use bx_state::StateDir;

/// The most bytes of the token file read.
const MAX_TOKEN_FILE: u64 = 4096;

/// Which service's token.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Service {
    /// `bx mcp --http`: `mcp.token`.
    Mcp,
    /// `bx serve --web`: `web.token`.
    Web,
}

impl Service {
    fn path(self, state: &StateDir) -> std::path::PathBuf {
        match self {
            Service::Mcp => state.mcp_token(),
            Service::Web => state.web_token(),
        }
    }

    /// Who says it made one.
    fn who(self) -> &'static str {
        match self {
            Service::Mcp => "bx mcp",
            Service::Web => "bx serve",
        }
    }

    /// The runbook entry of a token file that cannot be used.
    fn runbook(self) -> &'static str {
        match self {
            Service::Mcp => "docs/runbook.md#mcp-token",
            Service::Web => "docs/runbook.md#web-token",
        }
    }
}

/// The token every request to `service` must carry: read from its file in the state
/// directory, made (32 random bytes, hex, mode 0600) when missing. A file that others
/// can read is refused rather than used.
pub(crate) fn token(state: &StateDir, service: Service) -> anyhow::Result<String> {
    use std::io::Write as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let path = service.path(state);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        // Never through a symlink.
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(mut file) => {
            let mut raw = [0u8; 32];
            getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("random bytes: {e}"))?;
            let token = hex::encode(raw);
            file.write_all(format!("{token}\n").as_bytes())?;
            file.sync_all()?;
            errln!("{}: made a token in {}", service.who(), path.display());
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Opened without following a symlink, and checked as opened (not by its
            // name, which could be swapped in between): a regular file of this user's
            // that no one else can read.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .with_context(|| {
                    format!("opening {} (see {})", path.display(), service.runbook())
                })?;
            let meta = file.metadata()?;
            anyhow::ensure!(
                meta.is_file()
                    && meta.mode() & 0o077 == 0
                    && meta.uid() == rustix::process::geteuid().as_raw(),
                "{} must be a regular file of yours only you can read (mode 0600); see {}",
                path.display(),
                service.runbook()
            );
            // A token is 64 characters; a file of any size is not read whole.
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(file, MAX_TOKEN_FILE),
                &mut text,
            )
            .with_context(|| format!("reading {}", path.display()))?;
            let token = text.trim().to_owned();
            anyhow::ensure!(
                token.len() >= 32 && token.bytes().all(|b| b.is_ascii_graphic()),
                "{} does not hold a token (32 or more printable characters); see {}",
                path.display(),
                service.runbook()
            );
            Ok(token)
        }
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// Whether two tokens are equal, in time that does not depend on where they first
/// differ (`subtle`'s comparison; a length difference shows, and a token's length is
/// no secret).
pub(crate) fn same_token(given: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    given.ct_eq(expected).into()
}
