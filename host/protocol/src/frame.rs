//! Frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.

use std::io::Read;

use crate::message::Envelope;

/// The largest frame accepted (4 MiB). Without a bound a peer could announce a length of
/// 4 GiB and make the daemon allocate it before reading a byte; an approval block with a
/// megabyte of arguments still fits.
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The announced length is over [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes is over the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(usize),
    /// The input ended inside a frame.
    #[error("truncated frame: expected {expected} bytes, got {got}")]
    Truncated {
        /// Bytes the frame needs.
        expected: usize,
        /// Bytes present.
        got: usize,
    },
    /// Bytes follow the frame in a buffer that should hold exactly one.
    #[error("{0} trailing bytes after the frame")]
    Trailing(usize),
    /// The body is not a valid envelope (bad UTF-8 or JSON, unknown field or type).
    #[error("bad message: {0}")]
    Bad(String),
    /// The envelope's version is not ours.
    #[error("protocol version {0} is not supported (this bx speaks {v})", v = crate::VERSION)]
    Version(u32),
    /// Reading the socket failed.
    #[error("reading a frame: {0}")]
    Io(String),
}

/// Encodes one envelope as a frame.
pub fn encode(envelope: &Envelope) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(envelope).map_err(|e| FrameError::Bad(e.to_string()))?;
    if body.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The body length a frame's 4-byte head announces, refused when over
/// [`MAX_FRAME_BYTES`] (before anything is allocated or read).
pub fn body_len(head: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Parses a frame's body (what follows the head) as one envelope of our version.
pub fn parse_body(body: &[u8]) -> Result<Envelope, FrameError> {
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| FrameError::Bad(e.to_string()))?;
    if envelope.v != crate::VERSION {
        return Err(FrameError::Version(envelope.v));
    }
    Ok(envelope)
}

/// Decodes a buffer holding exactly one frame.
pub fn decode(buf: &[u8]) -> Result<Envelope, FrameError> {
    let Some(&[a, b, c, d]) = buf.get(..4) else {
        return Err(FrameError::Truncated { expected: 4, got: buf.len() });
    };
    let len = body_len([a, b, c, d])?;
    let rest = &buf[4..];
    if rest.len() < len {
        return Err(FrameError::Truncated { expected: len, got: rest.len() });
    }
    if rest.len() > len {
        return Err(FrameError::Trailing(rest.len() - len));
    }
    parse_body(rest)
}

/// Reads one frame from a stream; `Ok(None)` at a clean end of stream between frames.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Envelope>, FrameError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Truncated { expected: 4, got }),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e.to_string())),
        }
    }
    let len = body_len(head)?;
    let mut body = Vec::with_capacity(len);
    r.take(len as u64).read_to_end(&mut body).map_err(|e| FrameError::Io(e.to_string()))?;
    if body.len() < len {
        return Err(FrameError::Truncated { expected: len, got: body.len() });
    }
    parse_body(&body).map(Some)
}
