//! A session's transcript is kept in the daemon between turns (issue 18: a turn no
//! longer re-reads and re-checks the whole file). What it sends is the same as reading
//! the file afresh would give, and a transcript that anyone else changed between turns
//! is read again, so damage is still found. The model is scripted (`bx_eval::model`).

use std::sync::{Arc, Mutex};

use bx_eval::model::{Call, Reply, Request, ScriptedModel};
use serde_json::{Value, json};

use super::*;

/// Each turn lists the state directory's parent once, then answers.
fn model(bodies: &Arc<Mutex<Vec<Value>>>) -> ScriptedModel {
    let seen = Arc::clone(bodies);
    ScriptedModel::start(Arc::new(move |r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        seen.lock().unwrap().push(r.body.clone());
        if r.results_this_turn().is_empty() {
            Reply::Calls(vec![Call::new("fs.list", json!({"path": "."}))])
        } else {
            Reply::Text(format!("turn {} done", r.index))
        }
    }))
    .unwrap()
}

#[test]
fn a_kept_transcript_sends_what_the_file_says_and_an_edit_between_turns_is_found() {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let model = model(&bodies);
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    install(s, "fs_list");
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let ws = ws.to_str().unwrap();
    let daemon = Daemon::start(s);
    for turn in 0..3 {
        let (code, events) = say(s, "long", &format!("turn {turn}"), &["--workspace", ws]);
        assert_eq!(code, 0, "{events:?}");
    }
    // Every request held the whole transcript as the file has it, after the system
    // prompt, byte for byte as a fresh read of the file gives it.
    let file = transcript(s, "long");
    let last = bodies.lock().unwrap().last().unwrap().clone();
    let sent = last["messages"].as_array().unwrap();
    assert_eq!(sent[0]["role"], "system");
    // The last request was made before the final answer was written.
    assert_eq!(sent.len(), file.len(), "system + all but the last answer");
    for (i, (sent, kept)) in sent[1..].iter().zip(&file).enumerate() {
        assert_eq!(sent["role"], kept["role"], "message {i}");
        assert_eq!(sent["content"], kept["content"], "message {i}");
    }
    // An edit made while the daemon runs is found at the next turn: the kept copy is
    // not used, and the file is read and checked again.
    let path = s.join("sessions/long.transcript.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("{\"", "{ \"", 1)).unwrap();
    let (code, events) = say(s, "long", "turn 3", &["--workspace", ws]);
    assert_eq!(code, 1, "{events:?}");
    let error = of_type(&events, "error");
    assert_eq!(error.len(), 1, "{events:?}");
    assert_eq!(error[0]["code"], "session_damaged", "{}", error[0]);
    assert!(error[0]["message"].as_str().unwrap().contains("edited by hand"), "{}", error[0]);
    // Put back as bx wrote it, the session goes on from the file.
    std::fs::write(&path, &text).unwrap();
    let before = bodies.lock().unwrap().len();
    let (code, events) = say(s, "long", "turn 4", &["--workspace", ws]);
    assert_eq!(code, 0, "{events:?}");
    let bodies = bodies.lock().unwrap();
    assert!(bodies.len() > before);
    let sent = bodies[before]["messages"].as_array().unwrap();
    assert_eq!(sent.len(), 1 + text.lines().count() + 1, "system, the file, the new message");
    assert_eq!(sent.last().unwrap()["content"], "turn 4");
    daemon.stop();
    let r = bx(s, &["audit", "verify"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// A client that sends its next message the moment it hears `turn_done` finds the
/// session free: the turn lets go of it before the event is sent (found by the load
/// run: one turn in about a thousand came back `session_busy`).
#[test]
fn the_next_message_sent_at_turn_done_finds_the_session_free() {
    use bx_protocol::{Body, Envelope, VERSION};
    use std::io::Write as _;
    let model = ScriptedModel::start(Arc::new(|_: &Request| Reply::Text("ok".into()))).unwrap();
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    let _daemon = Daemon::start(s);
    let mut stream = daemon_socket(s);
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut busy = 0;
    for id in 1..=300 {
        let msg = Body::Send {
            session: "quick".into(),
            text: format!("message {id}"),
            require_tool: false,
            workspace: None,
        };
        stream.write_all(&bx_protocol::encode(&Envelope { v: VERSION, id, msg }).unwrap()).unwrap();
        loop {
            let e = bx_protocol::read_frame(&mut stream).unwrap().unwrap();
            match e.msg {
                Body::TurnDone { .. } if e.id == id => break,
                Body::Error { code, message, .. } if e.id == id => {
                    assert_eq!(code, bx_protocol::ErrorCode::SessionBusy, "{message}");
                    busy += 1;
                    break;
                }
                _ => {}
            }
        }
    }
    assert_eq!(busy, 0, "turns refused as busy right after the previous one was done");
}

/// The kept transcript is never preferred to the file once anyone else touched it: an
/// edit made while a turn runs (here, by the model's server in the middle of its reply),
/// or one whose modification time was put back, is what the next request carries; and a
/// FIFO or a symlink put in the transcript's place is refused at once, not waited on.
#[test]
fn edits_during_a_turn_or_with_the_old_mtime_are_read_and_odd_files_refused() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path().to_path_buf();
    let path = s.join("sessions/edit.transcript.jsonl");
    let bodies = Arc::new(Mutex::new(Vec::<Value>::new()));
    let (seen, during) = (Arc::clone(&bodies), path.clone());
    let model = ScriptedModel::start(Arc::new(move |r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        seen.lock().unwrap().push(r.body.clone());
        if r.last_user() == "second" {
            // While this turn runs: the first message, rewritten in place.
            let text = std::fs::read_to_string(&during).unwrap();
            std::fs::write(&during, text.replacen("original", "TAMPERED", 1)).unwrap();
        }
        Reply::Text("fine".into())
    }))
    .unwrap();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    let _daemon = Daemon::start(&s);
    let contents = |body: &Value| -> Vec<String> {
        body["messages"].as_array().unwrap().iter().map(|m| m["content"].to_string()).collect()
    };
    for text in ["original", "second", "third"] {
        let (code, events) = say(&s, "edit", text, &[]);
        assert_eq!(code, 0, "{events:?}");
    }
    let last = bodies.lock().unwrap().last().unwrap().clone();
    assert!(contents(&last).contains(&"\"TAMPERED\"".to_owned()), "{:?}", contents(&last));
    // In place, same length, and the modification time put back.
    let text = std::fs::read_to_string(&path).unwrap();
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, text.replacen("TAMPERED", "HIDDEN!!", 1)).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    let (code, events) = say(&s, "edit", "fourth", &[]);
    assert_eq!(code, 0, "{events:?}");
    let last = bodies.lock().unwrap().last().unwrap().clone();
    assert!(contents(&last).contains(&"\"HIDDEN!!\"".to_owned()), "{:?}", contents(&last));
    // A FIFO and a symlink in the transcript's place: refused, each turn ending at once.
    std::fs::remove_file(&path).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
    let (code, events) = say(&s, "edit", "fifth", &[]);
    assert_eq!(code, 1, "{events:?}");
    let error = of_type(&events, "error");
    assert_eq!(error[0]["code"], "session_damaged", "{events:?}");
    assert!(error[0]["message"].as_str().unwrap().contains("not a regular file"), "{error:?}");
    std::fs::remove_file(&path).unwrap();
    let elsewhere = s.join("elsewhere.jsonl");
    std::fs::write(&elsewhere, &text).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    let (code, events) = say(&s, "edit", "sixth", &[]);
    assert_eq!(code, 1, "{events:?}");
    assert_eq!(of_type(&events, "error")[0]["code"], "session_damaged", "{events:?}");
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), text, "nothing written through it");
}

#[test]
fn a_call_repeated_unchanged_in_a_turn_runs_and_the_next_request_asks_only_for_the_answer() {
    // The model lists the folder, lists it again unchanged, then would list it a third
    // time: the repeat runs (decided and recorded like any call), and the request after
    // it offers no tool (docs/agent.md#small-models). A different call after the first
    // does not count as a repeat.
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&bodies);
    let model = ScriptedModel::start(Arc::new(move |r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        seen.lock().unwrap().push(r.body.clone());
        match r.results_this_turn().len() {
            1 => Reply::Calls(vec![Call::new("fs.list", json!({"path": "sub"}))]),
            0 | 2 | 3 => Reply::Calls(vec![Call::new("fs.list", json!({"path": "."}))]),
            _ => Reply::Text("done".into()),
        }
    }))
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    std::fs::write(s.join("config.toml"), format!("[inference]\nurl = \"{}\"\n", model.url()))
        .unwrap();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    install(s, "fs_list");
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "again", "list it", &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(code, 0, "{events:?}");
    let choices: Vec<Value> =
        bodies.lock().unwrap().iter().map(|b| b["tool_choice"].clone()).collect();
    // Calls: ".", "sub", ".", "." — the third is the first repeat.
    assert_eq!(of_type(&events, "tool_call_proposed").len(), 4, "{events:?}");
    assert_eq!(of_type(&events, "tool_result").len(), 4, "every repeat ran: {events:?}");
    assert_eq!(choices.len(), 5, "{choices:?}");
    assert!(choices[..3].iter().all(|c| c != "none"), "no repeat yet: {choices:?}");
    assert_eq!(choices[3], "none", "after the repeat, only the answer: {choices:?}");
    assert_eq!(choices[4], "none", "{choices:?}");
}
