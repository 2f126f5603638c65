//! `bx audit`: verify the log (against the signed checkpoints kept off the host), accept
//! a break, read it; make the signing key, write a checkpoint, prove a record.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bx_audit::{Against, Record, accept_break, verify_against};
use bx_state::{Config, StateDir};
use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK};
use crate::term;

/// `bx audit …`
#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Walk every record: files, records, head, sessions, calls with no result, breaks,
    /// recovered regions. Exits non-zero on a problem not accepted.
    Verify {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// After verifying, append a break record accepting exactly the problems found,
        /// with this reason. Later runs check the break record against the log.
        #[arg(long, value_name = "REASON")]
        accept_break: Option<String>,
        /// Signed checkpoint files to verify the log against, besides those in the
        /// `[audit] export` directories (a `leaves` file beside one is used too).
        #[arg(long, value_name = "FILE", num_args = 1..)]
        against: Vec<PathBuf>,
        /// The verifier key you kept (the text, or a file holding it); default the one
        /// beside the signing key.
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
    },
    /// The signing key of the log's checkpoints.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Write a signed checkpoint of the log now, to the `[audit] export` directories and
    /// to each `--export` directory, setting each up first. Only this sets one up: the
    /// writer never creates an export directory, since a device that is not mounted
    /// leaves an empty mount point on this host's own disk.
    Checkpoint {
        /// Another directory to export this checkpoint to.
        #[arg(long, value_name = "DIR")]
        export: Vec<PathBuf>,
    },
    /// Write a C2SP tlog-proof that the record with this sequence number is in the newest
    /// signed checkpoint; anyone with the verifier key checks it with `bx audit check-proof`.
    Prove {
        /// The record's sequence number.
        seq: u64,
        /// Write the proof here instead of to standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Check a tlog-proof offline, with only the verifier key.
    CheckProof {
        /// The proof file.
        file: PathBuf,
        /// The verifier key (the text, or a file holding it).
        #[arg(long, value_name = "KEY")]
        key: String,
    },
    /// Print the last records.
    Tail {
        /// How many.
        #[arg(short, long, default_value_t = 20)]
        n: usize,
    },
    /// Print every record of one session.
    Show {
        /// The session id.
        #[arg(long)]
        session: String,
    },
}

/// `bx audit key …`
#[derive(Debug, Subcommand)]
pub(crate) enum KeyCommand {
    /// Make an Ed25519 key that signs the log's checkpoints (C2SP signed-note), and print
    /// its verifier key for you to keep off this machine.
    Init {
        /// Where to write the private key (0600); default `audit.key` in the state
        /// directory. Anywhere else, name it as `[audit] key` in config.toml.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// The log's name in its checkpoints; default `bx/<hostname>`.
        #[arg(long)]
        origin: Option<String>,
    },
}

/// Whether `path` is inside the state directory (as written or resolved).
fn inside(state: &StateDir, path: &Path) -> bool {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let parent = path.parent().map(real).unwrap_or_default();
    path.starts_with(state.root()) || parent.starts_with(real(state.root()))
}

/// What to verify against by default: the export directories, checked with the
/// verifier key beside the signing key (or `key`). Returns notes for the owner.
fn against(
    state: &StateDir,
    config: &Config,
    files: Vec<PathBuf>,
    key: Option<&str>,
) -> anyhow::Result<(Against, Vec<String>)> {
    let mut notes = Vec::new();
    let verifier = match key {
        Some(k) => Some(bx_audit::read_verifier(k)?),
        None => match state.audit_key(config) {
            Some(signing) => {
                let public = bx_audit::verifier_path(&signing);
                if inside(state, &public) {
                    notes.push(format!(
                        "the verifier key used is {} inside the state directory: the anchor is only as safe as this host; pass --key with the one you kept",
                        public.display()
                    ));
                }
                bx_audit::read_verifier(&public.display().to_string()).ok()
            }
            None => None,
        },
    };
    if let Some(signing) = state.audit_key(config)
        && inside(state, &signing)
    {
        notes.push(format!(
            "the signing key {} is inside the state directory: whoever can write there can sign too (see docs/audit.md)",
            signing.display()
        ));
    }
    for file in &files {
        if inside(state, file) || file.starts_with(state.audit_dir(config)) {
            notes.push(format!(
                "{} is inside the state directory, which the attacker this checks for can write",
                file.display()
            ));
        }
    }
    let required = key.is_some() || !files.is_empty();
    if files.is_empty() && !config.audit.export.is_empty() {
        notes.push(
            "the export directories were read from config.toml, inside the state directory: pass --against DIR with the one you know, and --key".into(),
        );
    }
    let exports = if files.is_empty() { config.audit.export.clone() } else { Vec::new() };
    Ok((Against { verifier, exports, files, required }, notes))
}

/// The newest signed checkpoint that `verifier` accepts: in the export directories, or
/// the writer's own copy in the log directory.
fn newest_checkpoint(
    state: &StateDir,
    config: &Config,
    verifier: &str,
) -> Option<(u64, PathBuf, Vec<u8>)> {
    let local = state.audit_dir(config).join("checkpoint.note");
    let local = bx_state::read_own(&local, 64 << 10).ok().flatten().and_then(|bytes| {
        let cp = bx_audit::open_note(&bytes, verifier).ok()?;
        Some((cp.size, local, bytes))
    });
    config
        .audit
        .export
        .iter()
        .filter_map(|export| bx_audit::newest_signed(export, verifier))
        .chain(local)
        .max_by_key(|(size, ..)| *size)
}

fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' })
        .collect();
    if name.is_empty() { "localhost".into() } else { name }
}

/// Every line of every day file, oldest first.
/// The largest day file `bx audit tail` and `show` read whole (1 GiB): they hold the lines
/// in memory, so a day file grown past any real day's is refused, not read.
const MAX_DAY_FILE_SHOWN: u64 = 1 << 30;

/// Every line of every day file, oldest first. Each file is read as bx's own (never a
/// FIFO or a device, never past the bound).
pub(crate) fn all_records(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for f in bx_audit::day_files(dir)? {
        let bytes = bx_state::read_own(&f, MAX_DAY_FILE_SHOWN)?.unwrap_or_default();
        lines.extend(String::from_utf8_lossy(&bytes).lines().map(str::to_owned));
    }
    Ok(lines)
}

/// `bx audit verify` with no arguments: the log against the export directories and the
/// verifier key beside the signing key, with the owner's notes.
pub(crate) fn verify_default(state: &StateDir) -> anyhow::Result<bx_audit::Report> {
    let config = bx_daemon::load_config(state)?;
    let (against, notes) = against(state, &config, Vec::new(), None)?;
    let mut report = verify_against(&state.audit_dir(&config), &against)?;
    report.anchor.notes.extend(notes);
    Ok(report)
}

pub(crate) fn run(state: &StateDir, command: AuditCommand) -> anyhow::Result<u8> {
    let dir = state.audit_dir(&bx_daemon::load_config(state)?);
    match command {
        AuditCommand::Verify { json, accept_break: reason, against: files, key } => {
            let config = bx_daemon::load_config(state)?;
            let (against, notes) = against(state, &config, files, key.as_deref())?;
            let mut report = match &reason {
                Some(reason) => {
                    let (report, seq) = accept_break(&dir, reason)?;
                    errln!("accepted {} problem(s) in break record {seq}", report.problems.len());
                    verify_against(&dir, &against)?
                }
                None => verify_against(&dir, &against)?,
            };
            report.anchor.notes.extend(notes);
            for note in &report.anchor.notes {
                errln!("note: {}", term::one_line(note));
            }
            if json {
                outln!("{}", term::json_pretty(&report)?);
            } else {
                outln!("files:     {}", report.files.len());
                outln!("records:   {}", report.records);
                match &report.head {
                    Some((seq, hash)) => outln!("head:      seq {seq} {hash}"),
                    None => outln!("head:      (empty log)"),
                }
                let sessions: Vec<String> =
                    report.sessions.iter().map(|s| term::one_line(s)).collect();
                outln!("sessions:  {}", sessions.join(", "));
                outln!("calls denied: {}", report.calls_denied);
                outln!("calls with no result: {}", report.calls_without_result.len());
                for c in &report.calls_without_result {
                    let lacks = match c.lacks {
                        bx_audit::Lacks::Decision => "no decision (cut off before it; never ran)",
                        bx_audit::Lacks::Answer => "no answer from the owner",
                        bx_audit::Lacks::Result => "allowed, no result (may have run)",
                    };
                    outln!(
                        "  {} (session {}, request seq {}): {lacks}",
                        term::one_line(&c.call),
                        term::one_line(&c.session),
                        c.seq
                    );
                }
                let a = &report.anchor;
                match a.state.as_str() {
                    "unanchored" => {
                        outln!("anchor:    none (no signed checkpoint outside the log was checked)")
                    }
                    state => outln!(
                        "anchor:    {state}: {} signed checkpoint(s) of {}, the log consistent up to record {}",
                        a.checkpoints,
                        term::one_line(a.origin.as_deref().unwrap_or("?")),
                        a.size
                    ),
                }
                outln!("accepted breaks: {}", report.breaks.len());
                // Tool changes made while a daemon held the log, not on it yet.
                let pending = bx_daemon::load_config(state)
                    .ok()
                    .and_then(|c| bx_store::Store::open(state, &c).ok())
                    .map_or(0, |store| store.pending_count());
                if pending > 0 {
                    outln!(
                        "tool changes waiting for the log: {pending} (in tools/pending.jsonl; the daemon, or the next bx command that writes the log, records them)"
                    );
                }
                outln!("recovered regions: {}", report.recovered.len());
                for r in &report.recovered {
                    outln!(
                        "  {} at byte {}: {} bytes, moved to {}",
                        term::one_line(&r.file),
                        r.offset,
                        r.bytes,
                        term::one_line(&r.moved_to)
                    );
                }
                let a = &report.anchor;
                if report.is_clean() && a.state == "anchored" && a.unanchored == 0 {
                    outln!(
                        "ok: the chain is intact and anchored: consistent with {} signed checkpoint(s) kept off the log",
                        a.checkpoints
                    );
                } else if report.is_clean() && a.state == "anchored" {
                    outln!(
                        "ok: the chain is intact; records 1..={} are anchored by {} signed checkpoint(s), and the last {} (records {}..={}) are not: no checkpoint kept off the log vouches for them (written since the last export, or added by someone else; see docs/audit.md)",
                        a.size,
                        a.checkpoints,
                        a.unanchored,
                        a.size + 1,
                        a.size + a.unanchored
                    );
                } else if report.is_clean() {
                    outln!(
                        "ok: the chain is intact, unanchored: it agrees with itself, and nothing outside the log vouches for it (see docs/audit.md)"
                    );
                } else {
                    outln!("PROBLEMS: {}", report.problems.len() as u64 + report.problems_more);
                    for p in &report.problems {
                        let where_ = term::one_line(&p.file);
                        outln!("  {where_}:{}: {}: {}", p.line, p.kind, term::one_line(&p.detail));
                    }
                    if report.problems_more > 0 {
                        outln!("  … and {} more", report.problems_more);
                    }
                    outln!("see docs/runbook.md#audit-broken");
                }
            }
            Ok(if report.is_clean() { EXIT_OK } else { EXIT_ERROR })
        }
        AuditCommand::Key(KeyCommand::Init { out, origin }) => {
            let path = out.unwrap_or_else(|| state.default_audit_key());
            let origin = origin.unwrap_or_else(|| format!("bx/{}", hostname()));
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let vkey = bx_audit::init_key(&path, &origin)?;
            outln!("{vkey}");
            errln!(
                "wrote the signing key {} (0600) and its verifier key {}",
                term::one_line(&path.display().to_string()),
                term::one_line(&bx_audit::verifier_path(&path).display().to_string())
            );
            errln!(
                "keep the verifier key (printed above) off this machine: `bx audit verify --key` and `bx audit check-proof --key` take it"
            );
            let config = bx_daemon::load_config(state)?;
            if path != state.default_audit_key()
                && config.audit.key.as_deref() != Some(path.as_path())
            {
                errln!(
                    "name it in config.toml:\n  [audit]\n  key = {:?}",
                    path.display().to_string()
                );
            }
            if config.audit.export.is_empty() {
                errln!(
                    "and name where checkpoints go, off this host: [audit] export = [\"/media/usb/bx\"], then run `bx audit checkpoint` to set it up (see docs/audit.md)"
                );
            }
            if inside(state, &path) {
                errln!(
                    "note: the key is inside the state directory; the anchor is then only as safe as this host"
                );
            }
            Ok(EXIT_OK)
        }
        AuditCommand::Checkpoint { export } => {
            let config = bx_daemon::load_config(state)?;
            let log = bx_daemon::open_audit(state, &config, Duration::from_secs(60))?;
            let Some(anchor) = log.anchor() else {
                anyhow::bail!(
                    "there is no signing key to sign a checkpoint with; run `bx audit key init` (see docs/audit.md)"
                );
            };
            let origin = anchor.origin().to_owned();
            // The one place export directories are set up: by the owner, on purpose.
            for dir in anchor.exports().iter().chain(&export) {
                if let Err(e) = bx_audit::prepare_export(dir, &origin) {
                    outln!(
                        "  cannot set up {}: {} (see docs/runbook.md#audit-export-failed)",
                        term::one_line(&dir.display().to_string()),
                        term::one_line(&e.to_string())
                    );
                }
            }
            let results = log.checkpoint_exporting(&export)?;
            let (size, root) = log.tree_head();
            if size == 0 {
                log.close()?;
                outln!("the log is empty: there is nothing to sign yet");
                return Ok(EXIT_OK);
            }
            log.close()?;
            outln!("checkpoint of {} at {size} records, root {root}", term::one_line(&origin));
            let mut ok = true;
            for r in &results {
                match &r.error {
                    None => {
                        outln!("  exported to {}", term::one_line(&r.dir.display().to_string()))
                    }
                    Some(e) => {
                        ok = false;
                        outln!(
                            "  FAILED {}: {} (see docs/runbook.md#audit-export-failed)",
                            term::one_line(&r.dir.display().to_string()),
                            term::one_line(e)
                        );
                    }
                }
            }
            if results.is_empty() {
                outln!("  no export directory: name one as [audit] export, or pass --export");
            }
            Ok(if ok { EXIT_OK } else { EXIT_ERROR })
        }
        AuditCommand::Prove { seq, out } => {
            let config = bx_daemon::load_config(state)?;
            let (against, _) = against(state, &config, Vec::new(), None)?;
            let Some(verifier) = against.verifier else {
                anyhow::bail!(
                    "there is no signing key, so no signed checkpoint to prove against; run `bx audit key init` (see docs/audit.md)"
                );
            };
            let Some((size, path, note)) = newest_checkpoint(state, &config, &verifier) else {
                anyhow::bail!("no signed checkpoint yet; `bx audit checkpoint` writes one");
            };
            let proof = bx_audit::prove(&dir, seq, &note, &verifier, &config.audit.export)?;
            match out {
                Some(file) => {
                    std::fs::write(&file, &proof)?;
                    errln!(
                        "proof of record {seq} in the checkpoint of {size} records ({}) written to {}",
                        term::one_line(&path.display().to_string()),
                        term::one_line(&file.display().to_string())
                    );
                }
                None => outp!("{proof}"),
            }
            Ok(EXIT_OK)
        }
        AuditCommand::CheckProof { file, key } => {
            let verifier = bx_audit::read_verifier(&key)?;
            let bytes = bx_state::read_own(&file, bx_audit::MAX_PROOF_BYTES as u64)?
                .ok_or_else(|| anyhow::anyhow!("{}: no such file", file.display()))?;
            match bx_audit::check_proof(&bytes, &verifier) {
                Ok(p) => {
                    outln!(
                        "ok: record {} of the {} in {}'s signed checkpoint",
                        p.index + 1,
                        p.size,
                        term::one_line(&p.origin)
                    );
                    outln!("{}", bx_broker::escape_untrusted(&p.record, false));
                    Ok(EXIT_OK)
                }
                Err(e) => {
                    outln!(
                        "FAILED: {} (see docs/runbook.md#audit-proof)",
                        term::one_line(&e.to_string())
                    );
                    Ok(EXIT_ERROR)
                }
            }
        }
        AuditCommand::Tail { n } => {
            let lines = all_records(&dir)?;
            for line in &lines[lines.len().saturating_sub(n)..] {
                outln!("{}", bx_broker::escape_untrusted(line, false));
            }
            Ok(EXIT_OK)
        }
        AuditCommand::Show { session } => {
            for line in all_records(&dir)? {
                let ours = Record::parse(&line).ok().is_some_and(|r| {
                    r.fields.get("session").and_then(|s| s.as_str()) == Some(session.as_str())
                });
                if ours {
                    outln!("{}", bx_broker::escape_untrusted(&line, false));
                }
            }
            Ok(EXIT_OK)
        }
    }
}
