//! Name rules: lists of names, names of several components, ASCII case folding, the
//! `[[ask]]` rule, and the default policy's credential denies under a home workspace.

use std::path::Path;

use bx_broker::{
    Answer, CREDENTIAL_STORES, CallRequest, Decision, Expect, FsAccess, Label, Policy, decide,
    redecide,
};

use super::{call, read, write};

/// "allow", "ask: <reasons>" or "deny: <reason>".
fn outcome(p: &Policy, c: &CallRequest) -> String {
    match decide(p, Label::CLEAN, c) {
        Decision::Allow(_) => "allow".into(),
        Decision::Ask(a) => format!("ask: {}", a.reasons.join("; ")),
        Decision::Deny(r) => format!("deny: {r}"),
    }
}

fn default_at(workspace: &str) -> Policy {
    let p = Policy::parse("example.toml", bx_broker::EXAMPLE_POLICY).unwrap();
    p.for_workspace(Some(Path::new(workspace))).into_owned()
}

/// Regression (issue 31, item 2): with the default policy and the workspace at the
/// owner's home, fs.read, fs.search and fs.list read 34 of 42 common credential stores
/// without a prompt. Every well-known store is now refused, by decide and by the grant a
/// read of the home directory runs under (which a listing or search of it uses).
#[test]
fn the_default_policy_refuses_credential_stores_under_a_home_workspace() {
    let p = default_at("/home/owner");
    let Decision::Allow(home) =
        decide(&p, Label::CLEAN, &call("fs.list", vec![read("/home/owner")]))
    else {
        panic!("a listing of the home workspace runs")
    };
    for store in CREDENTIAL_STORES {
        let path = format!("/home/owner/{}", store.path);
        for tool in ["fs.read", "fs.search", "fs.list"] {
            let got = outcome(&p, &call(tool, vec![read(&path)]));
            assert!(got.starts_with(&format!("deny: read {path} is refused by deny[")), "{got}");
        }
        assert!(home.denied_prefix(Path::new(&path)).is_some(), "{path} listed");
        assert!(home.route_path(&path, FsAccess::Read).is_err(), "{path} read");
    }
    // The refusal says which name refused it.
    let got = outcome(&p, &call("fs.read", vec![read("/home/owner/.aws/credentials")]));
    assert_eq!(
        got,
        "deny: read /home/owner/.aws/credentials is refused by deny[1] (line 70), name .aws"
    );
    // What is not a credential store still reads.
    for path in ["/home/owner/notes/todo.md", "/home/owner/.bashrc", "/home/owner/proj/.git/HEAD"] {
        assert_eq!(outcome(&p, &call("fs.read", vec![read(path)])), "allow", "{path}");
    }
}

#[test]
fn names_match_ignoring_ascii_case() {
    let p = default_at("/home/o/site");
    for path in ["/home/o/site/server.PEM", "/home/o/site/.ENV", "/home/o/site/.Git/Config"] {
        let got = outcome(&p, &call("fs.read", vec![read(path)]));
        assert!(got.starts_with("deny: "), "{path}: {got}");
    }
}

#[test]
fn a_name_of_several_components_matches_them_one_after_the_other_anywhere() {
    let p = Policy::parse(
        "p.toml",
        "[[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
         [[deny]]\ntool = \"*\"\nname = \".git/config\"\n",
    )
    .unwrap();
    for path in ["/w/.git/config", "/w/a/sub/.git/config", "/w/.git/config/x"] {
        let got = outcome(&p, &call("fs.read", vec![read(path)]));
        assert_eq!(
            got,
            format!("deny: read {path} is refused by deny[0] (line 7), name .git/config")
        );
    }
    for path in ["/w/.git", "/w/.git/HEAD", "/w/.git/x/config", "/w/config/.git", "/w/config"] {
        assert_eq!(outcome(&p, &call("fs.read", vec![read(path)])), "allow", "{path}");
    }
    // The runtime refuses the same paths under a read of the parent, and a listing of
    // `sub/.git` leaves `config` out.
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &call("fs.list", vec![read("/w")])) else {
        panic!("the listing runs")
    };
    let refusal = g.denied_prefix(Path::new("/w/a/sub/.git/config")).map(|r| r.to_string());
    assert_eq!(refusal.as_deref(), Some("a name denied by rule (name .git/config)"));
    assert!(g.denied_prefix(Path::new("/w/a/sub/.git/HEAD")).is_none());
}

#[test]
fn a_name_may_be_a_list_and_each_entry_is_checked_where_it_is_written() {
    let text = "[[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
                [[deny]]\ntool = \"fs.read\"\nname = [\".aws\", \"*.kdbx\"]\n";
    let p = Policy::parse("p.toml", text).unwrap();
    assert_eq!(p.denies()[0].to_string(), "deny[0] (line 7): tool fs.read names .aws, *.kdbx");
    let got = outcome(&p, &call("fs.read", vec![read("/w/x/Vault.KDBX")]));
    assert_eq!(got, "deny: read /w/x/Vault.KDBX is refused by deny[0] (line 7), name *.kdbx");
    // Only for the tool it names.
    assert_eq!(outcome(&p, &call("fs.search", vec![read("/w/.aws/credentials")])), "allow");

    // refuses_bad_names_in_a_list: each at its own line and column, with its index.
    let bad =
        "[[deny]]\ntool = \"*\"\nname = [\n  \".aws\",\n  \"a/../b\",\n  \"*\", \"/etc\",\n]\n";
    let err = Policy::parse("p.toml", bad).unwrap_err();
    let at: Vec<(usize, usize, &str)> =
        err.0.iter().map(|e| (e.line, e.column, e.rule.as_str())).collect();
    assert_eq!(
        at,
        vec![(5, 3, "deny[0].name[1]"), (6, 3, "deny[0].name[2]"), (6, 8, "deny[0].name[3]")]
    );
    assert!(
        err.to_string().contains("p.toml:5:3: deny[0].name[1]: a name has no \"..\" component"),
        "{err}"
    );
}

#[test]
fn refuses_empty_lists_non_strings_and_bad_single_names_with_their_location() {
    for (text, want) in [
        (
            "[[deny]]\ntool = \"*\"\nname = []\n",
            "p.toml:3:8: deny[0].name: an empty list names nothing",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = \"a//b\"\n",
            "p.toml:3:8: deny[0].name: a name has no empty component",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = \"/etc/shadow\"\n",
            "p.toml:3:8: deny[0].name: a name is relative",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = \".git/*\"\n",
            "p.toml:3:8: deny[0].name: a component of only *",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = 3\n",
            "p.toml:3:8: toml: invalid type: integer `3`, expected a name or an array of names",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = [\"a\", 3]\n",
            "p.toml:3:14: toml: invalid type: integer `3`, expected a string",
        ),
        (
            "[[ask]]\ntool = \"*\"\nname = \"a\"\nmode = \"fetch\"\n",
            "p.toml:4:8: ask[0].mode: \"fetch\" is not one of read, write",
        ),
        ("[[ask]]\ntool = \"*\"\nname = \"a\"\n", "p.toml:1:1: toml: missing field `mode`"),
        (
            "[[ask]]\ntool = \"*\"\npath = \"/a\"\nname = \"a\"\nmode = \"write\"\n",
            "p.toml:3:1: toml: unknown field `path`",
        ),
        (
            "[[ask]]\ntool = \"*\"\nname = [\"ok\", \"**\"]\nmode = \"write\"\n",
            "p.toml:3:15: ask[0].name[1]: \"**\": a component has at most one *",
        ),
    ] {
        let err = Policy::parse("p.toml", text).unwrap_err().to_string();
        assert!(err.starts_with(want), "{text}\n--- got\n{err}");
    }
}

/// A policy whose workspace write grant allows without asking, and an `[[ask]]` rule.
const ASKS: &str = "[[grant]]\ntool = \"*\"\npath = \"{workspace}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n\n\
[[grant]]\ntool = \"*\"\npath = \"{workspace}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n\n\
[[deny]]\ntool = \"*\"\nname = \".git/config\"\n\n\
[[ask]]\ntool = \"*\"\nmode = \"write\"\nname = [\".git/hooks\", \".bashrc\", \".git/config\"]\n";

#[test]
fn an_ask_rule_asks_at_every_taint_and_never_allows() {
    let p = Policy::parse("p.toml", ASKS).unwrap();
    assert_eq!(
        p.asks()[0].to_string(),
        "ask[0] (line 19): tool * write names .git/hooks, .bashrc, .git/config"
    );
    let ws = p.for_workspace(Some(Path::new("/w")));
    assert_eq!(outcome(&ws, &call("fs.write", vec![write("/w/notes.md")])), "allow");
    let hook = call("fs.write", vec![write("/w/.git/hooks/post-commit")]);
    assert_eq!(
        outcome(&ws, &hook),
        "ask: write /w/.git/hooks/post-commit: ask[0] (line 19) asks before every write of name .git/hooks"
    );
    for taint in [Label::CLEAN, Label::TOP] {
        assert!(matches!(decide(&ws, taint, &hook), Decision::Ask(_)), "{taint}");
        let rc = call("fs.write", vec![write("/w/sub/.BASHRC")]);
        assert!(matches!(decide(&ws, taint, &rc), Decision::Ask(_)), "{taint}");
    }
    // Reading is not what it asks about.
    assert_eq!(outcome(&ws, &call("fs.read", vec![read("/w/.bashrc")])), "allow");
    // A deny still wins, and it grants nothing no grant covers.
    let got = outcome(&ws, &call("fs.write", vec![write("/w/.git/config")]));
    assert!(got.starts_with("deny: write /w/.git/config is refused by deny[0]"), "{got}");
    let got = outcome(&ws, &call("fs.write", vec![write("/elsewhere/.bashrc")]));
    assert!(got.starts_with("deny: no grant covers"), "{got}");
}

#[test]
fn a_write_that_names_another_path_never_reaches_what_an_ask_rule_covers() {
    let p = Policy::parse("p.toml", ASKS).unwrap();
    let ws = p.for_workspace(Some(Path::new("/w")));
    let Decision::Allow(g) =
        decide(&ws, Label::CLEAN, &call("fs.write", vec![write("/w/notes.md")]))
    else {
        panic!("a write of the workspace runs")
    };
    assert!(g.route_path("/w/other.md", FsAccess::Write).is_ok());
    let err = g.route_path("/w/.git/hooks/pre-commit", FsAccess::Write).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/w/.git/hooks/pre-commit is under a name that asks the owner first (name .git/hooks); only a call that names it reaches it"
    );
    assert!(g.route_path("/w/a/.bashrc", FsAccess::Write).is_err());
    // Reading and listing it stay as they were.
    assert!(g.route_path("/w/.git/hooks/pre-commit", FsAccess::Read).is_ok());
    assert!(g.denied_prefix(Path::new("/w/.git/hooks/pre-commit")).is_none());

    // A call that names the hook, once approved, reaches that path (and below it) only.
    let hook = call("fs.write", vec![write("/w/.git/hooks/post-commit")]);
    let Decision::Ask(asked) = decide(&ws, Label::CLEAN, &hook) else { panic!("it asks") };
    let Decision::Allow(g) = redecide(&ws, Label::CLEAN, &asked, &Answer::Approve) else {
        panic!("the approved call runs")
    };
    assert!(g.route_path("/w/.git/hooks/post-commit", FsAccess::Write).is_ok());
    assert!(g.route_path("/w/.git/hooks/pre-push", FsAccess::Write).is_err());
    assert!(g.route_path("/w/.bashrc", FsAccess::Write).is_err());
}

#[test]
fn a_read_ask_rule_keeps_a_listing_from_naming_what_it_covers() {
    let text = "[[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
                [[ask]]\ntool = \"*\"\nmode = \"read\"\nname = \"diary\"\n";
    let p = Policy::parse("p.toml", text).unwrap();
    assert!(outcome(&p, &call("fs.read", vec![read("/w/diary/today.md")])).starts_with("ask: "));
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &call("fs.list", vec![read("/w")])) else {
        panic!("the listing runs")
    };
    assert!(g.denied_prefix(Path::new("/w/diary")).is_some());
    assert!(g.denied_prefix(Path::new("/w/notes")).is_none());
}

#[test]
fn doctor_finds_no_gap_in_the_default_policy_and_every_gap_without_its_denies() {
    let home = Path::new("/home/owner");
    let p = Policy::parse("example.toml", bx_broker::EXAMPLE_POLICY).unwrap();
    assert_eq!(p.missing_credential_denies(home), Vec::new());
    // The default policy with its deny rules cut out: every store reads.
    let (grants_only, _) = bx_broker::EXAMPLE_POLICY.split_once("\n[[deny]]\n").unwrap();
    let p = Policy::parse("p.toml", grants_only).unwrap();
    assert_eq!((p.grants().len(), p.denies().len()), (3, 0));
    let gaps = p.missing_credential_denies(home);
    assert_eq!(gaps.len(), CREDENTIAL_STORES.len());
    assert!(gaps.iter().all(|g| g.tool == "*" && g.decision == Expect::Allow), "{gaps:?}");
}
