//! The precompiled cache loads native code only when its MAC binds it to the digest
//! being run and this engine: a swapped, copied or re-checksummed artifact is refused
//! and recompiled, never loaded.

use bx_runtime::{CacheOutcome, ComponentCache};
use sha2::Digest as _;

use super::*;

fn hex_of(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Regression: replacing a `.cwasm` and its `.sha256` made bx load that native code
/// while the audit log recorded the installed tool's digest. Here fs.read's artifact is
/// replaced by test.hostile's, with every sidecar copied along: the load refuses it,
/// recompiles fs.read from its bytes, and what runs describes itself as fs.read.
#[test]
fn a_swapped_artifact_is_refused_and_recompiled() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let cache = ComponentCache::new(dir.path()).unwrap();
    let (read, hostile) = (component_bytes("fs_read"), component_bytes("test_hostile"));
    let (read_hex, hostile_hex) = (hex_of(&read), hex_of(&hostile));
    cache.compile(rt, &read_hex, &read).unwrap();
    cache.compile(rt, &hostile_hex, &hostile).unwrap();
    let (read_path, hostile_path) = (cache.path(rt, &read_hex), cache.path(rt, &hostile_hex));
    for ext in ["", ".mac"] {
        let from = format!("{}{ext}", hostile_path.display());
        std::fs::copy(from, format!("{}{ext}", read_path.display())).unwrap();
    }
    // The checksum an attacker can recompute is no help either.
    let native = std::fs::read(&read_path).unwrap();
    std::fs::write(format!("{}.sha256", read_path.display()), hex_of(&native)).unwrap();

    let (component, outcome) = cache.load(rt, &read_hex, || Ok(read.clone())).unwrap();
    assert!(matches!(&outcome, CacheOutcome::Replaced(why) if why.contains("MAC")), "{outcome:?}");
    let tool = rt.load_blocking(&component, &format!("sha256:{read_hex}")).unwrap();
    assert_eq!(tool.description().name, "fs.read");
    // The artifact was rewritten: the next load is a hit again.
    let (_, outcome) = cache.load(rt, &read_hex, || panic!("no recompile expected")).unwrap();
    assert_eq!(outcome, CacheOutcome::Hit);
}

/// An artifact edited in place (one byte) or stripped of its MAC is refused too.
#[test]
fn an_edited_or_unsigned_artifact_is_refused() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let cache = ComponentCache::new(dir.path()).unwrap();
    let read = component_bytes("fs_read");
    let hex = hex_of(&read);
    cache.compile(rt, &hex, &read).unwrap();
    let path = cache.path(rt, &hex);
    let mut native = std::fs::read(&path).unwrap();
    let mid = native.len() / 2;
    native[mid] ^= 1;
    std::fs::write(&path, &native).unwrap();
    let (_, outcome) = cache.load(rt, &hex, || Ok(read.clone())).unwrap();
    assert!(matches!(&outcome, CacheOutcome::Replaced(why) if why.contains("MAC")), "{outcome:?}");
    std::fs::remove_file(format!("{}.mac", path.display())).unwrap();
    let (_, outcome) = cache.load(rt, &hex, || Ok(read.clone())).unwrap();
    assert!(
        matches!(&outcome, CacheOutcome::Replaced(why) if why.contains("no MAC")),
        "{outcome:?}"
    );
    // Another cache directory has another key: its artifacts do not verify here.
    let other_dir = tempfile::tempdir().unwrap();
    let other = ComponentCache::new(other_dir.path()).unwrap();
    for ext in ["", ".mac"] {
        std::fs::copy(
            format!("{}{ext}", path.display()),
            format!("{}{ext}", other.path(rt, &hex).display()),
        )
        .unwrap();
    }
    let (_, outcome) = other.load(rt, &hex, || Ok(read.clone())).unwrap();
    assert!(matches!(outcome, CacheOutcome::Replaced(_)), "{outcome:?}");
}

/// Regression: the key was created empty and then filled, so a process starting beside
/// the first one could read a short key and fail (and a crash between the two left an
/// empty key that failed every start). Processes that start together all open the
/// cache, and they share one key: what one compiles, another loads as a hit.
#[test]
fn caches_opened_together_share_one_whole_key() {
    const OPENERS: usize = 4;
    let rt = runtime();
    let read = component_bytes("fs_read");
    let read_hex = hex_of(&read);
    for round in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let start = std::sync::Barrier::new(OPENERS);
        let caches: Vec<ComponentCache> = std::thread::scope(|scope| {
            let openers: Vec<_> = (0..OPENERS)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        ComponentCache::new(dir.path())
                    })
                })
                .collect();
            openers.into_iter().map(|o| o.join().unwrap().unwrap()).collect()
        });
        let key = std::fs::metadata(dir.path().join("cache.key")).unwrap();
        assert_eq!(key.len(), 32);
        if round % 10 != 0 {
            continue; // the race is in the opening; a compile every round only costs time
        }
        caches[0].compile(rt, &read_hex, &read).unwrap();
        let (_, outcome) = caches[OPENERS - 1].load(rt, &read_hex, || Ok(read.clone())).unwrap();
        assert!(matches!(outcome, CacheOutcome::Hit), "{outcome:?}");
    }
}
