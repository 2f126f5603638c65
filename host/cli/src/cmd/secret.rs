//! `bx secret`: set, list and remove the secrets the host puts into tools' requests
//! (`docs/policy.md#secrets`). A value is read from the terminal without echo, or from
//! stdin when it is not a terminal; never from the command line, and never printed.

use std::io::{IsTerminal as _, Read as _};

use bx_state::{MAX_SECRET_BYTES, SecretValue, StateDir};
use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK};
use crate::term;

/// `bx secret …`
#[derive(Debug, Subcommand)]
pub(crate) enum SecretCommand {
    /// Set a secret: the value is read from the terminal (not echoed), or from stdin
    /// when it is not a terminal (one line; a trailing newline is dropped). Never from
    /// the command line, where shell history and `ps` would keep it.
    Set {
        /// The secret's name (a-z, 0-9, '_', '-'), as `[[secret]]` rules name it.
        name: String,
        /// Refused: a value on the command line.
        #[arg(hide = true, trailing_var_arg = true, allow_hyphen_values = true)]
        rest: Vec<std::ffi::OsString>,
    },
    /// List the secrets: names, the policy's bindings, when each was set and last
    /// used. Never a value.
    List,
    /// Remove a secret.
    Rm {
        /// The secret's name.
        name: String,
    },
}

pub(crate) fn run(state: &StateDir, command: SecretCommand) -> anyhow::Result<u8> {
    let store = state.secrets();
    match command {
        SecretCommand::Set { name, rest } => {
            if !rest.is_empty() {
                // Not even the words are echoed: one of them is likely the value.
                errln!(
                    "bx: `bx secret set` takes no value on the command line ({} more argument(s) given, not shown): shell history and `ps` keep it. Run `bx secret set {}` and type or paste it, or pipe it in on stdin.",
                    rest.len(),
                    term::one_line(&name)
                );
                return Ok(EXIT_ERROR);
            }
            if !bx_broker::valid_secret_name(&name) {
                anyhow::bail!(bx_state::StateError::BadSecretName(term::one_line(&name)));
            }
            let text = read_value(&name)?;
            let value = match SecretValue::new(text) {
                Ok(v) => v,
                Err(why) => {
                    errln!("bx: secret {name} not set: {why}");
                    return Ok(EXIT_ERROR);
                }
            };
            let bytes = value.expose().len();
            let now = bx_audit::format_rfc3339(std::time::SystemTime::now());
            let replaced = store.set(&name, value, now)?;
            let verb = if replaced { "replaced" } else { "set" };
            outln!("secret {name} {verb} ({bytes} bytes) in {}", store.store_file().display());
            let bound = bindings(state).into_iter().filter(|(n, _)| *n == name).count();
            if bound == 0 {
                outln!(
                    "  no [[secret]] rule of the policy binds it yet, so no request carries it (docs/policy.md#secrets)"
                );
            }
        }
        SecretCommand::List => {
            let loaded = store.load()?;
            let uses = store.last_uses();
            let bindings = bindings(state);
            if let Some(why) = &loaded.exposed {
                outln!(
                    "warning: {} (calls that need a secret are refused; see docs/runbook.md#secrets-exposed)",
                    term::one_line(why)
                );
            }
            let held = store.quarantined();
            if held.is_none() {
                outln!(
                    "warning: {} cannot be read: every call that can send a request is refused (see docs/runbook.md#secret-quarantined)",
                    store.quarantine_file().display()
                );
            }
            let held = held.unwrap_or_default();
            let mut names: Vec<&str> = loaded.secrets.keys().map(String::as_str).collect();
            for (n, _) in &bindings {
                if !names.contains(&n.as_str()) {
                    names.push(n);
                }
            }
            if names.is_empty() {
                outln!("no secrets (bx secret set NAME)");
            }
            for name in names {
                match loaded.secrets.get(name) {
                    Some(s) => outln!("{name}  set {}", term::one_line(&s.set)),
                    None => outln!("{name}  not set (a rule binds it: bx secret set {name})"),
                }
                for (_, rule) in bindings.iter().filter(|(n, _)| n == name) {
                    outln!("  {}", term::one_line(rule));
                }
                if let Some(h) = held.get(name) {
                    outln!(
                        "  HELD BACK since {}: a tool tried to send it to {}; no call that can send a request runs until `bx secret set {name}` (see docs/runbook.md#secret-quarantined)",
                        term::one_line(&h.at),
                        term::one_line(&h.host)
                    );
                }
                match uses.get(name) {
                    Some(u) => outln!(
                        "  last used {} to {}",
                        term::one_line(&u.at),
                        term::one_line(&u.host)
                    ),
                    None => outln!("  never used"),
                }
            }
        }
        SecretCommand::Rm { name } => {
            if store.remove(&name)? {
                outln!("secret {} removed", term::one_line(&name));
            } else {
                errln!("bx: no secret {}", term::one_line(&name));
                return Ok(EXIT_ERROR);
            }
        }
    }
    Ok(EXIT_OK)
}

/// The policy's bindings, `(secret, rule as shown)`; none when it cannot be read.
fn bindings(state: &StateDir) -> Vec<(String, String)> {
    let Ok(config) = bx_daemon::load_config(state) else { return Vec::new() };
    let Ok(policy) = super::run::policy_in_force(state, &config) else { return Vec::new() };
    policy.secrets().iter().map(|b| (b.name.clone(), b.to_string())).collect()
}

/// The value: from the terminal without echo, or the first line of stdin.
fn read_value(name: &str) -> anyhow::Result<String> {
    if std::io::stdin().is_terminal() {
        let prompt = format!("value of secret {name} (not shown): ");
        return Ok(rpassword::prompt_password(prompt)?);
    }
    let mut data = Vec::new();
    std::io::stdin().take(MAX_SECRET_BYTES as u64 + 3).read_to_end(&mut data)?;
    let mut text = String::from_utf8(data)
        .map_err(|_| anyhow::anyhow!("secret {name} not set: the value on stdin is not text"))?;
    for end in ["\r\n", "\n"] {
        if let Some(cut) = text.strip_suffix(end) {
            text = cut.to_owned();
            break;
        }
    }
    Ok(text)
}
