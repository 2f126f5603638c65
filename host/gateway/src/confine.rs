//! What a stdio upstream's process may reach of the file system, enforced by Landlock
//! before it runs: it reads everything but bx's own files (the state directory with its
//! policy, installed set and secrets, the audit directory, the signing key and the
//! export directories), and writes only its own directory, the one the owner gave it, and
//! the shared temporary directories (bx's own files cut out of them too). An upstream is
//! a program of the owner's, but what it is told comes from anywhere: it must not be able
//! to rewrite the labels, pins or policy that decide its own calls, or read a secret.
//!
//! bx starts it through itself (`bx confine`, hidden), which restricts its own process
//! and then executes the server: Landlock restrictions are inherited and cannot be
//! undone. Landlock is Linux's unprivileged sandbox (5.13 and later); where the kernel
//! has none, the upstream is not started (docs/runbook.md#upstream-unconfined).

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access as _, AccessFs, BitFlags, Ruleset, RulesetAttr as _, RulesetCreatedAttr as _,
    RulesetStatus, Scope, path_beneath_rules,
};

use crate::error::GatewayError;

/// How bx starts a stdio upstream confined: its own executable, with the paths to hide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confine {
    /// bx itself, which runs `confine` and then the server.
    pub exe: PathBuf,
    /// bx's own files: out of reach for reading and writing.
    pub hidden: Vec<PathBuf>,
}

impl Confine {
    /// This bx (the running executable), hiding everything bx reads as its own under
    /// `state` and `config` ([`bx_state::StateDir::own_paths`]).
    pub fn for_state(
        state: &bx_state::StateDir,
        config: &bx_state::Config,
    ) -> Result<Confine, GatewayError> {
        let exe = std::env::current_exe().map_err(|e| GatewayError::io(Path::new("bx"), e))?;
        Ok(Confine { exe, hidden: state.own_paths(config) })
    }

    /// The command line that confines itself and then runs `command args`, writing only
    /// under its own directory `home` and `writable`.
    pub fn argv(
        &self,
        home: &Path,
        writable: &[&Path],
        command: &str,
        args: &[String],
    ) -> Vec<String> {
        let mut argv = vec!["confine".to_owned(), "--home".into(), home.display().to_string()];
        for h in &self.hidden {
            argv.push("--hide".into());
            argv.push(h.display().to_string());
        }
        for w in writable {
            argv.push("--write".into());
            argv.push(w.display().to_string());
        }
        argv.push("--".into());
        argv.push(command.to_owned());
        argv.extend(args.iter().cloned());
        argv
    }
}

/// The shared directories an upstream may write in (less anything hidden under them).
const SHARED_WRITABLE: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// The entries that together hold all of `roots` except every path in `hidden`: a root
/// inside a hidden path is dropped, and a root with a hidden path below it is replaced by
/// its entries other than the one leading there, level by level down to the hidden path. (Landlock grants by hierarchy and
/// cannot subtract, so what is left out is what no rule names.)
pub fn all_but(roots: &[PathBuf], hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = roots.to_vec();
    for h in hidden {
        let mut next = Vec::new();
        for root in out {
            // A root inside the hidden path goes whole.
            if root.starts_with(h) {
                continue;
            }
            if !h.starts_with(&root) {
                next.push(root);
                continue;
            }
            // `root` holds `h`: keep the siblings along the way down.
            let Ok(rest) = h.strip_prefix(&root) else { continue };
            let mut at = root.clone();
            for part in rest.components() {
                if let Ok(entries) = std::fs::read_dir(&at) {
                    for entry in entries.flatten() {
                        // A symlink is skipped: a rule follows it, and it may lead into
                        // the hidden path; what it leads to elsewhere is covered there.
                        let link = entry.file_type().is_ok_and(|t| t.is_symlink());
                        if entry.file_name() != part.as_os_str() && !link {
                            next.push(entry.path());
                        }
                    }
                }
                at.push(part);
            }
        }
        out = next;
    }
    out
}

/// Restricts this process (and what it executes next) to read everything but `hidden`,
/// and write only under its own directory `home` (kept whole, though it lies in bx's
/// state directory), `writable` and the shared temporary directories (those less
/// `hidden`). Fails when the kernel enforces none of it.
pub fn confine_self(
    hidden: &[PathBuf],
    home: &Path,
    writable: &[PathBuf],
) -> Result<(), GatewayError> {
    close_inherited()?;
    let abi = ABI::V5;
    let fail = |why: String| GatewayError::Unconfined(why);
    let read: BitFlags<AccessFs> = AccessFs::from_read(abi);
    let all: BitFlags<AccessFs> = AccessFs::from_all(abi);
    let readable = all_but(&[PathBuf::from("/")], hidden);
    let shared: Vec<PathBuf> = SHARED_WRITABLE.iter().map(PathBuf::from).collect();
    // The owner's directories lose bx's own files under them too.
    let mut writes = all_but(&[shared, writable.to_vec()].concat(), hidden);
    writes.push(home.to_path_buf());
    // And (Linux 6.12 on) no signal to a process outside its domain (the daemon, another
    // upstream) and no abstract unix socket made outside it; older kernels skip these.
    let status = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.scope(Scope::Signal | Scope::AbstractUnixSocket))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(&readable, read)))
        .and_then(|r| r.add_rules(path_beneath_rules(&writes, read)))
        .and_then(|r| r.add_rules(path_beneath_rules(&writes, all)))
        .and_then(|r| {
            r.add_rules(path_beneath_rules(["/dev/null"], AccessFs::ReadFile | AccessFs::WriteFile))
        })
        .and_then(|r| r.restrict_self())
        .map_err(|e| fail(e.to_string()))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
        RulesetStatus::NotEnforced => Err(fail("the kernel enforces no Landlock rule".into())),
    }
}

/// Marks every descriptor above stderr close-on-exec, so the server starts with its
/// standard streams alone: a descriptor the daemon inherited from whatever started it (a
/// shell's `200<policy.toml`, a service manager's) would otherwise reach the server open,
/// and Landlock checks a path when it is opened, not a read through an open descriptor
/// (found by attacking the built binary).
#[allow(unsafe_code, reason = "no safe API sets close-on-exec on descriptors by number")]
fn close_inherited() -> Result<(), GatewayError> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on each descriptor
    // from 3 up; none is closed, so no Rust object's descriptor becomes invalid.
    let done = unsafe {
        libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int)
    };
    if done == 0 {
        return Ok(());
    }
    // Before Linux 5.11: each open descriptor, as /proc lists them.
    let entries = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| GatewayError::Unconfined(format!("listing /proc/self/fd: {e}")))?;
    let fds: Vec<libc::c_int> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: fcntl(F_SETFD) sets a flag on a descriptor number and touches no memory;
        // on one that closed since it was listed it fails harmlessly with EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_but_keeps_every_sibling_on_the_way_down_and_nothing_below_the_hidden_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        for p in ["a/b/state/x", "a/b/other", "a/c", "d"] {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        // A symlink beside the way down, into the hidden path, is left out.
        std::os::unix::fs::symlink(root.join("a/b/state"), root.join("a/b/link")).unwrap();
        let mut got = all_but(std::slice::from_ref(&root), &[root.join("a/b/state")]);
        got.sort();
        let want: Vec<PathBuf> = ["a/b/other", "a/c", "d"].iter().map(|p| root.join(p)).collect();
        assert_eq!(got, want);
        // A root not holding the hidden path is kept whole; a hidden root goes.
        assert_eq!(all_but(&[root.join("d")], &[root.join("a")]), [root.join("d")]);
        assert!(all_but(&[root.join("a")], &[root.join("a")]).is_empty());
        assert!(all_but(&[root.join("a/b/state/x")], &[root.join("a/b/state")]).is_empty());
    }
}
