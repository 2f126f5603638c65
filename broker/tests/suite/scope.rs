//! Scoped answers: what one covers, what it never covers, and how a risen taint voids it.

use bx_broker::{
    Answer, Bearing, CallRequest, Cover, Decision, Label, Policy, Resource, Scope, ScopeKind,
    ScopedAnswer, cover_for, decide, decide_scoped, parse_label, redecide,
};

use super::{call, read, write};

const POLICY: &str = r#"
[[grant]]
tool = "*"
path = "/w"
mode = "read"
label = "private/trusted"

[[grant]]
tool = "*"
path = "/w/web"
mode = "read"
label = "public/untrusted"

[[grant]]
tool = "*"
path = "/w"
mode = "write"
label = "private/trusted"
when_clean = "ask"
when_tainted = "ask"

[[grant]]
tool = "http.fetch"
host = "api.example.com"
mode = "fetch"
label = "public/untrusted"
when_clean = "ask"
when_tainted = "ask"

[[deny]]
tool = "*"
name = [".env"]

[[ask]]
tool = "*"
mode = "write"
name = [".git/hooks"]
"#;

fn policy() -> Policy {
    Policy::parse("p.toml", POLICY).unwrap()
}

fn fetch(u: &str) -> Resource {
    Resource::Url(u.into())
}

/// The scope `kind` the owner gives when `first` asks at `taint`, as the agent records it.
fn scope_of(first: &CallRequest, args: &str, kind: ScopeKind, taint: Label) -> Scope {
    let Decision::Ask(ask) = decide(&policy(), taint, first) else { panic!("should ask") };
    let cover = cover_for(&ask, args, &kind, true).unwrap().unwrap();
    Scope {
        id: "k7qm3x".into(),
        tool: first.tool.clone(),
        digest: first.digest.clone(),
        taint: ask.flow,
        cover,
        approve: true,
        reason: String::new(),
        reviewer: false,
    }
}

/// `allow by k7qm3x`, `ask`, `ask (voided k7qm3x)`, `deny …` or `deny by k7qm3x`.
fn outcome(scopes: &[Scope], taint: Label, c: &CallRequest, args: &str) -> String {
    let (decision, bearing) = decide_scoped(&policy(), taint, c, args, scopes);
    match (decision, bearing) {
        (Decision::Allow(_), Bearing::Approved(s)) => format!("allow by {}", s.id),
        (Decision::Allow(_), _) => "allow".into(),
        (Decision::Ask(_), Bearing::Voided(s)) => format!("ask (voided {})", s.id),
        (Decision::Ask(_), _) => "ask".into(),
        (Decision::Deny(_), Bearing::Refused(s)) => format!("deny by {}", s.id),
        (Decision::Deny(r), _) => format!("deny: {r}"),
    }
}

#[test]
fn a_path_scope_covers_the_next_write_below_it_and_nothing_beside_it() {
    let first = call("fs.write", vec![write("/w/a/b/x.md")]);
    let s = scope_of(&first, "{}", ScopeKind::Path(None), Label::CLEAN);
    assert_eq!(s.cover, Cover::Path { prefix: "/w/a/b".into(), write: true });
    let scopes = [s];
    let c = |tool: &str, r: Resource| call(tool, vec![r]);
    assert_eq!(
        outcome(&scopes, Label::CLEAN, &c("fs.write", write("/w/a/b/y.md")), "{}"),
        "allow by k7qm3x"
    );
    assert_eq!(
        outcome(&scopes, Label::CLEAN, &c("fs.write", write("/w/a/b/deep/z")), "{}"),
        "allow by k7qm3x"
    );
    // Just outside: a sibling, a prefix by string only, the parent, another tool, reads.
    for (tool, r) in [
        ("fs.write", write("/w/a/c.md")),
        ("fs.write", write("/w/a/bc/x.md")),
        ("fs.write", write("/w/a/b/../c.md")),
        ("fs.edit", write("/w/a/b/y.md")),
    ] {
        let got = outcome(&scopes, Label::CLEAN, &c(tool, r.clone()), "{}");
        assert!(got == "ask" || got.starts_with("deny:"), "{tool} {r}: {got}");
    }
    // Another digest of the same tool (installed anew) asks.
    let other = CallRequest { digest: "sha256:01".into(), ..c("fs.write", write("/w/a/b/y.md")) };
    assert_eq!(outcome(&scopes, Label::CLEAN, &other, "{}"), "ask");
}

#[test]
fn a_host_scope_covers_its_origin_only() {
    let first = call("http.fetch", vec![fetch("https://api.example.com/v1/a")]);
    let scopes = [scope_of(&first, "{}", ScopeKind::Host, Label::CLEAN)];
    let c = |u: &str| call("http.fetch", vec![fetch(u)]);
    assert_eq!(
        outcome(&scopes, Label::CLEAN, &c("https://api.example.com/v2?x=1"), "{}"),
        "allow by k7qm3x"
    );
    assert_eq!(outcome(&scopes, Label::CLEAN, &c("http://api.example.com/v1/a"), "{}"), "ask");
    // Another port or host: the scope does not cover it (and the policy decides alone).
    let port = outcome(&scopes, Label::CLEAN, &c("https://api.example.com:8443/v1/a"), "{}");
    assert!(!port.starts_with("allow"), "{port}");
    let host = outcome(&scopes, Label::CLEAN, &c("https://example.com/v1/a"), "{}");
    assert!(host.starts_with("deny: no grant covers"), "{host}");
}

#[test]
fn an_args_scope_covers_the_same_arguments_only() {
    let first = call("fs.write", vec![write("/w/notes.md")]);
    let args = r#"{"path":"/w/notes.md","content":"hi"}"#;
    let scopes = [scope_of(&first, args, ScopeKind::Args, Label::CLEAN)];
    assert_eq!(outcome(&scopes, Label::CLEAN, &first, args), "allow by k7qm3x");
    let other = r#"{"path":"/w/notes.md","content":"hi!"}"#;
    assert_eq!(outcome(&scopes, Label::CLEAN, &first, other), "ask");
}

#[test]
fn a_risen_taint_voids_an_approving_scope_and_the_call_says_why() {
    let first = call("fs.write", vec![write("/w/out/a.md")]);
    let scopes = [scope_of(&first, "{}", ScopeKind::Path(None), Label::CLEAN)];
    let next = call("fs.write", vec![write("/w/out/b.md")]);
    let tainted = parse_label("public/untrusted").unwrap();
    assert_eq!(outcome(&scopes, tainted, &next, "{}"), "ask (voided k7qm3x)");
    let (Decision::Ask(ask), _) = decide_scoped(&policy(), tainted, &next, "{}", &scopes) else {
        panic!()
    };
    let why = ask.reasons.join("\n");
    assert!(why.contains("k7qm3x") && why.contains("given at taint public/trusted"), "{why}");
    assert!(why.contains("public/untrusted"), "{why}");
    // The call's own read of an untrusted file raises what its write is decided at.
    let reads_web = call("fs.write", vec![read("/w/web/page.html"), write("/w/out/c.md")]);
    assert_eq!(outcome(&scopes, Label::CLEAN, &reads_web, "{}"), "ask (voided k7qm3x)");
}

#[test]
fn deny_rules_and_ask_rules_are_never_covered() {
    let first = call("fs.write", vec![write("/w/x.md")]);
    let scopes = [scope_of(&first, "{}", ScopeKind::Path(None), Label::CLEAN)];
    assert_eq!(scopes[0].cover, Cover::Path { prefix: "/w".into(), write: true });
    assert!(
        outcome(&scopes, Label::CLEAN, &call("fs.write", vec![write("/w/.env")]), "{}")
            .starts_with("deny: write /w/.env is refused by deny[0]")
    );
    assert_eq!(
        outcome(
            &scopes,
            Label::CLEAN,
            &call("fs.write", vec![write("/w/.git/hooks/pre-commit")]),
            "{}"
        ),
        "ask"
    );
    // And a call an [[ask]] rule covers cannot be given a scope at all.
    let hook = call("fs.write", vec![write("/w/.git/hooks/pre-commit")]);
    let Decision::Ask(ask) = decide(&policy(), Label::CLEAN, &hook) else { panic!() };
    assert!(cover_for(&ask, "{}", &ScopeKind::Path(None), true).is_err());
    assert!(bx_broker::offers(&ask, "{}").is_empty());
}

#[test]
fn a_scope_never_turns_a_refusal_into_an_allow() {
    // The grant the scope was given under is gone from the policy: the call is refused.
    let first = call("fs.write", vec![write("/w/x.md")]);
    let scopes = [scope_of(&first, "{}", ScopeKind::Path(None), Label::CLEAN)];
    let narrower = Policy::parse(
        "p.toml",
        &POLICY.replace("path = \"/w\"\nmode = \"write\"", "path = \"/w/only\"\nmode = \"write\""),
    )
    .unwrap();
    let (decision, _) = decide_scoped(
        &narrower,
        Label::CLEAN,
        &call("fs.write", vec![write("/w/y.md")]),
        "{}",
        &scopes,
    );
    assert!(matches!(decision, Decision::Deny(_)), "{decision:?}");
}

#[test]
fn a_refusing_scope_refuses_at_every_taint() {
    let first = call("http.fetch", vec![fetch("https://api.example.com/a")]);
    let mut s = scope_of(&first, "{}", ScopeKind::Host, Label::CLEAN);
    s.approve = false;
    s.reason = "not that API".into();
    let scopes = [s];
    let next = call("http.fetch", vec![fetch("https://api.example.com/b")]);
    assert_eq!(outcome(&scopes, Label::CLEAN, &next, "{}"), "deny by k7qm3x");
    assert_eq!(outcome(&scopes, Label::TOP, &next, "{}"), "deny by k7qm3x");
    // A refusing answer redecided is a refusal with the owner's reason.
    let Decision::Ask(ask) = decide(&policy(), Label::CLEAN, &next) else { panic!() };
    let answer = Answer::Scoped(ScopedAnswer {
        cover: scopes[0].cover.clone(),
        approve: false,
        reason: "not that API".into(),
    });
    let Decision::Deny(r) = redecide(&policy(), Label::CLEAN, &ask, &answer) else { panic!() };
    assert!(r.message.contains("not that API"), "{}", r.message);
}

#[test]
fn a_block_shows_where_the_taint_came_from_and_the_clean_decision() {
    let next = call("fs.write", vec![write("/w/out/b.md")]);
    let tainted = parse_label("public/untrusted").unwrap();
    let Decision::Ask(ask) = decide(&policy(), tainted, &next) else { panic!() };
    let clean = ask.at_clean.clone().unwrap();
    assert!(clean.starts_with("ask (write /w/out/b.md: grant[2]"), "{clean}");
    let Decision::Ask(ask) = decide(&policy(), Label::CLEAN, &next) else { panic!() };
    assert_eq!(ask.at_clean, None);
}

#[test]
fn a_session_that_read_untrusted_content_gets_no_approving_scope() {
    // What the model proposes after an untrusted read may be the attacker's: each such
    // call is approved on its own, while a refusal can still cover more.
    let next = call("fs.write", vec![write("/w/out/b.md")]);
    let tainted = parse_label("public/untrusted").unwrap();
    let Decision::Ask(ask) = decide(&policy(), tainted, &next) else { panic!() };
    let why = cover_for(&ask, "{}", &ScopeKind::Path(None), true).unwrap_err();
    assert_eq!(why, bx_broker::ScopeError::Untrusted);
    assert!(why.to_string().contains("untrusted content"), "{why}");
    assert!(bx_broker::offers(&ask, "{}").is_empty());
    assert!(cover_for(&ask, "{}", &ScopeKind::Path(None), false).unwrap().is_some());
    // A call that reads untrusted content itself is decided at that taint too.
    let reads_web = call("fs.write", vec![read("/w/web/page.html"), write("/w/out/c.md")]);
    let Decision::Ask(ask) = decide(&policy(), Label::CLEAN, &reads_web) else { panic!() };
    assert!(cover_for(&ask, "{}", &ScopeKind::Args, true).is_err());
}

#[test]
fn the_grant_of_a_covered_call_is_held_to_the_scope() {
    // The runtime then refuses what the decision could not see: a symlink under the
    // scope's directory that leads out of it, a redirect to another origin.
    use bx_broker::{FsAccess, Resource};
    let first = call("fs.read", vec![read("/w/pages/a/x.html")]);
    let mut policy_text = POLICY.to_owned();
    policy_text.push_str("\n[[grant]]\ntool = \"*\"\npath = \"/w/pages\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\n");
    let p = Policy::parse("p.toml", &policy_text).unwrap();
    let Decision::Ask(ask) = decide(&p, Label::CLEAN, &first) else { panic!("should ask") };
    let cover = cover_for(&ask, "{}", &ScopeKind::Path(None), true).unwrap().unwrap();
    let scope = Scope {
        id: "k7qm3x".into(),
        tool: "fs.read".into(),
        digest: "sha256:00".into(),
        taint: Label::TOP,
        cover,
        approve: true,
        reason: String::new(),
        reviewer: false,
    };
    let next = call("fs.read", vec![read("/w/pages/a/y.html")]);
    let (Decision::Allow(grant), Bearing::Approved(_)) =
        decide_scoped(&p, Label::CLEAN, &next, "{}", std::slice::from_ref(&scope))
    else {
        panic!()
    };
    assert!(grant.route_path("/w/pages/a/y.html", FsAccess::Read).is_ok());
    assert!(
        grant.route_path("/w/pages/b/z.html", FsAccess::Read).is_err(),
        "a sibling of the scope"
    );
    assert!(grant.route_path("/w/notes.md", FsAccess::Read).is_err(), "the parent's root");

    let first = call("http.fetch", vec![Resource::Url("https://api.example.com/a".into())]);
    let host = scope_of(&first, "{}", ScopeKind::Host, Label::CLEAN);
    let next = call("http.fetch", vec![Resource::Url("https://api.example.com/b".into())]);
    let (Decision::Allow(grant), _) = decide_scoped(&policy(), Label::CLEAN, &next, "{}", &[host])
    else {
        panic!()
    };
    let hosts: Vec<&bx_broker::HostRule> = grant.hosts().collect();
    assert_eq!(
        hosts,
        [&bx_broker::HostRule::Name { name: "api.example.com".into(), port: Some(443) }],
        "only the scope's origin, port and all"
    );
}
