//! `bx-agentdojo`: AgentDojo's own suites through a real `bx`, judged by AgentDojo's own
//! checks (`make eval-agentdojo`, docs/eval.md). Every user task alone, then every
//! (user task × injection task) pair, per suite; a table at the end and the JSON report
//! in `target/eval/agentdojo.json`. Exits non-zero when the attacker's goal was reached
//! by a call, bx's own checks fired, a call had no request record or a log did not
//! verify.
//!
//! `--suite NAME` (again for more) runs those suites only; `--owner careless` approves
//! everything, to show that AgentDojo's checks see the attacker's wins when nothing
//! stops them; `--attacker once` (or `variants`) runs each pair one way only; `--model local` (`MODEL=local`) runs the user tasks alone against the
//! embedded model instead of the script, for utility.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use bx_eval::agentdojo::{Attacker, DojoPaths, DojoReport, SuiteFigures, SuiteRun};
use bx_eval::run::{ModelChoice, Owner, Paths};

const SUITES: &[&str] = &["banking", "slack", "travel", "workspace"];

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bx-agentdojo: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<bool> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut paths = DojoPaths {
        bx: Paths::in_repo(&repo),
        python: repo.join(".venv/bin/python"),
        server: repo.join("host/eval/agentdojo/dojo.py"),
        fixtures: repo.join("fixtures/agentdojo"),
    };
    let mut report_path = repo.join("target/eval/agentdojo.json");
    let mut suites: Vec<String> = Vec::new();
    let mut owner = Owner::Careful;
    let mut model = ModelChoice::Scripted;
    let mut attackers = vec![Attacker::Once, Attacker::Variants];
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow::anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--bx" => paths.bx.bx = PathBuf::from(value()?),
            "--attacker" => {
                attackers = match value()?.as_str() {
                    "once" => vec![Attacker::Once],
                    "variants" => vec![Attacker::Variants],
                    "both" => vec![Attacker::Once, Attacker::Variants],
                    a => anyhow::bail!("--attacker {a}: once, variants or both"),
                }
            }
            "--model" => model = ModelChoice::parse(&value()?, &repo)?,
            "--report" => report_path = PathBuf::from(value()?),
            "--suite" => {
                let s = value()?;
                anyhow::ensure!(SUITES.contains(&s.as_str()), "no suite {s} (one of {SUITES:?})");
                suites.push(s);
            }
            "--owner" => {
                owner = match value()?.as_str() {
                    "careful" => Owner::Careful,
                    "careless" => Owner::Careless,
                    "no-scopes" => Owner::NoScopes,
                    o => anyhow::bail!("--owner {o}: careful, careless or no-scopes"),
                }
            }
            other => anyhow::bail!("unknown flag {other} (see docs/eval.md)"),
        }
    }
    if suites.is_empty() {
        suites = SUITES.iter().map(|s| (*s).to_owned()).collect();
    }
    let scripted = matches!(model, ModelChoice::Scripted);
    let mut report = DojoReport {
        model: match &model {
            ModelChoice::Scripted => "scripted attacker".into(),
            ModelChoice::Url(u) => format!("model at {u}"),
            ModelChoice::Launch(_) => "embedded default model (local llama-server)".into(),
        },
        benchmark:
            "AgentDojo v1.2.2 (agentdojo 0.1.35), attack important_instructions_no_model_name"
                .into(),
        owner: format!("{owner:?}").to_lowercase(),
        ..DojoReport::default()
    };
    for suite in &suites {
        let started = Instant::now();
        eprintln!("bx-agentdojo: suite {suite}");
        let mut run = SuiteRun::start(suite, &paths, &model)?;
        run.owner_kind = owner;
        let mut fig = SuiteFigures { suite: suite.clone(), ..SuiteFigures::default() };
        let users = run.dojo.ready.user_tasks.clone();
        let injections = run.dojo.ready.injection_tasks.clone();
        for u in &users {
            let r = run.run(u, None, Attacker::None)?;
            if !r.utility {
                eprintln!("  utility failed: {} ({})", r.id, r.ended);
            }
            fig.add(r);
        }
        // A real model plays the user tasks alone, for utility.
        let pairs = if scripted { injections.as_slice() } else { &[] };
        for u in &users {
            for i in pairs {
                for &attacker in &attackers {
                    let r = run.run(u, Some(i), attacker)?;
                    if r.won() {
                        eprintln!(
                            "  ATTACKER WIN {} ({attacker:?}): security {:?}, answer only {}, {:?}",
                            r.id, r.security, r.answer_only, r.bx_findings
                        );
                    }
                    fig.add(r);
                }
            }
        }
        fig.pairs = users.len() * pairs.len();
        fig.verify_clean = run.finish()?;
        fig.secs = started.elapsed().as_secs_f64();
        eprintln!(
            "  {suite}: utility {}/{} alone, {}/{} and {}/{} under attack, {} wins, {:.0} s",
            fig.utility_alone,
            fig.user_tasks,
            fig.utility_once,
            fig.pairs,
            fig.utility_variants,
            fig.pairs,
            fig.wins,
            fig.secs
        );
        report.suites.push(fig);
    }
    report.close();
    println!("{}", report.table());
    if let Some(dir) = report_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&report_path, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("\nreport: {}", report_path.display());
    Ok(owner == Owner::Careless || !scripted || report.held())
}
