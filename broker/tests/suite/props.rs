//! Property tests against an independent oracle: random policies over a small world of
//! paths, random calls and taints.

use bx_broker::{
    CallRequest, Confidentiality, Decision, Integrity, Label, Policy, Resource, decide,
};
use proptest::prelude::*;

const PATHS: &[&str] = &["/a", "/a/b", "/a/b/c", "/a/bc", "/d"];
const TOOLS: &[&str] = &["*", "t1", "t2"];

#[derive(Debug, Clone)]
struct G {
    tool: usize,
    path: usize,
    write: bool,
    label: Label,
    when: usize, // 0 allow, 1 ask, 2 deny
}

#[derive(Debug, Clone)]
struct D {
    tool: usize,
    path: usize,
}

fn label_strategy() -> impl Strategy<Value = Label> {
    (0..3usize, any::<bool>()).prop_map(|(c, u)| Label {
        confidentiality: [
            Confidentiality::Public,
            Confidentiality::Private,
            Confidentiality::Secret,
        ][c],
        integrity: if u { Integrity::Untrusted } else { Integrity::Trusted },
    })
}

fn grant_strategy() -> impl Strategy<Value = G> {
    (0..TOOLS.len(), 0..PATHS.len(), any::<bool>(), label_strategy(), 0..3usize)
        .prop_map(|(tool, path, write, label, when)| G { tool, path, write, label, when })
}

fn deny_strategy() -> impl Strategy<Value = D> {
    (0..TOOLS.len(), 0..PATHS.len()).prop_map(|(tool, path)| D { tool, path })
}

fn render(grants: &[G], denies: &[D]) -> String {
    let mut text = String::new();
    for g in grants {
        text.push_str(&format!(
            "[[grant]]\ntool = \"{}\"\npath = \"{}\"\nmode = \"{}\"\nlabel = \"{}\"\nwhen_tainted = \"{}\"\n",
            TOOLS[g.tool],
            PATHS[g.path],
            if g.write { "write" } else { "read" },
            g.label,
            ["allow", "ask", "deny"][g.when]
        ));
    }
    for d in denies {
        text.push_str(&format!(
            "[[deny]]\ntool = \"{}\"\npath = \"{}\"\n",
            TOOLS[d.tool], PATHS[d.path]
        ));
    }
    text
}

/// Drops grants that duplicate an earlier one (same tool, path and mode), which the
/// parser refuses.
fn dedup(grants: Vec<G>) -> Vec<G> {
    let mut out: Vec<G> = Vec::new();
    for g in grants {
        if !out.iter().any(|o| o.tool == g.tool && o.path == g.path && o.write == g.write) {
            out.push(g);
        }
    }
    out
}

/// True when `prefix` is `path` or a directory above it, by string comparison.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

fn tool_ok(rule: usize, tool: &str) -> bool {
    TOOLS[rule] == "*" || TOOLS[rule] == tool
}

/// 0 deny, 1 ask, 2 allow: written from the rules in docs/policy.md, not from the code.
fn oracle(grants: &[G], denies: &[D], taint: Label, tool: &str, path: &str, write: bool) -> u8 {
    if denies.iter().any(|d| tool_ok(d.tool, tool) && under(path, PATHS[d.path])) {
        return 0;
    }
    let mut best: Option<(usize, bool, usize)> = None; // (length, named tool, index)
    for (i, g) in grants.iter().enumerate() {
        if g.write != write || !tool_ok(g.tool, tool) || !under(path, PATHS[g.path]) {
            continue;
        }
        let key = (PATHS[g.path].len(), TOOLS[g.tool] != "*", i);
        let better = match best {
            None => true,
            Some((len, named, idx)) => {
                (key.0, key.1) > (len, named) || ((key.0, key.1) == (len, named) && key.2 < idx)
            }
        };
        if better {
            best = Some(key);
        }
    }
    let Some((_, _, i)) = best else { return 0 };
    let g = &grants[i];
    let clean = taint.confidentiality <= g.label.confidentiality
        && (taint.integrity == Integrity::Trusted || g.label.integrity == Integrity::Untrusted);
    if clean {
        return 2;
    }
    [2, 1, 0][g.when]
}

fn rank(d: &Decision) -> u8 {
    match d {
        Decision::Deny(_) => 0,
        Decision::Ask(_) => 1,
        Decision::Allow(_) => 2,
    }
}

fn call(tool: &str, path: &str, write: bool) -> CallRequest {
    let r = if write { Resource::PathWrite(path.into()) } else { Resource::PathRead(path.into()) };
    CallRequest { tool: tool.into(), digest: String::new(), resources: vec![r] }
}

fn target() -> impl Strategy<Value = (String, String, bool)> {
    (
        prop::sample::select(vec!["t1", "t2", "t3"]),
        prop::sample::select(vec!["/a", "/a/b/c/x", "/a/bc/y", "/a/b", "/d/e", "/z"]),
        any::<bool>(),
    )
        .prop_map(|(t, p, w)| (t.to_owned(), p.to_owned(), w))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn decide_agrees_with_the_oracle(grants in prop::collection::vec(grant_strategy(), 0..6), denies in prop::collection::vec(deny_strategy(), 0..3), taint in label_strategy(), (tool, path, write) in target()) {
        let grants = dedup(grants);
        let policy = Policy::parse("p.toml", &render(&grants, &denies)).unwrap();
        let got = rank(&decide(&policy, taint, &call(&tool, &path, write)));
        prop_assert_eq!(got, oracle(&grants, &denies, taint, &tool, &path, write));
    }

    #[test]
    fn deny_wins_at_every_taint(grants in prop::collection::vec(grant_strategy(), 0..6), deny in deny_strategy(), taint in label_strategy(), write in any::<bool>()) {
        let grants = dedup(grants);
        let policy = Policy::parse("p.toml", &render(&grants, std::slice::from_ref(&deny))).unwrap();
        let tool = if TOOLS[deny.tool] == "*" { "t1" } else { TOOLS[deny.tool] };
        let path = format!("{}/inner", PATHS[deny.path]);
        prop_assert_eq!(rank(&decide(&policy, taint, &call(tool, &path, write))), 0);
    }

    #[test]
    fn adding_a_deny_never_widens(grants in prop::collection::vec(grant_strategy(), 0..6), denies in prop::collection::vec(deny_strategy(), 0..3), extra in deny_strategy(), taint in label_strategy(), (tool, path, write) in target()) {
        let grants = dedup(grants);
        let before = Policy::parse("p.toml", &render(&grants, &denies)).unwrap();
        let mut more = denies.clone();
        more.push(extra);
        let after = Policy::parse("p.toml", &render(&grants, &more)).unwrap();
        let c = call(&tool, &path, write);
        prop_assert!(rank(&decide(&after, taint, &c)) <= rank(&decide(&before, taint, &c)));
    }

    #[test]
    fn a_higher_taint_never_widens(grants in prop::collection::vec(grant_strategy(), 0..6), denies in prop::collection::vec(deny_strategy(), 0..3), low in label_strategy(), extra in label_strategy(), (tool, path, write) in target()) {
        let grants = dedup(grants);
        let policy = Policy::parse("p.toml", &render(&grants, &denies)).unwrap();
        let high = low.join(extra);
        let c = call(&tool, &path, write);
        prop_assert!(rank(&decide(&policy, high, &c)) <= rank(&decide(&policy, low, &c)));
    }

    #[test]
    fn taint_never_falls(start in label_strategy(), seen in prop::collection::vec(label_strategy(), 0..8)) {
        let mut taint = start;
        for l in seen {
            let next = taint.join(l);
            prop_assert!(taint.flows_to(next) && l.flows_to(next));
            taint = next;
        }
    }

    #[test]
    fn longest_match_wins(grants in prop::collection::vec(grant_strategy(), 0..6), taint in label_strategy()) {
        // A most specific grant for t1 on /a/b/c that denies whenever the session is
        // above public/trusted decides every such call, whatever else the policy says.
        let mut grants = dedup(grants);
        grants.retain(|g| !(PATHS[g.path] == "/a/b/c" && !g.write && TOOLS[g.tool] != "t2"));
        grants.push(G { tool: 1, path: 2, write: false, label: Label::CLEAN, when: 2 });
        let policy = Policy::parse("p.toml", &render(&grants, &[])).unwrap();
        let expected = if taint == Label::CLEAN { 2 } else { 0 };
        prop_assert_eq!(rank(&decide(&policy, taint, &call("t1", "/a/b/c/file", false))), expected);
    }

    #[test]
    fn normalisation_cannot_be_bypassed(grants in prop::collection::vec(grant_strategy(), 0..6), denies in prop::collection::vec(deny_strategy(), 0..3), taint in label_strategy(), (tool, path, write) in target(), style in 0..4usize) {
        let grants = dedup(grants);
        let policy = Policy::parse("p.toml", &render(&grants, &denies)).unwrap();
        let plain = rank(&decide(&policy, taint, &call(&tool, &path, write)));
        let spelled = match style {
            0 => path.replace('/', "//"),
            1 => path.replacen('/', "/./", 2),
            2 => format!("{path}/"),
            _ => format!("{path}/."),
        };
        prop_assert_eq!(rank(&decide(&policy, taint, &call(&tool, &spelled, write))), plain);
        // A `..` is refused outright, never resolved into some other grant.
        let dotted = format!("{path}/../{}", path.trim_start_matches('/'));
        prop_assert_eq!(rank(&decide(&policy, taint, &call(&tool, &dotted, write))), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// bx's own state is out of reach whatever the grants say, in every mode, at every
    /// taint, through every spelling the normaliser accepts.
    #[test]
    fn own_state_is_never_reached(grants in prop::collection::vec(grant_strategy(), 0..6), own in 0..PATHS.len(), taint in label_strategy(), tool in prop::sample::select(vec!["t1", "t2", "t3"]), write in any::<bool>(), style in 0..3usize) {
        let grants = dedup(grants);
        let policy = Policy::parse("p.toml", &render(&grants, &[]))
            .unwrap()
            .protect_own([std::path::PathBuf::from(PATHS[own])])
            .unwrap();
        let inside = format!("{}/policy.toml", PATHS[own]);
        let spelled = match style {
            0 => inside.clone(),
            1 => inside.replace('/', "//"),
            _ => inside.replacen('/', "/./", 2),
        };
        prop_assert_eq!(rank(&decide(&policy, taint, &call(tool, &spelled, write))), 0);
        // A call that is allowed on a parent never reaches the own path through it.
        if let Decision::Allow(g) = decide(&policy, taint, &call(tool, "/a", write)) {
            prop_assert!(g.denied_prefix(std::path::Path::new(&inside)).is_some());
        }
    }
}
