//! Well-known credential stores under a home directory: the probes `bx doctor` runs
//! against a policy, and the list the default policy's `[[deny]]` names must cover.
//!
//! The names the default policy denies live in one place, `fixtures/policy/example.toml`,
//! where the owner reads them. This list is the check on it: a test decides a read of
//! every entry under the default policy with the workspace at the home directory, and
//! fails on any that is not refused. [`Policy::missing_credential_denies`] runs the same
//! probes against the owner's own policy.

use std::path::{Path, PathBuf};

use crate::decide::{CallRequest, Decision, Resource, decide};
use crate::label::Label;
use crate::policy::{Expect, Mode, Policy, ResourceRule, ToolMatch};

/// One well-known credential store: where it lies below a home directory, and what it
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialStore {
    /// The path below the home directory (`.aws/credentials`): a file the store keeps
    /// its secrets in, or one typical file of a store that is a directory.
    pub path: &'static str,
    /// What it holds, for the owner (`AWS access keys`).
    pub what: &'static str,
}

const fn store(path: &'static str, what: &'static str) -> CredentialStore {
    CredentialStore { path, what }
}

/// The well-known credential stores a tool should never read without the owner, below
/// a home directory. Every one is refused by the default policy with the workspace at
/// the home directory (a test holds this).
pub const CREDENTIAL_STORES: &[CredentialStore] = &[
    store(".ssh/id_ed25519", "an SSH private key"),
    store(".ssh/config", "SSH hosts and key paths"),
    store("backup/id_rsa.bak", "a copied SSH private key"),
    store("keys/id_ecdsa_sk", "an SSH security-key handle"),
    store(".gnupg/private-keys-v1.d/A1B2.key", "GnuPG private keys"),
    store(".password-store/email.gpg", "pass, the password store"),
    store(".local/share/keyrings/login.keyring", "the GNOME keyring"),
    store("vault.kdbx", "a KeePass database"),
    store("certs/server.PEM", "a PEM private key or certificate"),
    store("certs/client.key", "a private key"),
    store("certs/client.p12", "a PKCS#12 key bundle"),
    store("certs/client.pfx", "a PKCS#12 key bundle"),
    store(".git-credentials", "git's stored HTTPS passwords"),
    store(".gitconfig", "git's settings, which may carry a token in a URL or a header"),
    store(".gitconfig.local", "git's included settings, which may carry a token"),
    store(".config/git/config", "git's settings (XDG), which may carry a token"),
    store("proj/.git/config", "a repository's remotes, which may carry a token"),
    store("proj/sub/.git/config", "a nested repository's remotes, which may carry a token"),
    store("proj/.git/modules/lib/config", "a submodule's remotes, which may carry a token"),
    store(".config/git/credentials", "git's stored HTTPS passwords (XDG)"),
    store(".netrc", "machine passwords (curl, ftp, heroku)"),
    store("_netrc", "machine passwords (curl, ftp, heroku)"),
    store(".netrc.bak", "a backup of machine passwords"),
    store(".env", "a project's environment secrets"),
    store("proj/.env.production", "a project's environment secrets"),
    store(".env~", "an editor's backup of a project's environment secrets"),
    store("proj/#.env#", "Emacs' autosave of a project's environment secrets"),
    store("proj/.env.swp", "vim's swap file of a project's environment secrets"),
    store(".envrc", "direnv's environment, which often exports secrets"),
    store("proj/.envrc.local", "direnv's local environment"),
    store("proj/deploy/production.env", "an environment file for docker compose or a service"),
    store("proj/.dev.vars", "wrangler's local secrets"),
    store("proj/.secrets", "act's secrets for GitHub Actions run locally"),
    store(".aws/credentials", "AWS access keys"),
    store(".aws/sso/cache/token.json", "AWS SSO tokens"),
    store(".azure/msal_token_cache.json", "Azure CLI tokens"),
    store(".config/gcloud/application_default_credentials.json", "Google Cloud credentials"),
    store(".config/gcloud/credentials.db", "Google Cloud credentials"),
    store(".oci/config", "Oracle Cloud keys"),
    store(".kube/config", "Kubernetes cluster credentials"),
    store(".docker/config.json", "Docker registry logins"),
    store(".docker/config.json.bak", "a backup of Docker registry logins"),
    store(".config/containers/auth.json", "Podman registry logins"),
    store(".config/gh/hosts.yml", "the GitHub CLI's token"),
    store(".config/hub", "hub's GitHub token"),
    store(".config/glab-cli/config.yml", "the GitLab CLI's token"),
    store(".config/op/config", "the 1Password CLI's session"),
    store(".vault-token", "a HashiCorp Vault token"),
    store(".terraformrc", "Terraform Cloud tokens"),
    store(".terraform.d/credentials.tfrc.json", "Terraform Cloud tokens"),
    store(".config/helm/repositories.yaml", "Helm chart repository passwords"),
    store(".pulumi/credentials.json", "Pulumi's access tokens"),
    store(".jfrog/jfrog-cli.conf.v6", "the JFrog CLI's tokens"),
    store(".npmrc", "an npm registry token"),
    store(".yarnrc.yml", "a Yarn registry token"),
    store(".yarnrc", "a Yarn (v1) registry token"),
    store(".bunfig.toml", "a Bun registry token"),
    store(".pypirc", "a PyPI upload token"),
    store(".config/pip/pip.conf", "pip's index URL, which may carry a password"),
    store(".pip/pip.conf", "pip's index URL (old place)"),
    store(".config/pypoetry/auth.toml", "Poetry's repository passwords"),
    store(".local/share/uv/credentials/credentials.toml", "uv's index credentials"),
    store(".cargo/credentials.toml", "a crates.io token"),
    store(".cargo/credentials", "a crates.io token (old name)"),
    store(".gem/credentials", "a RubyGems API key"),
    store(".bundle/config", "Bundler's gem source passwords"),
    store(".nuget/NuGet/NuGet.Config", "NuGet feed passwords"),
    store(".config/NuGet/NuGet.Config", "NuGet feed passwords (XDG)"),
    store(".sbt/.credentials", "sbt's repository passwords"),
    store(".ivy2/.credentials", "Ivy's repository passwords"),
    store(".config/dart/pub-tokens.json", "Dart pub tokens"),
    store(".m2/settings.xml", "Maven repository passwords"),
    store(".m2/settings-security.xml", "Maven's master password"),
    store(".gradle/gradle.properties", "Gradle's repository and signing passwords"),
    store(".gradle/init.gradle", "a Gradle init script's repository passwords"),
    store(".gradle/init.d/repos.gradle", "a Gradle init script's repository passwords"),
    store("proj/gradle.properties", "a project's Gradle properties, which often hold passwords"),
    store(".config/composer/auth.json", "Composer repository tokens"),
    store(".composer/auth.json", "Composer repository tokens (old place)"),
    store(".pgpass", "PostgreSQL passwords"),
    store(".my.cnf", "MySQL passwords"),
    store(".mylogin.cnf", "MySQL login paths"),
    store(".s3cfg", "s3cmd's AWS keys"),
    store(".boto", "boto and gsutil keys"),
    store(".config/rclone/rclone.conf", "rclone's cloud storage tokens"),
    store(".config/doctl/config.yaml", "the DigitalOcean CLI's token"),
    store(".databrickscfg", "Databricks tokens"),
    store(".fly/config.yml", "fly.io's token"),
    store(".config/sops/age/keys.txt", "SOPS age keys"),
    store(".config/github-copilot/apps.json", "GitHub Copilot's token"),
    store(".claude/.credentials.json", "Claude Code's token"),
    store(".codex/auth.json", "Codex's token"),
    store(".config/google-chrome/Default/Cookies", "a browser's cookies"),
    store(".config/google-chrome/Default/Network/Cookies", "a browser's cookies"),
    store(".config/chromium/Profile 1/Cookies", "a browser's cookies"),
    store(".config/google-chrome/Default/Login Data", "a browser's saved passwords"),
    store(".config/google-chrome/Default/Web Data", "a browser's saved cards and forms"),
    store(".mozilla/firefox/abc.default/logins.json", "a browser's saved passwords"),
    store(".mozilla/firefox/abc.default/key4.db", "a browser's password key"),
    store(".mozilla/firefox/abc.default/cookies.sqlite", "a browser's cookies"),
    store(".pki/nssdb/key4.db", "NSS keys and certificates"),
    store(".bash_history", "shell history, which keeps pasted secrets"),
    store(".zsh_history", "shell history, which keeps pasted secrets"),
    store(".zhistory", "shell history, which keeps pasted secrets"),
    store(".histfile", "shell history, which keeps pasted secrets"),
    store(".local/share/fish/fish_history", "shell history, which keeps pasted secrets"),
    store(".python_history", "REPL history"),
    store(".psql_history", "database client history"),
    store(".mysql_history", "database client history"),
    store(".node_repl_history", "REPL history"),
    store(".viminfo", "vim's history of commands, searches and registers"),
    store(".lesshst", "less's search history"),
];

/// A credential store a policy lets a tool read without refusing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialGap {
    /// The probe path (the home directory joined with the store's path).
    pub path: PathBuf,
    /// What the store holds.
    pub what: &'static str,
    /// A tool that reaches it; `*` when any tool not named by the policy does.
    pub tool: String,
    /// [`Expect::Allow`] when it is read without a word, [`Expect::Ask`] when the owner
    /// is asked first.
    pub decision: Expect,
}

/// A tool name no policy rule names, standing for "any other tool".
const ANY_OTHER_TOOL: &str = "bx.doctor.any-other-tool";

impl Policy {
    /// The well-known credential stores ([`CREDENTIAL_STORES`]) below `home` that this
    /// policy does not refuse to read, for `bx doctor`: each store is decided as a read
    /// by every tool a read grant names (and, when a grant is for `*`, by a tool no rule
    /// names), at a clean taint, in a session whose workspace is `home` (the one that
    /// reaches most when `bx chat` starts there). A store is listed once: for the first
    /// tool that reads it without asking, else the first that asks. Empty for a policy
    /// whose grants do not reach `home`.
    pub fn missing_credential_denies(&self, home: &Path) -> Vec<CredentialGap> {
        let policy = self.for_workspace(Some(home));
        let mut tools: Vec<String> = Vec::new();
        for g in policy.grants.iter().filter(|g| g.mode == Mode::Read) {
            if !matches!(g.resource, ResourceRule::Path(_)) {
                continue;
            }
            let tool = match &g.tool {
                ToolMatch::Any => ANY_OTHER_TOOL.to_owned(),
                ToolMatch::Named(name) => name.clone(),
                ToolMatch::Prefix(prefix) => format!("{prefix}{ANY_OTHER_TOOL}"),
            };
            if !tools.contains(&tool) {
                tools.push(tool);
            }
        }
        let mut gaps = Vec::new();
        for s in CREDENTIAL_STORES {
            let path = home.join(s.path);
            let decided = tools.iter().filter_map(|tool| {
                let call = CallRequest {
                    tool: tool.clone(),
                    digest: String::new(),
                    resources: vec![Resource::PathRead(path.display().to_string())],
                };
                match decide(&policy, Label::CLEAN, &call) {
                    Decision::Allow(_) => Some((tool, Expect::Allow)),
                    Decision::Ask(_) => Some((tool, Expect::Ask)),
                    Decision::Deny(_) => None,
                }
            });
            // A tool that reads it without a word says more than one that asks.
            let reached = decided.min_by_key(|(_, d)| *d != Expect::Allow);
            if let Some((tool, decision)) = reached {
                let tool = if tool == ANY_OTHER_TOOL { "*".to_owned() } else { tool.clone() };
                gaps.push(CredentialGap { path, what: s.what, tool, decision });
            }
        }
        gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 31, item 2): with the default policy and the workspace at the
    /// owner's home, fs.read read 34 of 42 common credential stores without a prompt.
    #[test]
    fn the_default_policy_refuses_every_store_under_a_home_workspace() {
        let policy = Policy::parse("example.toml", crate::EXAMPLE_POLICY).unwrap();
        let home = Path::new("/home/owner");
        let ws = policy.for_workspace(Some(home));
        for tool in ["fs.read", "fs.search", "fs.list", "fs.write"] {
            for s in CREDENTIAL_STORES {
                let path = home.join(s.path).display().to_string();
                for resource in [Resource::PathRead(path.clone()), Resource::PathWrite(path)] {
                    let call = CallRequest {
                        tool: tool.into(),
                        digest: String::new(),
                        resources: vec![resource.clone()],
                    };
                    let got = decide(&ws, Label::CLEAN, &call);
                    assert!(matches!(got, Decision::Deny(_)), "{tool} {resource}: {got:?}");
                }
            }
        }
        assert_eq!(policy.missing_credential_denies(home), Vec::new());
    }

    #[test]
    fn a_policy_that_reads_home_without_denies_lists_every_store() {
        let home = Path::new("/home/owner");
        let text = "[[grant]]\ntool = \"*\"\npath = \"{workspace}\"\nmode = \"read\"\nlabel = \"private/trusted\"\n\n\
                    [[grant]]\ntool = \"fs.read\"\npath = \"/home/owner\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\n\n\
                    [[deny]]\ntool = \"fs.read\"\nname = \".aws\"\n";
        let gaps = Policy::parse("p.toml", text).unwrap().missing_credential_denies(home);
        assert_eq!(gaps.len(), CREDENTIAL_STORES.len());
        // fs.read asks (its own grant is deeper-named) and is refused .aws, but any
        // other tool reads them all through the workspace grant.
        assert_eq!(
            gaps[0],
            CredentialGap {
                path: "/home/owner/.ssh/id_ed25519".into(),
                what: "an SSH private key",
                tool: "*".into(),
                decision: Expect::Allow,
            }
        );
        assert!(gaps.iter().all(|g| g.tool == "*" && g.decision == Expect::Allow));
        // A grant that asks before every read is reported as asking.
        let asks = "[[grant]]\ntool = \"fs.read\"\npath = \"/home\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_clean = \"ask\"\n";
        let gaps = Policy::parse("p.toml", asks).unwrap().missing_credential_denies(home);
        assert_eq!(gaps.len(), CREDENTIAL_STORES.len());
        assert!(gaps.iter().all(|g| g.tool == "fs.read" && g.decision == Expect::Ask));
        // A policy that does not reach the home directory has nothing to say about it.
        let elsewhere = "[[grant]]\ntool = \"*\"\npath = \"/srv/data\"\nmode = \"read\"\nlabel = \"private/trusted\"\n";
        let policy = Policy::parse("p.toml", elsewhere).unwrap();
        assert_eq!(policy.missing_credential_denies(home), Vec::new());
    }
}
