//! What a small model in constrained mode is sent (docs/agent.md#small-models): the
//! short prompt naming no absolute path, the worked exchange in the reply's shape, the
//! tools the first reply may call under `route_tools`, and every tool after a result.
//! The model is scripted (`bx_eval::model`), replying in the constrained shape.

use std::sync::{Arc, Mutex};

use bx_eval::model::{Reply, Request, ScriptedModel};
use serde_json::Value;

use super::*;

/// A model that lists "." once per turn, then answers; every request body is kept.
fn model(bodies: &Arc<Mutex<Vec<Value>>>) -> ScriptedModel {
    model_making(bodies, &[r#"{"tool":"fs.list","with":{"path":"."}}"#])
}

/// A model that replies `calls` in turn, one per request, then answers; every request
/// body is kept.
fn model_making(bodies: &Arc<Mutex<Vec<Value>>>, calls: &[&str]) -> ScriptedModel {
    let calls: Vec<String> = calls.iter().map(|c| (*c).to_owned()).collect();
    let seen = Arc::clone(bodies);
    ScriptedModel::start(Arc::new(move |r: &Request| {
        if r.is_self_test() {
            return Reply::Text("ok".into());
        }
        seen.lock().unwrap().push(r.body.clone());
        if let Some(call) = calls.get(r.results_this_turn().len()) {
            Reply::Text(call.clone())
        } else {
            Reply::Text(r#"{"tool":"answer","with":"one file"}"#.into())
        }
    }))
    .unwrap()
}

/// The tools a request's reply may name, in the schema's order.
fn offered(body: &Value) -> Vec<String> {
    body["response_format"]["json_schema"]["schema"]["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("no constrained schema: {body}"))
        .iter()
        .map(|o| o["properties"]["tool"]["const"].as_str().unwrap().to_owned())
        .collect()
}

fn setup(model: &ScriptedModel, inference: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let config = format!("[inference]\nurl = \"{}\"\n{inference}\n", model.url());
    std::fs::write(s.join("config.toml"), config).unwrap();
    assert_eq!(bx(s, &["policy", "init"]).code, 0);
    install(s, "fs_list");
    install(s, "fs_read");
    install(s, "fs_write");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "x\n").unwrap();
    (state, ws)
}

/// One turn of `request` against `calls` (replied in turn, then the answer) in
/// constrained mode, with `files` in the workspace; every request body, and the
/// workspace's path.
fn small_turn(
    calls: &[&'static str],
    request: &str,
    files: &[(&str, &str)],
) -> (Vec<Value>, String) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let scripted = model_making(&bodies, calls);
    let (state, ws) = setup(&scripted, "tool_mode = \"constrained\"");
    let s = state.path();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    for (name, text) in files {
        std::fs::write(ws.join(name), text).unwrap();
    }
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "small", request, &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(code, 0, "{events:?}");
    let bodies = bodies.lock().unwrap().clone();
    (bodies, ws.to_str().unwrap().to_owned())
}

/// One turn of `request` against `calls` (replied in turn, then the answer) in
/// constrained mode, after `prepare` got the state directory and the workspace (to
/// install tools, write files or a policy); every request body, one per call and one
/// for the answer.
fn small_turn_with(
    calls: &[&str],
    request: &str,
    prepare: impl FnOnce(&std::path::Path, &std::path::Path),
) -> Vec<Value> {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let scripted = model_making(&bodies, calls);
    let (state, ws) = setup(&scripted, "tool_mode = \"constrained\"");
    let s = state.path();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    prepare(s, &ws);
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "small", request, &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(code, 0, "{events:?}");
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), calls.len() + 1, "the calls, then the answer");
    bodies
}

/// Fails, showing both, unless `text` ends with `tail`.
fn assert_ends_with(text: &str, tail: &str) {
    assert!(text.ends_with(tail), "{text:?}\ndoes not end with\n{tail:?}");
}

/// The content of the last message of a request body.
fn last_content(body: &Value) -> String {
    body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned()
}

#[test]
fn a_small_model_gets_the_short_prompt_and_the_worked_exchange_in_its_reply_shape() {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let model = model(&bodies);
    let (state, ws) = setup(&model, "tool_mode = \"constrained\"");
    let s = state.path();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "small", "List my files.", &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(code, 0, "{events:?}");
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 2, "a call, then the answer");
    let messages = bodies[0]["messages"].as_array().unwrap();
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are bx") && system.contains("{\"tool\": NAME"), "{system}");
    assert!(system.contains("\n- fs.read: Read a text file."), "{system}");
    assert!(!system.contains(ws.to_str().unwrap()), "no absolute path: {system}");
    // The worked exchange: a folder listed and answered from; then a guessed path, its
    // error, a listing, the read, the answer; each reply in the shape the model writes.
    let shown: Vec<(&str, &str)> = messages[1..]
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(shown[0], ("user", "What is in my trips folder?"));
    assert_eq!(shown[1], ("assistant", r#"{"tool":"fs.list","with":{"path":"trips"}}"#));
    assert_eq!(shown[2].0, "tool");
    assert!(
        shown[3].1.starts_with(r#"{"tool":"answer","with":"rome.txt and oslo.txt are in it."#),
        "{shown:?}"
    );
    assert_eq!(shown[4], ("user", "When is my flight to Rome?"));
    assert_eq!(shown[5], ("assistant", r#"{"tool":"fs.read","with":{"path":"rome.txt"}}"#));
    // The error says which call lists the whole folder, in the words the grammar lets
    // the model write (the required path before the depth), and the next reply is it.
    let listing = r#"{"tool":"fs.list","with":{"path":".","depth":2}}"#;
    assert_eq!(shown[6].0, "tool");
    assert_eq!(
        shown[6].1,
        format!(
            "error: rome.txt: not found\nTo find where it is, list the whole folder: {listing}"
        )
    );
    assert_eq!(shown[7], ("assistant", listing));
    // The listing says which entry the owner's words point at, and the next reply reads it.
    let read = r#"{"tool":"fs.read","with":{"path":"trips/rome.txt"}}"#;
    assert!(shown[8].1.ends_with(&format!("\n{{\"next\":{read}}}")), "{shown:?}");
    assert_eq!(shown[9], ("assistant", read));
    assert!(shown[11].1.starts_with(r#"{"tool":"answer","with":"Your flight"#), "{shown:?}");
    assert_eq!(shown[12], ("user", "List my files."));
    assert_eq!(shown.len(), 13, "{shown:?}");
    // Every tool and the answer, in both requests (route_tools is off by default).
    let all = ["fs.list", "fs.read", "fs.write", "answer"];
    assert_eq!(offered(&bodies[0]), all);
    assert_eq!(offered(&bodies[1]), all);
    // The first request is a prefix of the second: the prompt cache holds.
    let first = bodies[0]["messages"].as_array().unwrap();
    let second = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(first[..], second[..first.len()]);
    assert_eq!(
        second[first.len()]["content"],
        r#"{"tool":"fs.list","with":{"path":"."}}"#,
        "the model's own call, in its shape"
    );
}

/// A path tool's failed call is shown to a small model with the call that lists the
/// whole folder (what the 0.5B model did not find by itself: it sent the failed call
/// again), and its own call comes back as the grammar let it write it, the required
/// path before the optional depth. A call that works gets no such line; a listing gets
/// the entry the owner's words point at.
#[test]
fn a_failed_path_call_is_shown_with_the_listing_to_make_next() {
    let call = r#"{"tool":"fs.list","with":{"path":"nowhere","depth":2}}"#;
    let (bodies, ws) = small_turn(&[call], "List my inbox.", &[]);
    assert_eq!(bodies.len(), 2, "a call, then the answer");
    let messages = bodies[1]["messages"].as_array().unwrap();
    let [.., asked, _] = messages.as_slice() else { panic!("{messages:?}") };
    assert_eq!(asked["content"], call, "the model's own call, in the grammar's order");
    let result = last_content(&bodies[1]);
    assert!(result.starts_with("error: nowhere: not found"), "relative to the workspace: {result}");
    assert!(!result.contains(&ws), "{result}");
    assert_ends_with(
        &result,
        r#"To find where it is, list the whole folder: {"tool":"fs.list","with":{"path":".","depth":2}}"#,
    );
    // A call that works has no such line; a listing the owner's words point into names
    // the entry, and the call that reads it.
    let (bodies, _) = small_turn(
        &[r#"{"tool":"fs.list","with":{"path":"."}}"#],
        "What is on my grocery list?",
        &[("groceries.md", "eggs\n")],
    );
    let last = last_content(&bodies[1]);
    assert!(!last.contains("To find where"), "{last}");
    assert_ends_with(&last, r#"{"next":{"tool":"fs.read","with":{"path":"groceries.md"}}}"#);
}

/// A file given to the tool of directories, just after a listing showed it is a file, is
/// shown with the call that reads it, not with the listing of the whole folder (the 0.5B
/// model listed a file it had just seen, and then the whole folder again).
#[test]
fn a_listed_file_given_to_the_listing_tool_is_shown_with_its_read() {
    let calls = [
        r#"{"tool":"fs.list","with":{"path":"."}}"#,
        r#"{"tool":"fs.list","with":{"path":"a.txt"}}"#,
    ];
    let (bodies, _) = small_turn(&calls, "List my files.", &[]);
    assert_eq!(bodies.len(), 3, "two calls, then the answer");
    let last = last_content(&bodies[2]);
    assert!(last.starts_with("error: a.txt"), "{last}");
    assert_ends_with(
        &last,
        r#"a.txt is a file. To read it: {"tool":"fs.read","with":{"path":"a.txt"}}"#,
    );
}

/// A request that names a file gets a call as its first reply (the grammar offers no
/// answer then); the reply after the result may answer. A request that names none may
/// answer at once (the first test: every tool and the answer).
#[test]
fn a_request_that_names_a_file_gets_a_call_first() {
    let call = r#"{"tool":"fs.read","with":{"path":"a.txt"}}"#;
    let (bodies, _) = small_turn(&[call], "What does a.txt say?", &[]);
    assert_eq!(offered(&bodies[0]), ["fs.list", "fs.read", "fs.write"]);
    assert_eq!(offered(&bodies[1]), ["fs.list", "fs.read", "fs.write", "answer"]);
}

/// So does a request that asks after something (a question, the owner's things, a verb
/// of looking): the 0.5B model answered "Remind me of my ideas." at once, from nothing.
/// Small talk may be answered at once.
#[test]
fn a_request_that_asks_after_something_gets_a_call_first() {
    let call = r#"{"tool":"fs.list","with":{"path":"."}}"#;
    for asking in ["Remind me of my ideas.", "How is the project deployed?"] {
        let (bodies, _) = small_turn(&[call], asking, &[]);
        assert_eq!(offered(&bodies[0]), ["fs.list", "fs.read", "fs.write"], "{asking}");
        assert_eq!(offered(&bodies[1]), ["fs.list", "fs.read", "fs.write", "answer"]);
    }
    let (bodies, _) = small_turn(&[call], "Who are you?", &[]);
    assert_eq!(offered(&bodies[0]), ["fs.list", "fs.read", "fs.write", "answer"]);
}

/// With a tool that runs code over files installed (py.run), the worked exchange ends
/// with a count made by it, over the file it names: asked how many lines the Makefile
/// has, the 0.5B model read the file and answered "Makefile is a file.", never calling
/// py.run. Without one (the first test) the exchange has no such part.
#[test]
fn the_worked_exchange_counts_with_the_tool_that_runs_code() {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let scripted = model_making(&bodies, &[]);
    let (state, ws) = setup(&scripted, "tool_mode = \"constrained\"");
    let s = state.path();
    let wasm = repo().join("tools/target/py/py_run.wasm");
    assert!(wasm.exists(), "{} is missing; run `make tools` first", wasm.display());
    let r = install_with_manifest(s, &wasm, &repo().join("tools/py-run/manifest.toml"), "py");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "small", "hello", &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(code, 0, "{events:?}");
    let bodies = bodies.lock().unwrap();
    let shown: Vec<(&str, &str)> = bodies[0]["messages"].as_array().unwrap()[1..]
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let n = shown.len();
    assert_eq!(shown[n - 5], ("user", "How many lines does trips/oslo.txt have?"), "{shown:?}");
    assert_eq!(
        shown[n - 4],
        (
            "assistant",
            r#"{"tool":"py.run","with":{"code":"len(open('trips/oslo.txt').read().splitlines())","reads":["trips/oslo.txt"]}}"#
        )
    );
    assert_eq!(shown[n - 3], ("tool", "\"4\""));
    assert!(shown[n - 2].1.contains("trips/oslo.txt has 4 lines."), "{shown:?}");
    assert_eq!(shown[n - 1], ("user", "hello"));
}

/// A result over 4 KiB is followed by the owner's question again (with a README in front
/// of it, the 0.5B model answered the worked exchange's question); a short one is not.
#[test]
fn a_long_result_is_followed_by_the_question() {
    let call = r#"{"tool":"fs.read","with":{"path":"long.txt"}}"#;
    let long = "word ".repeat(1000);
    let (bodies, _) = small_turn(&[call], "What does long.txt say?", &[("long.txt", &long)]);
    assert_ends_with(&last_content(&bodies[1]), "\nThe owner asked: What does long.txt say?");
    let call = r#"{"tool":"fs.read","with":{"path":"a.txt"}}"#;
    let (bodies, _) = small_turn(&[call], "What does a.txt say?", &[]);
    assert!(
        !last_content(&bodies[1]).contains("The owner asked"),
        "{:?}",
        last_content(&bodies[1])
    );
}

#[test]
fn route_tools_narrows_only_the_first_reply_to_the_tools_the_words_point_at() {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let model = model(&bodies);
    let (state, ws) = setup(&model, "tool_mode = \"constrained\"\nroute_tools = true");
    let s = state.path();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let ws = ws.to_str().unwrap();
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "routed", "List my inbox.", &["--workspace", ws]);
    assert_eq!(code, 0, "{events:?}");
    // Words that point at no tool: every tool.
    let (code, events) = say(s, "unrouted", "Remind me of my ideas.", &["--workspace", ws]);
    assert_eq!(code, 0, "{events:?}");
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 4);
    // Both ask after something, so neither first reply may answer yet.
    assert_eq!(offered(&bodies[0]), ["fs.list"]);
    assert_eq!(offered(&bodies[1]), ["fs.list", "fs.read", "fs.write", "answer"]);
    assert_eq!(offered(&bodies[2]), ["fs.list", "fs.read", "fs.write"]);
    // The prompt is the same either way: only the grammar narrows.
    assert_eq!(bodies[0]["messages"][0], bodies[2]["messages"][0]);
}

/// A small model in constrained mode is offered no optional argument that is an open map
/// (http.fetch's `headers`): asked what a page says, the 0.5B model wrote browser headers
/// until its tokens ran out, and the grammar cannot bound a map's size. The prompt does
/// not name it either. A model in native mode is offered the tool's whole schema.
#[test]
fn a_small_model_is_offered_no_optional_open_map() {
    let args_of = |mode: &str| {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let scripted = model_making(&bodies, &[]);
        let (state, ws) = setup(&scripted, mode);
        let s = state.path();
        install(s, "http_fetch");
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let _daemon = Daemon::start(s);
        let (code, events) = say(s, "small", "hello", &["--workspace", ws.to_str().unwrap()]);
        assert_eq!(code, 0, "{events:?}");
        bodies.lock().unwrap()[0].clone()
    };
    let keys = |schema: &Value| -> Vec<String> {
        schema["properties"].as_object().unwrap().keys().cloned().collect()
    };
    let small = args_of("tool_mode = \"constrained\"");
    let options = small["response_format"]["json_schema"]["schema"]["oneOf"].as_array().unwrap();
    let fetch = options
        .iter()
        .find(|o| o["properties"]["tool"]["const"] == "http.fetch")
        .unwrap_or_else(|| panic!("http.fetch is offered: {small}"));
    assert_eq!(keys(&fetch["properties"]["with"]), ["body", "method", "url"]);
    let system = small["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains(" Arguments: body?, method?, url (http or https URL)."), "{system}");
    let native = args_of("");
    let fetch = native["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "http.fetch")
        .unwrap_or_else(|| panic!("http.fetch is offered: {native}"));
    assert_eq!(keys(&fetch["function"]["parameters"]), ["body", "headers", "method", "url"]);
}

/// A path call the policy refuses is shown with the same listing to make next as one that
/// failed (asked to change a line "in my ideas", the 0.5B model wrote to `ideas`, which
/// no grant covers, and answered with the refusal's words).
#[test]
fn a_refused_path_call_is_shown_with_the_listing_to_make_next() {
    let call = r#"{"tool":"fs.write","with":{"content":"x","path":"/etc/bx-nowhere"}}"#;
    let (bodies, _) = small_turn(&[call], "Write x to the file.", &[]);
    assert_eq!(bodies.len(), 2, "a call, then the answer");
    let result = last_content(&bodies[1]);
    assert!(result.starts_with("refused: "), "{result}");
    assert!(!std::path::Path::new("/etc/bx-nowhere").exists());
    assert_ends_with(
        &result,
        r#"do not repeat it unchanged.
To find where it is, list the whole folder: {"tool":"fs.list","with":{"path":".","depth":2}}"#,
    );
}

/// Says `request` in `ws` with the daemon of state `s`, where the scripted model makes
/// one call and then answers: what the model was shown of the call.
fn the_one_result(
    s: &std::path::Path,
    ws: &std::path::Path,
    bodies: &Arc<Mutex<Vec<Value>>>,
    request: &str,
) -> String {
    let _daemon = Daemon::start(s);
    let (code, events) = say(s, "small", request, &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(code, 0, "{events:?}");
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 2, "a call, then the answer");
    last_content(&bodies[1])
}

/// The owner's no (here the owner's reviewer's) is not about where a file is: the
/// refusal is shown without the listing to make next.
#[test]
fn a_path_call_the_owner_refuses_gets_no_listing_hint() {
    use std::os::unix::fs::PermissionsExt as _;
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let scripted = model_making(&bodies, &[r#"{"tool":"fs.read","with":{"path":"a.txt"}}"#]);
    let (state, ws) = setup(&scripted, "tool_mode = \"constrained\"");
    let s = state.path();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let policy = format!(
        "[[grant]]\ntool = \"fs.read\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\nwhen_tainted = \"ask\"\n",
        ws.display()
    );
    std::fs::write(s.join("policy.toml"), policy).unwrap();
    let bin = tempfile::tempdir().unwrap();
    let review = bin.path().join("review");
    std::fs::write(
        &review,
        "#!/bin/sh\ncat > /dev/null\necho '{\"answer\": \"refuse\", \"reason\": \"not today\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&review, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = std::fs::read_to_string(s.join("config.toml")).unwrap();
    config.push_str(&format!("\n[approvals]\nreviewer = [\"{}\"]\n", review.display()));
    std::fs::write(s.join("config.toml"), config).unwrap();
    let result = the_one_result(s, &ws, &bodies, "What does a.txt say?");
    assert!(result.starts_with("refused: refused by the owner's reviewer"), "{result}");
    assert_ends_with(&result, "do not repeat it unchanged.");
}

/// The listing a refusal points to is never the call just refused: copied, it would be
/// refused again and end the turn. With no grant at all, the listing of the whole folder
/// is refused with no such line.
#[test]
fn a_refused_listing_does_not_point_to_itself() {
    let call = r#"{"tool":"fs.list","with":{"path":".","depth":2}}"#;
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let scripted = model_making(&bodies, &[call]);
    let (state, ws) = setup(&scripted, "tool_mode = \"constrained\"");
    let s = state.path();
    std::fs::write(s.join("policy.toml"), "").unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let result = the_one_result(s, &ws, &bodies, "List my files.");
    assert!(result.starts_with("refused: no grant covers"), "{result}");
    assert_ends_with(&result, "do not repeat it unchanged.");
}

/// A listing is shown to a small model without its sizes (it read a size in bytes as a
/// count of lines: "Cargo.toml has 60 lines."); the transcript keeps what it was shown.
#[test]
fn a_listing_is_shown_without_its_sizes() {
    let (bodies, _) =
        small_turn(&[r#"{"tool":"fs.list","with":{"path":"."}}"#], "List my files.", &[]);
    let shown = last_content(&bodies[1]);
    assert!(shown.contains(r#"{"path":"a.txt","kind":"file"}"#), "{shown}");
    assert!(!shown.contains("\"size\""), "{shown}");
}

/// A listing that points at no entry, for a request that gives a name, is shown with the
/// call that searches the listed folder for it (asked for Luis's phone number, the 0.5B
/// model listed `docs`, saw no file named after him, and answered from the names). A
/// request that gives no name gets no such line.
#[test]
fn a_listing_that_points_at_no_entry_is_shown_with_the_search_for_a_name() {
    let list = r#"{"tool":"fs.list","with":{"path":"."}}"#;
    let ask = |request: &str| {
        let bodies = small_turn_with(&[list], request, |s, ws| {
            install(s, "fs_search");
            std::fs::write(ws.join("contacts.txt"), "Luis Ortega, +34 600 333 444\n").unwrap();
        });
        last_content(&bodies[1])
    };
    let shown = ask("What is Luis's phone number?");
    assert_ends_with(
        &shown,
        r#"{"next":{"tool":"fs.search","with":{"path":".","pattern":"luis"}}}"#,
    );
    let shown = ask("What is his phone number?");
    assert!(!shown.contains("next"), "{shown}");
}

/// The search a listing points to is never one the policy refused earlier in the turn:
/// copied, it would be refused again and end the turn.
#[test]
fn a_listing_does_not_point_to_a_search_refused_before() {
    let search = r#"{"tool":"fs.search","with":{"path":".","pattern":"luis"}}"#;
    let list = r#"{"tool":"fs.list","with":{"path":"."}}"#;
    let bodies = small_turn_with(&[search, list], "What is Luis's phone number?", |s, ws| {
        install(s, "fs_search");
        std::fs::write(ws.join("contacts.txt"), "Luis Ortega, +34 600 333 444\n").unwrap();
        // fs.list and fs.read may read the workspace; no grant covers fs.search.
        let policy: String = ["fs.list", "fs.read"]
            .iter()
            .map(|tool| {
                format!(
                    "[[grant]]\ntool = \"{tool}\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"allow\"\nwhen_tainted = \"allow\"\n\n",
                    ws.display()
                )
            })
            .collect();
        write_policy(s, &policy);
    });
    let refused = last_content(&bodies[1]);
    assert!(refused.starts_with("refused: no grant covers"), "{refused}");
    let listing = last_content(&bodies[2]);
    assert!(listing.contains("contacts.txt"), "{listing}");
    assert!(!listing.contains("next"), "the refused search again: {listing}");
}

/// A result that is no listing is shown with the fetch of a web address the owner gave
/// that no call of the turn fetched (asked "Is Foo up, and what changed last? URL1 and
/// URL2", the 0.5B model fetched the first and answered from it alone). An address a
/// call of the turn fetched, even one refused, is not pointed at again; with every
/// address fetched, there is no such line.
#[test]
fn a_result_is_shown_with_the_fetch_of_an_address_the_owner_gave() {
    let first = "http://127.0.0.1:9/status";
    let second = "http://127.0.0.1:9/changelog";
    let request = format!("Read a.txt, then check {first} and {second}.");
    let fetch = |url: &str| format!(r#"{{"tool":"http.fetch","with":{{"url":"{url}"}}}}"#);
    let read = r#"{"tool":"fs.read","with":{"path":"a.txt"}}"#;
    let turn = |calls: &[&str]| {
        small_turn_with(calls, &request, |s, _| {
            install(s, "http_fetch");
        })
    };
    let bodies = turn(&[read]);
    let shown = last_content(&bodies[1]);
    assert!(shown.starts_with("x\n"), "{shown}");
    assert_ends_with(&shown, &format!("\n{{\"next\":{}}}", fetch(first)));
    // The first address fetched (no grant covers it: refused), the next result points
    // at the second.
    let bodies = turn(&[&fetch(first), read]);
    let refused = last_content(&bodies[1]);
    assert!(refused.starts_with("refused: no grant covers"), "{refused}");
    assert_ends_with(&last_content(&bodies[2]), &format!("\n{{\"next\":{}}}", fetch(second)));
    // Both fetched: the read has no pointer.
    let bodies = turn(&[&fetch(first), &fetch(second), read]);
    assert_eq!(last_content(&bodies[3]), "x\n");
    // A call that failed gets no fetch's line: its own line says where to look.
    let bodies = turn(&[r#"{"tool":"fs.read","with":{"path":"b.txt"}}"#]);
    let failed = last_content(&bodies[1]);
    assert!(failed.starts_with("error: b.txt"), "{failed}");
    assert!(!failed.contains("http.fetch"), "{failed}");
}

/// A web address the owner gave, given to a path tool, is shown with the call that
/// fetches it, not the listing of the whole folder (asked "What licence is fastcount
/// under? See URL.", the 0.5B model gave the URL to fs.read). An address the owner did
/// not give (one a file or a page could have put in the model's call) gets the listing
/// line any failed path call gets.
#[test]
fn a_web_address_of_the_owners_given_as_a_path_is_shown_with_its_fetch() {
    let url = "http://127.0.0.1:9/crates/fastcount";
    let given = format!("What licence is fastcount under? See {url}.");
    let fetch = format!(r#"{{"tool":"http.fetch","with":{{"url":"{url}"}}}}"#);
    let read = format!(r#"{{"tool":"fs.read","with":{{"path":"{url}"}}}}"#);
    let list = format!(r#"{{"tool":"fs.list","with":{{"path":"{url}"}}}}"#);
    let last = |calls: &[&str], request: &str| {
        let bodies = small_turn_with(calls, request, |s, _| {
            install(s, "http_fetch");
        });
        let shown = last_content(bodies.last().unwrap());
        assert!(shown.starts_with("error: "), "{shown}");
        shown
    };
    let listing = r#"To find where it is, list the whole folder: {"tool":"fs.list","with":{"path":".","depth":2}}"#;
    // Given to either tool that reads a path.
    assert_ends_with(&last(&[&read], &given), &format!("\n{{\"next\":{fetch}}}"));
    assert_ends_with(&last(&[&list], &given), &format!("\n{{\"next\":{fetch}}}"));
    // Not an address the owner gave.
    assert_ends_with(&last(&[&read], "What licence is fastcount under?"), listing);
    // Not a fetch the policy refused earlier in the turn (no grant covers it).
    assert_ends_with(&last(&[&fetch, &read], &given), listing);
}

/// A search that found nothing is shown with the listing of the folder it searched (asked
/// "Search my notes for the research topic.", the 0.5B model searched for `research`, a
/// word of a file's name and not of its text, and answered that there was no topic). A
/// search that found a line gets no such line, nor does one of a folder the turn listed.
#[test]
fn a_search_that_found_nothing_is_shown_with_the_listing_of_its_folder() {
    let search = r#"{"tool":"fs.search","with":{"path":".","pattern":"research"}}"#;
    let turn = |calls: &[&str], text: &str| {
        let request = "Search my notes for the research topic.";
        let bodies = small_turn_with(calls, request, |s, ws| {
            install(s, "fs_search");
            std::fs::write(ws.join("research.md"), text).unwrap();
        });
        last_content(bodies.last().unwrap())
    };
    let shown = turn(&[search], "Topic: fast table formatters.\n");
    assert_eq!(shown, "\n{\"next\":{\"tool\":\"fs.list\",\"with\":{\"path\":\".\"}}}");
    let shown = turn(&[search], "The research: fast table formatters.\n");
    assert_eq!(shown, "research.md:1:The research: fast table formatters.");
    let list = r#"{"tool":"fs.list","with":{"path":"."}}"#;
    let shown = turn(&[list, search], "Topic: fast table formatters.\n");
    assert_eq!(shown, "");
}

/// A question is answered once the call a pointer named has run and shows no next one:
/// asked "List my inbox.", the 0.5B model listed `messages/inbox` as pointed, then listed
/// a file in it and answered from that. The reply after the pointed call may only answer;
/// before it, and for a request that asks for a change, every tool is offered.
#[test]
fn a_question_is_answered_after_the_call_a_pointer_named() {
    let calls = [
        r#"{"tool":"fs.list","with":{"path":"."}}"#,
        r#"{"tool":"fs.list","with":{"path":"inbox"}}"#,
    ];
    let turn = |request: &str| {
        small_turn_with(&calls, request, |_, ws| {
            std::fs::create_dir(ws.join("inbox")).unwrap();
            std::fs::write(ws.join("inbox/001-ana.txt"), "Dinner on Saturday?\n").unwrap();
        })
    };
    let bodies = turn("List my inbox.");
    assert_ends_with(
        &last_content(&bodies[1]),
        r#"{"next":{"tool":"fs.list","with":{"path":"inbox"}}}"#,
    );
    assert_eq!(offered(&bodies[1]), ["fs.list", "fs.read", "fs.write", "answer"]);
    assert_eq!(offered(&bodies[2]), ["answer"]);
    let bodies = turn("Add a line to my inbox.");
    assert_eq!(offered(&bodies[2]), ["fs.list", "fs.read", "fs.write", "answer"]);
}

/// A pointed call that did not run (the policy refused it) asks for no answer: what the
/// model is told then is not the owner's answer, and it may go on.
#[test]
fn a_pointed_call_that_was_refused_asks_for_no_answer() {
    let calls = [
        r#"{"tool":"fs.list","with":{"path":"."}}"#,
        r#"{"tool":"fs.read","with":{"path":"groceries.md"}}"#,
    ];
    let bodies = small_turn_with(&calls, "What is on my grocery list?", |s, ws| {
        std::fs::write(ws.join("groceries.md"), "eggs\n").unwrap();
        // fs.list may read the workspace; no grant covers fs.read.
        write_policy(
            s,
            &format!(
                "[[grant]]\ntool = \"fs.list\"\npath = \"{}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"allow\"\nwhen_tainted = \"allow\"\n",
                ws.display()
            ),
        );
    });
    assert_ends_with(
        &last_content(&bodies[1]),
        r#"{"next":{"tool":"fs.read","with":{"path":"groceries.md"}}}"#,
    );
    let refused = last_content(&bodies[2]);
    assert!(refused.starts_with("refused: no grant covers"), "{refused}");
    assert_eq!(offered(&bodies[2]), ["fs.list", "fs.read", "fs.write", "answer"]);
}
