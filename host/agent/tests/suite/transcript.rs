//! The transcript is append-only and the request rebuilt from it is the same bytes after
//! a restart: what keeps the server's prompt cache warm.

use bx_agent::Transcript;
use bx_infer::{ChatRequest, Message, ToolCall};
use proptest::prelude::*;
use serde_json::json;

fn text() -> impl Strategy<Value = String> {
    // Newlines, quotes, control and bidi characters, astral planes: all must round-trip.
    proptest::collection::vec(
        prop_oneof![
            Just('\n'),
            Just('"'),
            Just('\\'),
            Just('\u{202e}'),
            Just('\u{1f600}'),
            any::<char>(),
            proptest::char::range('a', 'z'),
        ],
        0..24,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        text().prop_map(|content| Message::User { content }),
        (text(), proptest::collection::vec((text(), text(), any::<i64>()), 0..3)).prop_map(
            |(content, calls)| Message::Assistant {
                content,
                tool_calls: calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, arg, n))| ToolCall {
                        id: format!("call_{i}"),
                        name,
                        arguments: json!({"path": arg, "n": n, "nested": {"z": [1, 2], "a": null}}),
                    })
                    .collect(),
            }
        ),
        (text(), text()).prop_map(|(id, content)| Message::Tool { tool_call_id: id, content }),
    ]
}

fn body(messages: &[Message]) -> Vec<u8> {
    let mut all = vec![Message::System { content: "baseline".into() }];
    all.extend_from_slice(messages);
    ChatRequest { messages: all, max_tokens: Some(64), ..ChatRequest::default() }.to_body(1)
}

/// The `messages` array of a request body, without its closing bracket.
fn messages_prefix(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let text = serde_json::to_string(&v["messages"]).unwrap();
    text[..text.len() - 1].to_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn appending_keeps_every_earlier_byte_and_a_restart_rebuilds_the_same_request(
        batches in proptest::collection::vec(proptest::collection::vec(message(), 1..4), 1..6)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Transcript::open(&dir.path().join("s.transcript.jsonl")).unwrap();
        let mut before = Vec::new();
        let mut bodies = Vec::new();
        for batch in &batches {
            t.append(batch).unwrap();
            let now = std::fs::read(t.path()).unwrap();
            prop_assert!(now.starts_with(&before), "an append changed an earlier byte");
            prop_assert!(now.len() > before.len());
            before = now;
            bodies.push(body(&t.messages()));
        }
        // A restart: the transcript read back gives the same request, byte for byte.
        let reopened = Transcript::open(&dir.path().join("s.transcript.jsonl")).unwrap();
        prop_assert_eq!(reopened.messages(), t.messages());
        prop_assert_eq!(body(&reopened.messages()), body(&t.messages()));
        // Each earlier request's messages are a prefix of every later one's.
        for pair in bodies.windows(2) {
            prop_assert!(messages_prefix(&pair[1]).starts_with(&messages_prefix(&pair[0])));
        }
    }
}

#[test]
fn refuses_a_cut_off_line_and_a_hand_edited_one_and_changes_nothing() {
    // Damage is reported with its line and the file is left as it was.
    let dir = tempfile::tempdir().unwrap();
    let mut t = Transcript::open(&dir.path().join("s.transcript.jsonl")).unwrap();
    t.append(&[Message::User { content: "hi".into() }]).unwrap();
    let path = t.path().to_owned();
    let good = std::fs::read(&path).unwrap();
    for (bad, want) in [
        (b"{\"role\":\"user\",\"content\":\"cut".to_vec(), "line 2 is cut off"),
        (b"{\"role\":\"user\",  \"content\":\"x\"}\n".to_vec(), "line 2: not in the form"),
        (b"{\"role\":\"user\",\"content\":\"x\",\"extra\":1}\n".to_vec(), "line 2: unknown field"),
        (b"{\"role\":\"robot\",\"content\":\"x\"}\n".to_vec(), "line 2: unknown variant"),
    ] {
        let mut damaged = good.clone();
        damaged.extend_from_slice(&bad);
        std::fs::write(&path, &damaged).unwrap();
        let err = Transcript::open(&dir.path().join("s.transcript.jsonl")).unwrap_err();
        assert_eq!(err.runbook(), "docs/runbook.md#session-state-damaged");
        let err = err.to_string();
        assert!(err.contains(want), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), damaged);
    }
}

#[test]
fn dangling_calls_get_a_result_so_the_next_request_is_well_formed() {
    // A turn cancelled between a call and its result leaves the call answered.
    let dir = tempfile::tempdir().unwrap();
    let mut t = Transcript::open(&dir.path().join("s.transcript.jsonl")).unwrap();
    let call = |id: &str| ToolCall { id: id.into(), name: "fs.read".into(), arguments: json!({}) };
    t.append(&[
        Message::User { content: "go".into() },
        Message::Assistant { content: String::new(), tool_calls: vec![call("a"), call("b")] },
        Message::Tool { tool_call_id: "a".into(), content: "done".into() },
    ])
    .unwrap();
    assert_eq!(t.close_dangling_calls().unwrap(), 1);
    let t = Transcript::open(&dir.path().join("s.transcript.jsonl")).unwrap();
    let messages = t.messages();
    let Some(Message::Tool { tool_call_id, content }) = messages.last() else { panic!() };
    assert_eq!(tool_call_id, "b");
    assert!(content.starts_with("no result"));
    let mut t = t;
    assert_eq!(t.close_dangling_calls().unwrap(), 0);
}
