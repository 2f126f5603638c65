//! Against a hostile server on a real socket: every probe of it ends by a deadline and
//! reads a bounded body. (A stand-in server: what it does, no real llama-server does.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use bx_infer::{ChatRequest, Client, InferConfig, InferError, Message, RetryPolicy};

/// How the stand-in answers a request, by its request line.
#[derive(Clone, Copy)]
enum Answer {
    /// Headers, then a body that never ends.
    Endless(u16),
    /// Nothing at all, the connection held open.
    Silent,
    /// `/props` as llama-server gives it, with one slot.
    Props,
}

/// Serves every connection on its own thread with `answer(request line)`.
fn serve(answer: fn(&str) -> Answer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer_one(stream, answer));
        }
    });
    url
}

/// One request per connection: each answer says `connection: close`, or the client
/// could send its next request on a connection this has just dropped (it failed the chat
/// request as unreachable, now and then, under load).
fn answer_one(stream: TcpStream, answer: fn(&str) -> Answer) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let _ = reader.by_ref().take(length as u64).read_to_end(&mut Vec::new());
    let mut out = stream;
    match answer(&line) {
        Answer::Silent => std::thread::sleep(Duration::from_secs(60)),
        Answer::Props => {
            let body = r#"{"total_slots":1,"chat_template_caps":{}}"#;
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        }
        Answer::Endless(status) => {
            let _ = write!(
                out,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
            );
            let block = vec![b'a'; 64 << 10];
            while out.write_all(&block).is_ok() {}
        }
    }
}

/// One chat request ("hi") through a client of `cfg`, failing with `stuck` past 40 s.
async fn chat_once(cfg: InferConfig, stuck: &str) -> Result<bx_infer::Completion, InferError> {
    let client = Client::connect(cfg).await.unwrap();
    let req = ChatRequest {
        messages: vec![Message::User { content: "hi".into() }],
        ..ChatRequest::default()
    };
    tokio::time::timeout(Duration::from_secs(40), client.chat("s", &req, |_| {}))
        .await
        .expect(stuck)
}

fn config(url: &str) -> InferConfig {
    let mut cfg = InferConfig::new(url);
    cfg.connect_window = Duration::from_millis(200);
    cfg.retry = RetryPolicy { attempts: 1, ..RetryPolicy::default() };
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_props_body_is_refused_at_its_bound() {
    let url = serve(|_| Answer::Endless(200));
    let outcome = tokio::time::timeout(Duration::from_secs(60), Client::connect(config(&url)))
        .await
        .expect("connect read an endless body for a minute");
    let Err(InferError::Unreachable { last, .. }) = outcome else {
        panic!("{:?}", outcome.map(|_| ()))
    };
    assert!(last.contains("over 4194304 bytes"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_props_ends_connect_by_its_deadline() {
    let url = serve(|_| Answer::Silent);
    let outcome = tokio::time::timeout(Duration::from_secs(40), Client::connect(config(&url)))
        .await
        .expect("connect waited for an answer with no deadline");
    assert!(matches!(outcome, Err(InferError::Unreachable { .. })), "{:?}", outcome.map(|_| ()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_error_body_is_cut_and_the_request_ends() {
    // /props and /health answer; the chat request gets a 500 whose body never ends.
    let url =
        serve(|line| if line.starts_with("POST") { Answer::Endless(500) } else { Answer::Props });
    let outcome = chat_once(config(&url), "an error body was read for ever").await;
    let Err(InferError::Http { status, body }) = outcome else {
        panic!("{:?}", outcome.map(|_| ()))
    };
    assert_eq!(status, 500);
    assert!(!body.is_empty() && body.chars().count() <= 1024, "{} chars", body.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_request_that_gets_no_answer_ends_by_the_idle_wait() {
    // /props and /health answer; the chat request is accepted and never answered.
    let url = serve(|line| if line.starts_with("POST") { Answer::Silent } else { Answer::Props });
    let mut cfg = config(&url);
    cfg.idle_timeout = Duration::from_secs(2);
    let outcome =
        chat_once(cfg, "a chat request waited for its answer's head with no deadline").await;
    assert!(matches!(outcome, Err(InferError::IdleTimeout(_))), "{:?}", outcome.map(|_| ()));
}
