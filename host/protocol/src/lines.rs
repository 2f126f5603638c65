//! Newline-delimited lines from an untrusted byte stream, bounded: the stdio transport of
//! `bx mcp` reads an MCP client's messages with it (`bx-fuzz mcp_lines` fuzzes it).
//! tokio-util's `LinesCodec` does the splitting ([`Splitter`]; [`LineReader`] drives it
//! over a blocking reader): a line ends at `\n` (a `\r` before it is dropped), the
//! input's last line may lack its `\n`, and a line over the limit is reported once and
//! discarded as it arrives, never held.

use std::io::Read;

use bytes::BytesMut;
use tokio_util::codec::{Decoder as _, LinesCodec, LinesCodecError};

/// Bytes asked of the input per read (64 KiB). With the line limit it bounds what is
/// held: at most the limit plus one read.
pub const LINE_READ_BYTES: usize = 64 << 10;

/// Why a line was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// The line is longer than the limit (in bytes); it is discarded up to its end and
    /// reading goes on with the next.
    #[error("a line over {0} bytes is not read; it was discarded")]
    TooLong(usize),
    /// The line is not UTF-8; it is skipped and reading goes on with the next.
    #[error("the line is not UTF-8")]
    NotUtf8,
    /// Reading the input failed; nothing more is read. (The cause is in the message, and
    /// so not also a `source()`: a chain printed whole names it once.)
    #[error("reading lines: {0}")]
    Io(std::io::Error),
}

/// The splitting itself, with no input of its own: bytes go in through [`space`] and
/// [`filled`], lines come out of [`split`]. [`LineReader`] drives it over a blocking
/// reader; `bx mcp` drives it over a non-blocking pipe, so the two read the same lines.
///
/// [`space`]: Splitter::space
/// [`filled`]: Splitter::filled
/// [`split`]: Splitter::split
pub struct Splitter {
    max: usize,
    codec: LinesCodec,
    buf: BytesMut,
    chunk: Box<[u8]>,
    /// The input has ended: what is left is its last line.
    ended: bool,
    /// Nothing more comes.
    done: bool,
    /// The read that failed, to be handed out as the last item.
    failed: Option<std::io::Error>,
}

/// What [`Splitter::split`] has.
#[derive(Debug)]
pub enum Split {
    /// A line, or why one was not read.
    Line(Result<String, LineError>),
    /// Nothing until more is read: read into [`Splitter::space`], then call
    /// [`Splitter::filled`].
    Read,
    /// Nothing more comes.
    End,
}

impl Splitter {
    /// A splitter of lines of at most `max` bytes each.
    pub fn new(max: usize) -> Splitter {
        Splitter {
            max,
            codec: LinesCodec::new_with_max_length(max),
            buf: BytesMut::with_capacity(LINE_READ_BYTES),
            chunk: vec![0; LINE_READ_BYTES].into_boxed_slice(),
            ended: false,
            done: false,
            failed: None,
        }
    }

    /// The next line of what has been read so far.
    pub fn split(&mut self) -> Split {
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Split::Line(Err(LineError::Io(e)));
        }
        while !self.done {
            let decoded = if self.ended {
                self.codec.decode_eof(&mut self.buf)
            } else {
                self.codec.decode(&mut self.buf)
            };
            return match decoded {
                Ok(Some(line)) => Split::Line(Ok(line)),
                Ok(None) if self.ended => {
                    self.done = true;
                    continue;
                }
                Ok(None) => Split::Read,
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    Split::Line(Err(LineError::TooLong(self.max)))
                }
                // Bytes that are not UTF-8: the codec has already taken the line.
                Err(LinesCodecError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                    Split::Line(Err(LineError::NotUtf8))
                }
                Err(LinesCodecError::Io(e)) => {
                    self.done = true;
                    Split::Line(Err(LineError::Io(e)))
                }
            };
        }
        Split::End
    }

    /// Where the next read goes ([`LINE_READ_BYTES`]).
    pub fn space(&mut self) -> &mut [u8] {
        &mut self.chunk
    }

    /// What the read into [`space`](Splitter::space) gave: a count (0 is the input's
    /// end) or its error (an interrupted read is tried again).
    pub fn filled(&mut self, read: std::io::Result<usize>) {
        match read {
            Ok(0) => self.ended = true,
            Ok(n) => self.buf.extend_from_slice(&self.chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => self.failed = Some(e),
        }
    }

    /// Bytes read and not yet handed out as lines or discarded: never more than the
    /// limit plus [`LINE_READ_BYTES`].
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

/// The lines of a blocking input, each at most `max` bytes (without its `\r\n`).
pub struct LineReader<R> {
    input: R,
    split: Splitter,
}

impl<R: Read> LineReader<R> {
    /// Lines of `input`, each at most `max` bytes.
    pub fn new(input: R, max: usize) -> LineReader<R> {
        LineReader { input, split: Splitter::new(max) }
    }

    /// Bytes read and not yet handed out as lines or discarded: never more than the
    /// limit plus [`LINE_READ_BYTES`].
    pub fn buffered(&self) -> usize {
        self.split.buffered()
    }
}

impl<R: Read> Iterator for LineReader<R> {
    type Item = Result<String, LineError>;

    fn next(&mut self) -> Option<Result<String, LineError>> {
        loop {
            match self.split.split() {
                Split::Line(line) => return Some(line),
                Split::End => return None,
                Split::Read => {
                    let read = self.input.read(self.split.space());
                    self.split.filled(read);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line read, or which error came instead (an `io::Error` does not compare).
    #[derive(Debug, PartialEq, Eq)]
    enum Got {
        Line(String),
        TooLong(usize),
        NotUtf8,
        Io,
    }

    fn read(input: &[u8], max: usize) -> Vec<Got> {
        LineReader::new(input, max)
            .map(|l| match l {
                Ok(line) => Got::Line(line),
                Err(LineError::TooLong(n)) => Got::TooLong(n),
                Err(LineError::NotUtf8) => Got::NotUtf8,
                Err(LineError::Io(_)) => Got::Io,
            })
            .collect()
    }

    fn line(text: &str) -> Got {
        Got::Line(text.to_owned())
    }

    /// Lines end at `\n` with an optional `\r`; the last may lack its `\n`; a lone `\r`
    /// at the end is nothing.
    #[test]
    fn splits_lines_and_keeps_an_unended_last_one() {
        let got = read(b"a\r\nb\n\nc\r\rd", 8);
        assert_eq!(got, vec![line("a"), line("b"), line(""), line("c\r\rd")]);
        assert_eq!(read(b"a\n\r", 8), vec![line("a")]);
        assert_eq!(read(b"", 8), vec![]);
    }

    /// A line over the limit is one error and is discarded to its end; the lines around
    /// it are read, and one of exactly the limit is not refused.
    #[test]
    fn refuses_a_line_over_the_limit_once_and_reads_on() {
        let got = read(b"12345\n123456789\nok\n123456789", 5);
        assert_eq!(got, vec![line("12345"), Got::TooLong(5), line("ok"), Got::TooLong(5)]);
    }

    /// A line that is not UTF-8 is one error; reading goes on.
    #[test]
    fn refuses_a_line_that_is_not_utf8_and_reads_on() {
        let got = read(b"\xff\xfe\nok", 8);
        assert_eq!(got, vec![Got::NotUtf8, line("ok")]);
    }

    /// A failed read is one error, named once, and the end of the lines.
    #[test]
    fn a_failed_read_ends_the_lines_and_names_its_cause_once() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("the pipe broke"))
            }
        }
        let mut lines = LineReader::new(Broken, 8);
        let Some(Err(e)) = lines.next() else { panic!("no error") };
        assert_eq!(e.to_string(), "reading lines: the pipe broke");
        assert!(std::error::Error::source(&e).is_none(), "the cause would be named twice");
        assert!(lines.next().is_none());
    }

    /// What is held stays within the limit plus one read, however long the line.
    #[test]
    fn holds_at_most_the_limit_and_one_read() {
        let long = vec![b'x'; 1 << 20];
        let mut lines = LineReader::new(&long[..], 1000);
        assert!(matches!(lines.next(), Some(Err(LineError::TooLong(1000)))));
        assert!(lines.buffered() <= 1000 + LINE_READ_BYTES, "{}", lines.buffered());
        assert!(lines.next().is_none());
    }
}
