//! Regression tests of issue 31, defect 4: an attacker who can write the state directory
//! (not the export directories) rewrites or cuts the log, recomputes the chain and fixes
//! up or deletes the local checkpoints; the owner's next call must not sign the forged
//! tree, nor export it, and `prove` must not prove a forged record. Real files in
//! tempdirs, real keys.

use std::path::{Path, PathBuf};

use bx_audit::{Anchor, AuditError, AuditLog, Entry, Outcome, Tree, day_files, leaf_hash};

use super::anchor::{Anchored, rechain};
use super::*;

const RUNBOOK: &str = "docs/runbook.md#audit-anchor-mismatch";

/// A result whose label is `label`.
fn labelled(call: &str, label: &str) -> Entry {
    Entry::Result(Outcome { label: label.into(), ..result_of(call) })
}

fn result_of(call: &str) -> Outcome {
    match result("s1", call) {
        Entry::Result(o) => o,
        _ => unreachable!(),
    }
}

/// Three calls, nine records; record 6 is c1's result, labelled private. Close exports
/// `9.checkpoint`.
fn honest_log(a: &Anchored) {
    let log = a.open();
    for (i, label) in ["public/trusted", "private/trusted", "public/trusted"].iter().enumerate() {
        let call = format!("c{i}");
        log.append(&request("s1", &call, "{}")).unwrap();
        log.append(&decision("s1", &call, Verdict::Allow)).unwrap();
        log.append(&labelled(&call, label)).unwrap();
    }
    log.close().unwrap();
}

/// The attack: record 6's label from private to public, every later `prev` recomputed,
/// the local checkpoint files removed.
fn relabel_record_6(a: &Anchored) {
    rechain(&a.log, |files| {
        let line = &mut files[0].1[5];
        assert!(line.contains("\"seq\":6,") && line.contains("private/trusted"), "{line}");
        *line = line.replace("private/trusted", "public/trusted");
    });
    remove_local_checkpoints(&a.log);
}

fn remove_local_checkpoints(dir: &Path) {
    for name in ["checkpoint.json", "checkpoint.note"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

/// The checkpoint files in the export directory, by name.
fn exported_checkpoints(a: &Anchored) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(a.exported())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".checkpoint"))
        .collect();
    names.sort();
    names
}

/// What `bx audit prove SEQ` does: the newest signed checkpoint, in the exports or the
/// writer's own copy, and the exports to check it against.
fn prove_as_the_cli(a: &Anchored, seq: u64) -> Result<String, AuditError> {
    let exported = bx_audit::newest_signed(&a.export, &a.vkey).map(|(size, _, note)| (size, note));
    let local = std::fs::read(a.log.join("checkpoint.note"))
        .ok()
        .and_then(|note| Some((bx_audit::open_note(&note, &a.vkey).ok()?.size, note)));
    let (_, note) = exported.into_iter().chain(local).max_by_key(|(size, _)| *size).unwrap();
    bx_audit::prove(&a.log, seq, &note, &a.vkey, std::slice::from_ref(&a.export))
}

/// The owner's next ordinary call after the rewrite, and the close after it: both are
/// refused with the damage error, naming its runbook entry, and nothing is signed.
fn the_next_call_is_refused(a: &Anchored) {
    let log = a.open();
    let failure = log.failure().expect("the log is damaged from open on");
    assert!(failure.contains(RUNBOOK), "{failure}");
    for i in 0..6 {
        let refused = log.append(&request("s1", &format!("next{i}"), "{}")).unwrap_err();
        assert!(matches!(refused, AuditError::Unavailable(_)), "{refused}");
        assert!(refused.to_string().contains(RUNBOOK), "{refused}");
    }
    let refused = log.checkpoint_exporting(&[]).unwrap_err();
    assert!(refused.to_string().contains(RUNBOOK), "{refused}");
    assert!(log.close().is_err(), "close signs nothing either");
    assert!(!a.log.join("checkpoint.note").exists(), "a checkpoint of the forged tree was signed");
}

#[test]
fn a_rewritten_record_is_not_signed_exported_or_proved_by_the_next_call() {
    let a = Anchored::new();
    honest_log(&a);
    assert_eq!(exported_checkpoints(&a), ["9.checkpoint"]);
    relabel_record_6(&a);
    assert!(bx_audit::verify(&a.log).unwrap().is_clean(), "the chain alone cannot see it");

    the_next_call_is_refused(&a);
    assert_eq!(exported_checkpoints(&a), ["9.checkpoint"], "the forged tree was exported");
    let refused = prove_as_the_cli(&a, 6).unwrap_err();
    assert!(matches!(refused, AuditError::AnchorMismatch(_)), "{refused}");
    assert!(refused.to_string().contains(RUNBOOK), "{refused}");
    // Sticky: the next open is refused the same way.
    assert!(a.open().failure().is_some_and(|f| f.contains(RUNBOOK)));
}

#[test]
fn a_cut_tail_with_the_checkpoint_fixed_up_is_not_signed_exported_or_proved() {
    let a = Anchored::new();
    a.write(4);
    assert_eq!(exported_checkpoints(&a), ["12.checkpoint"]);
    // Cut to 9 records; `rechain` writes checkpoint.json for the new head.
    rechain(&a.log, |files| files[0].1.truncate(9));
    let _ = std::fs::remove_file(a.log.join("checkpoint.note"));
    assert!(AuditLog::open(&a.log).is_ok(), "checkpoint.json was fixed up: open alone allows it");

    // Appending past the exported size used to export the forged tree beside the real one.
    the_next_call_is_refused(&a);
    assert_eq!(exported_checkpoints(&a), ["12.checkpoint"], "the forged tree was exported");
    let refused = prove_as_the_cli(&a, 3).unwrap_err();
    assert!(matches!(refused, AuditError::AnchorMismatch(_)), "{refused}");
}

/// The export directory was not mounted when the log opened, so open had nothing to
/// check against; it is checked before the first checkpoint is signed while it is there.
#[test]
fn an_export_directory_mounted_after_open_is_checked_before_signing() {
    let a = Anchored::new();
    honest_log(&a);
    relabel_record_6(&a);
    let away = a.export.with_file_name("usb-unmounted");
    std::fs::rename(a.exported(), &away).unwrap();
    let log = a.open();
    assert_eq!(log.failure(), None, "nothing to check against yet");
    log.append(&request("s1", "while unmounted", "{}")).unwrap();
    std::fs::rename(&away, a.exported()).unwrap();
    let refused = log.checkpoint_exporting(&[]).unwrap_err();
    assert!(refused.to_string().contains(RUNBOOK), "{refused}");
    assert!(log.append(&note("s1", "after")).is_err(), "sticky");
    assert!(log.close().is_err());
    assert!(!a.log.join("checkpoint.note").exists());
    assert_eq!(exported_checkpoints(&a), ["9.checkpoint"]);
}

/// What the writer did before the fix: it signed the rewritten tree (here signed by hand
/// with the owner's key) and exported it beside the honest checkpoint. A proof from the
/// newer, forged checkpoint is refused: the older one contradicts it.
#[test]
fn prove_refuses_a_checkpoint_that_an_older_exported_one_contradicts() {
    let a = Anchored::new();
    honest_log(&a);
    relabel_record_6(&a);
    let mut forged = Tree::new();
    for path in day_files(&a.log).unwrap() {
        for line in std::fs::read_to_string(path).unwrap().lines() {
            forged.push(leaf_hash(line.as_bytes()));
        }
    }
    let note = Anchor::load(&a.key, vec![]).unwrap().sign(&forged).unwrap();
    std::fs::write(a.exported().join("9.checkpoint.new"), &note).unwrap();
    // Same size as the honest one: two roots for 9 records.
    let refused =
        bx_audit::prove(&a.log, 6, &note, &a.vkey, std::slice::from_ref(&a.export)).unwrap_err();
    assert!(matches!(refused, AuditError::AnchorMismatch(_)), "{refused}");
    assert!(refused.to_string().contains("9.checkpoint"), "{refused}");

    // A longer forged history: the honest 9.checkpoint is its prefix no more.
    let log = AuditLog::open(&a.log).unwrap();
    for i in 0..6 {
        log.append(&note_entry(i)).unwrap();
    }
    log.close().unwrap();
    let mut longer = Tree::new();
    for path in day_files(&a.log).unwrap() {
        for line in std::fs::read_to_string(path).unwrap().lines() {
            longer.push(leaf_hash(line.as_bytes()));
        }
    }
    let note = Anchor::load(&a.key, vec![]).unwrap().sign(&longer).unwrap();
    std::fs::write(a.exported().join(format!("{}.checkpoint", longer.size())), &note).unwrap();
    let checked = bx_audit::prove(&a.log, 6, &note, &a.vkey, &[]);
    assert!(checked.is_ok(), "alone, the forged checkpoint proves: {checked:?}");
    let refused = prove_as_the_cli(&a, 6).unwrap_err();
    assert!(matches!(refused, AuditError::AnchorMismatch(_)), "{refused}");
    assert!(refused.to_string().contains("9.checkpoint"), "{refused}");
}

fn note_entry(i: u32) -> Entry {
    note("s1", &format!("forged {i}"))
}

/// No false alarm: an honest log reopened, written, and reopened with a second export
/// directory added, is checked and goes on.
#[test]
fn an_honest_log_passes_the_check_at_every_open() {
    let a = Anchored::new();
    honest_log(&a);
    a.write(1);
    let second: PathBuf = a.export.with_file_name("usb2");
    std::fs::create_dir(&second).unwrap();
    bx_audit::prepare_export(&second, "bx.test/anchor").unwrap();
    let anchor = Anchor::load(&a.key, vec![a.export.clone(), second.clone()]).unwrap();
    let log = AuditLog::open(&a.log).unwrap().with_anchor(anchor);
    assert_eq!(log.failure(), None);
    log.append(&note("s1", "more")).unwrap();
    log.close().unwrap();
    assert_eq!(exported_checkpoints(&a), ["12.checkpoint", "13.checkpoint", "9.checkpoint"]);
    assert!(bx_audit::origin_dir(&second, "bx.test/anchor").join("13.checkpoint").exists());
    assert!(prove_as_the_cli(&a, 6).is_ok());
}

/// Regression (a probe of the fix above): the attacker also points the config at a key
/// of their own with the same origin. The writer sees a newest exported checkpoint its
/// key did not sign, and signs and exports nothing over it.
#[test]
fn a_key_swapped_in_the_config_signs_nothing_over_the_owners_checkpoints() {
    let a = Anchored::new();
    honest_log(&a);
    relabel_record_6(&a);
    let evil = a.key.with_file_name("evil.key");
    bx_audit::init_key(&evil, "bx.test/anchor").unwrap();
    let anchor = Anchor::load(&evil, vec![a.export.clone()]).unwrap();
    let log = AuditLog::open(&a.log).unwrap().with_anchor(anchor);
    let failure = log.failure().expect("refused from open on");
    assert!(failure.contains(RUNBOOK) && failure.contains("9.checkpoint"), "{failure}");
    assert!(log.append(&request("s1", "next", "{}")).is_err());
    assert!(log.close().is_err());
    assert_eq!(exported_checkpoints(&a), ["9.checkpoint"], "a checkpoint over the forged tree");
}

/// Regression (a second probe): a key of another origin, swapped into the config, is not
/// set up beside the owner's checkpoints by `bx audit checkpoint`'s setup; the owner who
/// means it makes the folder by hand.
#[test]
fn a_new_origin_is_not_set_up_beside_another_origins_checkpoints() {
    let a = Anchored::new();
    honest_log(&a);
    let refused = bx_audit::prepare_export(&a.export, "bx.test/other").unwrap_err();
    assert!(refused.to_string().contains("another origin"), "{refused}");
    assert!(!bx_audit::origin_dir(&a.export, "bx.test/other").exists());
    std::fs::create_dir(bx_audit::origin_dir(&a.export, "bx.test/other")).unwrap();
    assert!(bx_audit::prepare_export(&a.export, "bx.test/other").is_ok());
    // The owner's own origin, already there, is set up as before.
    assert!(bx_audit::prepare_export(&a.export, "bx.test/anchor").is_ok());
}
