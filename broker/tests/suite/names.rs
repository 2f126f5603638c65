//! Name rules: lists of names, names of several components, ASCII case folding, the
//! `[[ask]]` rule, and the default policy's credential denies under a home workspace.

use std::path::Path;

use bx_broker::{
    Answer, CREDENTIAL_STORES, CallRequest, Decision, Expect, FsAccess, Label, Policy, decide,
    redecide,
};

use super::{call, read, write};

/// "allow", "ask: <reasons>" or "deny: <reason>".
fn outcome(p: &Policy, c: &CallRequest) -> String {
    outcome_at(p, Label::CLEAN, c)
}

/// [`outcome`] in a session of taint `taint`.
fn outcome_at(p: &Policy, taint: Label, c: &CallRequest) -> String {
    match decide(p, taint, c) {
        Decision::Allow(_) => "allow".into(),
        Decision::Ask(a) => format!("ask: {}", a.reasons.join("; ")),
        Decision::Deny(r) => format!("deny: {r}"),
    }
}

fn default_at(workspace: &str) -> Policy {
    let p = Policy::parse("example.toml", bx_broker::EXAMPLE_POLICY).unwrap();
    p.for_workspace(Some(Path::new(workspace))).into_owned()
}

/// Regression (issue 31, item 2): with the default policy and the workspace at the
/// owner's home, fs.read, fs.search and fs.list read 34 of 42 common credential stores
/// without a prompt. Every well-known store is now refused, by decide and by the grant a
/// read of the home directory runs under (which a listing or search of it uses).
#[test]
fn the_default_policy_refuses_credential_stores_under_a_home_workspace() {
    let p = default_at("/home/owner");
    let Decision::Allow(home) =
        decide(&p, Label::CLEAN, &call("fs.list", vec![read("/home/owner")]))
    else {
        panic!("a listing of the home workspace runs")
    };
    for store in CREDENTIAL_STORES {
        let path = format!("/home/owner/{}", store.path);
        for tool in ["fs.read", "fs.search", "fs.list"] {
            let got = outcome(&p, &call(tool, vec![read(&path)]));
            assert!(got.starts_with(&format!("deny: read {path} is refused by deny[")), "{got}");
        }
        assert!(home.denied_prefix(Path::new(&path)).is_some(), "{path} listed");
        assert!(home.route_path(&path, FsAccess::Read).is_err(), "{path} read");
    }
    // The refusal says which name refused it.
    let got = outcome(&p, &call("fs.read", vec![read("/home/owner/.aws/credentials")]));
    assert_eq!(
        got,
        "deny: read /home/owner/.aws/credentials is refused by deny[1] (line 83), name .aws"
    );
    // What is not a credential store still reads.
    for path in ["/home/owner/notes/todo.md", "/home/owner/.bashrc", "/home/owner/proj/.git/HEAD"] {
        assert_eq!(outcome(&p, &call("fs.read", vec![read(path)])), "allow", "{path}");
    }
}

#[test]
fn names_match_ignoring_ascii_case() {
    let p = default_at("/home/o/site");
    for path in ["/home/o/site/server.PEM", "/home/o/site/.ENV", "/home/o/site/.Git/Config"] {
        let got = outcome(&p, &call("fs.read", vec![read(path)]));
        assert!(got.starts_with("deny: "), "{path}: {got}");
    }
}

#[test]
fn a_name_of_several_components_matches_them_one_after_the_other_anywhere() {
    let p = Policy::parse(
        "p.toml",
        "[[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
         [[deny]]\ntool = \"*\"\nname = \".git/config\"\n",
    )
    .unwrap();
    for path in ["/w/.git/config", "/w/a/sub/.git/config", "/w/.git/config/x"] {
        let got = outcome(&p, &call("fs.read", vec![read(path)]));
        assert_eq!(
            got,
            format!("deny: read {path} is refused by deny[0] (line 7), name .git/config")
        );
    }
    for path in ["/w/.git", "/w/.git/HEAD", "/w/.git/x/config", "/w/config/.git", "/w/config"] {
        assert_eq!(outcome(&p, &call("fs.read", vec![read(path)])), "allow", "{path}");
    }
    // The runtime refuses the same paths under a read of the parent, and a listing of
    // `sub/.git` leaves `config` out.
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &call("fs.list", vec![read("/w")])) else {
        panic!("the listing runs")
    };
    let refusal = g.denied_prefix(Path::new("/w/a/sub/.git/config")).map(|r| r.to_string());
    assert_eq!(refusal.as_deref(), Some("a name denied by rule (name .git/config)"));
    assert!(g.denied_prefix(Path::new("/w/a/sub/.git/HEAD")).is_none());
}

#[test]
fn a_name_may_be_a_list_and_each_entry_is_checked_where_it_is_written() {
    let text = "[[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
                [[deny]]\ntool = \"fs.read\"\nname = [\".aws\", \"*.kdbx\"]\n";
    let p = Policy::parse("p.toml", text).unwrap();
    assert_eq!(p.denies()[0].to_string(), "deny[0] (line 7): tool fs.read names .aws, *.kdbx");
    let got = outcome(&p, &call("fs.read", vec![read("/w/x/Vault.KDBX")]));
    assert_eq!(got, "deny: read /w/x/Vault.KDBX is refused by deny[0] (line 7), name *.kdbx");
    // Only for the tool it names.
    assert_eq!(outcome(&p, &call("fs.search", vec![read("/w/.aws/credentials")])), "allow");

    // refuses_bad_names_in_a_list: each at its own line and column, with its index.
    let bad =
        "[[deny]]\ntool = \"*\"\nname = [\n  \".aws\",\n  \"a/../b\",\n  \"*\", \"/etc\",\n]\n";
    let err = Policy::parse("p.toml", bad).unwrap_err();
    let at: Vec<(usize, usize, &str)> =
        err.0.iter().map(|e| (e.line, e.column, e.rule.as_str())).collect();
    assert_eq!(
        at,
        vec![(5, 3, "deny[0].name[1]"), (6, 3, "deny[0].name[2]"), (6, 8, "deny[0].name[3]")]
    );
    assert!(
        err.to_string().contains("p.toml:5:3: deny[0].name[1]: a name has no \"..\" component"),
        "{err}"
    );
}

#[test]
fn refuses_empty_lists_non_strings_and_bad_single_names_with_their_location() {
    for (text, want) in [
        (
            "[[deny]]\ntool = \"*\"\nname = []\n",
            "p.toml:3:8: deny[0].name: an empty list names nothing",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = \"a//b\"\n",
            "p.toml:3:8: deny[0].name: a name has no empty component",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = \"/etc/shadow\"\n",
            "p.toml:3:8: deny[0].name: a name is relative",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = \".git/*\"\n",
            "p.toml:3:8: deny[0].name: a component of only *",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = 3\n",
            "p.toml:3:8: toml: invalid type: integer `3`, expected a name or an array of names",
        ),
        (
            "[[deny]]\ntool = \"*\"\nname = [\"a\", 3]\n",
            "p.toml:3:14: toml: invalid type: integer `3`, expected a string",
        ),
        (
            "[[ask]]\ntool = \"*\"\nname = \"a\"\nmode = \"fetch\"\n",
            "p.toml:4:8: ask[0].mode: \"fetch\" is not one of read, write",
        ),
        ("[[ask]]\ntool = \"*\"\nname = \"a\"\n", "p.toml:1:1: toml: missing field `mode`"),
        (
            "[[ask]]\ntool = \"*\"\npath = \"/a\"\nname = \"a\"\nmode = \"write\"\n",
            "p.toml:3:1: toml: unknown field `path`",
        ),
        (
            "[[ask]]\ntool = \"*\"\nname = [\"ok\", \"**\"]\nmode = \"write\"\n",
            "p.toml:3:15: ask[0].name[1]: \"**\": a component has at most one *",
        ),
    ] {
        let err = Policy::parse("p.toml", text).unwrap_err().to_string();
        assert!(err.starts_with(want), "{text}\n--- got\n{err}");
    }
}

/// A policy whose workspace write grant allows without asking, and an `[[ask]]` rule.
const ASKS: &str = "[[grant]]\ntool = \"*\"\npath = \"{workspace}\"\nmode = \"read\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n\n\
[[grant]]\ntool = \"*\"\npath = \"{workspace}\"\nmode = \"write\"\nlabel = \"private/trusted\"\nwhen_tainted = \"allow\"\n\n\
[[deny]]\ntool = \"*\"\nname = \".git/config\"\n\n\
[[ask]]\ntool = \"*\"\nmode = \"write\"\nname = [\".git/hooks\", \".bashrc\", \".git/config\"]\n";

#[test]
fn an_ask_rule_asks_at_every_taint_and_never_allows() {
    let p = Policy::parse("p.toml", ASKS).unwrap();
    assert_eq!(
        p.asks()[0].to_string(),
        "ask[0] (line 19): tool * write names .git/hooks, .bashrc, .git/config"
    );
    let ws = p.for_workspace(Some(Path::new("/w")));
    assert_eq!(outcome(&ws, &call("fs.write", vec![write("/w/notes.md")])), "allow");
    let hook = call("fs.write", vec![write("/w/.git/hooks/post-commit")]);
    assert_eq!(
        outcome(&ws, &hook),
        "ask: write /w/.git/hooks/post-commit: ask[0] (line 19) asks before every write of name .git/hooks"
    );
    for taint in [Label::CLEAN, Label::TOP] {
        assert!(matches!(decide(&ws, taint, &hook), Decision::Ask(_)), "{taint}");
        let rc = call("fs.write", vec![write("/w/sub/.BASHRC")]);
        assert!(matches!(decide(&ws, taint, &rc), Decision::Ask(_)), "{taint}");
    }
    // Reading is not what it asks about.
    assert_eq!(outcome(&ws, &call("fs.read", vec![read("/w/.bashrc")])), "allow");
    // A deny still wins, and it grants nothing no grant covers.
    let got = outcome(&ws, &call("fs.write", vec![write("/w/.git/config")]));
    assert!(got.starts_with("deny: write /w/.git/config is refused by deny[0]"), "{got}");
    let got = outcome(&ws, &call("fs.write", vec![write("/elsewhere/.bashrc")]));
    assert!(got.starts_with("deny: no grant covers"), "{got}");
}

#[test]
fn a_write_that_names_another_path_never_reaches_what_an_ask_rule_covers() {
    let p = Policy::parse("p.toml", ASKS).unwrap();
    let ws = p.for_workspace(Some(Path::new("/w")));
    let Decision::Allow(g) =
        decide(&ws, Label::CLEAN, &call("fs.write", vec![write("/w/notes.md")]))
    else {
        panic!("a write of the workspace runs")
    };
    assert!(g.route_path("/w/other.md", FsAccess::Write).is_ok());
    let err = g.route_path("/w/.git/hooks/pre-commit", FsAccess::Write).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/w/.git/hooks/pre-commit is under a name that asks the owner first (name .git/hooks); only a call that names it reaches it"
    );
    assert!(g.route_path("/w/a/.bashrc", FsAccess::Write).is_err());
    // Reading and listing it stay as they were.
    assert!(g.route_path("/w/.git/hooks/pre-commit", FsAccess::Read).is_ok());
    assert!(g.denied_prefix(Path::new("/w/.git/hooks/pre-commit")).is_none());

    // A call that names the hook, once approved, reaches that path (and below it) only.
    let hook = call("fs.write", vec![write("/w/.git/hooks/post-commit")]);
    let Decision::Ask(asked) = decide(&ws, Label::CLEAN, &hook) else { panic!("it asks") };
    let Decision::Allow(g) = redecide(&ws, Label::CLEAN, &asked, &Answer::Approve) else {
        panic!("the approved call runs")
    };
    assert!(g.route_path("/w/.git/hooks/post-commit", FsAccess::Write).is_ok());
    assert!(g.route_path("/w/.git/hooks/pre-push", FsAccess::Write).is_err());
    assert!(g.route_path("/w/.bashrc", FsAccess::Write).is_err());
}

#[test]
fn a_read_ask_rule_keeps_a_listing_from_naming_what_it_covers() {
    let text = "[[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
                [[ask]]\ntool = \"*\"\nmode = \"read\"\nname = \"diary\"\n";
    let p = Policy::parse("p.toml", text).unwrap();
    assert!(outcome(&p, &call("fs.read", vec![read("/w/diary/today.md")])).starts_with("ask: "));
    let Decision::Allow(g) = decide(&p, Label::CLEAN, &call("fs.list", vec![read("/w")])) else {
        panic!("the listing runs")
    };
    assert!(g.denied_prefix(Path::new("/w/diary")).is_some());
    assert!(g.denied_prefix(Path::new("/w/notes")).is_none());
}

#[test]
fn doctor_finds_no_gap_in_the_default_policy_and_every_gap_without_its_denies() {
    let home = Path::new("/home/owner");
    let p = Policy::parse("example.toml", bx_broker::EXAMPLE_POLICY).unwrap();
    assert_eq!(p.missing_credential_denies(home), Vec::new());
    // The default policy with its deny rules cut out: every store reads.
    let (grants_only, _) = bx_broker::EXAMPLE_POLICY.split_once("\n[[deny]]\n").unwrap();
    let p = Policy::parse("p.toml", grants_only).unwrap();
    assert_eq!((p.grants().len(), p.denies().len()), (4, 0));
    let gaps = p.missing_credential_denies(home);
    assert_eq!(gaps.len(), CREDENTIAL_STORES.len());
    assert!(gaps.iter().all(|g| g.tool == "*" && g.decision == Expect::Allow), "{gaps:?}");
}

/// A directory under the system's temporary directory, removed when dropped: the broker
/// has no `tempfile` dependency, and these tests need real files only to walk them.
struct TempHome(std::path::PathBuf);

impl TempHome {
    fn new(tag: &str) -> TempHome {
        let dir = std::env::temp_dir().join(format!("bx-broker-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempHome(std::fs::canonicalize(&dir).unwrap())
    }

    /// Writes each file (a path below the home), with its folders.
    fn with(self, files: &[&str]) -> TempHome {
        for rel in files {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "token=not-a-real-secret\n").unwrap();
        }
        self
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The files a search of `root` under `grant` reaches: a walk that, as the runtime's
/// listing does, leaves out every entry the grant refuses (and so all below it).
fn reachable(grant: &bx_broker::Grant, root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if grant.denied_prefix(&path).is_some() {
            continue;
        }
        if path.is_dir() {
            reachable(grant, root, &path, out);
        } else {
            out.push(path.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

/// Backups and editor copies of names the default policy denies (issue 40, class 1).
const BACKUPS: &[&str] = &[
    ".env~",
    ".env.bak",
    ".env.swp",
    ".env.swo",
    "#.env#",
    ".#.env",
    ".env.orig",
    ".env.old",
    "proj/.env.save.1",
    ".netrc~",
    ".netrc.bak",
    ".netrc.~1~",
    "_netrc.old",
    ".pgpass.orig",
    ".pgpass.dpkg-old",
    ".my.cnf copy 2",
    ".npmrc.old",
    ".npmrc-backup",
    ".pypirc.swp",
    ".git-credentials.bak",
    ".vault-token (1)",
    ".ssh.bak/id_ed25519",
    ".aws~/credentials",
    ".config/gcloud.old/credentials.db",
    "backup/.id_rsa.swp",
    "backup/#id_ed25519#",
    "certs/server.pem.bak",
    "certs/client.key~",
    "certs/client.p12.orig",
    ".docker/config.json.bak",
    ".docker/config-old.json",
    ".docker/config (1).json",
    ".docker/config copy.json",
    ".docker/config - Copy.json",
    ".docker/.config.json.swp",
    ".kube.orig/config",
    ".claude/.credentials.json~",
    ".m2/settings.xml.orig",
    ".m2/settings_BACKUP_4242.xml",
    "proj/.git/config.lock",
    "proj/.git/config~",
    ".config/google-chrome/Default/Cookies-journal",
    ".config/google-chrome/Default/Login Data-journal",
    ".mozilla/firefox/abc.default/key4.db-wal",
    ".mozilla/firefox/abc.default/logins-backup.json",
    ".bash_history.1",
    ".zsh_history.bak",
];

/// Per-directory environment files (issue 40, class 2).
const ENV_FILES: &[&str] = &[
    ".envrc",
    "proj/.envrc",
    "proj/.envrc.local",
    "proj/.envrc.private",
    "proj/.env.local",
    "proj/.env-staging",
    "proj/.env_prod",
    "proj/deploy/production.env",
    "proj/.envs/.production/.django",
    "proj/worker/.dev.vars",
    "proj/.secrets",
];

/// Package managers' and build tools' logins (issue 40, class 3).
const BUILD_LOGINS: &[&str] = &[
    ".gradle/gradle.properties",
    ".gradle/init.gradle",
    ".gradle/init.gradle.kts",
    ".gradle/init.d/repos.gradle",
    "proj/gradle.properties",
    "proj/app/gradle.properties",
    ".gitconfig",
    ".gitconfig.local",
    ".gitconfig-work",
    ".config/git/config",
    ".config/git/ignore",
    ".git-credentials",
    ".config/git/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".npmrc",
    "proj/.npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    "proj/.yarnrc.yml",
    ".bunfig.toml",
    ".pypirc",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    "AppData/Roaming/pip/pip.ini",
    ".config/pypoetry/auth.toml",
    ".local/share/uv/credentials/credentials.toml",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".bundle/config",
    "proj/.bundle/config",
    ".nuget/NuGet/NuGet.Config",
    ".config/NuGet/NuGet.Config",
    ".sbt/.credentials",
    ".ivy2/.credentials",
    ".config/composer/auth.json",
    ".composer/auth.json",
    ".config/hub",
    ".config/gh/hosts.yml",
    ".terraformrc",
    ".terraform.d/credentials.tfrc.json",
    ".docker/config.json",
    ".kube/config",
    ".config/helm/repositories.yaml",
    ".config/helm/registry/config.json",
    ".pulumi/credentials.json",
    ".jfrog/jfrog-cli.conf.v6",
    ".config/dart/pub-tokens.json",
];

/// What sits beside them and stays readable: a search of the home reaches exactly these.
const NEIGHBOURS: &[&str] = &[
    "README.md",
    ".bashrc",
    ".cargo/config.toml",
    ".gradle/wrapper/dists/gradle-8.5-bin/gradle-8.5-bin.zip.ok",
    ".m2/repository/org/example/lib/1.0/lib-1.0.pom",
    "notes/todo.md",
    "notes/todo.md~",
    "notes/todo.old.md",
    "notes/env-setup.md",
    "proj/README.md",
    "proj/build.gradle",
    "proj/build.gradle.kts",
    "proj/settings.gradle",
    "proj/gradlew",
    "proj/gradle/wrapper/gradle-wrapper.properties",
    "proj/app/build.gradle",
    "proj/app/src/main/java/App.java",
    "proj/src/credentials.rs",
    "proj/src/env.rs",
    "proj/src/id_map.rs",
    "proj/src/locales/en/auth.json",
    "proj/src/config.old.json",
    "proj/docs/environment.md",
    "proj/package.json",
    "proj/Cargo.toml",
    "proj/Cargo.lock",
    "proj/.gitignore",
    "proj/.git/HEAD",
    "proj/.github/workflows/ci.yml",
];

/// Regression (issue 40): with the default policy and the workspace at the owner's home,
/// fs.read and fs.search read `.env~` beside a refused `.env`, direnv's `.envrc`,
/// Gradle's `~/.gradle/gradle.properties` and `~/.gitconfig` without a prompt. Every
/// backup or editor copy of a denied name, every per-directory environment file and
/// every package manager's or build tool's login is now refused at every taint, and a
/// search of the home reaches exactly the files beside them.
#[test]
fn the_default_policy_refuses_backups_env_files_and_build_logins_in_a_home() {
    let files: Vec<&str> = [BACKUPS, ENV_FILES, BUILD_LOGINS, NEIGHBOURS]
        .iter()
        .flat_map(|l| l.iter().copied())
        .collect();
    let home = TempHome::new("home").with(&files);
    let root = home.0.display().to_string();
    let p = default_at(&root);
    for rel in BACKUPS.iter().chain(ENV_FILES).chain(BUILD_LOGINS) {
        let path = format!("{root}/{rel}");
        for tool in ["fs.read", "fs.search"] {
            for taint in [Label::CLEAN, Label::TOP] {
                let got = outcome_at(&p, taint, &call(tool, vec![read(&path)]));
                let want = format!("deny: read {path} is refused by deny[");
                assert!(got.starts_with(&want), "{tool} {rel} at {taint}: {got}");
            }
        }
    }
    for rel in NEIGHBOURS {
        let path = format!("{root}/{rel}");
        for tool in ["fs.read", "fs.search"] {
            assert_eq!(outcome(&p, &call(tool, vec![read(&path)])), "allow", "{tool} {rel}");
        }
    }
    let Decision::Allow(search) = decide(&p, Label::CLEAN, &call("fs.search", vec![read(&root)]))
    else {
        panic!("a search of the home workspace runs")
    };
    let mut got = Vec::new();
    reachable(&search, &home.0, &home.0, &mut got);
    let mut want: Vec<String> = NEIGHBOURS.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

/// Regression (issue 40): a name the owner denies also refuses its backup and editor
/// spellings (`diary.txt~`, `diary.bak.txt`, `#diary.txt#`, `.diary.txt.swp`), in their
/// own rules too, and an `[[ask]]` rule asks about them; other names stay as they were.
#[test]
fn an_owners_name_rule_covers_the_names_backup_and_editor_spellings() {
    let text = "[[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"read\"\nlabel = \"public/trusted\"\n\n\
                [[grant]]\ntool = \"*\"\npath = \"/w\"\nmode = \"write\"\nlabel = \"public/trusted\"\n\n\
                [[deny]]\ntool = \"*\"\nname = [\"diary.txt\", \"vault\"]\n\n\
                [[ask]]\ntool = \"*\"\nmode = \"write\"\nname = \"Makefile\"\n";
    let p = Policy::parse("p.toml", text).unwrap();
    for (path, by) in [
        ("/w/diary.txt", "diary.txt"),
        ("/w/a/diary.txt~", "diary.txt"),
        ("/w/diary.txt.bak", "diary.txt"),
        ("/w/Diary.TXT.OLD", "diary.txt"),
        ("/w/diary.bak.txt", "diary.txt"),
        ("/w/diary (2).txt", "diary.txt"),
        ("/w/diary copy.txt", "diary.txt"),
        ("/w/#diary.txt#", "diary.txt"),
        ("/w/.diary.txt.swp", "diary.txt"),
        ("/w/diary.txt.~3~", "diary.txt"),
        ("/w/diary.txt.orig.swp", "diary.txt"),
        ("/w/vault.bak/key", "vault"),
        ("/w/vault~", "vault"),
    ] {
        let got = outcome(&p, &call("fs.read", vec![read(path)]));
        assert_eq!(got, format!("deny: read {path} is refused by deny[0] (line 13), name {by}"));
    }
    for path in ["/w/diary.md", "/w/diary.txt.md", "/w/mydiary.txt", "/w/vaults", "/w/vault.rs"] {
        assert_eq!(outcome(&p, &call("fs.read", vec![read(path)])), "allow", "{path}");
    }
    for path in ["/w/Makefile", "/w/Makefile.orig", "/w/sub/#Makefile#"] {
        let got = outcome(&p, &call("fs.write", vec![write(path)]));
        assert!(got.starts_with("ask: "), "{path}: {got}");
    }
    assert_eq!(outcome(&p, &call("fs.write", vec![write("/w/Makefile.am")])), "allow");
}
