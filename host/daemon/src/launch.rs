//! A llama-server the daemon starts itself from `[inference] launch`, on a free loopback
//! port, and stops when it exits.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, bail};

/// A launched server; dropping it stops the server.
pub(crate) struct Launched {
    child: Child,
    port: u16,
}

impl Launched {
    /// Starts `argv` with `{port}` replaced, its output going to `log_path` (the state
    /// directory's `llama-server.log`).
    pub(crate) fn start(argv: &[String], log_path: &Path) -> anyhow::Result<Launched> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let argv: Vec<String> =
            argv.iter().map(|a| a.replace("{port}", &port.to_string())).collect();
        let Some((program, args)) = argv.split_first() else { bail!("inference.launch is empty") };
        let log = std::fs::File::create(log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| {
                format!("starting {program} (see docs/runbook.md#inference-unreachable)")
            })?;
        let shown = bx_broker::escape_untrusted(program, false);
        eprintln!("bx serve: started {shown} (pid {}) on port {port}", child.id());
        Ok(Launched { child, port })
    }

    /// The server's base URL.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
