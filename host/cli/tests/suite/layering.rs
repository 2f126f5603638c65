//! The dependency direction from design.md, read from `cargo metadata`: the broker and
//! the leaf crates depend on nothing of the host, the runtime and the inference client
//! do not know each other, and only the top (agent, daemon, CLI) sees everything.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// For each workspace crate, the bx crates and heavy runtimes it must not depend on.
/// Every workspace crate must appear here, so a new crate forces a decision.
fn forbidden() -> BTreeMap<&'static str, Vec<&'static str>> {
    let runtimes = ["tokio", "tokio-util", "wasmtime", "wasmtime-wasi", "reqwest", "hyper"];
    let all_bx = [
        "bx-audit",
        "bx-protocol",
        "bx-runtime",
        "bx-state",
        "bx-store",
        "bx-infer",
        "bx-agent",
        "bx-daemon",
        "bx-cli",
        "bx-eval",
        "bx-gateway",
    ];
    let mut m = BTreeMap::new();
    m.insert("bx-broker", [all_bx.as_slice(), &runtimes].concat());
    m.insert("bx-audit", [all_bx.as_slice(), &runtimes, &["bx-broker"]].concat());
    m.insert("bx-protocol", [all_bx.as_slice(), &runtimes, &["bx-broker"]].concat());
    // File helpers under everything: they know nothing of bx.
    m.insert("bx-fs", [all_bx.as_slice(), &runtimes, &["bx-broker"]].concat());
    m.insert(
        "bx-runtime",
        vec![
            "bx-audit",
            "bx-protocol",
            "bx-state",
            "bx-store",
            "bx-infer",
            "bx-agent",
            "bx-daemon",
            "bx-cli",
            "bx-gateway",
        ],
    );
    // The state directory's files: the broker's policy and labels, nothing that runs.
    m.insert(
        "bx-state",
        [
            &[
                "bx-audit",
                "bx-protocol",
                "bx-runtime",
                "bx-store",
                "bx-infer",
                "bx-agent",
                "bx-daemon",
                "bx-cli",
                "bx-gateway",
            ][..],
            &runtimes,
        ]
        .concat(),
    );
    // The gateway's client beside the runtime: the owner's other MCP servers, knowing
    // nothing of components, the log or the loop (the broker's network rules it shares).
    m.insert(
        "bx-gateway",
        vec![
            "bx-audit",
            "bx-protocol",
            "bx-runtime",
            "bx-store",
            "bx-infer",
            "bx-agent",
            "bx-daemon",
            "bx-cli",
            "bx-eval",
        ],
    );
    // The inference client and the component runtime do not know each other.
    m.insert("bx-infer", [all_bx.as_slice(), &["bx-broker", "wasmtime", "wasmtime-wasi"]].concat());
    m.insert(
        "bx-store",
        vec!["bx-audit", "bx-protocol", "bx-infer", "bx-agent", "bx-daemon", "bx-cli", "bx-eval"],
    );
    // The loop sees everything below it; the daemon and the CLI sit above it.
    m.insert("bx-agent", vec!["bx-daemon", "bx-cli", "bx-eval"]);
    m.insert("bx-daemon", vec!["bx-cli", "bx-eval"]);
    // Nothing in the shipped binary depends on the benchmark (its tests may).
    m.insert("bx-cli", vec!["bx-eval"]);
    m.insert("bx-eval", vec![]);
    // Telemetry is a view beside the loop: it knows the config and the labels, and
    // nothing that decides, records or runs; only the agent, the daemon and the CLI
    // (and the benchmark) use it. Its exporter's HTTP client is its own dependency's.
    m.insert(
        "bx-telemetry",
        [
            &[
                "bx-audit",
                "bx-protocol",
                "bx-runtime",
                "bx-store",
                "bx-infer",
                "bx-agent",
                "bx-daemon",
                "bx-cli",
                "bx-eval",
                "bx-gateway",
            ][..],
            &runtimes,
        ]
        .concat(),
    );
    for below in [
        "bx-broker",
        "bx-audit",
        "bx-protocol",
        "bx-fs",
        "bx-runtime",
        "bx-state",
        "bx-gateway",
        "bx-infer",
        "bx-store",
    ] {
        if let Some(banned) = m.get_mut(below) {
            banned.push("bx-telemetry");
        }
    }
    // The fuzz targets reach the parsers (the tool store's `installed.json` among them,
    // which sits below the agent); nothing depends on them, and they run nothing above
    // the agent.
    for banned in m.values_mut() {
        banned.push("bx-fuzz");
    }
    m.insert("bx-fuzz", vec!["bx-daemon", "bx-cli", "bx-eval"]);
    m
}

#[test]
fn dependencies_point_one_way() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().expect("cargo metadata lists packages");
    let rules = forbidden();
    let mut seen = BTreeSet::new();
    for pkg in packages {
        let name = pkg["name"].as_str().unwrap();
        seen.insert(name.to_owned());
        let banned = rules.get(name).unwrap_or_else(|| {
            panic!("{name} has no layering rule; add it to forbidden() in this test")
        });
        for dep in pkg["dependencies"].as_array().unwrap() {
            // Dev-dependencies may reach further (a test harness); normal and build may not.
            if dep["kind"].as_str() == Some("dev") {
                continue;
            }
            let dep_name = dep["name"].as_str().unwrap();
            // The wire protocol's frame codec is a feature its async users turn on; by
            // default the leaf has no tokio in its tree.
            if name == "bx-protocol" && dep_name == "tokio-util" {
                assert_eq!(dep["optional"], true, "bx-protocol -> tokio-util must be optional");
                continue;
            }
            assert!(!banned.contains(&dep_name), "forbidden dependency edge: {name} -> {dep_name}");
        }
    }
    let expected: BTreeSet<String> = rules.keys().map(|k| (*k).to_owned()).collect();
    assert_eq!(seen, expected, "workspace crates and layering rules differ");
}
