//! Interoperability with an implementation no one on bx wrote: Go's
//! `golang.org/x/mod/sumdb/note` and `sumdb/tlog` (Debian's `golang-go` and
//! `golang-golang-x-mod-dev`, which `make setup` installs) verify bx's signed checkpoint,
//! recompute its tree hash from the records and check its inclusion proof.

use std::path::Path;
use std::process::Command;

use super::anchor::Anchored;

/// Where Debian puts Go sources for GOPATH builds.
const GOPATH: &str = "/usr/share/gocode";

/// Runs `tests/go/check.go` on the log; its stdout and stderr, and whether it passed.
fn go_check(a: &Anchored, checkpoint: &Path, proof: &Path) -> (bool, String) {
    assert!(
        Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()),
        "`go` is not installed: `make setup` installs golang-go and golang-golang-x-mod-dev"
    );
    assert!(
        Path::new(GOPATH).join("src/golang.org/x/mod/sumdb/tlog").is_dir(),
        "{GOPATH} has no golang.org/x/mod: `make setup` installs golang-golang-x-mod-dev"
    );
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-cache");
    let out = Command::new("go")
        .args(["run", "check.go", &a.vkey])
        .arg(checkpoint)
        .arg(&a.log)
        .arg(proof)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go"))
        .env("GOPATH", GOPATH)
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        .env("GOCACHE", cache)
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn go_sumdb_verifies_the_checkpoint_recomputes_the_tree_and_checks_the_proof() {
    let a = Anchored::new();
    a.write(5);
    let checkpoint = a.exported().join("15.checkpoint");
    let note = std::fs::read(&checkpoint).unwrap();
    let proof = a.log.join("p.tlog-proof");
    for seq in [1, 8, 15] {
        std::fs::write(&proof, bx_audit::prove(&a.log, seq, &note, &a.vkey, &[]).unwrap()).unwrap();
        let (ok, text) = go_check(&a, &checkpoint, &proof);
        assert!(ok, "Go disagrees with bx on record {seq}: {text}");
        let (_, root) = bx_audit::open_note(&note, &a.vkey).map(|c| (c.size, c.root)).unwrap();
        assert_eq!(text.trim(), format!("ok 15 {root}"));
    }

    // The same program fails when the records are not what was signed.
    let day = bx_audit::day_files(&a.log).unwrap().pop().unwrap();
    let text = std::fs::read_to_string(&day).unwrap();
    std::fs::write(&day, text.replacen("\"allow\"", "\"deny\"", 1)).unwrap();
    let (ok, text) = go_check(&a, &checkpoint, &proof);
    assert!(!ok && text.contains("tree hash"), "{text}");
}
