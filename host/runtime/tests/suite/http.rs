//! HTTP through the host: granted hosts only, addresses only when granted as addresses,
//! every redirect hop checked.

use bx_broker::AllowList;
use serde_json::json;

use super::*;

fn get(allow: AllowList, url: &str) -> Result<bx_runtime::CallReport, RunError> {
    call(tool("test_hostile"), allow, json!({"mode": "get", "url": url}))
}

#[test]
fn fetches_from_address_granted_by_address() {
    let server = TinyServer::start(|_| http_ok("hello"));
    let allow = AllowList::new().host(&format!("127.0.0.1:{}", server.port)).unwrap();
    assert_eq!(ok_text(get(allow, &format!("http://127.0.0.1:{}/x", server.port))), "200 hello");
    assert_eq!(server.hits(), 1);
}

#[test]
fn refuses_hosts_not_granted_and_private_addresses() {
    let server = TinyServer::start(|_| http_ok("should not be reached"));
    let p = server.port;
    // Granted by name only: no address form of anything reaches, however it is spelled.
    let allow = || AllowList::new().host("example.com").unwrap();
    for url in [
        "https://example.org/".to_owned(),
        format!("http://127.0.0.1:{p}/"),
        format!("http://[::1]:{p}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://2130706433:{p}/"),
        format!("http://0x7f000001:{p}/"),
        format!("http://0x7f.0.0.1:{p}/"),
        format!("http://127.1:{p}/"),
        "http://10.0.0.1/".to_owned(),
        "http://[::ffff:127.0.0.1]/".to_owned(),
    ] {
        let why = denied(get(allow(), &url));
        assert!(why.contains("not granted") || why.contains("non-canonical"), "{url}: {why}");
    }
    assert_eq!(server.hits(), 0, "a refused request reached the server");
}

#[test]
fn refuses_non_canonical_spelling_even_of_a_granted_address() {
    let server = TinyServer::start(|_| http_ok("x"));
    let allow = AllowList::new().host(&format!("127.0.0.1:{}", server.port)).unwrap();
    let why = denied(get(allow, &format!("http://2130706433:{}/", server.port)));
    assert!(why.contains("non-canonical"), "{why}");
    assert_eq!(server.hits(), 0);
}

#[test]
fn refuses_name_that_resolves_to_loopback() {
    // A name grant must not reach loopback through DNS (or /etc/hosts).
    let server = TinyServer::start(|_| http_ok("x"));
    let allow = AllowList::new().host(&format!("localhost:{}", server.port)).unwrap();
    let why = denied(get(allow, &format!("http://localhost:{}/", server.port)));
    assert!(why.contains("non-public address"), "{why}");
    assert_eq!(server.hits(), 0);
}

#[test]
fn refuses_redirect_to_host_not_granted() {
    let target = TinyServer::start(|_| http_ok("you should not see this"));
    let tport = target.port;
    let origin = TinyServer::start(move |_| {
        format!(
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.2:{tport}/stolen\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    });
    let allow = AllowList::new().host(&format!("127.0.0.1:{}", origin.port)).unwrap();
    let why = denied(get(allow, &format!("http://127.0.0.1:{}/", origin.port)));
    assert!(why.contains("redirect from") && why.contains("not granted"), "{why}");
    assert_eq!(origin.hits(), 1);
    assert_eq!(target.hits(), 0, "the redirect target was contacted");
}

#[test]
fn follows_redirect_within_grant() {
    let server = TinyServer::start(|port| {
        // First request redirects to /b on the same granted address; /b answers.
        static N: AtomicUsize = AtomicUsize::new(0);
        if N.fetch_add(1, Ordering::SeqCst) == 0 {
            format!(
                "HTTP/1.1 301 Moved\r\nlocation: http://127.0.0.1:{port}/b\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
        } else {
            http_ok("landed")
        }
    });
    let allow = AllowList::new().host(&format!("127.0.0.1:{}", server.port)).unwrap();
    assert_eq!(ok_text(get(allow, &format!("http://127.0.0.1:{}/a", server.port))), "200 landed");
    assert_eq!(server.hits(), 2);
}

#[test]
fn http_fetch_tool_reports_status_and_text() {
    let server = TinyServer::start(|_| http_ok("{\"ok\":true}"));
    let allow = AllowList::new().host(&format!("127.0.0.1:{}", server.port)).unwrap();
    let url = format!("http://127.0.0.1:{}/data", server.port);
    let out: serde_json::Value =
        serde_json::from_str(&ok_text(call(tool("http_fetch"), allow, json!({"url": url}))))
            .unwrap();
    assert_eq!(
        out,
        json!({"status": 200, "url": url, "content_type": "text/plain", "truncated": false, "text": "{\"ok\":true}"})
    );
}

#[test]
fn http_fetch_cuts_body_at_response_cap() {
    let body = "z".repeat(10_000);
    let server = TinyServer::start(move |_| http_ok(&body));
    let rt = Runtime::new(Limits { response_bytes: 1000, ..test_limits() }).unwrap();
    let bytes = component_bytes("http_fetch");
    let t = rt.load_blocking(&rt.compile(&bytes).unwrap(), &digest_of(&bytes)).unwrap();
    let allow = AllowList::new().host(&format!("127.0.0.1:{}", server.port)).unwrap();
    let g = grant(&t, allow);
    let args = json!({"url": format!("http://127.0.0.1:{}/", server.port)}).to_string();
    let out: serde_json::Value =
        serde_json::from_str(&ok_text(rt.call_blocking(&t, g, &args))).unwrap();
    assert_eq!(out["truncated"], json!(true));
    assert_eq!(out["text"].as_str().unwrap().len(), 1000);
}
