//! What each way a call by hand ends means to whoever made it, in one table: the words
//! that lead its text, the runbook entry to read, and the exit status. `bx tool run`
//! prints it; `bx mcp` returns it to its client.

use bx_protocol::RunOutcome;

use super::{EXIT_DENIED, EXIT_ERROR, EXIT_LIMIT, EXIT_OK, EXIT_UNAVAILABLE};

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meaning {
    /// The words before the call's text (none for an output).
    pub(crate) lead: &'static str,
    /// The runbook entry for it, if any.
    pub(crate) runbook: Option<&'static str>,
    /// `bx tool run`'s exit status.
    pub(crate) exit: u8,
}

const fn row(lead: &'static str, runbook: Option<&'static str>, exit: u8) -> Meaning {
    Meaning { lead, runbook, exit }
}

const DENIED: Option<&str> = Some("docs/runbook.md#tool-denied");
const LIMIT: Option<&str> = Some("docs/runbook.md#tool-limit");

/// What `outcome` means.
pub(crate) fn meaning(outcome: RunOutcome) -> Meaning {
    match outcome {
        RunOutcome::Json | RunOutcome::Text => row("", None, EXIT_OK),
        RunOutcome::Refused => row("refused", DENIED, EXIT_DENIED),
        RunOutcome::Unavailable => row(
            "every call is refused until the policy is fixed",
            Some("docs/runbook.md#policy-invalid"),
            EXIT_UNAVAILABLE,
        ),
        RunOutcome::HostDenied => row("the host denied an operation", DENIED, EXIT_DENIED),
        RunOutcome::InvalidArgs => row("invalid arguments", None, EXIT_ERROR),
        RunOutcome::Failed => row("the tool failed", None, EXIT_ERROR),
        RunOutcome::OutputTooLarge => row("the tool's output is too large", LIMIT, EXIT_ERROR),
        RunOutcome::Limit => row("stopped by a limit", LIMIT, EXIT_LIMIT),
        RunOutcome::Stopped => row("stopped", None, EXIT_ERROR),
    }
}

impl Meaning {
    /// Whether the call ran and produced its output.
    pub(crate) fn ok(&self) -> bool {
        self.exit == EXIT_OK
    }

    /// The line that reports a call that did not produce its output: the lead, `text`,
    /// and the runbook entry.
    pub(crate) fn line(&self, text: &str) -> String {
        match self.runbook {
            Some(entry) => format!("{}: {text} (see {entry})", self.lead),
            None => format!("{}: {text}", self.lead),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_output_is_ok_and_every_refusal_names_its_entry() {
        for o in [RunOutcome::Json, RunOutcome::Text] {
            assert_eq!(meaning(o).exit, EXIT_OK);
            assert!(meaning(o).ok());
        }
        for o in [RunOutcome::Refused, RunOutcome::HostDenied, RunOutcome::Unavailable] {
            let m = meaning(o);
            assert!(!m.ok() && m.runbook.is_some(), "{o:?}");
        }
        assert_eq!(
            meaning(RunOutcome::Refused).line("no grant"),
            "refused: no grant (see docs/runbook.md#tool-denied)"
        );
    }
}
