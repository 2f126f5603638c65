//! The frame codec for tokio-util's `FramedRead` and `FramedWrite`: the frames of
//! [`crate::read_frame`], through the same head, limit and parse.

use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use crate::frame::{FrameError, HEAD_BYTES, cut, frame_len, parse_body};
use crate::message::Envelope;

/// Frames of [`Envelope`]s for `FramedRead`/`FramedWrite`. A length over
/// [`crate::MAX_FRAME_BYTES`] is refused from the head, before its body is buffered; an
/// end of stream inside a frame (or after the last whole one) is
/// [`FrameError::Truncated`], never a quiet end.
#[derive(Debug, Default, Clone, Copy)]
pub struct FrameCodec;

impl Decoder for FrameCodec {
    type Item = Envelope;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Envelope>, FrameError> {
        let Some(whole) = frame_len(buf)? else { return Ok(None) };
        if buf.len() < whole {
            // The length is within the limit: room for the rest of the frame, once.
            buf.reserve(whole - buf.len());
            return Ok(None);
        }
        let frame = buf.split_to(whole);
        parse_body(&frame[HEAD_BYTES..]).map(Some)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Envelope>, FrameError> {
        match self.decode(buf)? {
            Some(envelope) => Ok(Some(envelope)),
            None if buf.is_empty() => Ok(None),
            None => Err(cut(buf)),
        }
    }
}

impl Encoder<&Envelope> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, envelope: &Envelope, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.extend_from_slice(&crate::encode(envelope)?);
        Ok(())
    }
}

impl Encoder<Envelope> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, envelope: Envelope, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.encode(&envelope, dst)
    }
}
