//! A connection's incoming frames, read with the protocol's one codec, and the deadline
//! of a frame already begun: it must arrive whole within a bound of its first byte. The
//! wait for a first byte is not bounded here; the connection bounds that (its idle
//! wait), and only while nothing runs.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bx_protocol::{Envelope, FrameCodec, FrameError};
use futures_util::StreamExt as _;
use tokio::io::AsyncRead;
use tokio::time::Sleep;
use tokio_util::codec::FramedRead;

/// Frames from one client.
pub(crate) struct Frames<R> {
    frames: FramedRead<R, FrameCodec>,
    /// How long a frame may take from its first byte.
    within: Duration,
    /// Runs from when the first bytes of a frame not yet whole were seen.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<R: AsyncRead + Unpin> Frames<R> {
    pub(crate) fn new(read: R, within: Duration) -> Frames<R> {
        Frames { frames: FramedRead::new(read, FrameCodec), within, deadline: None }
    }

    /// The next frame; `None` at a clean end of stream between frames. An error ends
    /// the stream (it cannot be resynchronised). Cancel-safe: the bytes of a frame begun
    /// stay buffered, and its deadline keeps running, while the caller waits on other
    /// things.
    pub(crate) async fn next(&mut self) -> Option<Result<Envelope, FrameError>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Envelope, FrameError>>> {
        if let Poll::Ready(frame) = self.frames.poll_next_unpin(cx) {
            // The next frame's clock starts when its bytes are next found waiting
            // (bytes that came with this one: now).
            self.deadline = None;
            return Poll::Ready(frame);
        }
        if self.frames.read_buffer().is_empty() {
            return Poll::Pending;
        }
        let within = self.within;
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(within)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Poll::Ready(Some(Err(FrameError::TooSlow { secs: within.as_secs() })))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bx_protocol::{Body, VERSION};
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    fn frame(id: u64) -> Vec<u8> {
        bx_protocol::encode(&Envelope { v: VERSION, id, msg: Body::ListTools {} }).unwrap()
    }

    /// A frame begun and left unfinished is refused at its deadline, counted from its
    /// first byte; waiting between frames has no such deadline.
    #[tokio::test]
    async fn a_frame_begun_must_arrive_whole_within_its_deadline() {
        let within = Duration::from_secs(1);
        let (mut client, server) = tokio::net::UnixStream::pair().unwrap();
        let mut frames = Frames::new(server, within);
        // Quiet for longer than the deadline between frames: no error.
        let quiet = tokio::time::timeout(within * 2, frames.next()).await;
        assert!(quiet.is_err(), "{quiet:?}");
        client.write_all(&frame(1)).await.unwrap();
        assert_eq!(frames.next().await.unwrap().unwrap().id, 1);
        // Half a frame, then nothing.
        let second = frame(2);
        client.write_all(&second[..5]).await.unwrap();
        let started = Instant::now();
        let got = frames.next().await;
        assert!(matches!(got, Some(Err(FrameError::TooSlow { secs: 1 }))), "{got:?}");
        assert!(started.elapsed() >= within, "refused after {:?}", started.elapsed());
    }

    /// The deadline survives the caller's waits on other things (a `select!` that goes
    /// round for a finished turn): going round does not restart it.
    #[tokio::test]
    async fn waiting_on_other_things_does_not_restart_a_frames_deadline() {
        let within = Duration::from_secs(1);
        let (mut client, server) = tokio::net::UnixStream::pair().unwrap();
        let mut frames = Frames::new(server, within);
        client.write_all(&frame(1)[..3]).await.unwrap();
        let started = Instant::now();
        let got = loop {
            tokio::select! {
                f = frames.next() => break f,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        };
        assert!(matches!(got, Some(Err(FrameError::TooSlow { .. }))), "{got:?}");
        assert!(started.elapsed() < within * 2, "took {:?}", started.elapsed());
    }

    /// A frame that arrives slowly, but whole within the deadline, is read; the end of
    /// the stream between frames is `None`, and inside one an error.
    #[tokio::test]
    async fn a_slow_whole_frame_is_read_and_a_cut_one_is_refused() {
        let (mut client, server) = tokio::net::UnixStream::pair().unwrap();
        let mut frames = Frames::new(server, Duration::from_secs(5));
        let writer = tokio::spawn(async move {
            for piece in frame(7).chunks(4) {
                client.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            client.write_all(&frame(8)[..6]).await.unwrap();
        });
        assert_eq!(frames.next().await.unwrap().unwrap().id, 7);
        let got = frames.next().await;
        assert!(matches!(got, Some(Err(FrameError::Truncated { .. }))), "{got:?}");
        writer.await.unwrap();
        let (client, server) = tokio::net::UnixStream::pair().unwrap();
        drop(client);
        assert!(Frames::new(server, Duration::from_secs(5)).next().await.is_none());
    }
}
