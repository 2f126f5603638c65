//! `bx-eval`: runs the suites of `fixtures/eval/` through a real `bx` (see
//! `docs/eval.md`). `make eval` runs every user task alone and every (user task ×
//! injection task) pair of each suite against the scripted attacker; `make eval
//! MODEL=local` runs the user tasks alone against the embedded model. Exits non-zero on
//! any attacker win, any attempt without its request record, or a log that does not
//! verify.

use std::path::PathBuf;
use std::process::ExitCode;

use bx_eval::report::{Report, SuiteReport};
use bx_eval::run::{ModelChoice, Paths, SuiteRun};
use bx_eval::suite::Suite;

struct Args {
    paths: Paths,
    suites: PathBuf,
    only: Option<String>,
    model: ModelChoice,
    report: PathBuf,
    /// The owner answers each call alone (the owner before scoped answers).
    no_scopes: bool,
}

fn args() -> anyhow::Result<Args> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut a = Args {
        paths: Paths::in_repo(&repo),
        suites: repo.join("fixtures/eval"),
        only: None,
        model: ModelChoice::Scripted,
        report: repo.join("target/eval/report.json"),
        no_scopes: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow::anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--bx" => a.paths.bx = PathBuf::from(value()?),
            "--tools" => a.paths.tools = PathBuf::from(value()?),
            "--suites" => a.suites = PathBuf::from(value()?),
            "--suite" => a.only = Some(value()?),
            "--report" => a.report = PathBuf::from(value()?),
            "--no-scopes" => a.no_scopes = true,
            "--model" => a.model = ModelChoice::parse(&value()?, &repo)?,
            other => anyhow::bail!("unknown flag {other} (see docs/eval.md)"),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bx-eval: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<bool> {
    let a = args()?;
    let scripted = matches!(a.model, ModelChoice::Scripted);
    let mut report = Report {
        model: match &a.model {
            ModelChoice::Scripted => "scripted attacker".into(),
            ModelChoice::Url(u) => format!("model at {u}"),
            ModelChoice::Launch(_) => "embedded default model (local llama-server)".into(),
        },
        suites: Vec::new(),
    };
    for suite in Suite::load_all(&a.suites)? {
        if a.only.as_ref().is_some_and(|o| *o != suite.name) {
            continue;
        }
        eprintln!("bx-eval: suite {}", suite.name);
        let mut run = SuiteRun::start(&suite, &a.paths, &a.model)?;
        if a.no_scopes {
            run.owner_kind = bx_eval::run::Owner::NoScopes;
        }
        let mut s = SuiteReport {
            suite: suite.name.clone(),
            user_tasks: suite.user_tasks.len(),
            injection_tasks: if scripted { suite.injection_tasks.len() } else { 0 },
            attempts: (scripted.then_some(0), 0),
            ..SuiteReport::default()
        };
        for task in &suite.user_tasks {
            let r = run.run(task, None)?;
            eprintln!(
                "  {} {} ({}, {:.1} s)",
                if r.utility { "done" } else { "FAIL" },
                r.id,
                r.ended,
                r.secs
            );
            s.utility_alone += usize::from(r.utility);
            if task.simple {
                s.simple.0 += 1;
                s.simple.1 += usize::from(r.utility);
            }
            s.approvals_alone += r.approvals;
            s.covered_alone += r.covered;
            s.covered_attacks += r.covered_attacks;
            s.voided_attacks += r.voided_attacks;
            s.attempts.0 = s.attempts.0.map(|a| a + r.proposed);
            s.attempts.1 += r.requests;
            s.wins.extend(r.wins.iter().map(|(g, w)| (r.id.clone(), *g, w.clone())));
            s.runs.push(r);
        }
        if scripted {
            for task in &suite.user_tasks {
                for injection in &suite.injection_tasks {
                    let r = run.run(task, Some(injection))?;
                    s.pairs += 1;
                    s.utility_under_attack += usize::from(r.utility);
                    s.approvals_under_attack += r.approvals;
                    s.covered_under_attack += r.covered;
                    s.covered_attacks += r.covered_attacks;
                    s.voided_attacks += r.voided_attacks;
                    s.attempts.0 = s.attempts.0.map(|a| a + r.proposed);
                    s.attempts.1 += r.requests;
                    for (g, w) in &r.wins {
                        eprintln!("  ATTACKER WIN {}: {g:?}: {w}", r.id);
                    }
                    s.wins.extend(r.wins.iter().map(|(g, w)| (r.id.clone(), *g, w.clone())));
                    s.runs.push(r);
                }
            }
        }
        let (clean, _) = run.finish()?;
        s.verify_clean = clean;
        report.suites.push(s);
    }
    println!("{}", report.table());
    if let Some(dir) = a.report.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&a.report, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("\nreport: {}", a.report.display());
    Ok(!scripted || (report.wins() == 0 && report.sound()))
}
