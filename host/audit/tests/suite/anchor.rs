//! The anchored log: signed checkpoints exported off the host catch what the chain alone
//! cannot (a rewrite with every later hash recomputed, a cut tail with the checkpoint
//! fixed up or deleted, a removed day file), naming the record; proofs check offline.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bx_audit::{Against, Anchor, AuditLog, Record, Report, check_proof, day_files, line_hash};

use super::*;

pub(crate) struct Anchored {
    _tmp: tempfile::TempDir,
    pub(crate) log: PathBuf,
    pub(crate) export: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) vkey: String,
}

impl Anchored {
    pub(crate) fn new() -> Anchored {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("keys/audit.key");
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        let vkey = bx_audit::init_key(&key, "bx.test/anchor").unwrap();
        let export = tmp.path().join("usb");
        std::fs::create_dir(&export).unwrap();
        bx_audit::prepare_export(&export, "bx.test/anchor").unwrap();
        Anchored { log: tmp.path().join("audit"), export, key, vkey, _tmp: tmp }
    }

    pub(crate) fn open(&self) -> AuditLog {
        self.open_with(Box::new(bx_audit::SystemClock))
    }

    fn open_with(&self, clock: Box<dyn bx_audit::Clock>) -> AuditLog {
        let anchor = Anchor::load(&self.key, vec![self.export.clone()]).unwrap();
        AuditLog::open_with_clock(&self.log, clock).unwrap().with_anchor(anchor)
    }

    /// `calls` calls of three records each, then close (which exports).
    pub(crate) fn write(&self, calls: usize) {
        let log = self.open();
        append_calls(&log, "c", calls);
        log.close().unwrap();
    }

    pub(crate) fn against(&self) -> Against {
        Against {
            verifier: Some(self.vkey.clone()),
            exports: vec![self.export.clone()],
            files: vec![],
            required: true,
        }
    }

    fn verify(&self) -> Report {
        bx_audit::verify_against(&self.log, &self.against()).unwrap()
    }

    pub(crate) fn exported(&self) -> PathBuf {
        bx_audit::origin_dir(&self.export, "bx.test/anchor")
    }
}

/// `calls` calls of three records each (request, decision, result), named `{prefix}{i}`.
fn append_calls(log: &AuditLog, prefix: &str, calls: usize) {
    for i in 0..calls {
        let call = format!("{prefix}{i}");
        log.append(&request("s1", &call, "{}")).unwrap();
        log.append(&decision("s1", &call, Verdict::Allow)).unwrap();
        log.append(&result("s1", &call)).unwrap();
    }
}

fn all_lines(dir: &Path) -> Vec<(PathBuf, Vec<String>)> {
    day_files(dir)
        .unwrap()
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text.lines().map(str::to_owned).collect())
        })
        .collect()
}

/// What an attacker with write access to the log does after changing records: rewrite
/// every `prev` from the first record on, and the checkpoint to the new head.
pub(crate) fn rechain(dir: &Path, mut edit: impl FnMut(&mut Vec<(PathBuf, Vec<String>)>)) {
    let mut files = all_lines(dir);
    edit(&mut files);
    let mut prev = bx_audit::GENESIS.to_owned();
    let mut seq = 0;
    for (path, lines) in &mut files {
        for line in lines.iter_mut() {
            let mut r = Record::parse(line).unwrap();
            r.prev = prev.clone();
            *line = r.to_line();
            prev = line_hash(line.as_bytes());
            seq = r.seq;
        }
        std::fs::write(path, lines.join("\n") + if lines.is_empty() { "" } else { "\n" }).unwrap();
    }
    let cp = serde_json::json!({ "seq": seq, "hash": prev });
    std::fs::write(dir.join("checkpoint.json"), cp.to_string()).unwrap();
}

fn kinds(report: &Report) -> Vec<&str> {
    report.problems.iter().map(|p| p.kind.as_str()).collect()
}

#[test]
fn a_rewritten_middle_record_with_the_chain_recomputed_is_named() {
    let a = Anchored::new();
    a.write(4);
    assert_eq!(a.verify().anchor.state, "anchored");
    assert!(a.verify().is_clean());
    // A decision's reason rewritten (a refused call's result after it would show as out
    // of order; this edit the records alone cannot show).
    rechain(&a.log, |files| {
        let line = &mut files[0].1[4];
        assert!(line.contains("\"why\":\"\""), "{line}");
        *line = line.replace("\"why\":\"\"", "\"why\":\"edited by hand\"");
    });
    let alone = bx_audit::verify(&a.log).unwrap();
    assert!(alone.is_clean(), "the chain alone cannot see this: {:?}", alone.problems);
    assert_eq!(alone.anchor.state, "unanchored");

    let report = a.verify();
    assert_eq!(report.anchor.state, "broken");
    assert_eq!(kinds(&report), ["anchor-rewritten"], "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!(p.line, 5, "{p:?}");
    assert!(p.detail.starts_with("record 5 ("), "{p:?}");
    assert!(p.detail.contains("seq 5"), "{p:?}");
}

#[test]
fn a_cut_tail_with_the_checkpoint_fixed_up_or_deleted_is_named() {
    for delete_checkpoint in [false, true] {
        let a = Anchored::new();
        a.write(4);
        rechain(&a.log, |files| files[0].1.truncate(9));
        if delete_checkpoint {
            std::fs::remove_file(a.log.join("checkpoint.json")).unwrap();
        }
        assert!(bx_audit::verify(&a.log).unwrap().is_clean());
        let report = a.verify();
        assert_eq!(kinds(&report), ["anchor-truncated"], "{:?}", report.problems);
        assert!(
            report.problems[0].detail.contains("the log has 9 records")
                && report.problems[0].detail.contains("records 10..=12 were cut off"),
            "{:?}",
            report.problems[0]
        );
    }
}

#[test]
fn a_removed_newest_day_file_is_named() {
    let a = Anchored::new();
    let now = Arc::new(AtomicU64::new(BEFORE_MIDNIGHT - 1000));
    let log = a.open_with(Box::new(ManualClock(now.clone())));
    for i in 0..3 {
        log.append(&note("s1", &format!("day one {i}"))).unwrap();
    }
    now.store(BEFORE_MIDNIGHT + 2000, Ordering::SeqCst);
    for i in 0..2 {
        log.append(&note("s1", &format!("day two {i}"))).unwrap();
    }
    log.close().unwrap();
    let newest = day_files(&a.log).unwrap().pop().unwrap();
    std::fs::remove_file(newest).unwrap();
    std::fs::remove_file(a.log.join("checkpoint.json")).unwrap();
    assert!(bx_audit::verify(&a.log).unwrap().is_clean());
    let report = a.verify();
    assert_eq!(kinds(&report), ["anchor-truncated"], "{:?}", report.problems);
    assert!(report.problems[0].detail.contains("records 4..=5"), "{:?}", report.problems[0]);
}

#[test]
fn a_cut_log_is_not_continued_and_a_continued_one_is_named_a_fork() {
    // Cut back past the export: the writer's next open finds the log shorter than the
    // checkpoint exported, and refuses to continue it (issue 31: it used to go on
    // writing, and sign and export the cut history once it was longer again).
    let a = Anchored::new();
    a.write(4);
    rechain(&a.log, |files| files[0].1.truncate(6));
    let log = a.open();
    let refused = log.append(&note("s1", "after the cut")).unwrap_err();
    assert!(refused.to_string().contains("records 7..=12 were cut off"), "{refused}");
    assert!(refused.to_string().contains("docs/runbook.md#audit-anchor-mismatch"), "{refused}");
    drop(log);

    // Continued anyway (an older bx, or a new export directory that knows nothing of
    // the cut): the key has now signed two histories, and the old checkpoint names
    // where they part.
    let fresh = a.export.with_file_name("usb-new");
    std::fs::create_dir(&fresh).unwrap();
    bx_audit::prepare_export(&fresh, "bx.test/anchor").unwrap();
    let anchor = Anchor::load(&a.key, vec![fresh.clone()]).unwrap();
    let log = AuditLog::open(&a.log).unwrap().with_anchor(anchor);
    for i in 0..9 {
        log.append(&note("s1", &format!("more {i}"))).unwrap();
    }
    log.close().unwrap();
    let both = Against { exports: vec![a.export.clone(), fresh], ..a.against() };
    let report = bx_audit::verify_against(&a.log, &both).unwrap();
    assert!(kinds(&report).contains(&"anchor-forked"), "{:?}", report.problems);
    let fork = report.problems.iter().find(|p| p.kind == "anchor-forked").unwrap();
    assert!(fork.detail.starts_with("record 7 ("), "{fork:?}");
}

#[test]
fn a_checkpoint_signed_by_another_key_is_refused() {
    let a = Anchored::new();
    a.write(2);
    let other = Anchored::new();
    other.write(2);
    let theirs = bx_audit::origin_dir(&other.export, "bx.test/anchor").join("6.checkpoint");
    std::fs::copy(&theirs, a.exported().join("7.checkpoint")).unwrap();
    let report = a.verify();
    assert_eq!(kinds(&report), ["anchor-signature"], "{:?}", report.problems);
}

#[test]
fn with_no_exported_checkpoint_the_log_is_unanchored_not_clean_and_anchored() {
    let a = Anchored::new();
    let log = AuditLog::open(&a.log).unwrap();
    log.append(&note("s1", "x")).unwrap();
    log.close().unwrap();
    let unasked = Against { required: false, ..a.against() };
    let report = bx_audit::verify_against(&a.log, &unasked).unwrap();
    assert!(report.is_clean());
    assert_eq!(report.anchor.state, "unanchored");
    assert_eq!(report.anchor.checkpoints, 0);
    // Asked to check against a key, finding nothing it signed is a problem.
    let report = a.verify();
    assert_eq!(kinds(&report), ["anchor-missing"], "{:?}", report.problems);
}

#[test]
fn the_tree_survives_a_crash_and_a_missing_checkpoint() {
    let a = Anchored::new();
    a.write(2);
    // Records after the last checkpoint, then no close (a crash).
    let log = a.open();
    log.append(&note("s1", "unsaved")).unwrap();
    drop(log);
    a.write(1);
    assert!(a.verify().is_clean(), "{:?}", a.verify().problems);
    // With the tree gone from the checkpoint, open rehashes every line.
    std::fs::remove_file(a.log.join("checkpoint.json")).unwrap();
    a.write(1);
    let report = a.verify();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.anchor.size, 13);
}

/// The tree's right edge in `checkpoint.json` is only a shortcut anyone who can write
/// the log can edit; the writer checks it against its signed checkpoint rather than sign
/// a root the records do not have.
#[test]
fn an_edited_tree_in_the_checkpoint_is_not_signed() {
    let a = Anchored::new();
    a.write(2);
    let path = a.log.join("checkpoint.json");
    let mut cp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cp["tree"]["edge"][0] = json_hash(b"forged");
    std::fs::write(&path, cp.to_string()).unwrap();
    a.write(1);
    let report = a.verify();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.anchor.size, 9);
}

fn json_hash(data: &[u8]) -> serde_json::Value {
    serde_json::Value::String(bx_audit::leaf_hash(data).to_string())
}

/// The writer never makes an export directory: a device that is not mounted leaves an
/// empty mount point, and checkpoints written there would be on this host's own disk.
#[test]
fn an_export_directory_that_is_not_set_up_is_not_made_by_the_writer() {
    let a = Anchored::new();
    std::fs::remove_dir(a.exported()).unwrap();
    a.write(1);
    assert!(!a.exported().exists(), "the writer made the export directory");
    let status = std::fs::read_to_string(a.log.join("export.json")).unwrap();
    assert!(status.contains("not mounted, or was never set up"), "{status}");
    bx_audit::prepare_export(&a.export, "bx.test/anchor").unwrap();
    a.write(1);
    assert!(a.verify().is_clean(), "{:?}", a.verify().problems);
}

/// Two logs given one origin and one export directory would interleave their leaves; an
/// export waits for no one and is refused while another holds the directory's lock.
#[test]
fn an_export_directory_has_one_writer_at_a_time() {
    let a = Anchored::new();
    a.write(1);
    let other = std::fs::OpenOptions::new().write(true).open(a.exported().join(".lock")).unwrap();
    other.lock().unwrap();
    let log = a.open();
    log.append(&note("s1", "while another exports")).unwrap();
    let results = log.checkpoint_exporting(&[]).unwrap();
    let error = results[0].error.as_deref().unwrap();
    assert!(error.contains("another bx is exporting"), "{error}");
    log.close().unwrap();
    drop(other);
    a.write(1);
    let report = a.verify();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.anchor.unanchored, 0);
}

#[test]
fn a_proof_checks_offline_and_a_changed_record_or_key_does_not() {
    let a = Anchored::new();
    a.write(3);
    let note = std::fs::read(a.exported().join("9.checkpoint")).unwrap();
    let proof =
        bx_audit::prove(&a.log, 4, &note, &a.vkey, std::slice::from_ref(&a.export)).unwrap();
    assert!(proof.starts_with("c2sp.org/tlog-proof@v1\nextra "));
    let checked = check_proof(proof.as_bytes(), &a.vkey).unwrap();
    assert_eq!((checked.index, checked.size), (3, 9));
    assert!(checked.record.starts_with("{\"seq\":4,"));

    let other = Anchored::new();
    assert!(check_proof(proof.as_bytes(), &other.vkey).is_err());
    let mut lines: Vec<String> = proof.lines().map(str::to_owned).collect();
    let record = checked.record.replace("c1", "c9");
    use base64::Engine as _;
    lines[1] = format!("extra {}", base64::engine::general_purpose::STANDARD.encode(record));
    let forged = lines.join("\n") + "\n";
    let refused = check_proof(forged.as_bytes(), &a.vkey).unwrap_err();
    assert!(matches!(refused, bx_audit::ProofError::NotIncluded { index: 3, .. }), "{refused:?}");
    assert!(refused.to_string().contains("not at index 3"), "{refused}");
    assert!(bx_audit::prove(&a.log, 99, &note, &a.vkey, &[]).is_err());
}

/// Regression (found probing): a break record written by hand, listing the anchor
/// problems verify had reported, made verify exit clean. A break never accepts those.
#[test]
fn a_forged_break_record_does_not_excuse_an_anchor_problem() {
    let a = Anchored::new();
    a.write(2);
    rechain(&a.log, |files| {
        let line = &mut files[0].1[1];
        *line = line.replace("\"allow\"", "\"deny\"");
    });
    let problems = a.verify().problems;
    // (The refused call's result is also out of order; the break lists that too.)
    assert!(problems.iter().any(|p| p.kind == "anchor-rewritten"), "{problems:?}");
    let mut files = all_lines(&a.log);
    let (path, lines) = files.last_mut().unwrap();
    let last = Record::parse(lines.last().unwrap()).unwrap();
    let entry = bx_audit::Entry::Break(bx_audit::BreakEntry { reason: "forged".into(), problems });
    let record = Record {
        seq: last.seq + 1,
        time: last.time.clone(),
        prev: line_hash(lines.last().unwrap().as_bytes()),
        kind: entry.kind(),
        fields: entry.fields(),
    };
    lines.push(record.to_line());
    std::fs::write(&*path, lines.join("\n") + "\n").unwrap();
    let report = a.verify();
    assert!(kinds(&report).contains(&"anchor-rewritten"), "{:?}", report.problems);
    assert!(!report.is_clean());
}

/// Runs `f` on another thread and fails the test if it has not returned in 20 s: what
/// bx must never do is wait on a file.
fn ends<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: still waiting after 20 s"))
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let ok = std::process::Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Regression (found probing): a FIFO (or `/dev/zero`) where a day file, the checkpoint,
/// the lock, the leaves, a checkpoint file or the verifier key should be made verify, open
/// or an export wait for good. Each is now refused as not a regular file.
#[test]
fn a_fifo_or_a_device_in_place_of_any_file_is_refused_not_waited_on() {
    type Place = fn(&Anchored) -> PathBuf;
    let places: Vec<(&str, Place)> = vec![
        ("checkpoint.json", |a| a.log.join("checkpoint.json")),
        ("the day file", |a| day_files(&a.log).unwrap().pop().unwrap()),
        (".lock", |a| a.log.join(".lock")),
        ("leaves", |a| a.exported().join("leaves")),
        ("a checkpoint file", |a| a.exported().join("3.checkpoint")),
        ("the next checkpoint file", |a| a.exported().join("4.checkpoint")),
        ("the verifier key", |a| bx_audit::verifier_path(&a.key)),
    ];
    for (what, place) in places {
        let a = Arc::new(Anchored::new());
        a.write(1);
        mkfifo(&place(&a));
        let b = Arc::clone(&a);
        ends(&format!("verify with a FIFO as {what}"), move || {
            let _ = bx_audit::verify_against(&b.log, &b.against());
        });
        let b = Arc::clone(&a);
        ends(&format!("open and append with a FIFO as {what}"), move || {
            if let Ok(anchor) = Anchor::load(&b.key, vec![b.export.clone()])
                && let Ok(log) = AuditLog::open(&b.log)
            {
                let log = log.with_anchor(anchor);
                let _ = log.append(&note("s1", "x"));
                let _ = log.close();
            }
        });
    }
    let a = Arc::new(Anchored::new());
    a.write(1);
    let day = day_files(&a.log).unwrap().pop().unwrap();
    std::fs::remove_file(&day).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &day).unwrap();
    let b = Arc::clone(&a);
    let r = ends("verify with /dev/zero as the day file", move || {
        bx_audit::verify_against(&b.log, &b.against())
    });
    assert!(r.unwrap_err().to_string().contains("not a regular file"));
    let fifo = a.log.join("against.fifo");
    mkfifo(&fifo);
    let b = Arc::clone(&a);
    ends("verify --against a FIFO", move || {
        let against = Against { files: vec![fifo], exports: vec![], ..b.against() };
        let _ = bx_audit::verify_against(&b.log, &against);
    });
}

/// Regression (found probing): check-proof took `index +2` for index 2, and a signed
/// checkpoint copied under another size's name was counted as another checkpoint.
#[test]
fn a_proof_index_is_canonical_and_a_misnamed_checkpoint_is_reported() {
    let a = Anchored::new();
    a.write(1);
    let note = std::fs::read(a.exported().join("3.checkpoint")).unwrap();
    let proof =
        bx_audit::prove(&a.log, 2, &note, &a.vkey, std::slice::from_ref(&a.export)).unwrap();
    assert!(check_proof(proof.as_bytes(), &a.vkey).is_ok());
    let plus = proof.replace("\nindex 1\n", "\nindex +1\n");
    assert_ne!(plus, proof);
    assert!(check_proof(plus.as_bytes(), &a.vkey).is_err());

    std::fs::write(a.exported().join("7.checkpoint"), &note).unwrap();
    let report = a.verify();
    assert_eq!(kinds(&report), ["anchor-unreadable"], "{:?}", report.problems);
    assert!(report.problems[0].detail.contains("named for 7 records but signs 3"));
    assert_eq!(report.anchor.checkpoints, 1);
}

/// Regression (found probing): records added after the newest signed checkpoint (with
/// the chain recomputed) left verify saying the whole log was anchored. They are now
/// counted as unanchored: nothing kept off the log vouches for them.
#[test]
fn records_past_the_newest_checkpoint_are_counted_as_unanchored() {
    let a = Anchored::new();
    a.write(2);
    let log = AuditLog::open(&a.log).unwrap();
    log.append(&note("s1", "after the last export")).unwrap();
    log.append(&note("s1", "and another")).unwrap();
    log.close().unwrap();
    let report = a.verify();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.anchor.state, "anchored");
    assert_eq!((report.anchor.size, report.anchor.unanchored), (6, 2));
}

/// `bx audit prove` takes the newest checkpoint the key signed: the largest name that
/// checks, skipping one signed by another key or named for another size.
#[test]
fn the_newest_signed_checkpoint_skips_forged_and_misnamed_ones() {
    let a = Anchored::new();
    a.write(1);
    a.write(1);
    let other = Anchored::new();
    other.write(3);
    let theirs = bx_audit::origin_dir(&other.export, "bx.test/anchor").join("9.checkpoint");
    std::fs::copy(&theirs, a.exported().join("9.checkpoint")).unwrap();
    std::fs::copy(a.exported().join("3.checkpoint"), a.exported().join("8.checkpoint")).unwrap();
    let (size, path, _) = bx_audit::newest_signed(&a.export, &a.vkey).unwrap();
    assert_eq!((size, path), (6, a.exported().join("6.checkpoint")));
}

/// 2030-01-01T12:00:00Z in milliseconds: days after any file these tests write was
/// changed, so the days written are settled (`checked.json` records only those).
const LATER: u64 = 1_893_499_200_000;

/// An anchored log written on days of a clock the test moves, from [`LATER`] on.
struct OnDays {
    a: Anchored,
    ms: Arc<std::sync::atomic::AtomicU64>,
}

impl OnDays {
    fn new() -> OnDays {
        let a = Anchored::new();
        // Only days on ext4, XFS or Btrfs are vouched for (host/audit/src/checked.rs), so
        // these tests count reads only on one of them: say so rather than fail obscurely.
        let there = a.log.ancestors().find(|d| d.exists()).unwrap();
        let kind = rustix::fs::statfs(there).unwrap().f_type;
        assert!(
            [0xEF53, 0x5846_5342, 0x9123_683E].contains(&kind),
            "these tests need the temporary directory on ext4, XFS or Btrfs (f_type {kind:#x})"
        );
        OnDays { a, ms: Arc::new(std::sync::atomic::AtomicU64::new(LATER)) }
    }

    /// The writer, opened with the clock on `day`.
    fn open(&self, day: u64) -> AuditLog {
        self.ms.store(LATER + day * 86_400_000, std::sync::atomic::Ordering::SeqCst);
        self.a.open_with(Box::new(ManualClock(Arc::clone(&self.ms))))
    }

    /// Opens on `day`, writes `calls` calls of three records and closes (which exports);
    /// how many records the open read to check the log.
    fn write(&self, day: u64, calls: usize) -> Option<u64> {
        let log = self.open(day);
        assert_eq!(log.failure(), None);
        let read = log.records_read_at_open();
        append_calls(&log, &format!("d{day}c"), calls);
        log.close().unwrap();
        read
    }
}

#[test]
fn an_anchored_open_reads_only_what_the_last_check_did_not() {
    let d = OnDays::new();
    let (a, write) = (&d.a, |day, calls| d.write(day, calls));
    // No export yet, so no check; then every open checks against the last close's export.
    assert_eq!(write(0, 4), None);
    // The first day is the newest file: read, and not recorded (a writer appends to it).
    assert_eq!(write(1, 4), Some(12));
    // Now it is an earlier day: read once more and recorded, as is each day after.
    assert_eq!(write(2, 2), Some(24));
    assert_eq!(write(2, 0), Some(12 + 6));
    // From here on only the newest day is read.
    assert_eq!(write(2, 0), Some(6));
    assert!(a.log.join("checked.json").exists());
    assert!(a.verify().is_clean(), "{:?}", a.verify().problems);

    // Whoever edits checked.json (to vouch for more) has no key to sign it: ignored, and
    // the check reads every record.
    let checked = a.log.join("checked.json");
    let text = std::fs::read_to_string(&checked).unwrap();
    let forged = text.replacen(&text[..1], if &text[..1] == "0" { "1" } else { "0" }, 1);
    std::fs::write(&checked, forged).unwrap();
    assert_eq!(write(2, 0), Some(30));
    assert_eq!(write(2, 0), Some(6));

    // A record of the first day edited in place, nothing else touched (the chain then
    // breaks there, which only a full read sees): the day vouched for has changed, so
    // the open reads every record and refuses to sign over them.
    let first = &day_files(&a.log).unwrap()[0];
    let text = std::fs::read_to_string(first).unwrap();
    assert!(text.contains("\"why\":\"\""), "{text}");
    std::fs::write(first, text.replacen("\"why\":\"\"", "\"why\":\"edited by hand\"", 1)).unwrap();
    let log = d.open(2);
    let failure = log.failure().unwrap_or_default();
    assert!(failure.contains("rewritten within them"), "{failure}");
    // Every record twice: once to find the records' tree is not the writer's, once
    // against the tree rebuilt from them.
    assert_eq!(log.records_read_at_open(), Some(60));
}

/// Keeps a shared writable mapping of a file: writes one byte as it was (the fault gives
/// the file a change time and leaves the page writable), says `primed`, and on a line of
/// input writes `argv[3]` over `argv[2]` through the mapping and says `edited`.
const MAPPER: &str = r#"
import mmap, sys
path, old, new = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
f = open(path, "r+b")
m = mmap.mmap(f.fileno(), 0)
k = m.find(old)
assert k >= 0 and len(old) == len(new)
m[k] = m[k]
print("primed", flush=True)
sys.stdin.readline()
m[k:k + len(new)] = new
print("edited", flush=True)
sys.stdin.readline()
"#;

#[test]
fn a_day_edited_through_a_mapping_made_before_its_check_is_read_again_and_refused() {
    use std::io::{BufRead as _, Write as _};
    let d = OnDays::new();
    let (a, open) = (&d.a, |day| d.open(day));
    assert_eq!((d.write(0, 4), d.write(1, 4)), (None, Some(12)));
    let first = day_files(&a.log).unwrap()[0].clone();
    let mut mapper = std::process::Command::new("python3")
        .args(["-c", MAPPER])
        .arg(&first)
        .args(["\"d0c1\"", "\"d0c9\""])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut said = std::io::BufReader::new(mapper.stdout.take().unwrap()).lines();
    let mut tell = mapper.stdin.take().unwrap();
    assert_eq!(said.next().unwrap().unwrap(), "primed");
    // This open reads both days and vouches for the first (it is no longer the newest).
    let log = open(2);
    assert_eq!((log.failure(), log.records_read_at_open()), (None, Some(24)));
    log.close().unwrap();
    let checked = std::fs::read_to_string(a.log.join("checked.json")).unwrap();
    assert!(checked.contains(first.file_name().unwrap().to_str().unwrap()), "{checked}");
    // The mapping writes the edit. Had the page stayed writable since the first write,
    // no fault would move the change time and the next open would trust the day.
    writeln!(tell, "go").unwrap();
    assert_eq!(said.next().unwrap().unwrap(), "edited");
    assert!(std::fs::read_to_string(&first).unwrap().contains("\"d0c9\""));
    let log = open(2);
    let failure = log.failure().unwrap_or_default();
    assert!(failure.contains("rewritten within them"), "{failure}");
    drop(tell);
    let _ = mapper.wait();
}

#[test]
fn a_day_on_a_file_system_whose_change_times_do_not_hold_is_never_vouched_for() {
    // tmpfs takes writes through a mapping with no new change time, and a `/proc` file
    // behind a symlink changes with none at all: such a day is read at every open.
    let shm = tempfile::tempdir_in("/dev/shm").expect("this test needs /dev/shm, a tmpfs");
    let d = OnDays::new();
    let (a, open) = (&d.a, |day| d.open(day));
    assert_eq!((d.write(0, 4), d.write(1, 4)), (None, Some(12)));
    let first = day_files(&a.log).unwrap()[0].clone();
    let moved = shm.path().join("day.jsonl");
    std::fs::copy(&first, &moved).unwrap();
    std::fs::remove_file(&first).unwrap();
    std::os::unix::fs::symlink(&moved, &first).unwrap();
    for _ in 0..2 {
        let log = open(2);
        assert_eq!((log.failure(), log.records_read_at_open()), (None, Some(24)));
        log.close().unwrap();
    }
    assert!(!a.log.join("checked.json").exists());
}
