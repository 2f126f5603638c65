//! Frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON. What a valid
//! frame is is decided here, once: [`body_len`] reads the head and its limit,
//! [`parse_body`] the envelope. The sync reader ([`read_frame`]), the one-buffer
//! [`decode`] and the async codec (`FrameCodec`, feature `codec`) all go through them.

use std::io::Read;

use crate::message::{Envelope, Wire};

/// The largest frame accepted (4 MiB). Without a bound a peer could announce a length of
/// 4 GiB and make the daemon allocate it before reading a byte; an approval block with a
/// megabyte of arguments still fits.
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// Bytes of a frame's head (its length).
pub(crate) const HEAD_BYTES: usize = 4;

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The announced length is over [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes is over the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(usize),
    /// The input ended inside a frame (its head or its body).
    #[error("truncated frame: expected {expected} bytes, got {got}")]
    Truncated {
        /// Bytes the frame's head or body needs.
        expected: usize,
        /// Bytes present.
        got: usize,
    },
    /// Bytes follow the frame in a buffer that should hold exactly one.
    #[error("{0} trailing bytes after the frame")]
    Trailing(usize),
    /// The body is not a valid envelope (bad UTF-8 or JSON, unknown field or type).
    #[error("bad message: {0}")]
    Bad(serde_json::Error),
    /// The envelope's version is not ours.
    #[error("protocol version {0} is not supported (this bx speaks {v})", v = crate::VERSION)]
    Version(u32),
    /// A frame whose first byte had come did not arrive whole in time (the reader's
    /// deadline, such as the daemon's `FRAME_SECS`).
    #[error("a frame did not arrive whole within {secs} s")]
    TooSlow {
        /// The deadline, in seconds.
        secs: u64,
    },
    /// Reading or writing the stream failed.
    #[error("frame i/o: {0}")]
    Io(std::io::Error),
}

// Each variant names its cause in its message, so none is also a `source()`: a chain
// printed whole (`{e:#}`) names it once.
impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> FrameError {
        FrameError::Io(e)
    }
}

/// The first frame of a connection to the daemon: [`crate::Body::Hello`] with `token`.
pub fn hello(token: &str) -> Result<Vec<u8>, FrameError> {
    encode(&Envelope {
        v: crate::VERSION,
        id: 0,
        msg: crate::Body::Hello { token: token.to_owned() },
    })
}

/// Encodes one envelope as a frame.
pub fn encode(envelope: &Envelope) -> Result<Vec<u8>, FrameError> {
    // Room for a large tool output at once, rather than doubling up to it. Only a large
    // one: the daemon bounds what it queues for a client by frames' lengths, so a small
    // frame must not hold much more memory than its length.
    let room = match &envelope.msg {
        crate::Body::ToolOutput { text, call, label, stderr, .. } if text.len() >= 64 << 10 => {
            HEAD_BYTES + 256 + call.len() + label.len() + stderr.len() + text.len()
        }
        _ => HEAD_BYTES,
    };
    let mut out = Vec::with_capacity(room.min(HEAD_BYTES + MAX_FRAME_BYTES));
    out.resize(HEAD_BYTES, 0);
    envelope.write_body(&mut out).map_err(FrameError::Bad)?;
    let len = out.len() - HEAD_BYTES;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    // In range: MAX_FRAME_BYTES fits in a u32.
    out[..HEAD_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// The body length a frame's 4-byte head announces, refused when over
/// [`MAX_FRAME_BYTES`] (before anything is allocated or read).
pub(crate) fn body_len(head: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Parses a frame's body (what follows the head) as one envelope of our version.
pub(crate) fn parse_body(body: &[u8]) -> Result<Envelope, FrameError> {
    let bad = |e: &dyn std::fmt::Display| FrameError::Bad(serde::de::Error::custom(e));
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<Wire>();
    let wire = match values.next() {
        Some(wire) => wire.map_err(FrameError::Bad)?,
        None => return Err(bad(&"the frame holds no envelope")),
    };
    // What follows the JSON: a `text` result's bytes where the envelope says so, and
    // otherwise nothing but JSON's white space.
    let after = &body[values.byte_offset()..];
    let attached = wire.attaches();
    if !attached && let Some(at) = after.iter().position(|b| !b" \t\n\r".contains(b)) {
        let at = values.byte_offset() + at;
        return Err(bad(&format_args!("bytes after the envelope, from byte {at}")));
    }
    let envelope = Envelope::from_wire(wire, Some(after)).map_err(|e| bad(&e))?;
    if envelope.v != crate::VERSION {
        return Err(FrameError::Version(envelope.v));
    }
    Ok(envelope)
}

/// The whole length (head and body) of the frame `buf` starts with, from its head;
/// `None` while the head has not all arrived.
pub(crate) fn frame_len(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    match buf.get(..HEAD_BYTES) {
        Some(&[a, b, c, d]) => Ok(Some(HEAD_BYTES + body_len([a, b, c, d])?)),
        _ => Ok(None),
    }
}

/// Why `buf`, the start of a frame that the input ended inside, is not one.
pub(crate) fn cut(buf: &[u8]) -> FrameError {
    match frame_len(buf) {
        Ok(Some(whole)) => {
            FrameError::Truncated { expected: whole - HEAD_BYTES, got: buf.len() - HEAD_BYTES }
        }
        Ok(None) => FrameError::Truncated { expected: HEAD_BYTES, got: buf.len() },
        Err(e) => e,
    }
}

/// Decodes a buffer holding exactly one frame.
pub fn decode(buf: &[u8]) -> Result<Envelope, FrameError> {
    match frame_len(buf)? {
        Some(whole) if buf.len() == whole => parse_body(&buf[HEAD_BYTES..]),
        Some(whole) if buf.len() > whole => Err(FrameError::Trailing(buf.len() - whole)),
        _ => Err(cut(buf)),
    }
}

/// Reads one frame from a stream; `Ok(None)` at a clean end of stream between frames,
/// [`FrameError::Truncated`] at an end inside one. It reads exactly the frame's bytes,
/// so the stream can be handed on between frames.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Envelope>, FrameError> {
    let mut head = [0u8; HEAD_BYTES];
    let mut got = 0;
    while got < HEAD_BYTES {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(cut(&head[..got])),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = body_len(head)?;
    let mut body = Vec::with_capacity(len);
    r.take(len as u64).read_to_end(&mut body)?;
    if body.len() < len {
        return Err(FrameError::Truncated { expected: len, got: body.len() });
    }
    parse_body(&body).map(Some)
}
