//! `bx-fuzz TARGET [--secs N] [--seed N] [--fixtures DIR] [--out DIR]`: mutates the
//! target's seeds for N seconds (default 60) and stops at the first finding, saving
//! the input under `--out` (default `target/fuzz/TARGET/`). `--input FILE` runs one
//! input again. `make fuzz` runs every
//! target under a memory limit; see `docs/fuzzing.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bx_fuzz::{Mutator, Outcome, SLOW, Scratch, TARGETS, run_one, seeds, target};

struct Args {
    target: String,
    secs: u64,
    seed: u64,
    fixtures: PathBuf,
    out: Option<PathBuf>,
    input: Option<PathBuf>,
}

fn args() -> anyhow::Result<Args> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    let usage = format!(
        "usage: bx-fuzz TARGET [--secs N] [--seed N] [--fixtures DIR] [--out DIR] \
         [--input FILE]; targets: {}",
        names.join(", ")
    );
    let mut a = Args {
        target: String::new(),
        secs: 60,
        seed: 1,
        fixtures: repo.join("fixtures"),
        out: None,
        input: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow::anyhow!("{arg} needs a value"));
        match arg.as_str() {
            "--secs" => a.secs = value()?.parse()?,
            "--seed" => a.seed = value()?.parse()?,
            "--fixtures" => a.fixtures = PathBuf::from(value()?),
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "--input" => a.input = Some(PathBuf::from(value()?)),
            name if a.target.is_empty() && !name.starts_with('-') => a.target = name.to_owned(),
            other => anyhow::bail!("unexpected {other:?}; {usage}"),
        }
    }
    anyhow::ensure!(!a.target.is_empty(), "{usage}");
    if a.out.is_none() {
        a.out = Some(repo.join("target/fuzz").join(&a.target));
    }
    Ok(a)
}

fn run() -> anyhow::Result<bool> {
    let a = args()?;
    let t = target(&a.target).ok_or_else(|| anyhow::anyhow!("no target {:?}", a.target))?;
    if let Some(path) = &a.input {
        // One input again (a finding, to see it fail and then pass once fixed).
        let input = std::fs::read(path)?;
        let scratch = Scratch::new()?;
        let outcome = run_one(t, &input, &scratch);
        println!("bx-fuzz {}: {} ({} bytes): {outcome:?}", t.name, path.display(), input.len());
        return Ok(matches!(outcome, Outcome::Fine(took) if took <= SLOW));
    }
    let out = a.out.clone().unwrap_or_default();
    std::fs::create_dir_all(&out)?;
    let seeds = seeds(t, &a.fixtures)?;
    let scratch = Scratch::new()?;
    // Findings are reported here, not by the default hook on stderr per input.
    std::panic::set_hook(Box::new(|_| {}));
    // The input being run, so one that kills the process (out of memory under `make
    // fuzz`'s limit) is still on disk.
    let current = out.join("current");
    let mut mutator = Mutator::new(a.seed);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.secs);
    let mut next_report = started + Duration::from_secs(10);
    let (mut n, mut slowest, mut largest) = (0u64, Duration::ZERO, 0usize);
    // Each seed as it is first, then mutations.
    let mut queue: Vec<Vec<u8>> = seeds.iter().map(|(_, b)| b.clone()).collect();
    while Instant::now() < deadline {
        let input = queue.pop().unwrap_or_else(|| mutator.make(&seeds, t.dictionary));
        std::fs::write(&current, &input)?;
        n += 1;
        largest = largest.max(input.len());
        let finding = match run_one(t, &input, &scratch) {
            Outcome::Fine(took) if took > SLOW => {
                Some(("slow", format!("{} ms on one input", took.as_millis())))
            }
            Outcome::Fine(took) => {
                // The slowest input so far is kept (`slowest`), to look into one that
                // nears the bound before it crosses it.
                if took > slowest {
                    slowest = took;
                    std::fs::write(out.join("slowest"), &input)?;
                }
                None
            }
            Outcome::Panicked(why) => Some(("crash", format!("panicked: {why}"))),
        };
        if let Some((kind, what)) = finding {
            let saved = out.join(format!("{kind}-{n}"));
            std::fs::write(&saved, &input)?;
            println!(
                "bx-fuzz {}: {kind} after {n} inputs: {}; the input is {}",
                t.name,
                bx_broker::escape_untrusted(&what, true),
                saved.display()
            );
            return Ok(false);
        }
        if Instant::now() >= next_report {
            let secs = started.elapsed().as_secs_f64();
            println!("bx-fuzz {}: {n} inputs in {secs:.0} s ({:.0}/s)", t.name, n as f64 / secs);
            next_report += Duration::from_secs(10);
        }
    }
    let _ = std::fs::remove_file(&current);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "bx-fuzz {}: {n} inputs in {secs:.0} s ({:.0}/s) from {} seeds, no finding; slowest \
         input {:.1} ms, largest {largest} bytes",
        t.name,
        n as f64 / secs,
        seeds.len(),
        slowest.as_secs_f64() * 1000.0
    );
    Ok(true)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("bx-fuzz: {e:#}");
            ExitCode::from(2)
        }
    }
}
