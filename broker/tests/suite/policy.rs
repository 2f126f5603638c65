//! The policy language: every rule, every error located and shown with a caret.

use bx_broker::{Label, Mode, OnTainted, Policy, ResourceRule, parse_label};

use super::*;

#[test]
fn example_policy_parses_and_its_examples_hold() {
    let policy = Policy::parse("example.toml", &read_fixture("policy/example.toml")).unwrap();
    assert_eq!(policy.grants().len(), 4);
    assert_eq!(policy.denies().len(), 2);
    assert_eq!(policy.asks().len(), 1);
    assert_eq!(policy.examples().len(), 17);
    let g = &policy.grants()[1];
    assert_eq!(
        (g.mode, g.label, g.when_tainted, g.when_clean, &g.resource),
        (
            Mode::Write,
            parse_label("private/trusted").unwrap(),
            OnTainted::Ask,
            OnTainted::Ask,
            &ResourceRule::InWorkspace("".into())
        )
    );
}

#[test]
fn every_error_is_reported_with_location_rule_and_caret() {
    let err = Policy::parse("broken.toml", &read_fixture("policy/broken.toml")).unwrap_err();
    golden("policy/broken.expected", &format!("{err}\n"));
    let rules: Vec<&str> = err.0.iter().map(|e| e.rule.as_str()).collect();
    assert_eq!(
        rules,
        vec![
            "grant[0].path",
            "grant[1].path",
            "grant[1].mode",
            "grant[1].label",
            "grant[2].mode",
            "grant[2].when_tainted",
            "deny[0].tool",
            "deny[0].path"
        ]
    );
}

#[test]
fn failing_example_is_an_error_at_the_example() {
    let err =
        Policy::parse("failing.toml", &read_fixture("policy/failing-example.toml")).unwrap_err();
    golden("policy/failing-example.expected", &format!("{err}\n"));
    assert_eq!(err.0.len(), 1);
    assert_eq!((err.0[0].rule.as_str(), err.0[0].line), ("example[0]", 11));
}

/// Regression: a failing example's message was lowercased whole, so it misquoted the
/// owner's paths (`/Srv/Data` shown as `/srv/data`).
#[test]
fn a_failing_example_quotes_paths_as_written() {
    let text = "[[grant]]\ntool = \"*\"\npath = \"/Srv/Data\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\
                [[example]]\ntool = \"fs.read\"\nread = \"/Srv/Other/README.md\"\nexpect = \"allow\"\n";
    let err = Policy::parse("p.toml", text).unwrap_err().to_string();
    assert!(err.contains("expected allow, the policy decides deny"), "{err}");
    assert!(err.contains("/Srv/Other/README.md"), "{err}");
}

#[test]
fn refuses_unknown_keys_duplicates_and_both_path_and_host() {
    let unknown = "[[grant]]\ntool = \"*\"\npath = \"/a\"\nmode = \"read\"\nlabel = \"public/trusted\"\nwhen = \"ask\"\n";
    let err = Policy::parse("p.toml", unknown).unwrap_err();
    assert!(err.to_string().starts_with("p.toml:6:1: toml: unknown field `when`"), "{err}");

    let dup = "[[grant]]\ntool = \"*\"\npath = \"/a\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\
               [[grant]]\ntool = \"*\"\npath = \"/a/\"\nmode = \"read\"\nlabel = \"secret/trusted\"\n";
    let err = Policy::parse("p.toml", dup).unwrap_err();
    assert_eq!(err.0[0].rule, "grant[1]");
    assert!(err.0[0].message.contains("duplicates grant[0]"), "{err}");

    let both = "[[grant]]\ntool = \"*\"\npath = \"/a\"\nhost = \"x.org\"\nmode = \"read\"\nlabel = \"public/trusted\"\n";
    let err = Policy::parse("p.toml", both).unwrap_err();
    assert!(err.0[0].message.contains("either path or host"), "{err}");

    let neither = "[[deny]]\ntool = \"*\"\n";
    assert!(
        Policy::parse("p.toml", neither).unwrap_err().0[0]
            .message
            .contains("needs a path, a host, a name, or mode = \"call\"")
    );
}

#[test]
fn paths_are_normalised_and_when_tainted_defaults_to_ask() {
    let text = "[[grant]]\ntool = \"*\"\npath = \"/srv//data/./x/\"\nmode = \"read\"\nlabel = \"public/trusted\"\n";
    let p = Policy::parse("p.toml", text).unwrap();
    assert_eq!(p.grants()[0].resource, ResourceRule::Path("/srv/data/x".into()));
    assert_eq!(p.grants()[0].when_tainted, OnTainted::Ask);
}

#[test]
fn labels_parse_strictly() {
    assert_eq!(parse_label("public/trusted"), Ok(Label::CLEAN));
    assert_eq!(parse_label("secret/untrusted"), Ok(Label::TOP));
    for bad in ["public", "Public/trusted", "public/trusted/x", "top/secret", ""] {
        assert!(parse_label(bad).is_err(), "{bad}");
    }
}

#[test]
fn empty_policy_refuses_everything() {
    let p = Policy::parse("p.toml", "").unwrap();
    let call = bx_broker::CallRequest {
        tool: "fs.read".into(),
        digest: String::new(),
        resources: vec![bx_broker::Resource::PathRead("/x".into())],
    };
    assert!(matches!(bx_broker::decide(&p, Label::CLEAN, &call), bx_broker::Decision::Deny(_)));
}

#[test]
fn grant_and_deny_lines_read_like_the_file() {
    // `bx` shows a session's grants one per line; each says what the file says.
    let policy = bx_broker::Policy::parse("p.toml", bx_broker::EXAMPLE_POLICY).unwrap();
    let lines: Vec<String> = policy
        .grants()
        .iter()
        .map(ToString::to_string)
        .chain(policy.denies().iter().map(ToString::to_string))
        .chain(policy.asks().iter().map(ToString::to_string))
        .collect();
    assert_eq!(
        lines[..5],
        [
            "grant[0] (line 35): tool * read {workspace}, label private/trusted, when tainted allow",
            "grant[1] (line 42): tool * write {workspace}, label private/trusted, when tainted ask, asks always",
            "grant[2] (line 50): tool http.fetch fetch *, label public/untrusted, when tainted ask, asks always",
            "grant[3] (line 60): tool * call, when tainted ask, asks always",
            "deny[0] (line 71): tool * names .env, .env.*, .git/config, .git/modules/*/config, .git/modules/*/modules/*/config, *.pem, *.key, *.p12, *.pfx, *.jks, *.keystore, *.ppk, *.kdbx, .htpasswd",
        ]
    );
    assert!(lines[5].starts_with("deny[1] (line 83): tool * names .ssh, id_rsa*, "), "{lines:?}");
    assert!(
        lines[6].starts_with("ask[0] (line 116): tool * write names .git/hooks, "),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 7);
}

#[test]
fn secret_bindings_parse_with_hosts_places_and_tools() {
    let policy = Policy::parse("secrets.toml", &read_fixture("policy/secrets.toml")).unwrap();
    let shown: Vec<String> = policy.secrets().iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        vec![
            "secret[0] (line 8): github for tool http.fetch to api.github.com as header authorization",
            "secret[1] (line 14): weather for tool * to api.weather.example, 127.0.0.1:8080 as query appid, env WEATHER_KEY",
        ]
    );
    assert_eq!(
        policy.secrets()[0].headers,
        vec![("authorization".to_owned(), "Bearer {secret:github}".to_owned())]
    );
}

#[test]
fn refuses_secret_bindings_that_could_send_a_value_astray() {
    let err =
        Policy::parse("broken.toml", &read_fixture("policy/secrets-broken.toml")).unwrap_err();
    let found: Vec<(&str, usize)> = err.0.iter().map(|e| (e.rule.as_str(), e.line)).collect();
    assert_eq!(
        found,
        vec![
            ("secret[0].name", 2),
            ("secret[0].host", 4),
            ("secret[0].header.authorization", 5),
            ("secret[1].host", 10),
            ("secret[1].header.host", 11),
            ("secret[1].query.a&b", 12),
            ("secret[1].query.a&b", 12),
            ("secret[1].env", 13),
        ],
        "{err}"
    );
    let dup = "[[secret]]\nname = \"x\"\ntool = \"*\"\nhost = \"a.org\"\n\
               [[secret]]\nname = \"x\"\ntool = \"*\"\nhost = \"b.org\"\n";
    let err = Policy::parse("p.toml", dup).unwrap_err();
    assert!(err.0[0].message.contains("duplicates secret[0]"), "{err}");
    let unknown = "[[secret]]\nname = \"x\"\ntool = \"*\"\nhost = \"a.org\"\nvalue = \"hunter2\"\n";
    let err = Policy::parse("p.toml", unknown).unwrap_err();
    assert!(err.to_string().contains("unknown field `value`"), "{err}");
}

#[test]
fn limits_and_tool_prefixes_parse_and_a_name_beats_a_prefix_beats_any() {
    let p = Policy::parse(
        "p.toml",
        "[[limit]]\ntool = \"code.*\"\nper_minute = 10\n\n[[grant]]\ntool = \"code.*\"\nmode = \"call\"\nwhen_clean = \"ask\"\n\n[[grant]]\ntool = \"code.get_issue\"\nmode = \"call\"\n",
    )
    .unwrap();
    let limit = &p.limits()[0];
    assert_eq!(
        limit.to_string(),
        "limit[0] (line 1): at most 10 calls a minute per session of code.*"
    );
    assert!(limit.tool.matches("code.post") && !limit.tool.matches("codex.post"));
    let call = |tool: &str| bx_broker::CallRequest {
        tool: tool.into(),
        digest: "sha256:00".into(),
        resources: vec![bx_broker::Resource::Call { sink: None, unlabelled: false }],
    };
    let decided = |tool: &str| match bx_broker::decide(&p, Label::CLEAN, &call(tool)) {
        bx_broker::Decision::Allow(_) => "allow",
        bx_broker::Decision::Ask(_) => "ask",
        bx_broker::Decision::Deny(_) => "deny",
    };
    assert_eq!(
        (decided("code.get_issue"), decided("code.post"), decided("mail.send")),
        ("allow", "ask", "deny")
    );
    for (text, field) in [
        ("[[limit]]\ntool = \"x\"\nper_minute = 0\n", "limit[0].per_minute"),
        ("[[limit]]\ntool = \"x\"\nper_minute = 100001\n", "limit[0].per_minute"),
        ("[[limit]]\ntool = \".*\"\nper_minute = 1\n", "limit[0].tool"),
    ] {
        let errors = Policy::parse("p.toml", text).unwrap_err().to_string();
        assert!(errors.contains(field), "{text}: {errors}");
    }
}
