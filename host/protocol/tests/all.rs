//! The wire protocol against its fixtures: every type has one, every fixture parses
//! strictly and re-serialises byte for byte; and the refusals.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::Path;

use bx_protocol::{Body, Envelope, FrameError, MAX_FRAME_BYTES, decode, encode, read_frame};

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
        assert_eq!(
            env.msg.type_name(),
            name,
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
        seen.insert(name.clone());
    }
    let types: BTreeSet<String> = Body::TYPES.iter().map(|t| (*t).to_owned()).collect();
    let missing: Vec<_> = types.difference(&seen).collect();
    assert!(missing.is_empty(), "types without a fixture in fixtures/wire: {missing:?}");
    let stray: Vec<_> = seen.difference(&types).collect();
    assert!(stray.is_empty(), "fixtures without a type: {stray:?}");
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
