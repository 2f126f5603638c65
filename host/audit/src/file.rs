//! Opening the log's own files without waiting on them: a FIFO, a device or a socket put
//! where a day file, a checkpoint, a key or the lock should be is refused as not a
//! regular file, never waited on (a FIFO's open blocks until a writer comes; `/dev/zero`
//! never ends).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// `O_NONBLOCK | O_NOCTTY`, Linux's values.
const FLAGS: i32 = 0o4000 | 0o400;

fn regular(file: File) -> std::io::Result<File> {
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Opens `path` for reading, only if it is a regular file.
pub(crate) fn open_read(path: &Path) -> std::io::Result<File> {
    regular(OpenOptions::new().read(true).custom_flags(FLAGS).open(path)?)
}

/// Opens `options` on `path` without waiting, only if it is (or is created as) a regular
/// file.
pub(crate) fn open_with(options: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    regular(options.custom_flags(FLAGS).open(path)?)
}
