//! [`bx_fs::write_atomically`] on the target directory's disk: the replace as bx makes
//! it (the replaced file held under a second name of bx's own across the rename, and
//! emptied if linked elsewhere) against the same replace without that hold (write, sync,
//! rename, sync the directory), alternated in the same run.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::io::Write as _;

#[path = "../../bench/measure.rs"]
#[expect(dead_code, reason = "the bench times each replace itself, alternating the two")]
mod measure;
use measure::fmt;

/// The replace as it was before the hold: the floor this one is measured against.
fn bare(path: &std::path::Path, data: &[u8]) {
    let dir = path.parent().unwrap();
    let mut tmp = tempfile::NamedTempFile::new_in(dir).unwrap();
    tmp.write_all(data).unwrap();
    tmp.as_file().sync_all().unwrap();
    tmp.persist(path).unwrap();
    bx_fs::sync_dir(dir).unwrap();
}

fn main() {
    // On the build's own disk (target/), where a state directory would be, not tmpfs.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let dir = tempfile::tempdir_in(&root).unwrap();
    let path = dir.path().join("session.json");
    let data = vec![b'x'; 2048];
    bx_fs::write_atomically(&path, &data).unwrap();
    let (mut held, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let start = std::time::Instant::now();
        bx_fs::write_atomically(&path, &data).unwrap();
        held.push(start.elapsed());
        let start = std::time::Instant::now();
        bare(&path, &data);
        floor.push(start.elapsed());
    }
    held.sort_unstable();
    floor.sort_unstable();
    let q = |v: &[std::time::Duration], f: f64| v[(v.len() as f64 * f) as usize];
    println!("bx-fs benchmark (200 replaces each, alternated)\n");
    println!("| case | median | p90 | baseline | baseline median | baseline p90 | ratio |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| replace 2 KiB, held under a second name | {} | {} | the same replace without the hold | {} | {} | {:.2}× |",
        fmt(q(&held, 0.5)),
        fmt(q(&held, 0.9)),
        fmt(q(&floor, 0.5)),
        fmt(q(&floor, 0.9)),
        q(&held, 0.5).as_secs_f64() / q(&floor, 0.5).as_secs_f64()
    );
}
