//! What `make eval` prints and writes: per suite and in total, the tasks and pairs, the
//! attacker's wins (with the pair and the check that fired), utility alone and under
//! attack, approvals asked per task, whether the audit log verified, and every attempt
//! the model made against the request records on the log.

use serde::Serialize;

use crate::run::RunResult;
use crate::suite::Goal;

/// One suite's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SuiteReport {
    /// The suite.
    pub suite: String,
    /// User tasks.
    pub user_tasks: usize,
    /// Injection tasks.
    pub injection_tasks: usize,
    /// Pairs run.
    pub pairs: usize,
    /// Wins: the run, the check, what it found.
    pub wins: Vec<(String, Goal, String)>,
    /// User tasks done, run alone.
    pub utility_alone: usize,
    /// Simple tasks (one list, read or search), and how many of them were done alone.
    pub simple: (usize, usize),
    /// Pairs whose user task was still done.
    pub utility_under_attack: usize,
    /// Approvals asked in the runs alone, and in the pairs.
    pub approvals_alone: u64,
    /// Approvals asked under attack.
    pub approvals_under_attack: u64,
    /// Calls the owner's scoped answers allowed without a prompt, alone: without scopes
    /// each would have been an approval.
    pub covered_alone: u64,
    /// The same, under attack.
    pub covered_under_attack: u64,
    /// Calls the task never asked for that ran under a scoped answer, without a prompt.
    pub covered_attacks: u64,
    /// Calls the task never asked for that a scoped answer would have let through had
    /// the session's taint not risen past it (they asked, and the owner refused).
    pub voided_attacks: u64,
    /// Tool calls the model proposed, and request records on the log for them (a real
    /// model's proposals are not counted apart: `None`).
    pub attempts: (Option<u64>, u64),
    /// `bx audit verify` was clean after the suite.
    pub verify_clean: bool,
    /// Every run, for the JSON report.
    pub runs: Vec<RunResult>,
}

/// The whole report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// What played the model.
    pub model: String,
    /// Each suite.
    pub suites: Vec<SuiteReport>,
}

/// `n/of (p%)`, or `-` of nothing.
pub(crate) fn pct(n: usize, of: usize) -> String {
    if of == 0 { "-".into() } else { format!("{n}/{of} ({:.0}%)", 100.0 * n as f64 / of as f64) }
}

impl Report {
    /// Attacker wins in all.
    pub fn wins(&self) -> usize {
        self.suites.iter().map(|s| s.wins.len()).sum()
    }

    /// Whether every suite's log verified and every attempt had its record.
    pub fn sound(&self) -> bool {
        self.suites.iter().all(|s| s.verify_clean && s.attempts.0.is_none_or(|a| a == s.attempts.1))
    }

    /// The table, one row per suite and a total.
    pub fn table(&self) -> String {
        let mut out = format!("bx eval ({})\n\n", self.model);
        out.push_str("| suite | user tasks | injection tasks | pairs | attacker wins | utility alone | simple tasks | utility under attack | approvals alone / under attack | attempts / request records | audit verify |\n");
        out.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        // A real model's proposals are not counted apart: the total has a count only when
        // every suite has one.
        let counted = self.suites.iter().all(|s| s.attempts.0.is_some());
        let mut total = SuiteReport {
            suite: "total".into(),
            verify_clean: true,
            attempts: (counted.then_some(0), 0),
            ..SuiteReport::default()
        };
        for s in &self.suites {
            out.push_str(&row(s));
            total.user_tasks += s.user_tasks;
            total.injection_tasks += s.injection_tasks;
            total.pairs += s.pairs;
            total.wins.extend(s.wins.iter().cloned());
            total.utility_alone += s.utility_alone;
            total.simple.0 += s.simple.0;
            total.simple.1 += s.simple.1;
            total.utility_under_attack += s.utility_under_attack;
            total.approvals_alone += s.approvals_alone;
            total.approvals_under_attack += s.approvals_under_attack;
            total.covered_alone += s.covered_alone;
            total.covered_under_attack += s.covered_under_attack;
            total.voided_attacks += s.voided_attacks;
            total.covered_attacks += s.covered_attacks;
            total.attempts.0 = match (total.attempts.0, s.attempts.0) {
                (Some(t), Some(a)) => Some(t + a),
                _ => None,
            };
            total.attempts.1 += s.attempts.1;
            total.verify_clean &= s.verify_clean;
        }
        out.push_str(&row(&total));
        out.push_str(&scopes_line(&total));
        for (run, goal, what) in &total.wins {
            out.push_str(&format!("\nATTACKER WIN: {run}: {goal:?}: {what}"));
        }
        out
    }
}

/// PRUDENTIA (ICLR 2026): up to 1.9x fewer human approvals at equal task completion.
const PRUDENTIA_RATIO: f64 = 1.9;

/// What scoped answers bought and cost, in words: approvals before them (each call a
/// scope covered would have asked) and with them, alone and under attack, beside
/// PRUDENTIA's ratio; and the attacks a scope would have let through but for a risen
/// taint.
fn scopes_line(t: &SuiteReport) -> String {
    let ratio = |after: u64, covered: u64| {
        if after == 0 {
            "-".to_owned()
        } else {
            format!("{:.2}x", (after + covered) as f64 / after as f64)
        }
    };
    format!(
        "\nApprovals without scoped answers -> with them: alone {} -> {} ({} fewer), under attack {} -> {} ({} fewer); PRUDENTIA reports up to {PRUDENTIA_RATIO}x. Calls the task never asked for that ran under a scoped answer: {}; that a scoped answer would have let through had the taint not voided it: {}.\n",
        t.approvals_alone + t.covered_alone,
        t.approvals_alone,
        ratio(t.approvals_alone, t.covered_alone),
        t.approvals_under_attack + t.covered_under_attack,
        t.approvals_under_attack,
        ratio(t.approvals_under_attack, t.covered_under_attack),
        t.covered_attacks,
        t.voided_attacks,
    )
}

fn row(s: &SuiteReport) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} |\n",
        s.suite,
        s.user_tasks,
        s.injection_tasks,
        s.pairs,
        s.wins.len(),
        pct(s.utility_alone, s.user_tasks),
        pct(s.simple.1, s.simple.0),
        pct(s.utility_under_attack, s.pairs),
        s.approvals_alone,
        s.approvals_under_attack,
        s.attempts.0.map_or("-".to_owned(), |a| a.to_string()),
        s.attempts.1,
        if s.verify_clean { "clean" } else { "PROBLEMS" },
    )
}
