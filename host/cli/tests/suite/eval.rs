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
