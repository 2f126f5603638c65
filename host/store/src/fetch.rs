//! Getting component bytes from a file, an https URL or a mirror, bounded in size.

use std::io::Read as _;
use std::path::Path;

use crate::error::StoreError;
use crate::store::MAX_COMPONENT_BYTES;

/// Called as bytes arrive: (bytes so far, total when the server said).
pub type Progress<'a> = &'a mut dyn FnMut(u64, Option<u64>);

/// Reads a local file, refusing anything over [`MAX_COMPONENT_BYTES`].
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, StoreError> {
    read_bounded(path, MAX_COMPONENT_BYTES)
}

/// Reads a local regular file, refusing anything over `max` bytes.
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, StoreError> {
    let shown = path.display().to_string();
    let fetch_err = |m: String| StoreError::Fetch { source_name: shown.clone(), message: m };
    // Non-blocking, and only a regular file: a FIFO at a mirror's path must not hang an
    // install (mirrors are not trusted; their copies are verified by digest).
    let file = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(0o4000) // O_NONBLOCK
            .open(path)
            .map_err(|e| fetch_err(e.to_string()))?
    };
    if !file.metadata().map_err(|e| fetch_err(e.to_string()))?.is_file() {
        return Err(fetch_err("not a regular file".into()));
    }
    let mut data = Vec::new();
    file.take(max + 1).read_to_end(&mut data).map_err(|e| fetch_err(e.to_string()))?;
    if data.len() as u64 > max {
        return Err(fetch_err(format!("larger than {max} bytes")));
    }
    Ok(data)
}

/// Downloads an https URL, refusing anything over [`MAX_COMPONENT_BYTES`].
pub(crate) fn download(url: &str, progress: Progress<'_>) -> Result<Vec<u8>, StoreError> {
    let fetch_err = |m: String| StoreError::Fetch { source_name: url.to_owned(), message: m };
    if !url.starts_with("https://") {
        return Err(fetch_err("only https:// URLs are fetched".into()));
    }
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(300))
        .connect_timeout(std::time::Duration::from_secs(15))
        .build()
        .map_err(|e| fetch_err(e.to_string()))?;
    let response = client.get(url).send().map_err(|e| fetch_err(error_chain(&e)))?;
    if !response.status().is_success() {
        return Err(fetch_err(format!("server answered {}", response.status())));
    }
    let total = response.content_length();
    if total.is_some_and(|t| t > MAX_COMPONENT_BYTES) {
        return Err(fetch_err(format!("larger than {MAX_COMPONENT_BYTES} bytes")));
    }
    let mut reader = response.take(MAX_COMPONENT_BYTES + 1);
    let mut data = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = reader.read(&mut buf).map_err(|e| fetch_err(e.to_string()))?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        progress(data.len() as u64, total);
    }
    if data.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(fetch_err(format!("larger than {MAX_COMPONENT_BYTES} bytes")));
    }
    if total.is_some_and(|t| t != data.len() as u64) {
        return Err(fetch_err(format!("got {} of {} bytes", data.len(), total.unwrap_or(0))));
    }
    Ok(data)
}

/// An error and its sources, one after another, each said once.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = e.source();
    }
    out
}
