//! The bearer token of `bx mcp --http`: `mcp.token` in the state directory, made on
//! first use and refused when others can read it.

use anyhow::Context as _;
use bx_state::StateDir;

/// The most bytes of the token file read.
const MAX_TOKEN_FILE: u64 = 4096;

/// The token every HTTP request must carry: read from `mcp.token` in the state
/// directory, made (32 random bytes, hex, mode 0600) when missing. A file that others
/// can read is refused rather than used.
pub(super) fn token(state: &StateDir) -> anyhow::Result<String> {
    use std::io::Write as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let path = state.mcp_token();
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
            errln!("bx mcp: made a bearer token in {}", path.display());
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(&path)?;
            anyhow::ensure!(
                meta.is_file() && meta.mode() & 0o077 == 0,
                "{} must be a regular file only its owner can read (mode 0600); see docs/runbook.md#mcp-token",
                path.display()
            );
            // A token is 64 characters; a file of any size is not read whole.
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(std::fs::File::open(&path)?, MAX_TOKEN_FILE),
                &mut text,
            )
            .with_context(|| format!("reading {}", path.display()))?;
            let token = text.trim().to_owned();
            anyhow::ensure!(
                token.len() >= 32 && token.bytes().all(|b| b.is_ascii_graphic()),
                "{} does not hold a token (32 or more printable characters); see docs/runbook.md#mcp-token",
                path.display()
            );
            Ok(token)
        }
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// Whether two tokens are equal, in time that does not depend on where they first
/// differ (`subtle`'s comparison; a length difference shows, and a token's length is
/// no secret).
pub(super) fn same_token(given: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    given.ct_eq(expected).into()
}
