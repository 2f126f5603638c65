//! `bx-load`: the real daemon (`bx serve`) under many sessions at once, against the
//! scripted model of `bx_eval::model` (every turn: one fs.read, then an answer), so what
//! is measured is bx, not a model. `make load` runs it at 4, 16 and 64 sessions and with
//! 4 slots for 64 sessions (the starvation case); `make bench` runs `--history`, the
//! daemon's CPU per call as one session's history grows. See `docs/load.md`.
//!
//! Every number is measured in the run that prints it: calls per second, turn latency
//! (p50, p99), the daemon's CPU per call and its memory (from `/proc`), the turns each
//! session completed, and the audit cross-check (every call the clients saw proposed has
//! a request record, every result they saw has a result record, no `seq` twice, and
//! `bx audit verify` is clean). It exits non-zero when the cross-check fails, a turn
//! failed after its calls ran, or a session completed no turn.

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bx_eval::model::{Call, Reply, ScriptedModel};
use bx_eval::run::Daemon;
use bx_protocol::{Body, Envelope, ErrorCode, VERSION};
use serde_json::json;

struct Args {
    bx: PathBuf,
    tools: PathBuf,
    sessions: Vec<usize>,
    secs: u64,
    slots: u64,
    queue: Option<usize>,
    history: bool,
    idle_secs: u64,
}

fn args() -> anyhow::Result<Args> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut a = Args {
        bx: repo.join("target/release/bx"),
        tools: repo.join("tools/target/wasm32-wasip2/release"),
        sessions: vec![4, 16, 64],
        secs: 20,
        slots: 4,
        queue: None,
        history: false,
        idle_secs: 12,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow::anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--bx" => a.bx = PathBuf::from(value()?),
            "--tools" => a.tools = PathBuf::from(value()?),
            "--sessions" => {
                a.sessions = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|e| anyhow::anyhow!("--sessions: {e}"))?;
            }
            "--secs" => a.secs = value()?.parse()?,
            "--slots" => a.slots = value()?.parse()?,
            "--queue" => a.queue = Some(value()?.parse()?),
            "--history" => a.history = true,
            "--idle-secs" => a.idle_secs = value()?.parse()?,
            other => anyhow::bail!(
                "unknown argument {other:?}; usage: bx-load [--sessions 4,16,64] [--secs N] \
                 [--slots N] [--queue N] [--idle-secs N] [--history] [--bx PATH] [--tools DIR]"
            ),
        }
    }
    Ok(a)
}

/// A state directory with fs.read installed by digest, the default policy (reading the
/// workspace is allowed) and `[inference] url` at `model`; and a workspace.
struct Setup {
    _dir: tempfile::TempDir,
    state: PathBuf,
    workspace: String,
}

fn bx(a: &Args, state: &Path, args: &[&str]) -> anyhow::Result<std::process::Output> {
    let out = Command::new(&a.bx).arg("--state-dir").arg(state).args(args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "bx {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn setup(a: &Args, model: &ScriptedModel, sessions: usize) -> anyhow::Result<Setup> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join("state");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&state)?;
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("notes.txt"), "milk, eggs\n")?;
    let queue = a.queue.map(|q| format!("queue_bound = {q}\n")).unwrap_or_default();
    std::fs::write(
        state.join("config.toml"),
        format!(
            "[inference]\nurl = \"{}\"\n{queue}[loop]\nmax_connections = {}\n",
            model.url(),
            sessions + 4
        ),
    )?;
    bx(a, &state, &["policy", "init"])?;
    let wasm = a.tools.join("bx_tool_fs_read.wasm");
    let bytes = std::fs::read(&wasm)
        .map_err(|e| anyhow::anyhow!("{}: {e}; run `make tools`", wasm.display()))?;
    let digest = format!("sha256:{}", bx_audit::sha256_hex(&bytes));
    bx(a, &state, &["tool", "install", wasm.to_str().unwrap_or_default(), "--digest", &digest])?;
    let workspace = std::fs::canonicalize(&ws)?.to_string_lossy().into_owned();
    Ok(Setup { _dir: dir, state, workspace })
}

/// The model: each turn's first request gets one fs.read of notes.txt, the next (the
/// one whose last message is that call's result) an answer. It reads the raw body, not
/// parsed: its own time must not grow with the session's history, or the daemon's
/// waiting would be measured as its work.
fn model(slots: u64) -> anyhow::Result<ScriptedModel> {
    ScriptedModel::start_raw(
        Arc::new(|_, body: &[u8]| {
            if last_message_is_a_result(body) {
                Reply::Text("done".into())
            } else {
                Reply::Calls(vec![Call::new("fs.read", json!({"path": "notes.txt"}))])
            }
        }),
        slots,
    )
}

/// Whether the last message of a request body bx made is a tool's result. bx writes the
/// messages first and the fixed fields after them (`],"cache_prompt":…`), so the end of
/// the messages is found from the back, past the fixed part only. (Before bx kept a
/// session's history, the fields were in key order, and the messages ended at
/// `],"stream"`: read too, so the load run measures that bx as well.)
fn last_message_is_a_result(body: &[u8]) -> bool {
    let find = |end: &[u8]| body.windows(end.len()).rposition(|w| w == end);
    let Some(end) = find(b"],\"cache_prompt\"").or_else(|| find(b"],\"stream\"")) else {
        return false;
    };
    let Some(start) = body[..end].windows(11).rposition(|w| w == b"{\"content\":") else {
        return false;
    };
    body[start..end].windows(13).any(|w| w == b"\"role\":\"tool\"")
}

/// How one turn went, as its client saw it.
#[derive(Debug, Default)]
struct Turn {
    latency: Duration,
    /// The error code, when it failed.
    error: Option<ErrorCode>,
    /// Calls proposed and results received, by call id.
    proposed: Vec<String>,
    results: Vec<String>,
}

/// One client connection.
struct Client {
    stream: UnixStream,
    next: u64,
}

impl Client {
    fn connect(state: &Path) -> anyhow::Result<Client> {
        let dir = bx_state::StateDir::at(state);
        let mut stream = UnixStream::connect(dir.socket())?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        stream.write_all(&bx_protocol::hello(&dir.read_socket_token().unwrap_or_default())?)?;
        Ok(Client { stream, next: 1 })
    }

    /// [`Client::turn`], sent again while the daemon says the session is still busy
    /// with the turn it just reported done (a race bx had; counted in `busy`).
    fn turn_retrying(
        &mut self,
        session: &str,
        workspace: &str,
        busy: &mut usize,
    ) -> anyhow::Result<Turn> {
        loop {
            let t = self.turn(session, workspace)?;
            if t.error != Some(ErrorCode::SessionBusy) {
                anyhow::ensure!(t.error.is_none(), "a turn failed: {:?}", t.error);
                return Ok(t);
            }
            *busy += 1;
        }
    }

    fn turn(&mut self, session: &str, workspace: &str) -> anyhow::Result<Turn> {
        self.next += 1;
        let id = self.next;
        let msg = Body::Send {
            session: session.to_owned(),
            text: "read my notes".into(),
            require_tool: false,
            workspace: Some(workspace.to_owned()),
        };
        let started = Instant::now();
        self.stream.write_all(&bx_protocol::encode(&Envelope { v: VERSION, id, msg })?)?;
        let mut turn = Turn::default();
        loop {
            let Some(e) = bx_protocol::read_frame(&mut self.stream)? else {
                anyhow::bail!("the daemon closed the connection mid-turn");
            };
            if e.id != id {
                continue;
            }
            match e.msg {
                Body::ToolCallProposed { call, .. } => turn.proposed.push(call),
                Body::ToolResult { call, .. } => turn.results.push(call),
                Body::TurnDone { .. } => break,
                Body::Error { code, .. } => {
                    turn.error = Some(code);
                    break;
                }
                _ => {}
            }
        }
        turn.latency = started.elapsed();
        Ok(turn)
    }
}

/// The daemon's CPU time so far, in nanoseconds: the sum over its threads of
/// `/proc/PID/task/*/schedstat` (time on the CPU), precise where `/proc/PID/stat`
/// counts in 10 ms ticks.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
        .sum()
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// What the audit log says, against what the clients saw.
#[derive(Debug, Default)]
struct CrossCheck {
    requests: usize,
    results: usize,
    proposed_without_request: usize,
    result_without_record: usize,
    duplicate_seq: usize,
    verify_clean: bool,
}

fn cross_check(
    a: &Args,
    state: &Path,
    proposed: &HashSet<String>,
    results: &HashSet<String>,
) -> anyhow::Result<CrossCheck> {
    let mut c = CrossCheck::default();
    let (mut requested, mut resulted, mut seqs) = (HashSet::new(), HashSet::new(), HashSet::new());
    bx_audit::for_each_entry(
        &bx_state::StateDir::at(state).audit_dir(&bx_state::Config::default()),
        |seq, entry| {
            if !seqs.insert(seq) {
                c.duplicate_seq += 1;
            }
            match entry {
                bx_audit::Entry::Request(r) => {
                    c.requests += 1;
                    requested.insert(r.call);
                }
                bx_audit::Entry::Result(r) => {
                    c.results += 1;
                    resulted.insert(r.call);
                }
                _ => {}
            }
        },
    )?;
    c.proposed_without_request = proposed.difference(&requested).count();
    c.result_without_record = results.difference(&resulted).count();
    c.verify_clean = Command::new(&a.bx)
        .arg("--state-dir")
        .arg(state)
        .args(["audit", "verify"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?
        .success();
    Ok(c)
}

/// One load run: `sessions` clients for `a.secs` seconds. Returns whether it held.
fn load(a: &Args, sessions: usize) -> anyhow::Result<bool> {
    let model = model(a.slots)?;
    let s = setup(a, &model, sessions)?;
    let daemon = Daemon::start(&a.bx, &s.state)?;
    let pid = daemon.pid();
    let cpu_before = cpu_ns(pid);
    let deadline = Instant::now() + Duration::from_secs(a.secs);
    let started = Instant::now();
    let workers: Vec<_> = (0..sessions)
        .map(|i| {
            let (state, ws) = (s.state.clone(), s.workspace.clone());
            std::thread::spawn(move || -> anyhow::Result<Vec<Turn>> {
                let mut client = Client::connect(&state)?;
                let session = format!("load-{i}");
                let mut turns = Vec::new();
                while Instant::now() < deadline {
                    turns.push(client.turn(&session, &ws)?);
                }
                Ok(turns)
            })
        })
        .collect();
    let mut per_session = Vec::new();
    for w in workers {
        per_session.push(w.join().map_err(|_| anyhow::anyhow!("a client panicked"))??);
    }
    let wall = started.elapsed();
    let cpu = cpu_ns(pid).saturating_sub(cpu_before);
    let (rss_end, hwm) = (status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM"));
    // Idle: no turn running. What the daemon keeps once the load is gone (tokio's
    // blocking threads leave after 10 s idle, so the default waits 12 s).
    std::thread::sleep(Duration::from_secs(a.idle_secs));
    let rss_idle = status_kib(pid, "VmRSS");
    drop(daemon);

    let turns: Vec<&Turn> = per_session.iter().flatten().collect();
    let mut latencies: Vec<Duration> = turns.iter().map(|t| t.latency).collect();
    latencies.sort();
    let ok = turns.iter().filter(|t| t.error.is_none()).count();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for t in &turns {
        if let Some(e) = &t.error {
            *errors.entry(format!("{e:?}")).or_default() += 1;
        }
    }
    let failed_after_calls =
        turns.iter().filter(|t| t.error.is_some() && !t.results.is_empty()).count();
    let completed: Vec<usize> =
        per_session.iter().map(|ts| ts.iter().filter(|t| t.error.is_none()).count()).collect();
    let (least, most) = (
        completed.iter().min().copied().unwrap_or(0),
        completed.iter().max().copied().unwrap_or(0),
    );
    let proposed: HashSet<String> = turns.iter().flat_map(|t| t.proposed.clone()).collect();
    let results: HashSet<String> = turns.iter().flat_map(|t| t.results.clone()).collect();
    let check = cross_check(a, &s.state, &proposed, &results)?;
    let calls = results.len();
    println!(
        "| {sessions:>3} | {:>2} | {:>5} | {:>6.0} | {:>6} | {:>6} | {:>5.2} | {:>4}/{:<5} | {:>4} | {:>4.0}/{:.0}/{:.0} | {}/{}, {} {} |",
        a.slots,
        turns.len(),
        calls as f64 / wall.as_secs_f64(),
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        cpu as f64 / 1e6 / calls.max(1) as f64,
        least,
        most,
        failed_after_calls,
        hwm as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        rss_idle as f64 / 1024.0,
        check.proposed_without_request,
        check.result_without_record,
        check.duplicate_seq,
        if check.verify_clean { "clean" } else { "NOT CLEAN" },
    );
    if !errors.is_empty() {
        println!("|     | errors: {errors:?} ({ok} of {} turns completed) |", turns.len());
    }
    Ok(check.verify_clean
        && check.proposed_without_request == 0
        && check.result_without_record == 0
        && check.duplicate_seq == 0
        && failed_after_calls == 0
        && least > 0)
}

/// Turns of history before each measurement.
const HISTORY: [usize; 3] = [10, 100, 1000];
/// Turns per sample, and samples per level: CPU time is summed over a sample's turns.
const SAMPLE_TURNS: usize = 20;
const SAMPLES: usize = 10;

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.9))
}

/// One history level: `SAMPLES` samples of `SAMPLE_TURNS` turns each, the session of
/// each turn named by `session(sample, turn)`. The daemon's CPU per call (median, p90)
/// and the median turn's wall time, in ms.
fn level(
    client: &mut Client,
    pid: u32,
    workspace: &str,
    session: impl Fn(usize, usize) -> String,
    busy: &mut usize,
) -> anyhow::Result<(f64, f64, f64)> {
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    for k in 0..SAMPLES {
        let before = cpu_ns(pid);
        for i in 0..SAMPLE_TURNS {
            let t = client.turn_retrying(&session(k, i), workspace, busy)?;
            wall.push(t.latency.as_secs_f64() * 1000.0);
        }
        cpu.push(cpu_ns(pid).saturating_sub(before) as f64 / 1e6 / SAMPLE_TURNS as f64);
    }
    let (median, p90) = stats(cpu);
    Ok((median, p90, stats(wall).0))
}

/// The daemon's CPU per call as one session's history grows, next to a new session per
/// turn (no history: the baseline) in the same run.
fn history(a: &Args) -> anyhow::Result<bool> {
    let model = model(a.slots)?;
    let s = setup(a, &model, 1)?;
    let daemon = Daemon::start(&a.bx, &s.state)?;
    let pid = daemon.pid();
    let mut client = Client::connect(&s.state)?;
    println!(
        "bx-load --history: daemon CPU per call (one fs.read turn), {SAMPLES} samples of \
         {SAMPLE_TURNS} turns per row\n"
    );
    println!(
        "| history (turns) | CPU/call median (ms) | CPU/call p90 (ms) | turn wall median (ms) | median vs 10 turns |"
    );
    println!("|---|---|---|---|---|");
    let mut busy = 0;
    let fresh = level(&mut client, pid, &s.workspace, |k, i| format!("fresh-{k}-{i}"), &mut busy)?;
    let mut rows = vec![("none (a new session per turn)".to_owned(), fresh)];
    let mut done = 0;
    for target in HISTORY {
        while done < target {
            client.turn_retrying("long", &s.workspace, &mut busy)?;
            done += 1;
        }
        let measured = level(&mut client, pid, &s.workspace, |_, _| "long".into(), &mut busy)?;
        rows.push((target.to_string(), measured));
        done += SAMPLE_TURNS * SAMPLES;
    }
    drop(daemon);
    let median_at = |name: &str| rows.iter().find(|r| r.0 == name).map_or(f64::NAN, |r| r.1.0);
    let at10 = median_at("10");
    for (name, (median, p90, wall)) in &rows {
        println!("| {name} | {median:.3} | {p90:.3} | {wall:.2} | {:.2}x |", median / at10);
    }
    let ratio = median_at("1000") / at10;
    let held = ratio <= 1.5 && busy == 0;
    println!("\nturns refused as busy just after the one before was done (sent again): {busy}");
    println!(
        "CPU per call at 1000 turns of history: {ratio:.2}x that at 10 (target: within 1.5x): {}",
        if held { "met" } else { "NOT MET" }
    );
    Ok(held)
}

fn main() -> ExitCode {
    let run = || -> anyhow::Result<bool> {
        let a = args()?;
        anyhow::ensure!(
            a.bx.exists(),
            "{} is missing; build it first (`make load` does)",
            a.bx.display()
        );
        if a.history {
            return history(&a);
        }
        println!(
            "bx-load: {} s per run, scripted model with {} slots, one fs.read per turn\n",
            a.secs, a.slots
        );
        println!(
            "| sessions | slots | turns | calls/s | p50 turn (ms) | p99 turn (ms) | daemon CPU/call (ms) | turns done per session, least/most | failed after calls ran | RSS MiB peak/end/idle | audit: proposed w/o request / result w/o record, dup seq, verify |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        let mut held = true;
        for &n in &a.sessions {
            held &= load(&a, n)?;
        }
        Ok(held)
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("bx-load: the run did not hold (see the table)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("bx-load: {e:#}");
            ExitCode::FAILURE
        }
    }
}
