//! `decide` on a 200-grant policy: median and p90, against a linear scan that only
//! compares path prefixes (the floor any decision pays), measured in the same run.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use bx_broker::{CallRequest, Decision, Policy, Resource, decide, parse_label};

#[path = "../../host/bench/measure.rs"]
mod measure;
use measure::{fmt, measure};

fn policy_text(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        let (mode, label, when) = match i % 4 {
            0 => ("read", "private/trusted", "allow"),
            1 => ("write", "private/trusted", "ask"),
            2 => ("read", "public/trusted", "deny"),
            _ => ("write", "secret/trusted", "deny"),
        };
        text.push_str(&format!(
            "[[grant]]\ntool = \"{}\"\npath = \"/home/o/project{}/dir{}\"\nmode = \"{mode}\"\nlabel = \"{label}\"\nwhen_tainted = \"{when}\"\n",
            if i % 3 == 0 { "*" } else { "fs.read" },
            i % 50,
            i
        ));
    }
    for i in 0..10 {
        text.push_str(&format!("[[deny]]\ntool = \"*\"\npath = \"/home/o/project{i}/secrets\"\n"));
    }
    text
}

fn main() {
    let policy = Policy::parse("bench.toml", &policy_text(200)).unwrap();
    assert_eq!(policy.grants().len(), 200);
    let call = CallRequest {
        tool: "fs.read".into(),
        digest: "sha256:00".into(),
        resources: vec![Resource::PathRead("/home/o/project8/dir108/src/main.rs".into())],
    };
    let taint = parse_label("public/untrusted").unwrap();
    assert!(matches!(
        decide(&policy, taint, &call),
        Decision::Allow(_) | Decision::Ask(_) | Decision::Deny(_)
    ));
    let m = measure(20_000, || {
        let decision = decide(&policy, std::hint::black_box(taint), &call);
        let _kept = std::hint::black_box(decision);
    });
    let paths: Vec<String> =
        (0..200).map(|i| format!("/home/o/project{}/dir{i}", i % 50)).collect();
    let target = "/home/o/project8/dir108/src/main.rs";
    let b = measure(20_000, || {
        let hits = paths.iter().filter(|p| target.starts_with(p.as_str())).count();
        std::hint::black_box(hits);
    });
    println!("bx broker benchmark\n");
    println!("| case | median | p90 | baseline | baseline median | baseline p90 | ratio |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| decide, 200 grants + 10 denies, one path | {} | {} | prefix scan of 200 strings | {} | {} | {:.1}× |",
        fmt(m.median),
        fmt(m.p90),
        fmt(b.median),
        fmt(b.p90),
        m.median.as_secs_f64() / b.median.as_secs_f64()
    );
    listed_entry_row();
    println!("\ntarget: decide <= 5 µs median");
}

/// What the runtime asks for every entry a listing or a search meets: whether the
/// default policy's deny and ask names (with their backup and copy spellings) refuse it,
/// against splitting the same path into its components (the least such a check does).
fn listed_entry_row() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/policy/example.toml"),
    )
    .unwrap();
    let parsed = Policy::parse("example.toml", &text).unwrap();
    let policy = parsed.for_workspace(Some(std::path::Path::new("/home/o/w")));
    let call = CallRequest {
        tool: "fs.search".into(),
        digest: "sha256:00".into(),
        resources: vec![Resource::PathRead("/home/o/w".into())],
    };
    let Decision::Allow(grant) = decide(&policy, parse_label("public/trusted").unwrap(), &call)
    else {
        panic!("the default policy does not let fs.search read the workspace")
    };
    let entries = [
        "/home/o/w/src/main.rs",
        "/home/o/w/node_modules/left-pad/index.js",
        "/home/o/w/docs/guide-v2.1.md",
        "/home/o/w/target/debug/build/x-1a2b/out/gen.rs",
    ];
    let m = measure(20_000, || {
        for e in &entries {
            std::hint::black_box(grant.denied_prefix(std::path::Path::new(e)));
        }
    });
    let b = measure(20_000, || {
        for e in &entries {
            std::hint::black_box(std::path::Path::new(e).components().count());
        }
    });
    println!(
        "| deny and ask names of the default policy, 4 listed entries | {} | {} | split into components | {} | {} | {:.1}× |",
        fmt(m.median),
        fmt(m.p90),
        fmt(b.median),
        fmt(b.p90),
        m.median.as_secs_f64() / b.median.as_secs_f64()
    );
}
