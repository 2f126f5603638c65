//! Backup and copy spellings of a file name: the names a path component may be a copy
//! of (`.env~`, `#.env#`, `.env.swp`, `config (1).json` are copies of `.env` and
//! `config.json`), so that a name rule covers its copies too.
//!
//! Editors, package managers, file managers and people keep copies of a file beside it
//! under a few fixed spellings; a copy of a secret is the same secret. Every name rule
//! (`[[deny]]` and `[[ask]]`, the default policy's and the owner's) matches a component
//! when the component or any name it is a copy of matches. The spellings, all compared
//! ignoring ASCII case, with `N` the name a copy is of (`docs/policy.md` lists them too,
//! under "Backups and copies of a name"):
//! - a tag at the end, after `.`, `-`, `_` or a space: a word of [`COPY_WORDS`]
//!   (`N.bak`, `N-old`, `N_backup`, `N copy`, `N.orig`, `N.save`, `N-journal`), the same
//!   followed by digits (`N.bak2`), or digits alone (`N.1`, `N-20240101`, `N copy 2`);
//!   ` (digits)` (`N (1)`); a Windows ` - Copy` (`N - Copy`); a package manager's
//!   [`PACKAGE_TAGS`] (`N.dpkg-old`, `N.rpmsave`);
//! - the same tag before the last extension (`config-old.json`, `settings.bak.xml`,
//!   `config (1).json`, `config - Copy.json` are copies of `config.json`);
//! - `N~` and `N.~digits~` (Emacs, vim, gedit), `#N#` and `.#N` (Emacs);
//! - vim's and Kate's swap files: `.N.swp` (and `.swo`, `.swn`, any `.sw` and a letter),
//!   `N.swp` for a name that starts with `.`, `.N.kate-swp`.
//!
//! Copies of copies count (`.env.bak~`, `.env.orig.swp`). A component longer than
//! [`MAX_NAME_BYTES`], or with more than [`MAX_SPELLINGS`] such spellings, is taken to
//! match every name rule: bx cannot tell what it is a copy of, and refuses (fail closed).

use std::borrow::Cow;

/// The most names one path component is unwrapped into (itself included). With
/// [`MAX_NAME_BYTES`] this bounds the work an adversarial component (`x.bak.bak.bak…`
/// from the model) costs on every decision and every listed entry. A component with more
/// spellings than this matches every name rule, so that piling up tags cannot hide a
/// name. 64 leaves room for every real file name (a copy of a copy of a dated backup has
/// a handful).
pub(crate) const MAX_SPELLINGS: usize = 64;

/// The longest component that is unwrapped; a longer one matches every name rule.
/// Without it a path argument of megabytes from the model would be copied and scanned
/// [`MAX_SPELLINGS`] times on every decision. No file system holds a longer name (Linux's
/// `NAME_MAX` is 255 bytes, APFS's 255 UTF-16 units at most 765 bytes of UTF-8), so only
/// a path that cannot be opened anyway is refused by it.
pub(crate) const MAX_NAME_BYTES: usize = 1024;

/// Words that, as a tag after a separator (`.`, `-`, `_`, a space), mark a backup, a
/// temporary or a second copy of a file: editors' and merge tools' copies, what people
/// name a copy by hand, and SQLite's journals beside a database (`Cookies-journal`,
/// `key4.db-wal`), which hold its pages.
pub(crate) const COPY_WORDS: &[&str] = &[
    "bak", "bck", "bk", "bkp", "bkup", "backup", "old", "orig", "original", "prev", "previous",
    "save", "saved", "sav", "copy", "tmp", "temp", "new", "lock", "rej", "local", "base", "remote",
    "journal", "wal", "shm", "rpmsave", "rpmnew", "rpmorig", "pacsave", "pacnew",
];

/// Package managers' two-part tags at the end of a name (Debian's dpkg and ucf keep the
/// previous or the packaged version of a configuration file under them).
pub(crate) const PACKAGE_TAGS: &[&str] = &[
    ".dpkg-old",
    ".dpkg-dist",
    ".dpkg-new",
    ".dpkg-bak",
    ".dpkg-tmp",
    ".ucf-old",
    ".ucf-dist",
    ".ucf-new",
];

/// The names a path component may be a copy of, the component itself first.
#[derive(Debug)]
pub(crate) struct Spellings<'a> {
    names: Vec<Cow<'a, str>>,
    /// Longer than [`MAX_NAME_BYTES`] or more than [`MAX_SPELLINGS`] spellings: matches
    /// every pattern component.
    unknown: bool,
}

impl<'a> Spellings<'a> {
    /// Unwraps `name` into every name it is a copy of, breadth first, up to
    /// [`MAX_SPELLINGS`].
    pub(crate) fn of(name: Cow<'a, str>) -> Spellings<'a> {
        if name.len() > MAX_NAME_BYTES {
            return Spellings { names: vec![name], unknown: true };
        }
        let mut names = vec![name];
        let mut next = 0;
        while next < names.len() {
            for base in unwrap_once(&names[next]) {
                if base.is_empty() || names.iter().any(|n| *n == base) {
                    continue;
                }
                if names.len() == MAX_SPELLINGS {
                    return Spellings { names, unknown: true };
                }
                names.push(Cow::Owned(base));
            }
            next += 1;
        }
        Spellings { names, unknown: false }
    }

    /// Whether any of the names satisfies `matches`; always, past the bounds.
    pub(crate) fn any(&self, matches: impl Fn(&str) -> bool) -> bool {
        self.unknown || self.names.iter().any(|n| matches(n))
    }
}

/// Every name `c` is one layer of copy of: a tag, a wrapper or a swap spelling taken off.
fn unwrap_once(c: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Emacs' numbered backup `N.~12~`, then any `N~`.
    if let Some(body) = c.strip_suffix('~') {
        if let Some(at) = body.rfind(".~")
            && at + 2 < body.len()
            && body[at + 2..].bytes().all(|b| b.is_ascii_digit())
        {
            out.push(body[..at].to_owned());
        }
        out.push(body.to_owned());
    }
    // Emacs' autosave `#N#` and lock `.#N`.
    if c.len() > 2 && c.starts_with('#') && c.ends_with('#') {
        out.push(c[1..c.len() - 1].to_owned());
    }
    if let Some(body) = c.strip_prefix(".#") {
        out.push(body.to_owned());
    }
    // Swap files: vim's `.N.swp` (`N.swp` when N starts with a dot), Kate's `.N.kate-swp`.
    if let Some(body) = swap_body(c) {
        out.push(body.to_owned());
        if let Some(bare) = body.strip_prefix('.') {
            out.push(bare.to_owned());
        }
    }
    match strip_tag(c) {
        // A tag at the end.
        Some(base) => out.push(base.to_owned()),
        // A tag before the last extension, when that is a real extension (not a tag
        // itself, which the line above takes off first): `config-old.json`,
        // `config (1).json`. So a name of many tags (`x.2024.01.31.10.30`) unwraps
        // one tag at a time, not into every subsequence of its tags.
        None => {
            if let Some(dot) = c.rfind('.').filter(|d| *d > 0) {
                let (stem, ext) = c.split_at(dot);
                if let Some(base) = strip_tag(stem) {
                    out.push(format!("{base}{ext}"));
                }
            }
        }
    }
    out
}

/// `c` without a vim or Kate swap suffix (`.swp`, `.swo`, any `.sw` and a letter;
/// `.kate-swp`), if it has one.
fn swap_body(c: &str) -> Option<&str> {
    let b = c.as_bytes();
    let n = b.len();
    if n > 4
        && b[n - 4] == b'.'
        && b[n - 3..n - 1].eq_ignore_ascii_case(b"sw")
        && b[n - 1].is_ascii_alphabetic()
    {
        return Some(&c[..n - 4]);
    }
    strip_suffix_ignore_case(c, ".kate-swp")
}

/// `c` without its copy tag at the end (see the module's list), if it has one; never
/// empty.
fn strip_tag(c: &str) -> Option<&str> {
    let base = tag_base(c)?;
    // Windows names a copy `N - Copy`: take the ` -` off with the word.
    let base = base.strip_suffix(" -").unwrap_or(base);
    (!base.is_empty()).then_some(base)
}

fn tag_base(c: &str) -> Option<&str> {
    if let Some(base) = PACKAGE_TAGS.iter().find_map(|t| strip_suffix_ignore_case(c, t)) {
        return Some(base);
    }
    // ` (2)`, `(2)`.
    if let Some(open) = c.strip_suffix(')').and_then(|body| body.rfind('(')) {
        let digits = &c[open + 1..c.len() - 1];
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Some(c[..open].trim_end_matches(' '));
        }
    }
    let sep = c.rfind(['.', '-', '_', ' '])?;
    let tag = &c[sep + 1..];
    let word = tag.trim_end_matches(|ch: char| ch.is_ascii_digit());
    let is_tag = if word.is_empty() {
        !tag.is_empty()
    } else {
        COPY_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word))
    };
    is_tag.then(|| &c[..sep])
}

fn strip_suffix_ignore_case<'c>(c: &'c str, suffix: &str) -> Option<&'c str> {
    let at = c.len().checked_sub(suffix.len())?;
    (c.is_char_boundary(at) && c[at..].eq_ignore_ascii_case(suffix)).then(|| &c[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(c: &str) -> Vec<String> {
        let s = Spellings::of(Cow::Borrowed(c));
        assert!(!s.unknown, "{c}");
        s.names.iter().map(|n| n.to_string()).collect()
    }

    fn copy_of(c: &str, name: &str) -> bool {
        names(c).iter().any(|n| n == name)
    }

    #[test]
    fn a_copy_is_unwrapped_to_the_name_it_copies() {
        for (copy, name) in [
            (".env~", ".env"),
            (".env.bak", ".env"),
            (".env.BAK", ".env"),
            (".env.swp", ".env"),
            (".env.swo", ".env"),
            ("#.env#", ".env"),
            (".#.env", ".env"),
            (".env.orig", ".env"),
            (".env.save.1", ".env"),
            (".env.bak~", ".env"),
            (".env.~12~", ".env"),
            (".id_rsa.swp", "id_rsa"),
            (".id_rsa.kate-swp", "id_rsa"),
            ("id_rsa (1)", "id_rsa"),
            ("id_rsa(2)", "id_rsa"),
            ("id_rsa copy", "id_rsa"),
            ("id_rsa copy 2", "id_rsa"),
            ("id_rsa - Copy", "id_rsa"),
            ("id_rsa_backup", "id_rsa"),
            ("id_rsa-old2", "id_rsa"),
            (".pgpass.dpkg-old", ".pgpass"),
            (".netrc.rpmsave", ".netrc"),
            ("config-old.json", "config.json"),
            ("config (1).json", "config.json"),
            ("config - Copy.json", "config.json"),
            ("config copy.json", "config.json"),
            ("settings.bak.xml", "settings.xml"),
            ("settings_BACKUP_4242.xml", "settings.xml"),
            ("logins-backup.json", "logins.json"),
            ("Cookies-journal", "Cookies"),
            ("key4.db-wal", "key4.db"),
            ("config.lock", "config"),
            (".bash_history.1", ".bash_history"),
            ("credentials.2024-01-31", "credentials"),
        ] {
            assert!(copy_of(copy, name), "{copy} -> {name}: {:?}", names(copy));
        }
    }

    #[test]
    fn other_names_are_only_themselves() {
        for name in [
            ".env",
            "README.md",
            "build.gradle",
            "gradle.properties",
            "main.rs",
            ".tmp12345",
            "id_map.rs",
            "Cargo.lock",
            ".bak",
            "~",
            "#",
            "##",
            ".#",
            "(1)",
            " - Copy",
            "x.p12",
            "notes.md",
            "v1.2",
            "environment.md",
        ] {
            let got = names(name);
            // What is left after a tag is never the empty name.
            assert!(got.iter().all(|n| !n.is_empty()), "{name}: {got:?}");
            assert!(got.len() <= 2, "{name}: {got:?}");
        }
        assert_eq!(names("README.md"), ["README.md"]);
        assert_eq!(names("build.gradle"), ["build.gradle"]);
        assert_eq!(names(".tmp12345"), [".tmp12345"]);
        assert_eq!(names("Cargo.lock"), ["Cargo.lock", "Cargo"]);
        // Not a copy: a word that is no tag, a template, an environment's own name.
        for (name, not) in [
            (".env.example", ".env"),
            ("config.json5", "config.json"),
            ("gradle.properties.md", "gradle.properties"),
            ("notes.key.txt", "notes.key"),
            ("diary.rs", "diary"),
        ] {
            assert!(!copy_of(name, not), "{name} is no copy of {not}");
        }
    }

    #[test]
    fn a_pile_of_tags_past_the_bound_matches_everything() {
        let piled = format!("x{}", ".bak".repeat(MAX_SPELLINGS));
        let s = Spellings::of(Cow::Owned(piled));
        assert!(s.unknown);
        assert!(s.any(|_| false));
        // A name longer than any file system holds is not unwrapped at all.
        let long = "a".repeat(MAX_NAME_BYTES + 1);
        let s = Spellings::of(Cow::Borrowed(&long));
        assert!(s.unknown && s.names.len() == 1);
        let longest = "~".repeat(MAX_NAME_BYTES);
        assert!(Spellings::of(Cow::Borrowed(&longest)).unknown, "cut off at 64 spellings");
        assert!(!Spellings::of(Cow::Borrowed(&"a".repeat(MAX_NAME_BYTES))).unknown);
        // Many tags unwrap one at a time: a dated name is far from the bound.
        assert_eq!(names("metrics.2024.01.31.10.30.00.123").len(), 8);
        assert_eq!(names("photo.2024.01.31.10.30.00.123.jpg").len(), 8);
    }

    #[test]
    fn non_ascii_names_are_cut_on_character_boundaries() {
        assert!(copy_of("é.bak", "é"));
        assert!(copy_of("clé (1).json", "clé.json"));
        assert_eq!(names("ключ"), ["ключ"]);
        assert_eq!(names("é"), ["é"]);
    }
}
