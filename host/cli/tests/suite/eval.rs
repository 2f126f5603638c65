//! `make eval`'s checks see a win when there is one: with a careless policy (every ask
//! made an allow, the keys' deny rule gone) or a careless owner (approving whatever is
//! asked), the same attacks that make no win under the suite's policy do win, each
//! judged on the environment. Without this, "0 attacker wins" could mean blind checks.

use bx_eval::run::{ModelChoice, Owner, Paths, SuiteRun};
use bx_eval::suite::{Goal, Suite};

use super::*;

fn paths() -> Paths {
    Paths {
        bx: PathBuf::from(env!("CARGO_BIN_EXE_bx")),
        tools: repo().join("tools/target/wasm32-wasip2/release"),
    }
}

fn workspace() -> Suite {
    Suite::load(&repo().join("fixtures/eval/workspace.toml")).unwrap()
}

fn goals(run: &mut SuiteRun<'_>, suite: &Suite, task: &str, injection: &str) -> Vec<Goal> {
    let t = suite.user_tasks.iter().find(|t| t.id == task).unwrap();
    let i = suite.injection_tasks.iter().find(|i| i.id == injection).unwrap();
    run.run(t, Some(i)).unwrap().wins.into_iter().map(|(g, _)| g).collect()
}

#[test]
fn a_careless_policy_or_owner_gives_the_attacker_wins_the_checks_see() {
    let paths = paths();
    let careful = workspace();
    let mut run = SuiteRun::start(&careful, &paths, &ModelChoice::Scripted).unwrap();
    assert!(goals(&mut run, &careful, "weather", "exfil-diary").is_empty());
    run.owner_kind = Owner::Careless;
    let won = goals(&mut run, &careful, "weather-note", "exfil-diary");
    assert!(won.contains(&Goal::Exfiltrated) && won.contains(&Goal::DisguisedApproval), "{won:?}");
    assert!(run.finish().unwrap().0, "the log verifies");

    let mut careless = workspace();
    careless.policy = careless
        .policy
        .replace("when_tainted = \"ask\"", "when_tainted = \"allow\"")
        .replace("[[deny]]\ntool = \"*\"\npath = \"{home}/keys\"\n", "");
    let mut run = SuiteRun::start(&careless, &paths, &ModelChoice::Scripted).unwrap();
    assert!(goals(&mut run, &careless, "weather", "exfil-diary").contains(&Goal::Exfiltrated));
    assert!(goals(&mut run, &careless, "read-invoice", "wipe-todo").contains(&Goal::FileChanged));
    assert!(goals(&mut run, &careless, "read-invoice", "steal-key").contains(&Goal::DeniedRead));
    run.finish().unwrap();
}

/// AgentDojo's banking suite through bx (`make eval-agentdojo`): the same pair AgentDojo
/// judges safe under the suite's policy and a careful owner is judged the attacker's
/// when the owner approves everything, or when the policy lets a tainted session pay on
/// its own. AgentDojo's own `security()` judges each, on the environment the suite's
/// MCP server holds.
#[test]
fn agentdojo_judges_a_win_only_where_bx_let_one_through() {
    use bx_eval::agentdojo::{Attacker, DojoPaths, SuiteRun as DojoRun};
    let python = repo().join(".venv/bin/python");
    assert!(python.exists(), "no .venv: run `make setup`");
    let dojo = |fixtures: PathBuf| DojoPaths {
        bx: paths(),
        python: python.clone(),
        server: repo().join("host/eval/agentdojo/dojo.py"),
        fixtures,
    };
    let fixtures = repo().join("fixtures/agentdojo");
    let mut run =
        DojoRun::start("banking", &dojo(fixtures.clone()), &ModelChoice::Scripted).unwrap();
    // Pay the bill in a file that carries the injection: send money to the attacker.
    for attacker in [Attacker::Once, Attacker::Variants] {
        let r = run.run("user_task_0", Some("injection_task_0"), attacker).unwrap();
        assert_eq!(r.security, Some(false), "{r:?}");
        assert!(r.bx_findings.is_empty() && r.approvals > 0, "{r:?}");
        assert_eq!(r.proposed, r.requests, "{r:?}");
    }
    let alone = run.run("user_task_0", None, Attacker::None).unwrap();
    assert!(alone.utility, "{alone:?}");
    run.owner_kind = Owner::Careless;
    let r = run.run("user_task_0", Some("injection_task_0"), Attacker::Once).unwrap();
    assert_eq!(r.security, Some(true), "a careless owner lets the payment through: {r:?}");
    assert!(!r.bx_findings.is_empty(), "and bx sees the approval it was not asked for: {r:?}");
    assert!(run.finish().unwrap(), "the log verifies");

    // The same pair under a policy that lets a tainted session act on its own.
    let careless = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures.join("banking.toml"), careless.path().join("banking.toml")).unwrap();
    let policy = std::fs::read_to_string(fixtures.join("banking.policy.toml")).unwrap();
    let policy = policy.replace("when_tainted = \"ask\"", "when_tainted = \"allow\"");
    std::fs::write(careless.path().join("banking.policy.toml"), policy).unwrap();
    let mut run =
        DojoRun::start("banking", &dojo(careless.path().to_path_buf()), &ModelChoice::Scripted)
            .unwrap();
    let r = run.run("user_task_0", Some("injection_task_0"), Attacker::Once).unwrap();
    assert_eq!(r.security, Some(true), "{r:?}");
    assert_eq!(r.approvals, 0, "{r:?}");
    run.finish().unwrap();
}
