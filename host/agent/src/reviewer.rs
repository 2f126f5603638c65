//! Who else answers an approval, and who is told one waits (`[approvals]` in
//! `config.toml`, docs/approvals.md): a reviewer program that answers a call before the
//! owner is asked, and a notice run when a call starts to wait for the owner.
//!
//! Both are programs the owner configured, and both are given only what the owner is
//! shown: the approval block, escaped and bounded, with any secret's value redacted. They
//! run with an empty environment (but `PATH`, `HOME` and what the notice is about), from
//! `/`, and are stopped at their deadline. A reviewer that fails in any way refuses the
//! call; a notice that fails is counted and changes nothing.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bx_audit::{AnsweredBy, ReviewerId};
use bx_broker::{Answer, ScopeKind, escape_untrusted};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::call::Asking;
use crate::error::ReviewerFault;

/// The most a reviewer may write on stdout; more is not an answer.
const MAX_ANSWER_BYTES: usize = 16 << 10;
/// The most of a failing reviewer's stderr kept for the refusal's reason.
const MAX_STDERR_SHOWN: usize = 200;
/// The most bytes of a reason the reviewer gives.
const MAX_REASON_BYTES: usize = 1 << 10;
/// The most bytes of a notice's summary.
const MAX_SUMMARY_BYTES: usize = 200;

/// The reviewer and the notice, as `config.toml` names them.
#[derive(Debug, Default)]
pub struct Approvers {
    reviewer: Option<Program>,
    notify: Option<Program>,
    /// Notices that failed to start, failed, or ran past their deadline.
    notices_failed: AtomicU64,
}

#[derive(Debug, Clone)]
struct Program {
    argv: Vec<String>,
    deadline: Duration,
}

/// What the reviewer reads on stdin: the block the owner would be shown, and its parts.
#[derive(Debug, Serialize)]
struct Block<'a> {
    /// The approval's id.
    id: &'a str,
    session: &'a str,
    call: &'a str,
    /// The tool's name, escaped.
    tool: String,
    /// The block as the owner sees it.
    block: String,
    /// The call's whole arguments, pretty-printed and escaped as `bx approvals show`
    /// prints them (the block may show them in part).
    arguments: String,
    /// The scopes an approval may name (`args`, `path`, `host`); none means this call
    /// only.
    scopes: Vec<&'static str>,
}

/// What the reviewer answers on stdout.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    answer: Verdict,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Approve,
    Refuse,
    Abstain,
}

/// What came of asking the reviewer.
#[derive(Debug)]
pub enum Review {
    /// It answered (a failure is a refusal), and the log names it as the answerer.
    Answered(Answer, AnsweredBy),
    /// There is none to ask, the grant wants the owner, or it abstained: the owner answers.
    Owner,
}

impl Approvers {
    /// The helpers `config` names.
    pub fn new(config: &bx_state::ApprovalsConfig) -> Approvers {
        let program = |argv: &[String], secs: std::num::NonZeroU64| {
            (!argv.is_empty())
                .then(|| Program { argv: argv.to_vec(), deadline: Duration::from_secs(secs.get()) })
        };
        Approvers {
            reviewer: program(&config.reviewer, config.reviewer_secs),
            notify: program(&config.notify, config.notify_secs),
            notices_failed: AtomicU64::new(0),
        }
    }

    /// Asks the reviewer about `asking`, unless there is none or the call's grant wants
    /// the owner in person. `redact` takes any secret's value out of what it is given.
    pub async fn review(&self, asking: &Asking<'_>, redact: impl Fn(&str) -> String) -> Review {
        let Some(reviewer) = &self.reviewer else { return Review::Owner };
        if asking.request().person {
            return Review::Owner;
        }
        let command = reviewer.argv[0].clone();
        // Read just before it runs, under the same deadline.
        let digest = tokio::time::timeout(reviewer.deadline, file_digest(Path::new(&command)))
            .await
            .unwrap_or(Err(ReviewerFault::Timeout(reviewer.deadline.as_secs())));
        let (digest, read) = match digest {
            Ok(digest) => (digest, Ok(())),
            Err(e) => (String::new(), Err(e)),
        };
        let by = AnsweredBy::Reviewer(ReviewerId { command, digest });
        if let Err(e) = read {
            return Review::Answered(Answer::Refuse(fault(&e)), by);
        }
        let answer = match ask(reviewer, asking, &redact).await {
            Ok(Some(answer)) => answer,
            Ok(None) => return Review::Owner,
            Err(e) => Answer::Refuse(fault(&e)),
        };
        Review::Answered(answer, by)
    }

    /// Tells the owner, through the notice command, that `asking` waits. Returns at
    /// once: the notice runs on its own task, bounded by its deadline.
    pub fn notify(
        self: &std::sync::Arc<Self>,
        asking: &Asking<'_>,
        redact: impl Fn(&str) -> String,
    ) {
        let Some(notify) = self.notify.clone() else { return };
        let request = asking.request();
        let why = request.reasons.first().map_or("", String::as_str);
        let summary = bounded_line(
            &redact(&format!("{} waits for approval: {why}", request.call.tool)),
            MAX_SUMMARY_BYTES,
        );
        let vars = [
            ("BX_APPROVAL_ID", asking.approval().to_owned()),
            ("BX_SESSION", asking.session().to_owned()),
            ("BX_TOOL", bounded_line(&request.call.tool, MAX_SUMMARY_BYTES)),
            ("BX_SUMMARY", summary),
        ];
        let stdin = serde_json::json!({
            "id": vars[0].1, "session": vars[1].1, "tool": vars[2].1, "summary": vars[3].1,
        })
        .to_string();
        let this = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            let ran = tokio::time::timeout(notify.deadline, async {
                let mut child = command(&notify.argv, &vars, false).spawn()?;
                let mut group = Group::of(&child);
                if let Some(mut input) = child.stdin.take() {
                    // A notice that does not read its stdin is not a failure.
                    let _ = input.write_all(stdin.as_bytes()).await;
                }
                let status = child.wait().await;
                group.reaped();
                status
            })
            .await;
            let why = match ran {
                Ok(Ok(status)) if status.success() => return,
                Ok(Ok(status)) => status.to_string(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("still running after {} s, stopped", notify.deadline.as_secs()),
            };
            let failed = this.notices_failed.fetch_add(1, Ordering::Relaxed) + 1;
            eprintln!("bx serve: the approval notice failed ({failed} so far): {why}");
        });
    }
}

/// The refusal reason for a reviewer that failed, naming its runbook entry.
fn fault(e: &ReviewerFault) -> String {
    format!("{e} (see {})", e.runbook())
}

/// `program` as a child with an empty environment but `PATH`, `HOME` and `vars`, run from
/// `/`, with stdin piped, stdout and stderr piped when `read` (else to nowhere), and
/// killed if it is dropped.
fn command(argv: &[String], vars: &[(&str, String)], read: bool) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    // A group of its own, so that what it started can be stopped with it.
    cmd.args(&argv[1..]).env_clear().current_dir("/").kill_on_drop(true).process_group(0);
    for keep in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = || if read { Stdio::piped() } else { Stdio::null() };
    cmd.stdin(Stdio::piped()).stdout(out()).stderr(out());
    cmd
}

/// A helper's process group, killed whole when the wait for it is dropped (its deadline
/// passed): a program that left a child running, holding its pipes, leaves nothing
/// behind. Once the helper itself is reaped its group id may be reused, so the group is
/// then left alone.
struct Group(Option<rustix::process::Pid>);

impl Group {
    fn of(child: &tokio::process::Child) -> Group {
        Group(child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32)))
    }

    fn reaped(&mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // The group is the unreaped child's own (`process_group(0)`): its id cannot
        // name another group yet.
        if let Some(group) = self.0 {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

/// Runs the reviewer on `asking` to its deadline: `Ok(None)` when it abstains.
async fn ask(
    reviewer: &Program,
    asking: &Asking<'_>,
    redact: &impl Fn(&str) -> String,
) -> Result<Option<Answer>, ReviewerFault> {
    let request = asking.request();
    let args = redact(asking.args());
    let offered: Vec<&'static str> =
        bx_broker::offers(request, &args).into_iter().map(|(name, _)| name).collect();
    let now = crate::now_ms();
    let pending = bx_broker::Pending {
        id: asking.approval().to_owned(),
        request: request.clone(),
        args: args.clone(),
        created_ms: now,
        expires_ms: now
            .saturating_add(u64::try_from(reviewer.deadline.as_millis()).unwrap_or(u64::MAX)),
        seal: None,
    };
    let block = Block {
        id: asking.approval(),
        session: asking.session(),
        call: asking.call(),
        tool: escape_untrusted(&request.call.tool, false),
        block: redact(&bx_broker::render_block(&pending, &request.call.digest, now)),
        arguments: bx_broker::args_whole(&args),
        scopes: offered.clone(),
    };
    let input = serde_json::to_vec(&block).unwrap_or_default();
    let run = async {
        let mut child = command(&reviewer.argv, &[], true).spawn().map_err(ReviewerFault::Start)?;
        let mut group = Group::of(&child);
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ReviewerFault::Start(std::io::Error::other("no pipes")));
        };
        // Written beside the reads: a reviewer that answers before it has read its input
        // (or never reads it) must not block the write, nor the write its answer.
        let write = async move {
            let _ = stdin.write_all(&input).await;
            drop(stdin);
        };
        // Stdout up to one byte past its bound (more is not an answer, and the reviewer
        // is stopped); the start of stderr kept for the reason, the rest drained so that
        // a chatty reviewer does not block on it.
        let read_out = async {
            let mut out = Vec::new();
            let mut stdout = stdout;
            (&mut stdout).take(MAX_ANSWER_BYTES as u64 + 1).read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        let read_err = async {
            let mut err = Vec::new();
            let mut stderr = stderr;
            let _ = (&mut stderr).take(MAX_STDERR_SHOWN as u64).read_to_end(&mut err).await;
            let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            err
        };
        let read_out = async {
            let out = read_out.await;
            if matches!(&out, Ok(out) if out.len() > MAX_ANSWER_BYTES) {
                // Not an answer, whatever follows: it is stopped, not read to its end.
                let _ = child.start_kill();
            }
            out
        };
        let ((), out, err) = tokio::join!(write, read_out, read_err);
        let out = out.map_err(ReviewerFault::Start)?;
        if out.len() > MAX_ANSWER_BYTES {
            return Err(ReviewerFault::BadAnswer(format!("more than {MAX_ANSWER_BYTES} bytes")));
        }
        let status = child.wait().await;
        group.reaped();
        let status = status.map_err(ReviewerFault::Start)?;
        Ok((status, out, err))
    };
    let (status, out, err) = tokio::time::timeout(reviewer.deadline, run)
        .await
        .map_err(|_| ReviewerFault::Timeout(reviewer.deadline.as_secs()))??;
    if !status.success() {
        return Err(ReviewerFault::Failed {
            status: status.to_string(),
            stderr: bounded_line(&String::from_utf8_lossy(&err), MAX_STDERR_SHOWN),
        });
    }
    let bad = |e: serde_json::Error| {
        ReviewerFault::BadAnswer(bounded_line(&e.to_string(), MAX_STDERR_SHOWN))
    };
    // One JSON object: serde would also read a struct from an array.
    let reply = match serde_json::from_slice(out.trim_ascii()).map_err(bad)? {
        object @ serde_json::Value::Object(_) => {
            serde_json::from_value::<Reply>(object).map_err(bad)?
        }
        _ => return Err(ReviewerFault::BadAnswer("not a JSON object".into())),
    };
    let approve = match reply.answer {
        Verdict::Abstain if reply.scope.is_none() && reply.reason.is_none() => return Ok(None),
        Verdict::Abstain => {
            return Err(ReviewerFault::BadAnswer("abstain takes no scope or reason".into()));
        }
        Verdict::Approve if reply.reason.is_some() => {
            return Err(ReviewerFault::BadAnswer("approve takes no reason".into()));
        }
        Verdict::Approve => true,
        Verdict::Refuse => false,
    };
    let reason = bounded_line(reply.reason.as_deref().unwrap_or(""), MAX_REASON_BYTES);
    // Only a scope the block offers, by its name: `path=/dir` and the like are the
    // owner's to type.
    let kind = match reply.scope {
        None => ScopeKind::Call,
        Some(scope) if offered.contains(&scope.as_str()) => {
            ScopeKind::parse(&scope).map_err(|e| ReviewerFault::BadAnswer(e.to_string()))?
        }
        Some(scope) => {
            return Err(ReviewerFault::BadAnswer(format!(
                "scope {:?} is not one the block offers",
                bounded_line(&scope, 64)
            )));
        }
    };
    bx_broker::scoped_answer(request, &args, &kind, approve, reason)
        .map(Some)
        .map_err(|e| ReviewerFault::BadAnswer(e.to_string()))
}

/// `sha256:HEX` of the regular file at `path`.
async fn file_digest(path: &Path) -> Result<String, ReviewerFault> {
    use sha2::Digest as _;
    // Opened without blocking (a pipe put in its place must not hold the open), then
    // checked on what was opened: a pipe or a device would never end.
    let mut file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .await
        .map_err(ReviewerFault::Start)?;
    if !file.metadata().await.map_err(ReviewerFault::Start)?.is_file() {
        let why = format!("{} is not a regular file", path.display());
        return Err(ReviewerFault::Start(std::io::Error::other(why)));
    }
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = file.read(&mut buf).await.map_err(ReviewerFault::Start)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// `text` on one line, escaped as the owner is shown untrusted text, at most `max` bytes
/// in all (a cut one ends in `…`).
fn bounded_line(text: &str, max: usize) -> String {
    let mut line = escape_untrusted(text.trim(), false);
    if line.len() > max {
        let mut end = max.saturating_sub('…'.len_utf8());
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_line_is_one_escaped_line_within_its_bound_cut_marker_included() {
        for text in ["a".repeat(300), "\u{1}".repeat(300), "é".repeat(300), "x\ny\u{202e}z".into()]
        {
            let line = bounded_line(&text, MAX_SUMMARY_BYTES);
            assert!(line.len() <= MAX_SUMMARY_BYTES, "{} bytes", line.len());
            assert!(!line.chars().any(|c| c.is_control() || c == '\u{202e}'), "{line:?}");
            assert_eq!(line.ends_with('…'), text.len() > 100, "{line:?}");
        }
    }
}
