//! Decisions, rule by rule.

use std::path::Path;

use bx_broker::{
    Answer, CallRequest, Decision, Label, Policy, Resource, decide, parse_label, redecide,
};

use super::{call, read, write};

fn policy(text: &str) -> Policy {
    Policy::parse("p.toml", text).unwrap()
}

fn fetch(u: &str) -> Resource {
    Resource::Url(u.into())
}

fn label(s: &str) -> Label {
    parse_label(s).unwrap()
}

/// "allow", "ask" or "deny: <reason>".
fn outcome(p: &Policy, taint: &str, c: &CallRequest) -> String {
    match decide(p, label(taint), c) {
        Decision::Allow(_) => "allow".into(),
        Decision::Ask(_) => "ask".into(),
        Decision::Deny(r) => format!("deny: {r}"),
    }
}

const BASE: &str = r#"
[[grant]]
tool = "*"
path = "/home/o"
mode = "read"
label = "private/trusted"
when_tainted = "allow"

[[grant]]
tool = "*"
path = "/home/o/public"
mode = "read"
label = "public/trusted"
when_tainted = "deny"

[[grant]]
tool = "fs.write"
path = "/home/o/out"
mode = "write"
label = "private/trusted"
when_tainted = "ask"

[[grant]]
tool = "http.fetch"
host = "example.com"
mode = "fetch"
label = "public/untrusted"
when_tainted = "deny"

[[deny]]
tool = "*"
path = "/home/o/.ssh"
"#;

#[test]
fn deny_rule_applies_at_every_taint() {
    let p = policy(BASE);
    for taint in ["public/trusted", "private/trusted", "secret/untrusted"] {
        let got = outcome(&p, taint, &call("fs.read", vec![read("/home/o/.ssh/id")]));
        assert!(
            got.starts_with("deny: read /home/o/.ssh/id is refused by deny[0] (line 30)"),
            "{taint}: {got}"
        );
    }
}

#[test]
fn longest_path_wins_within_a_mode() {
    let p = policy(BASE);
    // /home/o/public is the longer match: its label is public, so a private session is
    // tainted relative to it, and it denies when tainted.
    let got = outcome(&p, "private/trusted", &call("fs.read", vec![read("/home/o/public/a")]));
    assert!(got.contains("grant[1] (line 9)") && got.contains("denies when tainted"), "{got}");
    assert_eq!(
        outcome(&p, "private/trusted", &call("fs.read", vec![read("/home/o/notes")])),
        "allow"
    );
    assert_eq!(
        outcome(&p, "public/trusted", &call("fs.read", vec![read("/home/o/public/a")])),
        "allow"
    );
}

#[test]
fn mode_and_tool_must_match() {
    let p = policy(BASE);
    let got = outcome(&p, "public/trusted", &call("fs.write", vec![write("/home/o/notes")]));
    assert_eq!(got, "deny: no grant covers write /home/o/notes for fs.write");
    let got = outcome(&p, "public/trusted", &call("fs.edit", vec![write("/home/o/out/x")]));
    assert_eq!(got, "deny: no grant covers write /home/o/out/x for fs.edit");
    assert_eq!(
        outcome(&p, "public/trusted", &call("fs.write", vec![write("/home/o/out/x")])),
        "allow"
    );
}

#[test]
fn named_tool_beats_wildcard_at_the_same_depth() {
    let p = policy(
        r#"
[[grant]]
tool = "*"
path = "/srv"
mode = "read"
label = "public/trusted"
when_tainted = "allow"
[[grant]]
tool = "fs.read"
path = "/srv"
mode = "read"
label = "public/trusted"
when_tainted = "deny"
"#,
    );
    assert!(
        outcome(&p, "secret/trusted", &call("fs.read", vec![read("/srv/x")])).contains("grant[1]")
    );
    assert_eq!(outcome(&p, "secret/trusted", &call("fs.list", vec![read("/srv/x")])), "allow");
}

#[test]
fn when_tainted_applies_only_when_taint_does_not_flow_to_the_label() {
    let p = policy(BASE);
    let c = call("fs.write", vec![write("/home/o/out/report.md")]);
    assert_eq!(outcome(&p, "public/trusted", &c), "allow");
    assert_eq!(outcome(&p, "private/trusted", &c), "allow");
    assert_eq!(outcome(&p, "public/untrusted", &c), "ask");
    assert_eq!(outcome(&p, "secret/trusted", &c), "ask");
}

#[test]
fn hosts_match_by_name_never_by_address() {
    let p = policy(BASE);
    assert_eq!(
        outcome(&p, "public/trusted", &call("http.fetch", vec![fetch("https://example.com/x")])),
        "allow"
    );
    assert_eq!(
        outcome(&p, "public/trusted", &call("http.fetch", vec![fetch("https://EXAMPLE.com./x")])),
        "allow"
    );
    for url in
        ["http://93.184.215.14/", "http://127.0.0.1/", "https://example.org/", "ftp://example.com/"]
    {
        let got = outcome(&p, "public/trusted", &call("http.fetch", vec![fetch(url)]));
        assert!(got.starts_with("deny"), "{url}: {got}");
    }
    // A private session may not send anything to a public host (exfiltration).
    let got = outcome(
        &p,
        "private/trusted",
        &call("http.fetch", vec![fetch("https://example.com/?q=secret")]),
    );
    assert!(got.contains("denies when tainted"), "{got}");
}

#[test]
fn worst_resource_decides_and_grant_reaches_only_what_covered() {
    let p = policy(BASE);
    let c = call("fs.write", vec![read("/home/o/notes/a"), write("/home/o/out/b")]);
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &c) else { panic!("not allowed") };
    let roots: Vec<String> = g.roots().map(|(p, k)| format!("{} {k:?}", p.display())).collect();
    assert_eq!(roots, vec!["/home/o ReadOnly", "/home/o/out ReadWrite"]);
    assert_eq!(g.denied().collect::<Vec<_>>(), vec![Path::new("/home/o/.ssh")]);
    assert_eq!(g.root_label(Path::new("/home/o")), Some(label("private/trusted")));
    assert_eq!(g.hosts().count(), 0);
    let mixed = call("fs.write", vec![read("/home/o/notes/a"), write("/etc/passwd")]);
    assert!(
        outcome(&p, "public/trusted", &mixed)
            .starts_with("deny: no grant covers write /etc/passwd")
    );
}

#[test]
fn bad_paths_and_urls_are_refused() {
    let p = policy(BASE);
    for r in
        [read("/home/o/../etc/passwd"), read("relative"), read("/home/o/\0x"), fetch("not a url")]
    {
        assert!(
            outcome(&p, "public/trusted", &call("fs.read", vec![r.clone()])).starts_with("deny"),
            "{r:?}"
        );
    }
}

#[test]
fn redecide_against_the_policy_and_taint_of_the_moment() {
    let p = policy(BASE);
    let c = call("fs.write", vec![write("/home/o/out/x")]);
    let Decision::Ask(ask) = decide(&p, label("public/untrusted"), &c) else {
        panic!("should ask")
    };
    assert!(matches!(
        redecide(&p, label("public/untrusted"), &ask, &Answer::Approve),
        Decision::Allow(_)
    ));
    let refused =
        redecide(&p, label("public/untrusted"), &ask, &Answer::Refuse("not today".into()));
    assert_eq!(
        refused,
        Decision::Deny(bx_broker::DenyReason { message: "refused by the owner: not today".into() })
    );
    assert!(matches!(
        redecide(&p, label("public/untrusted"), &ask, &Answer::Expired),
        Decision::Deny(_)
    ));

    // A deny rule added while the call waited wins over the approval.
    let stricter = policy(&format!("{BASE}\n[[deny]]\ntool = \"*\"\npath = \"/home/o/out\"\n"));
    assert!(matches!(
        redecide(&stricter, label("public/untrusted"), &ask, &Answer::Approve),
        Decision::Deny(_)
    ));

    // A resource that now asks too (the taint rose) was not shown to the owner: refused.
    let p2 = policy(
        r#"
[[grant]]
tool = "*"
path = "/w"
mode = "write"
label = "private/trusted"
when_tainted = "ask"
[[grant]]
tool = "*"
host = "example.com"
mode = "fetch"
label = "public/untrusted"
when_tainted = "ask"
"#,
    );
    let two = call("t", vec![write("/w/x"), fetch("https://example.com/")]);
    let Decision::Ask(ask2) = decide(&p2, label("public/untrusted"), &two) else {
        panic!("should ask")
    };
    assert_eq!(ask2.asking, vec![write("/w/x")]);
    assert!(matches!(
        redecide(&p2, label("public/untrusted"), &ask2, &Answer::Approve),
        Decision::Allow(_)
    ));
    let later = redecide(&p2, label("private/untrusted"), &ask2, &Answer::Approve);
    assert!(
        matches!(&later, Decision::Deny(r) if r.message.contains("now needs approval too")),
        "{later:?}"
    );
}

#[test]
fn deny_of_root_refuses_every_path() {
    let p = policy(&format!("{BASE}\n[[deny]]\ntool = \"*\"\npath = \"/\"\n"));
    let got = outcome(&p, "public/trusted", &call("fs.read", vec![read("/home/o/notes")]));
    assert!(got.starts_with("deny: read /home/o/notes is refused by deny[1]"), "{got}");
}

const NESTED: &str = r#"
[[grant]]
tool = "*"
path = "/w"
mode = "read"
label = "public/trusted"
when_tainted = "allow"

[[grant]]
tool = "*"
path = "/w/secret"
mode = "read"
label = "secret/trusted"
when_tainted = "deny"
"#;

/// A nested grant keeps its label: what a call reads under it through the wider root is
/// labelled by the most specific grant, not the root the call was decided on.
#[test]
fn nested_grants_keep_their_label_through_the_parent() {
    let p = policy(NESTED);
    let Decision::Allow(g) =
        decide(&p, label("public/trusted"), &call("fs.search", vec![read("/w")]))
    else {
        panic!("reading /w is allowed");
    };
    assert_eq!(g.path_label(Path::new("/w/notes.txt")), label("public/trusted"));
    assert_eq!(g.path_label(Path::new("/w/secret/secret.txt")), label("secret/trusted"));
    assert_eq!(g.path_label(Path::new("/elsewhere")), Label::TOP);
    assert_eq!(g.reach_label(), label("secret/trusted"));
    // Clean, the nested grant is reachable through the parent.
    assert!(g.denied_prefix(Path::new("/w/secret/secret.txt")).is_none());
}

/// A nested grant that would refuse at this taint is out of reach through the parent,
/// so a search of /w cannot read what a direct read of /w/secret would refuse.
#[test]
fn nested_grant_that_refuses_at_this_taint_is_denied_through_the_parent() {
    let p = policy(NESTED);
    let tainted = label("public/untrusted");
    let Decision::Allow(g) = decide(&p, tainted, &call("fs.search", vec![read("/w")])) else {
        panic!("reading /w is allowed at any taint");
    };
    assert!(g.denied_prefix(Path::new("/w/secret/secret.txt")).is_some());
    assert!(g.denied_prefix(Path::new("/w/other")).is_none());
    assert!(
        outcome(&p, "public/untrusted", &call("fs.read", vec![read("/w/secret/x")]))
            .starts_with("deny")
    );
}

/// bx's own state is refused in every mode, whatever grants cover it, and a grant over
/// it carries it as a denied sub-path.
#[test]
fn own_state_is_refused_and_named() {
    let p =
        policy(BASE).protect_own([std::path::PathBuf::from("/home/o/.local/state/bx")]).unwrap();
    for r in [read("/home/o/.local/state/bx/policy.toml"), write("/home/o/.local/state/bx/x")] {
        let got = outcome(&p, "public/trusted", &call("fs.write", vec![r]));
        assert!(got.contains("bx's own state") && got.contains("#own-state"), "{got}");
    }
    let got =
        outcome(&p, "public/trusted", &call("fs.read", vec![read("/home/o//.local/./state/bx")]));
    assert!(got.starts_with("deny"), "{got}");
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &call("fs.read", vec![read("/home/o")]))
    else {
        panic!("reading /home/o is allowed");
    };
    assert!(g.denied().any(|d| d == Path::new("/home/o/.local/state/bx")));
    let over: Vec<usize> = p.grants_over_own().iter().map(|(g, _)| g.index).collect();
    assert_eq!(over, vec![0]);
}

const IN_WORKSPACE: &str = r#"
[[grant]]
tool = "*"
path = "{workspace}"
mode = "read"
label = "private/trusted"
when_tainted = "allow"

[[grant]]
tool = "fs.write"
path = "{workspace}"
mode = "write"
label = "private/trusted"
when_clean = "ask"

[[grant]]
tool = "*"
path = "{workspace}/secrets"
mode = "read"
label = "secret/trusted"
when_clean = "ask"

[[deny]]
tool = "*"
path = "{workspace}/.env"

[[example]]
tool = "fs.read"
read = "/home/o/p/.env"
workspace = "/home/o/p"
expect = "deny"

[[example]]
tool = "fs.read"
read = "/home/o/p/src/main.rs"
workspace = "/home/o/p"
expect = "allow"
"#;

#[test]
fn workspace_rules_apply_to_the_session_workspace_only() {
    let template = policy(IN_WORKSPACE);
    let p = template.for_workspace(Some(Path::new("/home/o/p")));
    assert_eq!(outcome(&p, "public/trusted", &call("fs.read", vec![read("/home/o/p/a")])), "allow");
    // Asks at every taint, clean included.
    assert_eq!(outcome(&p, "public/trusted", &call("fs.write", vec![write("/home/o/p/a")])), "ask");
    let got = outcome(&p, "public/trusted", &call("fs.read", vec![read("/home/o/p/.env/x")]));
    assert!(got.starts_with("deny: read /home/o/p/.env/x is refused by deny[0]"), "{got}");
    // Another session's workspace is not this one's.
    let got = outcome(&p, "public/trusted", &call("fs.read", vec![read("/home/o/q/a")]));
    assert!(got.starts_with("deny: no grant covers"), "{got}");
    // A session with no workspace, and the policy before one is put in, grant nothing.
    for p in [template.for_workspace(None).into_owned(), template.clone()] {
        let got = outcome(&p, "public/trusted", &call("fs.read", vec![read("/home/o/p/a")]));
        assert!(got.starts_with("deny: no grant covers"), "{got}");
    }
    // A nested grant that asks always is a denied sub-path of a read of its parent.
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &call("fs.read", vec![read("/home/o/p")]))
    else {
        panic!("the workspace read is allowed")
    };
    assert!(g.denied().any(|d| d == Path::new("/home/o/p/secrets")), "{g:?}");
    // The rules say where they came from.
    let lines: Vec<String> = template.grants().iter().map(ToString::to_string).collect();
    assert!(
        lines[1].ends_with("{workspace}, label private/trusted, when tainted ask, asks always")
    );
    assert!(lines[2].contains(" read {workspace}/secrets,"), "{lines:?}");
}

#[test]
fn workspace_paths_are_checked_where_they_are_written() {
    for (path, why) in [
        ("{workspace}src", "after {workspace} comes / or the end of the path"),
        ("/home/{workspace}", "{workspace} may only begin a path"),
        ("{workspace}/../etc", ".."),
        ("{workspace}/a/{workspace}", "{workspace} may only begin a path"),
    ] {
        let text = format!(
            "[[grant]]\ntool = \"*\"\npath = \"{path}\"\nmode = \"read\"\nlabel = \"public/trusted\"\n"
        );
        let err = Policy::parse("p.toml", &text).unwrap_err().to_string();
        assert!(err.contains("grant[0].path") && err.contains(why), "{path}: {err}");
    }
    // Examples are decided in the workspace they name.
    let wrong = IN_WORKSPACE.replace(
        "workspace = \"/home/o/p\"\nexpect = \"allow\"",
        "workspace = \"/home/o/q\"\nexpect = \"allow\"",
    );
    let err = Policy::parse("p.toml", &wrong).unwrap_err().to_string();
    assert!(err.contains("example[1]") && err.contains("no grant covers"), "{err}");
}

#[test]
fn name_rules_refuse_a_file_name_anywhere_and_the_grant_carries_them() {
    let p = policy(bx_broker::EXAMPLE_POLICY);
    let p = p.for_workspace(Some(Path::new("/home/o/p")));
    for path in
        ["/home/o/p/.env", "/home/o/p/a/b/.env", "/home/o/p/.env.local", "/home/o/p/certs/x.pem"]
    {
        let got = outcome(&p, "public/trusted", &call("fs.read", vec![read(path)]));
        assert!(got.starts_with(&format!("deny: read {path} is refused by deny[")), "{got}");
    }
    for path in ["/home/o/p/env", "/home/o/p/a.envx", "/home/o/p/pem", "/home/o/p/.environment"] {
        assert_eq!(outcome(&p, "public/trusted", &call("fs.read", vec![read(path)])), "allow");
    }
    // A read of the workspace itself runs, and the runtime refuses those names in it.
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &call("fs.list", vec![read("/home/o/p")]))
    else {
        panic!("the workspace read is allowed")
    };
    let refusal = g.denied_prefix(Path::new("/home/o/p/sub/.env")).map(|r| r.to_string());
    assert_eq!(refusal.as_deref(), Some("a name denied by rule (name .env)"));
    assert!(g.denied_prefix(Path::new("/home/o/p/sub/notes.md")).is_none());
    assert!(g.denied_prefix(Path::new("/home/o/p/.git/config")).is_some());
    // A name's components each have at most one `*` (see suite::names for the rest).
    for bad in ["/a/b", "*", "..", "*a*", "", "\\n", " ", "a/*"] {
        let text = format!("[[deny]]\ntool = \"*\"\nname = \"{bad}\"\n");
        let err = Policy::parse("p.toml", &text).unwrap_err().to_string();
        assert!(err.contains("deny[0].name"), "{bad}: {err}");
    }
    let none = Policy::parse("p.toml", "[[deny]]\ntool = \"*\"\n").unwrap_err().to_string();
    assert!(none.contains("needs a path, a host, a name, or mode = \"call\""), "{none}");
    let both = "[[deny]]\ntool = \"*\"\nname = \".env\"\npath = \"/a\"\n";
    let err = Policy::parse("p.toml", both).unwrap_err().to_string();
    assert!(err.contains("give one of path, host or name"), "{err}");
}

#[test]
fn a_named_host_beats_the_any_name_rule() {
    let p = policy(
        "[[grant]]\ntool = \"http.fetch\"\nhost = \"*\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\nwhen_clean = \"ask\"\n\n\
         [[grant]]\ntool = \"http.fetch\"\nhost = \"docs.rs\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\nwhen_tainted = \"allow\"\n",
    );
    assert_eq!(
        outcome(&p, "public/trusted", &call("http.fetch", vec![fetch("https://docs.rs/x")])),
        "allow"
    );
    assert_eq!(
        outcome(&p, "public/trusted", &call("http.fetch", vec![fetch("https://crates.io/")])),
        "ask"
    );
    // `*` is names only: an address needs its own rule.
    let got =
        outcome(&p, "public/trusted", &call("http.fetch", vec![fetch("http://127.0.0.1:8080/")]));
    assert!(got.starts_with("deny: no grant covers"), "{got}");
}

/// An upstream tool's call is decided by its call grant and, where it acts on the world,
/// against its sink's label as a fetch is against its host's: the toxic flow's last step
/// (private data read, a public post) asks, or is refused under `when_tainted = "deny"`.
#[test]
fn an_upstream_call_is_decided_against_its_sinks_label() {
    let p = policy(
        r#"
[[grant]]
tool = "code.get_issue"
mode = "call"

[[grant]]
tool = "code.create_comment"
mode = "call"
when_tainted = "ask"

[[grant]]
tool = "mail.send"
mode = "call"
when_tainted = "deny"
"#,
    );
    let source = call("code.get_issue", vec![Resource::Call { sink: None, unlabelled: false }]);
    let public_sink = |tool: &str| {
        call(
            tool,
            vec![Resource::Call { sink: Some(label("public/untrusted")), unlabelled: false }],
        )
    };
    // A tool that only reads runs at any taint; its result raises the taint (the caller's).
    assert_eq!(outcome(&p, "secret/untrusted", &source), "allow");
    // A public sink from a clean or public session runs; from a private one it asks.
    assert_eq!(outcome(&p, "public/untrusted", &public_sink("code.create_comment")), "allow");
    assert_eq!(outcome(&p, "private/untrusted", &public_sink("code.create_comment")), "ask");
    let private_sink = call(
        "code.create_comment",
        vec![Resource::Call { sink: Some(label("private/untrusted")), unlabelled: false }],
    );
    assert_eq!(outcome(&p, "private/untrusted", &private_sink), "allow");
    let denied = outcome(&p, "private/trusted", &public_sink("mail.send"));
    assert!(denied.starts_with("deny: call, sending to a sink labelled public/untrusted: session taint private/trusted does not flow to the sink's label public/untrusted (grant[2] (line 11), which denies"), "{denied}");
    // A tool no manifest labels asks at every taint, and no scoped answer covers it.
    let unlabelled = call(
        "code.get_issue",
        vec![Resource::Call { sink: Some(label("public/untrusted")), unlabelled: true }],
    );
    match decide(&p, label("public/trusted"), &unlabelled) {
        Decision::Ask(ask) => {
            assert_eq!(ask.every.len(), 1);
            assert!(ask.reasons[0].contains("no manifest entry says what code.get_issue does"));
        }
        other => panic!("{other:?}"),
    }
    // A deny of a tool's calls wins over its grant, at every taint; a path deny does not
    // touch a call.
    let denied_policy = policy(&format!(
        "[[deny]]\ntool = \"code.*\"\nmode = \"call\"\n\n[[deny]]\ntool = \"*\"\npath = \"/home/o\"\n{}",
        "[[grant]]\ntool = \"*\"\nmode = \"call\"\n"
    ));
    let refused = outcome(&denied_policy, "public/trusted", &source);
    assert!(refused.starts_with("deny: call is refused by deny[0]"), "{refused}");
    let mail = call("mail.read", vec![Resource::Call { sink: None, unlabelled: false }]);
    assert_eq!(outcome(&denied_policy, "public/trusted", &mail), "allow");
    let errors =
        Policy::parse("p.toml", "[[deny]]\ntool = \"x\"\nmode = \"call\"\npath = \"/a\"\n")
            .unwrap_err()
            .to_string();
    assert!(errors.contains("deny[0].mode"), "{errors}");
    // No call grant: refused; and a path or host grant never covers a call.
    let other = outcome(
        &p,
        "public/trusted",
        &call("code.delete_repo", vec![Resource::Call { sink: None, unlabelled: false }]),
    );
    assert!(other.starts_with("deny: no grant covers call for code.delete_repo"), "{other}");
    let fs = policy(BASE);
    assert!(outcome(&fs, "public/trusted", &source).starts_with("deny: no grant covers call"));
}

#[test]
fn a_call_grant_names_only_its_tool() {
    for (extra, field) in [
        ("path = \"/home/o\"", "grant[0].path"),
        ("host = \"example.com\"", "grant[0].host"),
        ("label = \"public/untrusted\"", "grant[0].label"),
    ] {
        let text = format!("[[grant]]\ntool = \"code.post\"\nmode = \"call\"\n{extra}\n");
        let errors = Policy::parse("p.toml", &text).unwrap_err().to_string();
        assert!(
            errors.contains(field) && errors.contains("a call grant names only its tool"),
            "{errors}"
        );
    }
    let errors =
        Policy::parse("p.toml", "[[grant]]\ntool = \"*\"\npath = \"/home/o\"\nmode = \"read\"\n")
            .unwrap_err()
            .to_string();
    assert!(errors.contains("grant[0]: needs a label"), "{errors}");
}

/// `approver = "owner"` on any grant that covers the call marks its ask for a person
/// (the reviewer program is not asked); the default leaves it to whoever answers.
#[test]
fn a_grant_with_approver_owner_marks_its_asks_for_the_owner_in_person() {
    let text = |approver: &str| {
        format!(
            "[[grant]]\ntool = \"fs.write\"\npath = \"/home/o/out\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\n{approver}"
        )
    };
    for (approver, person) in
        [("", false), ("approver = \"any\"\n", false), ("approver = \"owner\"\n", true)]
    {
        let p = policy(&text(approver));
        match decide(&p, label("public/trusted"), &call("fs.write", vec![write("/home/o/out/a")])) {
            Decision::Ask(ask) => assert_eq!(ask.person, person, "{approver}"),
            other => panic!("{approver}: {other:?}"),
        }
    }
    let shown = policy(&text("approver = \"owner\"\n")).grants()[0].to_string();
    assert!(shown.ends_with(", asks always, answered by the owner in person"), "{shown}");
    let err = Policy::parse("p.toml", &text("approver = \"reviewer\"\n")).unwrap_err();
    let err = err.to_string();
    assert!(err.contains("p.toml:7:") && err.contains("grant[0].approver"), "{err}");
}
