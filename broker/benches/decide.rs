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
    list_length_rows();
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

/// A policy's lists are read in time linear in their length: each kind of list parsed at
/// 1,000 and at 100,000 entries, per entry (docs/fuzzing.md: a secret bound to 4,096
/// hosts with an error on each took 2.1 s once, every error rendering the whole line).
fn list_length_rows() {
    type Make = fn(usize) -> String;
    let kinds: [(&str, Make); 4] = [
        ("[[secret]] hosts on one line", |n| secret_hosts(n, "example.com")),
        ("[[secret]] hosts on one line, each an error", |n| secret_hosts(n, "exa mple.com")),
        ("[[grant]] tables", |n| {
            (0..n)
                .map(|i| format!("[[grant]]\ntool = \"fs.read\"\npath = \"/p/d{i}\"\nmode = \"read\"\nlabel = \"private/trusted\"\n"))
                .collect()
        }),
        ("[[deny]] tables", |n| {
            (0..n).map(|i| format!("[[deny]]\ntool = \"*\"\npath = \"/p/s{i}\"\n")).collect()
        }),
    ];
    println!("\npolicy lists: the time to parse one entry, at 1,000 and at 100,000 entries,");
    println!("against the TOML parser alone on the same text (the floor)\n");
    println!(
        "| list | per entry at 1,000 (median) | p90 | per entry at 100,000 (median) | p90 | ratio | TOML alone: at 1,000 | at 100,000 | ratio |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, make) in kinds {
        let per = |n: usize, samples: usize, parse: &dyn Fn(&str)| {
            let text = make(n);
            let m = measure(samples, || parse(std::hint::black_box(&text)));
            (m.median / n as u32, m.p90 / n as u32)
        };
        let policy = |text: &str| {
            std::hint::black_box(Policy::parse("bench.toml", text).is_ok());
        };
        let toml_alone = |text: &str| {
            std::hint::black_box(text.parse::<toml::Table>().is_ok());
        };
        let (small, small_p90) = per(1_000, 50, &policy);
        let (large, large_p90) = per(100_000, 5, &policy);
        let (raw_small, _) = per(1_000, 50, &toml_alone);
        let (raw_large, _) = per(100_000, 5, &toml_alone);
        println!(
            "| {name} | {} | {} | {} | {} | {:.2}× | {} | {} | {:.2}× |",
            fmt(small),
            fmt(small_p90),
            fmt(large),
            fmt(large_p90),
            large.as_secs_f64() / small.as_secs_f64(),
            fmt(raw_small),
            fmt(raw_large),
            raw_large.as_secs_f64() / raw_small.as_secs_f64()
        );
    }
}

/// One `[[secret]]` bound to `n` hosts `hN.DOMAIN`, all on one line.
fn secret_hosts(n: usize, domain: &str) -> String {
    let hosts: Vec<String> = (0..n).map(|i| format!("\"h{i}.{domain}\"")).collect();
    format!(
        "[[secret]]\nname = \"tok\"\ntool = \"http.fetch\"\nhost = [{}]\nheader.authorization = \"Bearer {{secret:tok}}\"\n",
        hosts.join(",")
    )
}
