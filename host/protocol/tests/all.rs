//! The wire protocol against its fixtures: every type has one, every fixture parses
//! strictly and re-serialises byte for byte; and the refusals.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::Path;

use bx_protocol::{
    Body, Envelope, ErrorCode, FrameCodec, FrameError, MAX_FRAME_BYTES, RunOutcome, decode, encode,
    read_frame,
};
use bytes::BytesMut;
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio_util::codec::{Decoder as _, Encoder as _, FramedRead};

fn fixtures() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/wire");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            (
                p.file_stem().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_fixture_round_trips_byte_for_byte_and_every_type_has_one() {
    let mut seen = BTreeSet::new();
    let all = fixtures();
    assert!(all.len() >= Body::TYPES.len(), "only {} fixtures", all.len());
    for (name, text) in &all {
        let line = text.strip_suffix('\n').unwrap_or(text);
        let env: Envelope =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}.json: {e}"));
        // `TYPE.json`, or `TYPE.FORM.json` for another form of the same type.
        let of_type = name.split('.').next().unwrap();
        assert_eq!(
            env.msg.type_name(),
            of_type,
            "{name}.json holds a {} message",
            env.msg.type_name()
        );
        assert_eq!(
            serde_json::to_string(&env).unwrap(),
            line,
            "{name}.json does not re-serialise byte for byte"
        );
        // And through a frame.
        assert_eq!(decode(&encode(&env).unwrap()).unwrap(), env);
        seen.insert(of_type.to_owned());
    }
    let types: BTreeSet<String> = Body::TYPES.iter().map(|t| (*t).to_owned()).collect();
    let missing: Vec<_> = types.difference(&seen).collect();
    assert!(missing.is_empty(), "types without a fixture in fixtures/wire: {missing:?}");
    let stray: Vec<_> = seen.difference(&types).collect();
    assert!(stray.is_empty(), "fixtures without a type: {stray:?}");
}

/// A tool's output with `outcome` and `text`, as the daemon sends it.
fn tool_output(outcome: RunOutcome, text: &str) -> Envelope {
    Envelope {
        v: 1,
        id: 9,
        msg: Body::ToolOutput {
            call: "c".into(),
            outcome,
            label: "private/trusted".into(),
            text: text.into(),
            stderr: String::new(),
        },
    }
}

/// A `json` result goes as the envelope's `output`, as it is (not escaped into `text`),
/// and is read back as the message's text; any other text goes in `text`.
#[test]
fn a_json_result_goes_as_it_is_and_comes_back_as_its_text() {
    let json = r#"{"a":"line\n\"quoted\"","b":[1,2.5,null]}"#;
    let wire =
        String::from_utf8(encode(&tool_output(RunOutcome::Json, json)).unwrap()[4..].to_vec())
            .unwrap();
    assert!(wire.ends_with(&format!(r#""text":"","stderr":""}},"output":{json}}}"#)), "{wire}");
    assert_eq!(
        decode(&encode(&tool_output(RunOutcome::Json, json)).unwrap()).unwrap(),
        tool_output(RunOutcome::Json, json)
    );
    // Every value, `null` included (a result of `null` is one, not an absent `output`).
    for value in ["null", "true", "0", "\"\"", "[]", "{}", "-0", "1e400", "\"\\ud800\""] {
        let env = tool_output(RunOutcome::Json, value);
        let bytes = encode(&env).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains(&format!(",\"output\":{value}}}")));
        assert_eq!(decode(&bytes).unwrap(), env, "{value}");
    }
    // Not one JSON value (two, space around one, none), or another outcome: in `text`.
    for (outcome, text) in [
        (RunOutcome::Json, "1 2"),
        (RunOutcome::Json, " 1"),
        (RunOutcome::Json, ""),
        (RunOutcome::Json, "{\"a\":"),
        (RunOutcome::Text, "[1]"),
    ] {
        let env = tool_output(outcome, text);
        let bytes = encode(&env).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("\"output\""), "{text:?}");
        assert_eq!(decode(&bytes).unwrap(), env);
    }
    // Nested far past serde_json's depth for values: checked and read without recursion
    // (no overflow), and carried as it is.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let env = tool_output(RunOutcome::Json, &deep);
    assert_eq!(decode(&encode(&env).unwrap()).unwrap(), env);
    let unclosed = format!(
        r#"{{"v":1,"id":1,"msg":{{"type":"tool_output","call":"c","outcome":"json","label":"","text":"","stderr":""}},"output":{}}}"#,
        "[".repeat(100_000)
    );
    assert!(matches!(decode(&frame(unclosed.as_bytes())), Err(FrameError::Bad(_))));
    // `output` anywhere else, or beside a text, is refused.
    for bad in [
        r#"{"v":1,"id":1,"msg":{"type":"ok"},"output":1}"#,
        r#"{"v":1,"id":1,"msg":{"type":"ok"},"output":null}"#,
        r#"{"v":1,"id":1,"msg":{"type":"tool_output","call":"c","outcome":"text","label":"","text":"","stderr":""},"output":1}"#,
        r#"{"v":1,"id":1,"msg":{"type":"tool_output","call":"c","outcome":"json","label":"","text":"2","stderr":""},"output":1}"#,
        r#"{"v":1,"id":1,"msg":{"type":"tool_output","call":"c","outcome":"json","label":"","text":"","stderr":""},"output":}"#,
    ] {
        assert!(
            matches!(decode(&frame(bad.as_bytes())), Err(FrameError::Bad(_))),
            "accepted {bad}"
        );
    }
}

/// A `text` result goes after the envelope's JSON in its frame, its bytes as they are
/// (not escaped into `text`), counted by `attached`, and is read back as the message's
/// text; out of a frame (plain JSON) it stays in `text`.
#[test]
fn a_text_result_goes_after_the_envelope_as_it_is() {
    for text in ["line\n\"quoted\" \\ 🦀\u{0}", "", "{\"a\":1}", " \n"] {
        let env = tool_output(RunOutcome::Text, text);
        let bytes = encode(&env).unwrap();
        let head = format!(r#""text":"","stderr":""}},"attached":{}}}"#, text.len());
        let body = &bytes[4..];
        assert!(body.ends_with(format!("{head}{text}").as_bytes()), "{text:?}");
        assert_eq!(decode(&bytes).unwrap(), env, "{text:?}");
        // Plain JSON has nowhere to put it after: it stays escaped in `text`.
        let json = serde_json::to_string(&env).unwrap();
        assert!(!json.contains("attached"), "{json}");
        assert_eq!(serde_json::from_str::<Envelope>(&json).unwrap(), env);
    }
    let head = |attached: &str, outcome: &str, text: &str| {
        format!(
            r#"{{"v":1,"id":1,"msg":{{"type":"tool_output","call":"c","outcome":"{outcome}","label":"","text":"{text}","stderr":""}},"attached":{attached}}}"#
        )
    };
    let refused = |body: &[u8]| match decode(&frame(body)) {
        Err(FrameError::Bad(e)) => e.to_string(),
        other => panic!("accepted {:?}: {other:?}", String::from_utf8_lossy(body)),
    };
    // The count must be the bytes that follow, exactly.
    assert!(refused(format!("{}abc", head("2", "text", "")).as_bytes()).contains("says 2"));
    assert!(refused(format!("{}abc", head("4", "text", "")).as_bytes()).contains("has 3"));
    assert!(refused(format!("{} abc", head("3", "text", "")).as_bytes()).contains("has 4"));
    // UTF-8, or nothing.
    let mut bad = head("2", "text", "").into_bytes();
    bad.extend_from_slice(b"a\xff");
    assert!(refused(&bad).contains("not UTF-8 (at byte 1)"));
    // Only beside an empty text of a `text` tool output.
    for (outcome, text) in [("json", ""), ("failed", ""), ("text", "x")] {
        let body = format!("{}y", head("1", outcome, text));
        assert!(refused(body.as_bytes()).contains("belongs only to"), "{outcome} {text}");
    }
    let ok = r#"{"v":1,"id":1,"msg":{"type":"ok"},"attached":1}x"#;
    assert!(refused(ok.as_bytes()).contains("belongs only to"));
    assert!(refused(br#"{"v":1,"id":1,"msg":{"type":"ok"},"attached":-1}"#).contains("`-1`"));
    // `null` is no count, and no absent field either.
    assert!(refused(br#"{"v":1,"id":1,"msg":{"type":"ok"},"attached":null}"#).contains("null"));
    // Out of a frame there is nothing after the JSON to attach.
    assert!(serde_json::from_str::<Envelope>(&head("0", "text", "")).is_err());
    // Without `attached`, anything after the JSON but white space is refused.
    assert!(refused(br#"{"v":1,"id":1,"msg":{"type":"ok"}}x"#).contains("from byte 34"));
    assert!(decode(&frame(b"{\"v\":1,\"id\":1,\"msg\":{\"type\":\"ok\"}} \n")).is_ok());
    assert!(refused(b" ").contains("no envelope"));
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

#[test]
fn refuses_unknown_fields_at_every_level() {
    for bad in [
        r#"{"v":1,"id":1,"msg":{"type":"send","session":"s","text":"t","extra":1}}"#,
        r#"{"v":1,"id":1,"msg":{"type":"turn_done","session":"s","usage":{"prompt":1,"cached":0,"completion":1,"x":2}}}"#,
        r#"{"v":1,"id":1,"msg":{"type":"list_tools","session":"s"}}"#,
        r#"{"v":1,"id":1,"msg":{"type":"ok"},"extra":true}"#,
        r#"{"v":1,"id":1,"msg":{"type":"answer_approval","approval":"a","answer":{"kind":"approve","reason":"x"}}}"#,
    ] {
        assert!(
            matches!(decode(&frame(bad.as_bytes())), Err(FrameError::Bad(_))),
            "accepted {bad}"
        );
    }
}

#[test]
fn refuses_unknown_types_and_versions_and_non_objects() {
    assert!(matches!(
        decode(&frame(br#"{"v":1,"id":1,"msg":{"type":"launch"}}"#)),
        Err(FrameError::Bad(_))
    ));
    assert!(matches!(decode(&frame(br#"{"v":1,"id":1}"#)), Err(FrameError::Bad(_))));
    assert!(matches!(decode(&frame(br#"[1,2]"#)), Err(FrameError::Bad(_))));
    assert!(matches!(decode(&frame(b"\xff\xfe")), Err(FrameError::Bad(_))));
    assert!(matches!(
        decode(&frame(br#"{"v":2,"id":1,"msg":{"type":"ok"}}"#)),
        Err(FrameError::Version(2))
    ));
}

#[test]
fn refuses_oversize_truncated_and_trailing() {
    let mut huge = ((MAX_FRAME_BYTES + 1) as u32).to_be_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(matches!(decode(&huge), Err(FrameError::TooLarge(n)) if n == MAX_FRAME_BYTES + 1));
    // A reader refuses the length before allocating or reading the body.
    assert!(matches!(read_frame(&mut &huge[..]), Err(FrameError::TooLarge(_))));

    let ok = frame(br#"{"v":1,"id":1,"msg":{"type":"ok"}}"#);
    assert!(matches!(decode(&ok[..ok.len() - 1]), Err(FrameError::Truncated { .. })));
    assert!(matches!(decode(&ok[..2]), Err(FrameError::Truncated { expected: 4, got: 2 })));
    let mut trailing = ok.clone();
    trailing.push(b' ');
    assert!(matches!(decode(&trailing), Err(FrameError::Trailing(1))));
    assert!(matches!(
        decode(&frame(br#"{"v":1,"id":1,"msg":{"type":"ok"}} {}"#)),
        Err(FrameError::Bad(_))
    ));

    let big = Envelope {
        v: 1,
        id: 1,
        msg: Body::ContentDelta { session: "s".into(), text: "x".repeat(MAX_FRAME_BYTES) },
    };
    assert!(matches!(encode(&big), Err(FrameError::TooLarge(_))));
}

#[test]
fn reads_frames_one_after_another_from_a_stream() {
    let mut stream = frame(br#"{"v":1,"id":1,"msg":{"type":"ok"}}"#);
    stream.extend(frame(br#"{"v":1,"id":2,"msg":{"type":"list_tools"}}"#));
    let mut r = &stream[..];
    assert_eq!(read_frame(&mut r).unwrap().unwrap().id, 1);
    assert_eq!(read_frame(&mut r).unwrap().unwrap().msg, Body::ListTools {});
    assert!(read_frame(&mut r).unwrap().is_none());
    let cut = &stream[..stream.len() - 3];
    let mut r = cut;
    read_frame(&mut r).unwrap();
    assert!(matches!(read_frame(&mut r), Err(FrameError::Truncated { .. })));
}

fn envelopes() -> Vec<Envelope> {
    fixtures().iter().map(|(_, text)| serde_json::from_str(text.trim_end()).unwrap()).collect()
}

/// Every fixture through the codec's encoder, then written in 7-byte pieces and read
/// back through `FramedRead`: the same envelopes, the same bytes as the sync `encode`,
/// and the sync reader reads what the codec wrote.
#[tokio::test]
async fn the_codec_round_trips_every_fixture_in_pieces() {
    let all = envelopes();
    let mut wire = BytesMut::new();
    for env in &all {
        let before = wire.len();
        FrameCodec.encode(env, &mut wire).unwrap();
        assert_eq!(wire[before..], encode(env).unwrap()[..]);
    }
    let mut sync = &wire[..];
    for env in &all {
        assert_eq!(read_frame(&mut sync).unwrap().as_ref(), Some(env));
    }
    let (mut tx, rx) = tokio::io::duplex(64);
    let bytes = wire.to_vec();
    let writer = tokio::spawn(async move {
        for piece in bytes.chunks(7) {
            tx.write_all(piece).await.unwrap();
        }
    });
    let read: Vec<Envelope> = FramedRead::new(rx, FrameCodec).map(Result::unwrap).collect().await;
    writer.await.unwrap();
    assert_eq!(read, all);
}

/// A length over the limit is refused from the head alone: the peer has sent nothing
/// more (and never will), and nothing is reserved for the body.
#[tokio::test]
async fn refuses_a_frame_over_the_limit_from_its_head() {
    let head = ((MAX_FRAME_BYTES + 1) as u32).to_be_bytes();
    let (mut tx, rx) = tokio::io::duplex(64);
    tx.write_all(&head).await.unwrap();
    let mut frames = FramedRead::new(rx, FrameCodec);
    let got = frames.next().await;
    assert!(
        matches!(got, Some(Err(FrameError::TooLarge(n))) if n == MAX_FRAME_BYTES + 1),
        "{got:?}"
    );
    assert!(frames.read_buffer().capacity() < 64 << 10, "the body's room was reserved");
    drop(tx);

    let mut buf = BytesMut::from(&head[..]);
    assert!(matches!(FrameCodec.decode(&mut buf), Err(FrameError::TooLarge(_))));
    assert!(buf.capacity() < 64 << 10);
    // The largest length allowed is not refused: it waits for its body.
    let mut buf = BytesMut::from(&(MAX_FRAME_BYTES as u32).to_be_bytes()[..]);
    assert!(FrameCodec.decode(&mut buf).unwrap().is_none());
}

/// A stream that ends inside a frame is an error, not a quiet end of stream.
#[tokio::test]
async fn refuses_a_cut_frame() {
    let ok = frame(br#"{"v":1,"id":1,"msg":{"type":"ok"}}"#);
    let body = ok.len() - 4;
    let mut frames = FramedRead::new(&ok[..ok.len() - 3], FrameCodec);
    let got = frames.next().await;
    assert!(
        matches!(got, Some(Err(FrameError::Truncated { expected, got })) if expected == body && got == body - 3),
        "{got:?}"
    );
    assert!(frames.next().await.is_none());
    // Cut inside the head.
    let got = FramedRead::new(&ok[..3], FrameCodec).next().await;
    assert!(matches!(got, Some(Err(FrameError::Truncated { expected: 4, got: 3 }))), "{got:?}");
    // The same through the sync reader.
    assert!(matches!(
        read_frame(&mut &ok[..ok.len() - 3]),
        Err(FrameError::Truncated { expected, got }) if expected == body && got == body - 3
    ));
}

/// Bytes after the last whole frame at the end of the stream are refused after that
/// frame is read.
#[tokio::test]
async fn refuses_trailing_bytes_after_the_last_frame_at_eof() {
    let mut stream = frame(br#"{"v":1,"id":1,"msg":{"type":"ok"}}"#);
    stream.extend_from_slice(&[0, 0]);
    let mut frames = FramedRead::new(&stream[..], FrameCodec);
    assert_eq!(frames.next().await.unwrap().unwrap().id, 1);
    let got = frames.next().await;
    assert!(matches!(got, Some(Err(FrameError::Truncated { expected: 4, got: 2 }))), "{got:?}");
    assert!(frames.next().await.is_none());
    let mut sync = &stream[..];
    read_frame(&mut sync).unwrap();
    assert!(matches!(read_frame(&mut sync), Err(FrameError::Truncated { expected: 4, got: 2 })));
}

/// The codec refuses what the sync decoder refuses: bad JSON, unknown fields, another
/// version.
#[test]
fn refuses_bad_bodies_through_the_codec() {
    for (bad, version) in [
        (&br#"{"v":1,"id":1,"msg":{"type":"ok"},"extra":true}"#[..], None),
        (br#"{"v":1,"id":1,"msg":{"type":"ok"}} {}"#, None),
        (b"\xff\xfe", None),
        (br#"{"v":2,"id":1,"msg":{"type":"ok"}}"#, Some(2)),
    ] {
        let got = FrameCodec.decode(&mut BytesMut::from(&frame(bad)[..]));
        match version {
            Some(v) => assert!(matches!(got, Err(FrameError::Version(n)) if n == v), "{got:?}"),
            None => assert!(matches!(got, Err(FrameError::Bad(_))), "{got:?}"),
        }
    }
}

/// Every wire spelling of an `ErrorCode`, as serde itself lists them for the derived
/// `Deserialize` (so a new variant is listed without anyone writing it down): a
/// deserializer that records the variants it is asked for and decodes nothing.
fn error_codes() -> Vec<&'static str> {
    use serde::de::{self, Deserialize as _, Visitor};

    struct Variants(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<T: std::fmt::Display>(_: T) -> Stop {
            Stop
        }
    }
    impl<'de> de::Deserializer<'de> for &mut Variants {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(variants);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            struct identifier ignored_any
        }
    }
    let mut v = Variants(None);
    let _ = ErrorCode::deserialize(&mut v);
    let codes = v.0.expect("ErrorCode deserializes as an enum").to_vec();
    // The spellings are the ones on the wire: each reads back and writes itself.
    for code in &codes {
        let c: ErrorCode = serde_json::from_value((*code).into()).unwrap();
        assert_eq!(serde_json::to_value(c).unwrap(), *code);
    }
    codes
}

/// docs/wire.md lists exactly the error codes on the wire (it lacked
/// `repeated_refusal` and `bad_workspace`).
#[test]
fn wire_md_lists_every_error_code() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire.md"))
            .unwrap();
    let (_, after) = doc.split_once("`error` codes:").expect("docs/wire.md lists `error` codes:");
    let (list, _) = after.split_once(';').expect("the list of codes ends with ';'");
    let listed: BTreeSet<&str> =
        list.split(',').map(|c| c.trim().trim_start_matches("and ").trim_matches('`')).collect();
    let codes: BTreeSet<&str> = error_codes().into_iter().collect();
    assert_eq!(listed, codes, "docs/wire.md's `error` codes and ErrorCode differ");
}
