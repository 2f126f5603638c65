//! The owner's page (`bx serve --web`) in a real browser: headless Chromium driven by
//! Selenium (`tests/web_driver.py`), against the real daemon, real calls from a real
//! `bx mcp` client, and the real log. What the browser did is checked where it lands:
//! the call's reply, the file it wrote, the audit record.

use std::io::Write as _;
use std::process::{Child, ChildStdin, Command, Stdio};

use serde_json::{Value, json};

use super::mcp::{Raw, approvals};
use super::*;

/// What a hostile call's arguments carry: a script, an image whose error runs one, a
/// right-to-left override, and a `javascript:` link.
const HOSTILE: &str = "<script>window.bxPwned = 1</script><img src=x onerror=\"window.bxPwned = 2\"> \u{202e}txt.exe <a href=\"javascript:window.bxPwned = 3\">open</a>";

struct Setup {
    _state: tempfile::TempDir,
    s: PathBuf,
    _ws: tempfile::TempDir,
    ws: PathBuf,
    /// An untrusted page, fetched without asking.
    page: u16,
}

/// Writes in the workspace ask every time; an untrusted page is fetched without asking.
fn setup() -> Setup {
    let state = tempfile::tempdir().unwrap();
    let s = state.path().to_path_buf();
    install(&s, "fs_write");
    install(&s, "http_fetch");
    let page = page_server("a page anyone could have written");
    let ws_dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws_dir.path()).unwrap();
    for dir in ["docs", "other"] {
        std::fs::create_dir_all(ws.join(dir)).unwrap();
    }
    write_policy(
        &s,
        &format!(
            "[[grant]]\ntool = \"*\"\npath = \"{}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\nwhen_tainted = \"ask\"\n\
             [[grant]]\ntool = \"http.fetch\"\nhost = \"127.0.0.1:{page}\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\nwhen_clean = \"allow\"\nwhen_tainted = \"allow\"\n",
            ws.display()
        ),
    );
    Setup { _state: state, s, _ws: ws_dir, ws, page }
}

/// `bx serve --web 127.0.0.1:0` (or `bx serve` with the address in `[approvals] web`),
/// and the page's address it printed.
fn serve_web(s: &Path, configured: bool) -> (Daemon, String) {
    if configured {
        std::fs::write(s.join("config.toml"), "[approvals]\nweb = \"127.0.0.1:0\"\n").unwrap();
    }
    let args: &[&str] = if configured { &[] } else { &["--web", "127.0.0.1:0"] };
    let mut daemon = Daemon::start_with(s, &[], args);
    let line = daemon.line_with("the owner's page is at");
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap().to_owned();
    (daemon, url.trim_end_matches('/').to_owned())
}

/// The browser, driven one command at a time.
struct Browser {
    child: Child,
    /// Closed when the browser is done with: the driver then quits Chromium itself.
    stdin: Option<ChildStdin>,
    replies: std::sync::mpsc::Receiver<String>,
}

impl Browser {
    fn start(base: &str) -> Browser {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web_driver.py");
        let mut child = Command::new(repo().join(".venv/bin/python"))
            .arg(script)
            .arg(base)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the venv's python (make setup installs selenium)");
        let stdin = child.stdin.take().unwrap();
        let replies = forward_lines(child.stdout.take().unwrap(), |l| l);
        Browser { child, stdin: Some(stdin), replies }
    }

    fn run(&mut self, command: Value) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
        let line = self
            .replies
            .recv_timeout(std::time::Duration::from_secs(180))
            .unwrap_or_else(|_| panic!("the browser did not answer {command}"));
        let reply: Value = serde_json::from_str(&line).unwrap();
        assert!(reply["error"].is_null(), "{command}: {reply}");
        reply
    }
}

impl Drop for Browser {
    /// The driver quits Chromium when its input ends (a kill would leave Chromium and
    /// chromedriver running); killed only if it has not ended within a minute.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one approval waiting, once one waits.
fn waiting(s: &Path) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(a) = approvals(s).pop() {
            return a;
        }
        assert!(std::time::Instant::now() < deadline, "no approval waits");
        std::thread::yield_now();
    }
}

fn write_call(id: u64, path: &str, content: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "fs.write", "arguments": {"path": path, "content": content}}})
    .to_string()
}

/// A page of another origin (another port of loopback) that posts the approval form to
/// the owner's page as soon as it loads, with `approval` typed and a guessed form token.
fn attacker_page(base: &str, approval: &str) -> u16 {
    let body = format!(
        "<!doctype html><form method=post action=\"{base}/approve\"><input name=csrf value=guess><input name=approval value={approval}><input name=typed value={approval}><input name=scope value=path></form><script>document.forms[0].submit()</script>"
    );
    typed_page_server(body, "text/html")
}

/// The session's `approval` records.
fn approval_records(s: &Path) -> Vec<Value> {
    audit_records(s)
        .into_iter()
        .filter(|r| r["kind"] == "approval")
        .map(|r| r["fields"].clone())
        .collect()
}

#[test]
fn the_owner_answers_from_the_page_in_a_real_browser() {
    let Setup { s, ws, page, .. } = &setup();
    let (daemon, base) = serve_web(s, false);
    let token = std::fs::read_to_string(s.join("web.token")).unwrap().trim().to_owned();
    let mut mcp = Raw::start(s, ws);
    let mut browser = Browser::start(&base);
    // Shots for docs/approvals.md when asked for.
    let shots = std::env::var_os("BX_WEB_SHOTS").map(PathBuf::from);

    // A call whose arguments are hostile waits; its block shows them as text.
    mcp.send(&write_call(2, "docs/a.txt", HOSTILE));
    let first = waiting(s);
    let a = first["approval"].as_str().unwrap().to_owned();
    let session = first["session"].as_str().unwrap().to_owned();
    assert_eq!(browser.run(json!({"cmd": "login", "token": "not the token"}))["logged_in"], false);
    assert_eq!(browser.run(json!({"cmd": "login", "token": token}))["logged_in"], true);
    let inert = browser.run(json!({"cmd": "inert", "id": a}));
    assert_eq!(inert["scripts"], 0, "{inert}");
    assert_eq!(inert["images"], 0, "{inert}");
    assert_eq!(inert["onerror"], 0, "{inert}");
    assert_eq!(inert["javascript_links"], 0, "{inert}");
    assert_eq!(inert["links_in_block"], 0, "{inert}");
    assert!(inert["pwned"].is_null(), "{inert}");
    assert_eq!(inert["bidi"], "bidi-override", "{inert}");
    let block = inert["block"].as_str().unwrap();
    for shown in [
        "<script>window.bxPwned = 1</script>",
        "onerror=",
        "\\u{202e}txt.exe",
        "javascript:window.bxPwned = 3",
    ] {
        assert!(block.contains(shown), "{shown:?} not shown as text in:\n{block}");
    }
    assert!(!block.contains('\u{202e}'), "the override reached the page as itself");
    if let Some(dir) = &shots {
        browser.run(json!({"cmd": "shot", "url": "/", "path": dir.join("approvals-page.png")}));
    }

    // Approving needs the id typed: anything else answers nothing.
    let wrong = browser.run(json!({"cmd": "approve", "id": a, "typed": "yes"}));
    assert_eq!(wrong["ok"], false, "{wrong}");
    assert!(wrong["text"].as_str().unwrap().contains("still waits"), "{wrong}");
    assert_eq!(waiting(s)["approval"], a.as_str());
    // Typed, with the path scope: it runs, and later writes under docs/ run unasked.
    let ok = browser.run(json!({"cmd": "approve", "id": a, "typed": a, "scope": "path"}));
    assert_eq!(ok["ok"], true, "{ok}");
    assert_eq!(mcp.reply(json!(2))["result"]["isError"], false);
    assert_eq!(std::fs::read_to_string(ws.join("docs/a.txt")).unwrap(), HOSTILE);
    mcp.send(&write_call(3, "docs/b.txt", "b"));
    assert_eq!(mcp.reply(json!(3))["result"]["isError"], false);

    // A call outside the scope waits, and is refused from the page with a reason.
    mcp.send(&write_call(4, "other/c.txt", "c"));
    let b = waiting(s)["approval"].as_str().unwrap().to_owned();
    let refused = browser.run(json!({"cmd": "refuse", "id": b, "reason": "not that folder"}));
    assert_eq!(refused["ok"], true, "{refused}");
    let reply = mcp.reply(json!(4));
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert!(reply.to_string().contains("not that folder"), "{reply}");
    assert!(!ws.join("other/c.txt").exists());

    // The scope, revoked on the session's page: the next write under docs/ waits again.
    let revoked = browser.run(json!({"cmd": "revoke", "session": session, "answer": a}));
    assert_eq!(revoked["ok"], true, "{revoked}");
    assert_eq!(revoked["scopes_left"], 0, "{revoked}");
    mcp.send(&write_call(5, "docs/d.txt", "d"));
    let c = waiting(s)["approval"].as_str().unwrap().to_owned();

    // A page of another origin that posts the approval form is refused; the call waits.
    let attacker = attacker_page(&base, &c);
    let cross = browser
        .run(json!({"cmd": "cross_site", "attacker": format!("http://127.0.0.1:{attacker}/")}));
    assert!(
        cross["text"].as_str().unwrap().contains("refused")
            || cross["text"].as_str().unwrap().contains("another origin"),
        "{cross}"
    );
    assert_eq!(waiting(s)["approval"], c.as_str());
    assert_eq!(bx(s, &["refuse", &c]).code, 0);
    assert_eq!(mcp.reply(json!(5))["result"]["isError"], true);

    // An untrusted read raises the session's taint; the session's page draws it rising.
    let fetch = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
        "name": "http.fetch", "arguments": {"url": format!("http://127.0.0.1:{page}/")}}});
    mcp.send(&fetch.to_string());
    assert_eq!(mcp.reply(json!(6))["result"]["isError"], false);
    mcp.send(&write_call(7, "docs/e.txt", "e"));
    let d = waiting(s)["approval"].as_str().unwrap().to_owned();
    let picture = browser.run(json!({"cmd": "picture", "session": session}));
    let calls: Vec<Value> = picture["calls"].as_array().unwrap().clone();
    let outcomes: Vec<&str> = calls.iter().map(|c| c["outcome"].as_str().unwrap()).collect();
    assert_eq!(
        outcomes,
        ["o-approved", "o-ran", "o-refused", "o-refused", "o-ran", "o-waiting"],
        "{picture}"
    );
    let integrity: Vec<&str> = calls.iter().map(|c| c["integrity"].as_str().unwrap()).collect();
    assert_eq!(integrity.last(), Some(&"i-untrusted"), "{picture}");
    assert_eq!(integrity[0], "i-trusted", "{picture}");
    if let Some(dir) = &shots {
        browser.run(json!({"cmd": "shot", "url": format!("/session/{session}"), "path": dir.join("approvals-session.png")}));
    }
    assert_eq!(bx(s, &["refuse", &d]).code, 0);
    assert_eq!(mcp.reply(json!(7))["result"]["isError"], true);
    mcp.kill();
    daemon.stop();

    // The log says who answered what: the owner, each time, as at the terminal.
    let records = approval_records(s);
    let of = |id: &str| records.iter().find(|r| r["id"] == id).cloned().unwrap();
    assert_eq!(of(&a)["answer"], "approve");
    assert_eq!(of(&a)["scope"]["kind"], "path");
    assert!(of(&a)["by"].is_null(), "the owner's answer names no reviewer");
    assert_eq!(of(&b)["answer"], "refuse");
    assert_eq!(of(&b)["reason"], "not that folder");
    assert_eq!(of(&c)["answer"], "refuse");
    assert_eq!(records.len(), 4, "{records:?}");
}

/// A client with no redirects followed, and the Host, Origin and cookie it is given.
fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap()
}

#[test]
fn without_the_token_from_another_origin_or_another_host_nothing_is_answered() {
    let Setup { s, ws, .. } = &setup();
    let (daemon, base) = serve_web(s, true);
    let token = std::fs::read_to_string(s.join("web.token")).unwrap().trim().to_owned();
    let mut mcp = Raw::start(s, ws);
    mcp.send(&write_call(2, "docs/a.txt", "a"));
    let a = waiting(s)["approval"].as_str().unwrap().to_owned();
    let client = http();
    let origin = base.clone();
    let form = |csrf: &str| format!("csrf={csrf}&approval={a}&typed={a}&scope=");

    // No login: the page sends the browser to log in, and a form is refused.
    let r = client.get(format!("{base}/")).send().unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/login");
    let r = client
        .post(format!("{base}/approve"))
        .header("origin", &origin)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form("x"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 403);
    // The token in a link is not a login.
    let r = client.get(format!("{base}/?token={token}")).send().unwrap();
    assert_eq!(r.status(), 303);
    // A wrong token is refused.
    let login = |t: &str, origin: &str| {
        client
            .post(format!("{base}/login"))
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={t}"))
            .send()
            .unwrap()
    };
    assert_eq!(login("0123", &origin).status(), 403);
    // The right token from another origin is refused (a login made for the attacker).
    assert_eq!(login(&token, "http://evil.example").status(), 403);
    let r = login(&token, &origin);
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    // Every response forbids script and framing.
    let page = client.get(format!("{base}/")).header("cookie", &cookie).send().unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("script-src"), "{csp}");
    let html = page.text().unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap();
    let post = |origin: Option<&str>, host: Option<&str>, body: String| {
        let mut r = client
            .post(format!("{base}/approve"))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        if let Some(h) = host {
            r = r.header("host", h);
        }
        r.body(body).send().unwrap()
    };
    // Logged in, but from another origin, with no origin, without the form token, or
    // under another host name (DNS rebinding): refused, and the call still waits.
    assert_eq!(post(Some("http://evil.example"), None, form(csrf)).status(), 403);
    assert_eq!(post(Some("null"), None, form(csrf)).status(), 403);
    assert_eq!(post(None, None, form(csrf)).status(), 403);
    assert_eq!(post(Some(&origin), None, form("0000")).status(), 403);
    assert_eq!(post(Some("http://evil.example"), Some("evil.example"), form(csrf)).status(), 421);
    let r = client
        .get(format!("{base}/"))
        .header("host", "evil.example")
        .header("cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(r.status(), 421);
    assert_eq!(waiting(s)["approval"], a.as_str());
    // The same form, from the page's own origin, answers it.
    let r = post(Some(&origin), None, form(csrf));
    assert_eq!(r.status(), 200);
    assert!(r.text().unwrap().contains("approved"));
    assert_eq!(mcp.reply(json!(2))["result"]["isError"], false);
    mcp.kill();
    daemon.stop();
    // The token file is the owner's alone.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(s.join("web.token")).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

#[test]
fn a_connection_that_stalls_is_closed_so_it_cannot_hold_the_page() {
    use std::io::Read as _;
    let Setup { s, .. } = &setup();
    let (daemon, base) = serve_web(s, false);
    let addr = base.trim_start_matches("http://").to_owned();
    // Headers that promise a body which never comes, before any check can run.
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stalled,
        "POST /approve HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
    )
    .unwrap();
    // The server ends it by itself (the page's connection lifetime); this read ends with
    // it. A generous deadline for the test: a read still blocked then fails it.
    stalled.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
    let mut rest = Vec::new();
    let ended = stalled.read_to_end(&mut rest);
    assert!(ended.is_ok(), "the stalled connection was never closed: {ended:?}");
    daemon.stop();
}

#[test]
fn a_token_file_others_can_read_or_a_symlink_is_refused_and_nothing_is_served() {
    use std::os::unix::fs::PermissionsExt as _;
    let Setup { s, .. } = &setup();
    let token = s.join("web.token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let serve = |s: &Path| {
        bx_command(s).args(["serve", "--web", "127.0.0.1:0"]).stdin(Stdio::null()).output().unwrap()
    };
    let out = serve(s);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("only you can read") && err.contains("docs/runbook.md#web-token"),
        "{err}"
    );
    assert!(!err.contains("the owner's page is at"), "{err}");
    // A symlink to a private file of the owner's is not followed.
    let elsewhere = tempfile::tempdir().unwrap();
    let real = elsewhere.path().join("t");
    std::fs::write(&real, "0123456789abcdef0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(&token).unwrap();
    std::os::unix::fs::symlink(&real, &token).unwrap();
    let out = serve(s);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("docs/runbook.md#web-token"), "{err}");
}

#[test]
fn a_call_too_big_for_the_page_is_named_not_read() {
    let Setup { s, ws, .. } = &setup();
    let (daemon, base) = serve_web(s, false);
    let token = std::fs::read_to_string(s.join("web.token")).unwrap().trim().to_owned();
    let mut mcp = Raw::start(s, ws);
    // 1.5 MiB of arguments: more than the page shows whole (1 MiB).
    mcp.send(&write_call(2, "docs/big.txt", &"x".repeat(3 << 19)));
    let a = waiting(s)["approval"].as_str().unwrap().to_owned();
    let client = http();
    let r = client
        .post(format!("{base}/login"))
        .header("origin", &base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let page = client.get(format!("{base}/approval/{a}")).header("cookie", &cookie).send().unwrap();
    let text = page.text().unwrap();
    assert!(
        text.contains("more than are read here") && text.contains("bx approvals show"),
        "{text}"
    );
    assert!(text.len() < 64 << 10, "the page carried {} bytes", text.len());
    // Its neighbour, a call under the bound, is shown whole.
    assert_eq!(bx(s, &["refuse", &a]).code, 0);
    assert_eq!(mcp.reply(json!(2))["result"]["isError"], true);
    mcp.send(&write_call(3, "docs/small.txt", &"y".repeat(1000)));
    let b = waiting(s)["approval"].as_str().unwrap().to_owned();
    let page = client.get(format!("{base}/approval/{b}")).header("cookie", &cookie).send().unwrap();
    assert!(page.text().unwrap().contains(&"y".repeat(1000)));
    assert_eq!(bx(s, &["refuse", &b]).code, 0);
    assert_eq!(mcp.reply(json!(3))["result"]["isError"], true);
    mcp.kill();
    daemon.stop();
}
