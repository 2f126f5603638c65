//! The stdio transport of `bx mcp`: newline-delimited JSON-RPC, one message per line,
//! as the MCP specification frames it, with an answer for every line that is not a
//! message. rmcp's own stdio transport drops a line that is not JSON and a line over
//! its limit without a word (rust-sdk#938 chose that, fearing an error storm with a peer
//! that answers errors with garbage); a client then waits for a reply that never comes.
//! Here each such line gets one JSON-RPC error, without an `id` when none can be read
//! (as MCP says; JSON-RPC 2.0 would have `null`), so the exchange is one answer per bad
//! line and never grows.
//!
//! Both ends are tasks on the bridge's one thread: one reads stdin, splits lines
//! ([`bx_protocol::lines::Splitter`], tokio-util's `LinesCodec`, bounded; fuzzed as
//! `bx-fuzz mcp_lines`), parses them and hands messages to the service; one writes
//! what the service sends to stdout. A stdin or stdout that is a pipe or a socket (what
//! a client that starts `bx mcp` gives it) is made non-blocking and polled with the
//! daemon's connection, so a message crosses no thread on its way in or out. Two
//! threads with blocking reads and writes cost a hand-off each way per message, and
//! tokio's own stdin and stdout pass every read and write through its blocking pool.
//! A terminal or a file is relayed through a pipe by a thread of its own.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt as _;

use bx_protocol::lines::{LineError, Split, Splitter};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::{ErrorData, RoleServer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

/// The longest line read (8 MiB). A tool call's arguments go to the daemon in one frame
/// of at most 4 MiB, so a longer request could not be carried anyway; past the limit
/// the line is discarded as it arrives, never held.
pub(crate) const MAX_LINE_BYTES: usize = 8 << 20;
/// Messages parsed but not yet taken by the service, and replies not yet written.
/// When either is full the reader stops reading: a client that sends without reading
/// what comes back is slowed, not buffered without end.
const QUEUE: usize = 32;
/// Requests read but not yet answered. Past it the reader waits for an answer to go
/// out before it reads on: each request is a task in the service (and a call may wait
/// for the owner), so a client that sent without reading grew `bx mcp` to gigabytes.
pub(crate) const MAX_PENDING: usize = 64;

/// The requests read and not yet answered, by id.
#[derive(Default)]
struct Pending {
    ids: parking_lot::Mutex<std::collections::HashSet<RequestId>>,
    answered: tokio::sync::Notify,
}

impl Pending {
    fn lock(&self) -> parking_lot::MutexGuard<'_, std::collections::HashSet<RequestId>> {
        self.ids.lock()
    }

    /// Waits until fewer than [`MAX_PENDING`] requests are open, then counts `id` in.
    async fn admit(&self, id: RequestId, to_service: &mpsc::Sender<ClientJsonRpcMessage>) -> Admit {
        loop {
            // Listening before the check: an answer between the two is not missed.
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            {
                let mut ids = self.lock();
                if ids.contains(&id) {
                    return Admit::Taken(id);
                }
                if ids.len() < MAX_PENDING {
                    ids.insert(id);
                    return Admit::In;
                }
            }
            tokio::select! {
                () = answered => {}
                () = to_service.closed() => return Admit::Gone,
            }
        }
    }

    /// Whether message `m` goes on to the service: a request once it has its place
    /// ([`Pending::admit`]); a cancel frees the place of the request it names.
    async fn enter(
        &self,
        m: &ClientJsonRpcMessage,
        to_service: &mpsc::Sender<ClientJsonRpcMessage>,
    ) -> Admit {
        match m {
            ClientJsonRpcMessage::Request(r) => self.admit(r.id.clone(), to_service).await,
            ClientJsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.done(id);
                }
                Admit::In
            }
            _ => Admit::In,
        }
    }

    /// `id` is answered (or cancelled: then no answer comes).
    fn done(&self, id: &RequestId) {
        if self.lock().remove(id) {
            self.answered.notify_waiters();
        }
    }
}

/// A message for stdout.
struct Out {
    message: ServerJsonRpcMessage,
    /// It comes from the service, so a response or an error with an id answers that open
    /// request. The reader's own answers to lines it did not pass on (a bad line, an id
    /// still open) answer nothing that is open, even when they carry an open id.
    answers: bool,
}

/// Whether a message goes on to the service.
enum Admit {
    In,
    /// A request with this id is still open: the service would answer only one of the
    /// two, so this one is answered with an error here.
    Taken(RequestId),
    /// The service is gone: nobody will answer any more.
    Gone,
}

/// The service's end of the transport.
pub(crate) struct Lines {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    outgoing: Option<mpsc::Sender<Out>>,
    /// Fires when the writer stops (stdout closed): then serving ends, even while
    /// stdin stays open.
    stdout_gone: oneshot::Receiver<()>,
}

/// What one line is.
#[derive(Debug)]
enum Line {
    Message(Box<ClientJsonRpcMessage>),
    /// Not a message; this is the answer.
    Error(Box<ServerJsonRpcMessage>),
    /// Nothing to answer: an empty line, or a notification bx cannot read (notifications
    /// never get an answer).
    Nothing,
}

impl Lines {
    /// Starts reading stdin and writing stdout, as tasks of the current runtime. The
    /// returned receiver yields once everything sent before the transport closed has been
    /// written out (or writing has failed): await it, bounded, before the process exits.
    pub(crate) fn stdio() -> std::io::Result<(Lines, oneshot::Receiver<()>)> {
        let (to_service, incoming) = mpsc::channel(QUEUE);
        let (outgoing, to_write) = mpsc::channel(QUEUE);
        let pending = std::sync::Arc::new(Pending::default());
        let (gone, stdout_gone) = oneshot::channel();
        let (written, done) = oneshot::channel();
        let input = reader(std::io::stdin().as_fd())?;
        let (output, written) = writer(std::io::stdout().as_fd(), written)?;
        // The reader's handle on the writer is weak: once the service lets go of its
        // end, the writer finishes even while the reader still waits on stdin.
        let replies = outgoing.downgrade();
        let read_pending = std::sync::Arc::clone(&pending);
        tokio::spawn(async move {
            read_lines(input, &to_service, &replies, &read_pending).await;
        });
        tokio::spawn(async move {
            write_lines(output, to_write, &pending).await;
            let _ = gone.send(());
            // With a relay, it says so once it has passed everything on.
            if let Some(written) = written {
                let _ = written.send(());
            }
        });
        Ok((Lines { incoming, outgoing: Some(outgoing), stdout_gone }, done))
    }
}

/// Input that is read without a thread.
type Input = Box<dyn AsyncRead + Unpin + Send>;
/// Output that is written without a thread.
type Output = Box<dyn AsyncWrite + Unpin + Send>;

/// What `fd` is, as a file of its own (a duplicate: `fd` stays open).
fn own(fd: BorrowedFd<'_>) -> std::io::Result<(std::fs::File, std::fs::FileType)> {
    let file = std::fs::File::from(fd.try_clone_to_owned()?);
    let kind = file.metadata()?.file_type();
    Ok((file, kind))
}

/// A socket, non-blocking, for the runtime to poll.
fn socket(file: std::fs::File) -> std::io::Result<tokio::net::UnixStream> {
    let socket = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
    socket.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(socket)
}

/// Stdin as the runtime reads it: the pipe or socket itself, else a pipe that a thread
/// fills from it.
fn reader(fd: BorrowedFd<'_>) -> std::io::Result<Input> {
    let (mut file, kind) = own(fd)?;
    if kind.is_fifo() {
        return Ok(Box::new(pipe::Receiver::from_file(file)?));
    }
    if kind.is_socket() {
        return Ok(Box::new(socket(file)?));
    }
    let (relayed, mut into) = std::io::pipe()?;
    std::thread::Builder::new().name("mcp-stdin".into()).spawn(move || {
        // Ends at the input's end, or once the reader is gone.
        let _ = std::io::copy(&mut file, &mut into);
    })?;
    Ok(Box::new(pipe::Receiver::from_owned_fd(OwnedFd::from(relayed))?))
}

/// Stdout as the runtime writes it: the pipe or socket itself, else a pipe that a thread
/// empties into it. With a relay, `written` goes to the thread, which sends it once it
/// has passed on everything; otherwise it is handed back, for the writer to send.
fn writer(
    fd: BorrowedFd<'_>,
    written: oneshot::Sender<()>,
) -> std::io::Result<(Output, Option<oneshot::Sender<()>>)> {
    let (mut file, kind) = own(fd)?;
    if kind.is_fifo() {
        return Ok((Box::new(pipe::Sender::from_file(file)?), Some(written)));
    }
    if kind.is_socket() {
        return Ok((Box::new(socket(file)?), Some(written)));
    }
    let (mut relayed, from) = std::io::pipe()?;
    let sender = pipe::Sender::from_owned_fd(OwnedFd::from(from))?;
    std::thread::Builder::new().name("mcp-stdout".into()).spawn(move || {
        // Ends once the writer has closed its end and all is passed on, or stdout fails
        // (the writer's next write then fails too, and serving ends).
        let _ = std::io::copy(&mut relayed, &mut file);
        let _ = written.send(());
    })?;
    Ok((Box::new(sender), None))
}

impl rmcp::transport::Transport<RoleServer> for Lines {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let outgoing = self.outgoing.clone();
        async move {
            let Some(outgoing) = outgoing else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the transport is closed",
                ));
            };
            outgoing.send(Out { message: item, answers: true }).await.map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed")
            })
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        tokio::select! {
            m = self.incoming.recv() => m,
            _ = &mut self.stdout_gone => None,
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.outgoing = None;
        self.incoming.close();
        Ok(())
    }
}

/// Reads lines until the input ends, the service is gone, or the writer is.
async fn read_lines(
    mut input: impl AsyncRead + Unpin,
    to_service: &mpsc::Sender<ClientJsonRpcMessage>,
    replies: &mpsc::WeakSender<Out>,
    pending: &Pending,
) {
    let mut split = Splitter::new(MAX_LINE_BYTES);
    loop {
        let line = match split.split() {
            Split::Line(line) => line,
            Split::Read => {
                let read = input.read(split.space()).await;
                split.filled(read);
                continue;
            }
            Split::End => return,
        };
        let line = match line {
            Ok(text) => classify(&text),
            Err(LineError::TooLong(_)) => error(
                ErrorData::invalid_request(
                    format!(
                        "a line over {MAX_LINE_BYTES} bytes is not read (bx mcp's limit); it was discarded"
                    ),
                    None,
                ),
                None,
            ),
            Err(LineError::NotUtf8) => parse_error("the line is not UTF-8"),
            // The input failed: nothing more comes.
            Err(_) => return,
        };
        let sent = match line {
            Line::Message(m) => match pending.enter(&m, to_service).await {
                Admit::In => to_service.send(*m).await.is_ok(),
                Admit::Taken(id) => {
                    let why = "a request with this id is still open (JSON-RPC ids are unique among open requests)";
                    answer(
                        replies,
                        ServerJsonRpcMessage::error(
                            ErrorData::invalid_request(why, None),
                            Some(id),
                        ),
                    )
                    .await
                }
                Admit::Gone => false,
            },
            Line::Error(reply) => answer(replies, *reply).await,
            Line::Nothing => true,
        };
        if !sent {
            return;
        }
    }
}

/// Sends the reader's own answer to a line it did not pass on; false once the writer
/// is gone. It answers no open request, even one with its id ([`Out::answers`]).
async fn answer(replies: &mpsc::WeakSender<Out>, message: ServerJsonRpcMessage) -> bool {
    match replies.upgrade() {
        Some(out) => out.send(Out { message, answers: false }).await.is_ok(),
        None => false,
    }
}

/// Writes each message as one line, flushing when nothing more is waiting.
async fn write_lines(
    mut out: impl AsyncWrite + Unpin,
    mut to_write: mpsc::Receiver<Out>,
    pending: &Pending,
) {
    let mut line = Vec::new();
    while let Some(Out { message, answers }) = to_write.recv().await {
        match &message {
            ServerJsonRpcMessage::Response(r) if answers => pending.done(&r.id),
            ServerJsonRpcMessage::Error(e) if answers => {
                if let Some(id) = &e.id {
                    pending.done(id);
                }
            }
            _ => {}
        }
        line.clear();
        if serde_json::to_writer(&mut line, &message).is_err() {
            continue;
        }
        line.push(b'\n');
        if out.write_all(&line).await.is_err()
            || (to_write.is_empty() && out.flush().await.is_err())
        {
            return;
        }
    }
    let _ = out.flush().await;
}

fn error(e: ErrorData, id: Option<RequestId>) -> Line {
    Line::Error(Box::new(ServerJsonRpcMessage::error(e, id)))
}

fn parse_error(why: &str) -> Line {
    error(ErrorData::new(ErrorCode::PARSE_ERROR, format!("parse error: {why}"), None), None)
}

/// The methods bx serves. rmcp reads a request to one of them whose params do not fit as
/// a custom request, which would then be answered "method not found".
const SERVED: &[&str] = &["initialize", "ping", "tools/list", "tools/call"];

fn classify(text: &str) -> Line {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text).trim();
    if text.is_empty() {
        return Line::Nothing;
    }
    let e = match serde_json::from_str::<ClientJsonRpcMessage>(text) {
        Ok(ClientJsonRpcMessage::Request(r)) => {
            if let ClientRequest::CustomRequest(c) = &r.request
                && SERVED.contains(&c.method.as_str())
            {
                let why = format!("the params of {} do not have the form MCP gives them", c.method);
                return error(ErrorData::invalid_params(why, None), Some(r.id));
            }
            return Line::Message(Box::new(ClientJsonRpcMessage::Request(r)));
        }
        Ok(m) => return Line::Message(Box::new(m)),
        Err(e) => e,
    };
    if e.is_syntax() || e.is_eof() {
        return parse_error(&e.to_string());
    }
    // JSON, but not a message: answer with its id if it has one a request could have.
    let value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let id = match value.get("id") {
        Some(serde_json::Value::Number(n)) => n.as_i64().map(RequestId::Number),
        Some(serde_json::Value::String(s)) => Some(RequestId::String(s.as_str().into())),
        _ => None,
    };
    let method = value.get("method").and_then(serde_json::Value::as_str);
    // A notification (a method, no id at all) is never answered, even one bx cannot
    // read; a request whose id is not a string or an integer is answered without one.
    if value.get("id").is_none() && method.is_some() {
        return Line::Nothing;
    }
    if let (Some(id), Some(method)) = (&id, method)
        && SERVED.contains(&method)
    {
        let why = format!("the params of {method} do not have the form MCP gives them: {e}");
        return error(ErrorData::invalid_params(why, None), Some(id.clone()));
    }
    error(ErrorData::invalid_request(format!("not a JSON-RPC message: {e}"), None), id)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// One thread's runtime, as `bx mcp` has.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    fn lines(input: &[u8]) -> (Vec<ClientJsonRpcMessage>, Vec<serde_json::Value>) {
        let (to_service, mut incoming) = mpsc::channel(1024);
        let (replies, mut to_write) = mpsc::channel(1024);
        runtime().block_on(read_lines(
            input,
            &to_service,
            &replies.downgrade(),
            &Pending::default(),
        ));
        drop((to_service, replies));
        let mut messages = Vec::new();
        while let Ok(m) = incoming.try_recv() {
            messages.push(m);
        }
        let mut errors = Vec::new();
        while let Ok(m) = to_write.try_recv() {
            errors.push(serde_json::to_value(&m.message).unwrap());
        }
        (messages, errors)
    }

    #[test]
    fn every_line_that_is_not_a_message_gets_one_error_and_reading_goes_on() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"ping","pad":"{}"}}"#,
            "x".repeat(MAX_LINE_BYTES)
        );
        let input = [
            "{not json",
            "",
            r#"{"jsonrpc":"2.0","id":"q"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fs.read","arguments":[1,2]}}"#,
            &big,
            r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":7}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r",
        ]
        .join("\n");
        let mut bytes = input.into_bytes();
        bytes.extend_from_slice(b"\n\xff\xfe\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
        let (messages, errors) = lines(&bytes);
        let codes: Vec<_> =
            errors.iter().map(|e| (e.get("id").cloned(), e["error"]["code"].clone())).collect();
        assert_eq!(
            codes,
            [
                (None, (-32700).into()),
                (Some("q".into()), (-32600).into()),
                (Some(3.into()), (-32602).into()),
                (None, (-32600).into()),
                (None, (-32700).into()),
            ],
            "{errors:#?}"
        );
        assert!(errors[3]["error"]["message"].as_str().unwrap().contains("8388608 bytes"));
        // The two pings, the last without its newline at the end of the input.
        assert_eq!(messages.len(), 2, "{messages:?}");
    }

    #[test]
    fn a_request_with_an_id_bx_cannot_use_is_answered_and_a_bad_notification_is_not() {
        let input = [
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":5}"#,
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":5}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#,
        ]
        .join("\n");
        let (messages, errors) = lines(input.as_bytes());
        let got: Vec<_> =
            errors.iter().map(|e| (e.get("id").cloned(), e["error"]["code"].clone())).collect();
        let none = None;
        assert_eq!(
            got,
            [
                (none.clone(), (-32600).into()),
                (none.clone(), (-32600).into()),
                (none.clone(), (-32600).into()),
                (none, (-32600).into()),
                (Some(11.into()), (-32602).into()),
            ],
            "{errors:#?}"
        );
        assert!(messages.is_empty(), "{messages:?}");
    }

    /// A request whose id is still open is answered with an error, not passed on: the
    /// service would answer one of the two and drop the other without a word. Neither
    /// that answer nor a bad line's with the open id lets the open request go (it would
    /// free its place past the bound). Once the first is answered, the id may be used
    /// again.
    #[test]
    fn a_request_reusing_an_open_id_is_answered_with_an_error() {
        let (to_service, mut incoming) = mpsc::channel(1024);
        let (replies, mut to_write) = mpsc::channel(1024);
        let pending = Pending::default();
        let bad = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":5}\n";
        let input = format!("{}{}{bad}{}", ping(5), ping(5), ping(6));
        runtime().block_on(read_lines(
            input.as_bytes(),
            &to_service,
            &replies.downgrade(),
            &pending,
        ));
        assert_eq!(id_of(&incoming.try_recv().unwrap()), RequestId::Number(5));
        assert_eq!(id_of(&incoming.try_recv().unwrap()), RequestId::Number(6));
        assert!(incoming.try_recv().is_err());
        let taken = to_write.try_recv().unwrap();
        let value = serde_json::to_value(&taken.message).unwrap();
        assert_eq!((&value["id"], &value["error"]["code"]), (&json!(5), &json!(-32600)));
        let bad = to_write.try_recv().unwrap();
        let value = serde_json::to_value(&bad.message).unwrap();
        assert_eq!((&value["id"], &value["error"]["code"]), (&json!(5), &json!(-32602)));
        // Written out, those errors answer nothing: request 5 is still open.
        let (out, to_write) = mpsc::channel(2);
        out.try_send(taken).unwrap();
        out.try_send(bad).unwrap();
        drop(out);
        let mut written = Vec::new();
        runtime().block_on(write_lines(&mut written, to_write, &pending));
        assert_eq!(String::from_utf8(written).unwrap().lines().count(), 2);
        assert!(pending.lock().contains(&RequestId::Number(5)), "the open request was let go");
        pending.done(&RequestId::Number(5));
        runtime().block_on(read_lines(
            ping(5).as_bytes(),
            &to_service,
            &replies.downgrade(),
            &pending,
        ));
        assert_eq!(id_of(&incoming.try_recv().unwrap()), RequestId::Number(5));
    }

    fn ping(id: u64) -> String {
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n")
    }

    fn id_of(m: &ClientJsonRpcMessage) -> RequestId {
        match m {
            ClientJsonRpcMessage::Request(r) => r.id.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// A client that sends requests and never reads the answers gets [`MAX_PENDING`]
    /// of them read; the next is read once one is answered (or cancelled), and the
    /// reader ends when the service is gone.
    #[test]
    fn requests_past_the_pending_bound_wait_for_an_answer_or_a_cancel() {
        let mut input = String::new();
        for id in 1..=MAX_PENDING as u64 {
            input.push_str(&ping(id));
        }
        input.push_str(
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}\n",
        );
        for id in 100..110 {
            input.push_str(&ping(id));
        }
        let (to_service, mut incoming) = mpsc::channel(1024);
        let (replies, _to_write) = mpsc::channel(1024);
        let pending = std::sync::Arc::new(Pending::default());
        let reading = {
            let pending = std::sync::Arc::clone(&pending);
            std::thread::spawn(move || {
                let replies = replies.downgrade();
                runtime().block_on(read_lines(input.as_bytes(), &to_service, &replies, &pending));
            })
        };
        for id in 1..=MAX_PENDING as i64 {
            let m = incoming.blocking_recv().unwrap();
            assert_eq!(id_of(&m), RequestId::Number(id));
        }
        // The cancel frees one place: request 100 is read without any answer.
        assert!(matches!(incoming.blocking_recv(), Some(ClientJsonRpcMessage::Notification(_))));
        assert_eq!(id_of(&incoming.blocking_recv().unwrap()), RequestId::Number(100));
        // Now MAX_PENDING are open again; 101 waits for an answer, which frees it.
        assert!(incoming.try_recv().is_err(), "read past the bound");
        assert_eq!(pending.lock().len(), MAX_PENDING);
        pending.done(&RequestId::Number(2));
        assert_eq!(id_of(&incoming.blocking_recv().unwrap()), RequestId::Number(101));
        drop(incoming);
        reading.join().unwrap();
    }
}
