//! The approval block, pinned by golden files, with hostile arguments.

use bx_broker::{
    ApprovalTable, Decision, Label, Policy, Resource, decide, escape_untrusted, parse_label,
    render_block,
};

use super::*;

const POLICY: &str = r#"
[[grant]]
tool = "fs.write"
path = "/home/o/out"
mode = "write"
label = "private/trusted"
when_tainted = "ask"
"#;

fn pending(args: &str, path: &str) -> bx_broker::Pending {
    let policy = Policy::parse("p.toml", POLICY).unwrap();
    let call = bx_broker::CallRequest {
        tool: "fs.write".into(),
        digest: "sha256:5e".into(),
        resources: vec![Resource::PathWrite(path.into())],
    };
    let Decision::Ask(ask) = decide(&policy, parse_label("public/untrusted").unwrap(), &call)
    else {
        panic!("should ask")
    };
    let table = ApprovalTable::new();
    let mut p = table.insert(ask, args.into(), 1_000, 120_000);
    p.id = "7kq3mx".into(); // ids are random; pin one for the golden file
    p
}

#[test]
fn plain_block() {
    let p = pending(
        r#"{"path":"/home/o/out/today.md","content":"hello\nworld","mode":"create"}"#,
        "/home/o/out/today.md",
    );
    golden("approval/plain.txt", &render_block(&p, "sha256:5e", 31_000));
}

#[test]
fn bidi_override_and_zero_width_characters_are_shown() {
    // U+202E makes "gpj.exe" display as "exe.jpg"; U+200B, U+200D and U+2060 hide in words;
    // tag characters (U+E0041…) carry invisible text; U+2066/U+2069 isolate.
    let path = "/home/o/out/invoice\u{202e}gpj.exe";
    let content = "pay\u{200b}ment to acc\u{2060}ount\u{e0041}\u{e0042} \u{2066}rtl\u{2069} \u{7}bell a\u{200d}b";
    let args = serde_json::json!({"path": path, "content": content}).to_string();
    let block = render_block(&pending(&args, path), "sha256:5e", 1_000);
    golden("approval/hostile.txt", &block);
    for hidden in [
        '\u{202e}',
        '\u{200b}',
        '\u{200d}',
        '\u{2060}',
        '\u{e0041}',
        '\u{2066}',
        '\u{2069}',
        '\u{7}',
    ] {
        assert!(!block.contains(hidden), "{:?} reached the owner unescaped", hidden);
    }
}

/// A megabyte of arguments is shown in part, never cut silently: the block keeps the
/// first 2 KiB (escaped), says the whole size and SHA-256, and names the command that
/// prints it whole; the block stays small enough for any listing to carry.
#[test]
fn a_megabyte_of_arguments_is_shown_in_part_with_its_size_and_hash() {
    use sha2::Digest as _;
    let content = "A\u{200d}".repeat(350_000); // over 1 MB with a zero-width joiner in every pair
    let args = serde_json::json!({"path": "/home/o/out/big.txt", "content": content}).to_string();
    let waiting = pending(&args, "/home/o/out/big.txt");
    let block = render_block(&waiting, "sha256:5e", 1_000);
    let head = escape_untrusted(&content[..1_000], false);
    assert!(block.contains(&head[..1_500]), "the block lost the start of the arguments");
    assert!(block.len() < 24 << 10, "block is {} bytes", block.len());
    let hash: String =
        sha2::Sha256::digest(args.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert!(block.contains(&format!("{} bytes in all, sha256 {hash}", args.len())), "{block}");
    assert!(block.contains(&format!("bx approvals show {}", waiting.id)), "{block}");
    assert!(!block.contains('\u{200d}'));
}

#[test]
fn label_display_matches_policy_syntax() {
    assert_eq!(Label::TOP.to_string(), "secret/untrusted");
    assert_eq!(parse_label(&Label::CLEAN.to_string()), Ok(Label::CLEAN));
}

#[test]
fn only_the_id_approves_what_the_owner_types() {
    // A reflexive "y" must not approve; the id does, whatever its case.
    use bx_broker::{Answer, ScopeKind, typed_answer};
    assert_eq!(typed_answer("k7qm3x", " K7QM3X\n"), (Answer::Approve, ScopeKind::Call));
    for reflex in ["y", "YES", "", "  "] {
        let (Answer::Refuse(why), ScopeKind::Call) = typed_answer("k7qm3x", reflex) else {
            panic!("{reflex:?}")
        };
        assert!(why.contains("not the id k7qm3x"), "{why}");
    }
    assert_eq!(
        typed_answer("k7qm3x", "not that file"),
        (Answer::Refuse("not that file".into()), ScopeKind::Call)
    );
}

#[test]
fn a_scope_follows_the_id_and_anything_else_refuses() {
    use bx_broker::{Answer, ScopeKind, typed_answer};
    assert_eq!(typed_answer("k7qm3x", "k7qm3x path"), (Answer::Approve, ScopeKind::Path(None)));
    assert_eq!(
        typed_answer("k7qm3x", "K7QM3X path=/w/docs/"),
        (Answer::Approve, ScopeKind::Path(Some("/w/docs".into())))
    );
    assert_eq!(typed_answer("k7qm3x", "k7qm3x host"), (Answer::Approve, ScopeKind::Host));
    // The id with something that is not a scope, or more than one word after it, refuses.
    for typed in ["k7qm3x everything", "k7qm3x path host", "k7qm3x path=relative", "path k7qm3x"] {
        let (answer, scope) = typed_answer("k7qm3x", typed);
        assert!(matches!(answer, Answer::Refuse(_)), "{typed}: {answer:?}");
        assert_eq!(scope, ScopeKind::Call, "{typed}");
    }
    assert_eq!(
        typed_answer("k7qm3x", "refuse k7qm3x host not that site"),
        (Answer::Refuse("not that site".into()), ScopeKind::Host)
    );
    assert_eq!(
        typed_answer("k7qm3x", "refuse k7qm3x not now"),
        (Answer::Refuse("not now".into()), ScopeKind::Call)
    );
    // Another id after `refuse` is a plain refusal whose reason is the line.
    assert_eq!(
        typed_answer("k7qm3x", "refuse aaaaaa host"),
        (Answer::Refuse("refuse aaaaaa host".into()), ScopeKind::Call)
    );
}

/// A call whose request would carry a secret shows the binding in its block, and only
/// the placeholder among its arguments.
#[test]
fn a_block_names_the_secrets_the_host_would_put_in() {
    let policy = Policy::parse(
        "p.toml",
        "[[grant]]\ntool = \"http.fetch\"\nhost = \"api.github.com\"\nmode = \"fetch\"\nlabel = \"public/untrusted\"\nwhen_clean = \"ask\"\n\
         [[secret]]\nname = \"github\"\ntool = \"http.fetch\"\nhost = \"api.github.com\"\nheader.authorization = \"Bearer {secret:github}\"\n\
         [[secret]]\nname = \"other\"\ntool = \"http.fetch\"\nhost = \"example.org\"\nquery.k = \"{secret:other}\"\n",
    )
    .unwrap();
    let call = bx_broker::CallRequest {
        tool: "http.fetch".into(),
        digest: "sha256:5e".into(),
        resources: vec![Resource::Url("https://api.github.com/user".into())],
    };
    let Decision::Ask(ask) = decide(&policy, Label::CLEAN, &call) else { panic!("should ask") };
    let mut p = ApprovalTable::new().insert(
        ask,
        r#"{"url":"https://api.github.com/user","headers":{"x-t":"{secret:github}"}}"#.into(),
        1_000,
        120_000,
    );
    p.id = "7kq3mx".into();
    golden("approval/secret.txt", &render_block(&p, "sha256:5e", 31_000));
}
