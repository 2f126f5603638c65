//! `decide` on a 200-grant policy: median and p90, against a linear scan that only
//! compares path prefixes (the floor any decision pays), measured in the same run.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::time::{Duration, Instant};

use bx_broker::{CallRequest, Decision, Policy, Resource, decide, parse_label};

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

fn measure(samples: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..samples / 10 {
        f();
    }
    let mut t: Vec<Duration> = (0..samples)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    (t[t.len() / 2], t[t.len() * 9 / 10])
}

fn us(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
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
    let (med, p90) = measure(20_000, || {
        let decision = decide(&policy, std::hint::black_box(taint), &call);
        let _kept = std::hint::black_box(decision);
    });
    let paths: Vec<String> =
        (0..200).map(|i| format!("/home/o/project{}/dir{i}", i % 50)).collect();
    let target = "/home/o/project8/dir108/src/main.rs";
    let (bmed, bp90) = measure(20_000, || {
        let hits = paths.iter().filter(|p| target.starts_with(p.as_str())).count();
        std::hint::black_box(hits);
    });
    println!("bx broker benchmark\n");
    println!("| case | median | p90 | baseline | baseline median | baseline p90 | ratio |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| decide, 200 grants + 10 denies, one path | {} | {} | prefix scan of 200 strings | {} | {} | {:.1}× |",
        us(med),
        us(p90),
        us(bmed),
        us(bp90),
        med.as_secs_f64() / bmed.as_secs_f64()
    );
    println!("\ntarget: decide <= 5 µs median");
}
