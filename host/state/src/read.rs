//! Reading a file bx keeps as its own (policy, config, `core.md`, session state): never
//! waiting on a FIFO, never reading a device, never more than a bound.

use std::io::Read as _;
use std::path::Path;

use crate::error::StateError;

/// The largest `policy.toml` read (2 MiB: some 20,000 grants). Without a bound, a policy
/// of deep dotted keys makes the TOML parser build a huge tree before it refuses.
pub const MAX_POLICY_BYTES: u64 = 2 << 20;
/// The largest `config.toml` read (64 KiB); it has four small tables.
pub const MAX_CONFIG_BYTES: u64 = 64 << 10;
/// The largest other file bx reads as its own in one piece (`core.md`, session state,
/// the installed set): 1 MiB.
pub const MAX_OWN_FILE_BYTES: u64 = 1 << 20;

/// `O_NONBLOCK`, so that opening a FIFO does not wait for a writer.
const O_NONBLOCK: i32 = 0o4000;

/// Reads `path` whole, if it exists: `Ok(None)` when it does not. Refuses anything that
/// is not a regular file (a FIFO at `policy.toml` would otherwise hang bx) and anything
/// over `max` bytes, naming the file and the bound.
pub fn read_own(path: &Path, max: u64) -> Result<Option<Vec<u8>>, StateError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StateError::io(path, e)),
    };
    let meta = file.metadata().map_err(|e| StateError::io(path, e))?;
    if !meta.is_file() {
        return Err(StateError::NotRegular(path.display().to_string()));
    }
    if meta.len() > max {
        return Err(StateError::TooLarge { path: path.display().to_string(), max });
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max + 1).read_to_end(&mut data).map_err(|e| StateError::io(path, e))?;
    if data.len() as u64 > max {
        return Err(StateError::TooLarge { path: path.display().to_string(), max });
    }
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_fifos_and_oversize_files_and_reads_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("policy.toml");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(matches!(read_own(&fifo, 100), Err(StateError::NotRegular(_))));
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 101]).unwrap();
        assert!(matches!(read_own(&big, 100), Err(StateError::TooLarge { max: 100, .. })));
        assert_eq!(read_own(&big, 101).unwrap().unwrap().len(), 101);
        assert_eq!(read_own(&dir.path().join("none"), 100).unwrap(), None);
        assert!(matches!(read_own(dir.path(), 100), Err(StateError::NotRegular(_))));
    }
}
