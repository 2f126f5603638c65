//! Against a real llama-server: streaming, cache reuse, constrained tool calls, the slot
//! gate under load, a server killed mid-stream, a server that starts late, one that never
//! comes, and the thinking cap on a real reasoning stream.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bx_infer::{
    ChatRequest, Client, EndThinking, InferConfig, InferError, Message, RetryPolicy, StreamEvent,
    ToolChoice, ToolDef, ToolMode,
};
use serde_json::json;

use super::*;

fn user(text: &str) -> Message {
    Message::User { content: text.into() }
}

fn request(messages: Vec<Message>, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        messages,
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        seed: Some(1),
        ..ChatRequest::default()
    }
}

async fn client(server: &Server) -> Client {
    Client::connect(InferConfig::new(&server.url())).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_prompt_streams_its_progress_before_the_first_token() {
    // The server reads a prompt in batches of 512 tokens (llama_server.py) and, asked
    // for it, says how far it got after each: the idle wait sees events while a slow
    // CPU reads a long prompt, where it saw silence.
    let server = Server::start(1);
    let c = client(&server).await;
    let long = "The owner keeps notes in plain text files. ".repeat(150);
    let mut progress: Vec<(u64, u64)> = Vec::new();
    let mut content_before_progress_ended = false;
    c.chat("p", &request(vec![user(&format!("{long}\nSay hi."))], 4), |e| match e {
        StreamEvent::PromptProgress { processed, total } => progress.push((*processed, *total)),
        StreamEvent::Content(_) => {
            content_before_progress_ended |= progress.last().is_none_or(|(p, t)| p < t);
        }
        _ => {}
    })
    .await
    .unwrap();
    let total = progress.last().map(|(_, t)| *t).unwrap_or(0);
    assert!(total > 1024, "a prompt of over 1,024 tokens: {progress:?}");
    assert!(progress.len() >= 3, "an event per batch of 512: {progress:?}");
    assert!(progress.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 == w[1].1), "{progress:?}");
    assert_eq!(progress.last().unwrap().0, total, "the whole prompt read: {progress:?}");
    assert!(!content_before_progress_ended, "text came before the prompt was read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_tokens_as_they_arrive_and_reuses_the_prompt_cache() {
    let server = Server::start(2);
    let c = client(&server).await;
    let first = request(
        vec![
            Message::System { content: "You are terse.".into() },
            user("Count from one to ten in words."),
        ],
        24,
    );
    let mut arrivals: Vec<(Instant, String)> = Vec::new();
    let done = c
        .chat("s1", &first, |e| {
            if let StreamEvent::Content(t) = e {
                arrivals.push((Instant::now(), t.clone()));
            }
        })
        .await
        .unwrap();
    let returned = Instant::now();
    assert!(arrivals.len() >= 3, "only {} content events", arrivals.len());
    assert_eq!(arrivals.iter().map(|(_, t)| t.as_str()).collect::<String>(), done.content);
    // Tokens reached us while the model was still generating, not all at the end.
    let spread = arrivals.last().unwrap().0 - arrivals[0].0;
    assert!(spread > Duration::from_millis(5) && arrivals[0].0 < returned, "spread {spread:?}");
    let t1 = done.timings.expect("timings");

    // The next turn on the same session reuses the first turn's prompt from the slot.
    let mut messages = first.messages.clone();
    messages.push(Message::Assistant { content: done.content.clone(), tool_calls: vec![] });
    messages.push(user("Now from eleven to fifteen."));
    let second = c.chat("s1", &request(messages, 8), |_| {}).await.unwrap();
    let t2 = second.timings.expect("timings");
    assert!(
        t2.cache_n >= t1.prompt_n + t1.cache_n,
        "cache_n {} after a first prompt of {}",
        t2.cache_n,
        t1.prompt_n + t1.cache_n
    );
}

fn read_tool() -> ToolDef {
    ToolDef {
        name: "read_file".into(),
        description: "Read a file".into(),
        // A length bound keeps the tiny model's string from running on to the token limit;
        // the schema then guarantees the shape of the call, not the sense of the path.
        parameters: json!({"type": "object", "properties": {"path": {"type": "string", "maxLength": 32}}, "required": ["path"], "additionalProperties": false}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constrained_mode_gets_a_real_tool_call_shaped_like_a_native_one() {
    let server = Server::start(2);
    let mut cfg = InferConfig::new(&server.url());
    cfg.mode = ToolMode::Constrained;
    let c = Client::connect(cfg).await.unwrap();
    let req = ChatRequest {
        tools: vec![read_tool()],
        tool_choice: Some(ToolChoice::Required),
        ..request(
            vec![
                Message::System { content: "You call tools. Reply with JSON.".into() },
                user("Read the file notes.txt"),
            ],
            128,
        )
    };
    let got = c.chat("t", &req, |_| {}).await.unwrap();
    assert_eq!(got.tool_calls.len(), 1, "{got:?}");
    let call = &got.tool_calls[0];
    assert_eq!(call.name, "read_file");
    assert!(call.arguments["path"].is_string(), "{call:?}");
    assert_eq!(got.finish, bx_infer::FinishReason::ToolCalls);

    // The same call arriving natively assembles to the same value.
    let native = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        json!({"choices":[{"index":0,"finish_reason":null,"delta":{"tool_calls":[{"index":0,"id":"call_0","function":{"name":"read_file","arguments":call.arguments.to_string()}}]}}]}),
        json!({"choices":[{"index":0,"finish_reason":"tool_calls","delta":{}}]})
    );
    let parsed = bx_infer::parse_sse_bytes(native.as_bytes()).unwrap();
    assert_eq!(&parsed.tool_calls, &got.tool_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_sessions_on_two_slots_never_share_a_slot() {
    let server = Server::start(2);
    let c = client(&server).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let req = request(vec![user(&format!("Say the number {i}."))], 12);
            c.chat(&format!("session-{i}"), &req, |_| {}).await
        }));
    }
    let mut waited = 0;
    for t in tasks {
        // Six of eight must queue for one of the two slots, each for at least a whole
        // generation of another session (many milliseconds); each says how long.
        if t.await.unwrap().unwrap().slot_wait > Duration::from_millis(10) {
            waited += 1;
        }
    }
    assert!(waited >= 6, "only {waited} of 8 requests report waiting for a slot");
    assert_eq!(c.gate().load(), (0, 0));
    // Every launch line was written before its reply; a release line still unwritten
    // cannot hide an overlap, since no launch follows it.
    let launched = check_one_task_per_slot(&server.log_text()).unwrap();
    assert!(launched >= 8, "the log shows {launched} launches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_stream_is_truncated_within_a_second() {
    let server = Arc::new(Mutex::new(Server::start(1)));
    let url = server.lock().unwrap().url();
    let c = Client::connect(InferConfig::new(&url)).await.unwrap();
    let req = request(vec![user("Write a very long story about a lighthouse keeper.")], 400);
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (k, s) = (Arc::clone(&killed_at), Arc::clone(&server));
    let result = c
        .chat("k", &req, move |e| {
            if matches!(e, StreamEvent::Content(_)) && k.lock().unwrap().is_none() {
                s.lock().unwrap().kill();
                *k.lock().unwrap() = Some(Instant::now());
            }
        })
        .await;
    let ended = Instant::now();
    let killed = killed_at.lock().unwrap().expect("no token arrived before the kill");
    assert!(matches!(result, Err(InferError::Truncated(_))), "{result:?}");
    assert!(ended - killed < Duration::from_secs(1), "took {:?} to notice", ended - killed);
    assert_eq!(c.gate().load(), (0, 0), "the slot was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_late_is_reached_by_the_retry() {
    let port = free_port();
    let mut cfg = InferConfig::new(&format!("http://127.0.0.1:{port}"));
    cfg.retry = RetryPolicy {
        window: Duration::from_secs(120),
        attempts: 1000,
        base: Duration::from_millis(50),
        max: Duration::from_millis(500),
    };
    let connecting = tokio::spawn(Client::connect(cfg));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!connecting.is_finished(), "connect gave up before the server came");
    let _server = Server::spawn(port, 1);
    let c = connecting.await.unwrap().unwrap();
    let got = c.chat("late", &request(vec![user("Hi")], 4), |_| {}).await.unwrap();
    assert!(got.usage.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_comes_is_a_clear_error_when_the_budget_ends() {
    let port = free_port();
    let mut cfg = InferConfig::new(&format!("http://127.0.0.1:{port}"));
    cfg.retry = RetryPolicy {
        window: Duration::from_secs(2),
        attempts: 5,
        base: Duration::from_millis(50),
        max: Duration::from_millis(400),
    };
    let started = Instant::now();
    let err = Client::connect(cfg).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    match &err {
        InferError::Unreachable { attempts, .. } => {
            assert!(*attempts <= 5 && *attempts >= 2, "{err}")
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
    assert_eq!(err.runbook(), Some("docs/runbook.md#inference-unreachable"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_test_reports_the_server() {
    let server = Server::start(2);
    let c = client(&server).await;
    let report = c.self_test().await;
    assert!(report.healthy && report.completion_ok, "{report}");
    assert_eq!(report.slots, 2);
    assert!(report.context.is_some_and(|n| n >= 512), "{report}");
    assert_eq!(report.tool_mode, "constrained", "SmolLM2's template takes no tools: {report}");
    assert!(report.thinking_control, "this build has /v1/chat/completions/control: {report}");
    assert!(report.to_string().contains("thinking cap: ended live"), "{report}");
    assert!(report.problems.is_empty(), "{report}");
}

/// Runs `req` and returns the completion, the reasoning deltas as they came, and how
/// many content deltas came.
async fn chat_counting_reasoning(
    c: &Client,
    session: &str,
    req: &ChatRequest,
) -> (bx_infer::Completion, Vec<String>, u64) {
    let mut thought = Vec::new();
    let mut said = 0;
    let done = c
        .chat(session, req, |e| match e {
            StreamEvent::Reasoning(t) => thought.push(t.clone()),
            StreamEvent::Content(_) => said += 1,
            _ => {}
        })
        .await
        .unwrap();
    (done, thought, said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_cap_ends_a_real_thinking_block_live_or_by_reissue() {
    // The template's generation prompt opens a thinking block, so the server streams the
    // model's output as `reasoning_content`.
    let template = repo().join("fixtures/templates/think.jinja");
    let server = Server::start_with(1, &["--template", template.to_str().unwrap()]);
    let question = || {
        request(
            vec![
                Message::System { content: "You are a patient teacher.".into() },
                user("Explain in detail why the sky is blue."),
            ],
            48,
        )
    };

    // Uncapped: every token is thinking, up to the token limit.
    let live = client(&server).await;
    let (free, thought, _) = chat_counting_reasoning(&live, "s", &question()).await;
    assert!(thought.len() >= 40, "{} reasoning deltas: {thought:?}", thought.len());
    assert!(free.content.trim().is_empty(), "{:?}", free.content);
    assert!(!free.thinking_capped);

    // Capped at 8, ended live by the server's control endpoint: the same generation
    // closes its thinking (a token or two may be in flight) and goes on to answer.
    let capped_req = ChatRequest { max_thinking_tokens: Some(8), ..question() };
    let (capped, thought, said) = chat_counting_reasoning(&live, "s", &capped_req).await;
    assert!(capped.thinking_capped);
    assert!((8..=12).contains(&thought.len()), "{} reasoning deltas", thought.len());
    assert_eq!(thought.concat(), capped.reasoning);
    assert!(!capped.content.trim().is_empty(), "no answer after the cap");
    let first = capped.timings.expect("timings");
    // One generation held both the thinking and the answer (a re-issue would count
    // only the answer).
    assert!(
        first.predicted_n >= thought.len() as u64 + said,
        "{} tokens generated for {} reasoning and {said} content deltas",
        first.predicted_n,
        thought.len()
    );

    // The next request of the session re-reads the capped turn once: the old prompt
    // comes from the slot's cache up to the thinking opener of its generation prompt
    // (history carries the answer, not the thinking), and only the rest is read again.
    let mut messages = capped_req.messages.clone();
    messages.push(Message::Assistant { content: capped.content.clone(), tool_calls: vec![] });
    messages.push(user("Thank you."));
    let next = ChatRequest { max_thinking_tokens: Some(4), ..request(messages, 16) };
    let (after, ..) = chat_counting_reasoning(&live, "s", &next).await;
    let t = after.timings.expect("timings");
    let old_prompt = first.cache_n + first.prompt_n;
    assert!(
        t.cache_n <= old_prompt && old_prompt - t.cache_n <= 8,
        "cache_n {} after a capped request whose prompt was {old_prompt}",
        t.cache_n
    );

    // Capped at 8 by stopping and re-issuing with the template's thinking switch off:
    // exactly 8 reasoning tokens reach the caller, then the answer.
    let mut cfg = InferConfig::new(&server.url());
    cfg.end_thinking = EndThinking::Reissue;
    let reissue = Client::connect(cfg).await.unwrap();
    let (capped, thought, said) = chat_counting_reasoning(&reissue, "s", &capped_req).await;
    assert!(capped.thinking_capped);
    assert_eq!(thought.len(), 8, "{thought:?}");
    let answered = capped.timings.expect("timings").predicted_n;
    assert!(answered < 8 + said, "the re-issue generated {answered} tokens for {said} deltas");
    assert_eq!(thought.concat(), capped.reasoning);
    assert!(!capped.content.trim().is_empty(), "no answer after the re-issue");

    // A cap of 0: no thinking at all, only the answer.
    let none = ChatRequest { max_thinking_tokens: Some(0), ..question() };
    let (answer, thought, _) = chat_counting_reasoning(&live, "s", &none).await;
    assert!(thought.is_empty(), "{thought:?}");
    assert!(!answer.content.trim().is_empty() && !answer.thinking_capped);
}
