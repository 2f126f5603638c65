//! Every wait ends by the call's deadline: a guest asleep in WASI, a `describe` that
//! sleeps, a granted server that never answers, and a redirect chain whose hops each
//! stall. Each case would return something else (or hang) if the deadline did not hold
//! inside host calls, so none of these assertions is about elapsed time.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;

use bx_broker::AllowList;
use bx_runtime::Limit;
use serde_json::json;

use super::*;

fn is_deadline(r: &Result<CallReport, RunError>) -> bool {
    matches!(r, Err(RunError::Limit { limit: Limit::Deadline, .. }))
}

/// Regression: a tool that slept 25 s returned after 25 s with "ran past 10s".
#[test]
fn a_guest_asleep_in_a_host_call_is_stopped_at_the_deadline() {
    let r = call(tool("test_hostile"), AllowList::new(), json!({"mode": "sleep", "ms": 60_000}));
    assert!(is_deadline(&r), "{r:?}");
    // A short sleep inside the deadline completes.
    let r = call(tool("test_hostile"), AllowList::new(), json!({"mode": "sleep", "ms": 10}));
    assert_eq!(ok_text(r), "slept 10 ms");
}

/// Regression: a `describe` that slept made an install take as long.
#[test]
fn a_describe_that_sleeps_is_stopped_at_the_deadline() {
    let bytes = component_bytes("test_slow_describe");
    let rt = runtime();
    let component = rt.compile(&bytes).unwrap();
    match rt.load_blocking(&component, &digest_of(&bytes)) {
        Err(RunError::Limit { limit: Limit::Deadline, .. }) => {}
        other => panic!("expected the deadline, got {other:?}"),
    }
}

/// A server that accepts and never answers; counts the connections it took.
fn stalled_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(stream); // never answered, never closed
        }
    });
    (port, hits)
}

/// Regression: a granted server that stalled for 20 s held `http.fetch` for 20 s.
#[test]
fn a_stalled_server_is_cut_at_the_call_deadline() {
    let (port, hits) = stalled_server();
    let allow = AllowList::new().host(&format!("127.0.0.1:{port}")).unwrap();
    let r = call(
        tool("test_hostile"),
        allow,
        json!({"mode": "get", "url": format!("http://127.0.0.1:{port}/")}),
    );
    assert!(is_deadline(&r), "{r:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// Regression: three redirect hops that stalled 11 s each took 33 s; the whole-request
/// limit was applied per hop. Here each hop stalls 1.5 s under a 2 s request deadline:
/// the second hop is cut, and the third is never asked for.
#[test]
fn a_redirect_chain_is_bounded_as_one_request() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    let (stalled_tx, stalled_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let tx = stalled_tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    line.clear();
                }
                // Stall, as a slow server would, then redirect to the next hop.
                let _ =
                    std::sync::mpsc::channel::<()>().1.recv_timeout(Duration::from_millis(1500));
                let _ = write!(
                    stream,
                    "HTTP/1.1 302 Found\r\nlocation: /hop{}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    n + 1
                );
                let _ = tx.send(());
            });
        }
    });
    let limits = Limits {
        deadline: Duration::from_secs(20),
        http_timeout: Duration::from_secs(2),
        ..test_limits()
    };
    let rt = Runtime::new(limits).unwrap();
    let bytes = component_bytes("test_hostile");
    let t = rt.load_blocking(&rt.compile(&bytes).unwrap(), &digest_of(&bytes)).unwrap();
    let allow = AllowList::new().host(&format!("127.0.0.1:{port}")).unwrap();
    let g = grant(&t, allow);
    let args = json!({"mode": "get", "url": format!("http://127.0.0.1:{port}/hop0")}).to_string();
    let r = rt.call_blocking(&t, g, &args).unwrap();
    match r.result {
        Err(CallError::Failed(m)) => assert!(m.contains("request's deadline"), "{m}"),
        other => panic!("expected the request deadline, got {other:?}"),
    }
    let _ = stalled_rx.recv_timeout(Duration::from_secs(5));
    assert_eq!(hits.load(Ordering::SeqCst), 2, "hops asked for");
}

/// Regression: a 1.5 MiB error went whole into the result record and the terminal. An
/// error is cut at the error cap, saying how much was cut.
#[test]
fn a_huge_error_is_cut_at_the_error_cap() {
    let r = call(
        tool("test_hostile"),
        AllowList::new(),
        json!({"mode": "big-error", "bytes": 6 << 20}),
    );
    let cap = test_limits().error_bytes;
    match r.unwrap().result {
        Err(CallError::Failed(m)) => {
            assert!(m.len() < cap + 64, "{} bytes kept", m.len());
            assert!(
                m.ends_with(&format!("[{} bytes cut]", (6 << 20) - cap)),
                "{}",
                &m[m.len() - 40..]
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}
