//! Reading a policy file: the raw TOML shapes, each rule checked against its span, and
//! the caret snippets every error carries (located and rendered by [`crate::SourceLines`]).

use std::path::Path;

use toml::Spanned;

use super::*;
use crate::label::{Confidentiality, Integrity, Label, LabelError};
use crate::name::NamePattern;
use crate::net::HostRule;
use crate::path::normalize;

/// The most calls a minute a `[[limit]]` may allow.
const MAX_PER_MINUTE: u32 = 100_000;

struct Source<'a> {
    file: &'a str,
    lines: crate::SourceLines<'a>,
}

impl<'a> Source<'a> {
    fn new(file: &'a str, text: &'a str) -> Source<'a> {
        Source { file, lines: crate::SourceLines::new(text) }
    }

    /// The 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.lines.line_of(offset)
    }

    fn error(
        &self,
        span: std::ops::Range<usize>,
        rule: &str,
        message: impl Into<String>,
    ) -> PolicyError {
        let at = self.lines.locate(span);
        PolicyError {
            file: self.file.to_owned(),
            line: at.line,
            column: at.column,
            rule: rule.to_owned(),
            message: message.into(),
            snippet: at.snippet,
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    grant: Vec<Spanned<RawGrant>>,
    #[serde(default)]
    deny: Vec<Spanned<RawDeny>>,
    #[serde(default)]
    ask: Vec<Spanned<RawAsk>>,
    #[serde(default)]
    example: Vec<Spanned<RawExample>>,
    #[serde(default)]
    secret: Vec<Spanned<RawSecret>>,
    #[serde(default)]
    limit: Vec<Spanned<RawLimit>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    tool: Spanned<String>,
    per_minute: Spanned<i64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    name: Spanned<String>,
    tool: Spanned<String>,
    host: Spanned<RawNames>,
    #[serde(default)]
    header: Option<std::collections::BTreeMap<String, Spanned<String>>>,
    #[serde(default)]
    query: Option<std::collections::BTreeMap<String, Spanned<String>>>,
    #[serde(default)]
    env: Option<Spanned<RawNames>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    tool: Spanned<String>,
    path: Option<Spanned<String>>,
    host: Option<Spanned<String>>,
    mode: Spanned<String>,
    label: Option<Spanned<String>>,
    when_tainted: Option<Spanned<String>>,
    when_clean: Option<Spanned<String>>,
    approver: Option<Spanned<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeny {
    tool: Spanned<String>,
    path: Option<Spanned<String>>,
    host: Option<Spanned<String>>,
    name: Option<Spanned<RawNames>>,
    mode: Option<Spanned<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAsk {
    tool: Spanned<String>,
    name: Spanned<RawNames>,
    mode: Spanned<String>,
}

/// `name = ".env"` or `name = [".env", ".git/config"]`, each name with its own span.
enum RawNames {
    One(String),
    Many(Vec<Spanned<String>>),
}

impl<'de> serde::Deserialize<'de> for RawNames {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawNames, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawNames;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a name or an array of names")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawNames, E> {
                Ok(RawNames::One(v.to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RawNames, A::Error> {
                let mut names = Vec::new();
                while let Some(n) = seq.next_element::<Spanned<String>>()? {
                    names.push(n);
                }
                Ok(RawNames::Many(names))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// Parses a rule's `name`: every name, each error at its own span. `None` when any
/// name (or the list) is invalid; the errors say why.
fn names_rule(
    src: &Source<'_>,
    raw: &Spanned<RawNames>,
    rule: &str,
    errors: &mut Vec<PolicyError>,
) -> Option<Vec<NamePattern>> {
    let before = errors.len();
    let mut out = Vec::new();
    let mut one =
        |text: &str, span: std::ops::Range<usize>, at: String| match NamePattern::parse(text) {
            Ok(n) => out.push(n),
            Err(e) => errors.push(src.error(span, &at, e.to_string())),
        };
    match raw.get_ref() {
        RawNames::One(text) => one(text, raw.span(), format!("{rule}.name")),
        RawNames::Many(list) if list.is_empty() => {
            errors.push(src.error(
                raw.span(),
                &format!("{rule}.name"),
                "an empty list names nothing",
            ));
        }
        RawNames::Many(list) => {
            for (i, n) in list.iter().enumerate() {
                one(n.get_ref(), n.span(), format!("{rule}.name[{i}]"));
            }
        }
    }
    (errors.len() == before).then_some(out)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExample {
    tool: Spanned<String>,
    read: Option<Spanned<String>>,
    write: Option<Spanned<String>>,
    fetch: Option<Spanned<String>>,
    taint: Option<Spanned<String>>,
    workspace: Option<Spanned<String>>,
    expect: Spanned<String>,
}

/// Parses `"private/untrusted"`.
pub fn parse_label(text: &str) -> Result<Label, LabelError> {
    let (c, i) = text.split_once('/').ok_or(LabelError::Shape)?;
    let confidentiality = match c {
        "public" => Confidentiality::Public,
        "private" => Confidentiality::Private,
        "secret" => Confidentiality::Secret,
        _ => return Err(LabelError::Confidentiality(c.to_owned())),
    };
    let integrity = match i {
        "trusted" => Integrity::Trusted,
        "untrusted" => Integrity::Untrusted,
        _ => return Err(LabelError::Integrity(i.to_owned())),
    };
    Ok(Label { confidentiality, integrity })
}

fn tool_match(
    src: &Source<'_>,
    raw: &Spanned<String>,
    rule: &str,
    errors: &mut Vec<PolicyError>,
) -> Option<ToolMatch> {
    let name = raw.get_ref();
    if name == "*" {
        return Some(ToolMatch::Any);
    }
    let valid = |n: &str| {
        !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    if let Some(prefix) = name.strip_suffix(".*")
        && valid(prefix)
    {
        return Some(ToolMatch::Prefix(format!("{prefix}.")));
    }
    if !valid(name) {
        errors.push(src.error(
            raw.span(),
            &format!("{rule}.tool"),
            "a tool name (letters, digits, '.', '_', '-'), \"NAME.*\" for every tool named NAME.…, or \"*\"",
        ));
        return None;
    }
    Some(ToolMatch::Named(name.clone()))
}

fn path_rule(
    src: &Source<'_>,
    raw: &Spanned<String>,
    rule: &str,
    errors: &mut Vec<PolicyError>,
) -> Option<ResourceRule> {
    match rule_path(raw.get_ref()) {
        Ok(ResourceRule::Path(p)) if p == Path::new("/") => {
            errors.push(src.error(
                raw.span(),
                &format!("{rule}.path"),
                "a grant of / is invalid: name the directories the tool needs",
            ));
            None
        }
        Ok(r) => Some(r),
        Err(e) => {
            errors.push(src.error(raw.span(), &format!("{rule}.path"), e.to_string()));
            None
        }
    }
}

/// Why a rule's path was refused.
#[derive(Debug, thiserror::Error)]
enum RulePathError {
    /// `{workspace}` somewhere other than the start.
    #[error("{WORKSPACE} may only begin a path")]
    WorkspaceNotFirst,
    /// `{workspace}` followed by something other than `/`.
    #[error("after {WORKSPACE} comes / or the end of the path")]
    AfterWorkspace,
    /// The path itself.
    #[error(transparent)]
    Path(#[from] crate::PathError),
}

/// A rule's path: absolute and normalised, or `{workspace}` with a normalised rest.
fn rule_path(text: &str) -> Result<ResourceRule, RulePathError> {
    let Some(rest) = text.strip_prefix(WORKSPACE) else {
        if text.contains(WORKSPACE) {
            return Err(RulePathError::WorkspaceNotFirst);
        }
        return Ok(ResourceRule::Path(normalize(Path::new(text))?));
    };
    if !rest.is_empty() && !rest.starts_with('/') {
        return Err(RulePathError::AfterWorkspace);
    }
    if rest.contains(WORKSPACE) {
        return Err(RulePathError::WorkspaceNotFirst);
    }
    let under = normalize(&Path::new("/").join(rest.trim_start_matches('/')))?;
    let rest = under.strip_prefix("/").map(Path::to_path_buf).unwrap_or_default();
    Ok(ResourceRule::InWorkspace(rest))
}

fn resource(
    src: &Source<'_>,
    path: Option<&Spanned<String>>,
    host: Option<&Spanned<String>>,
    whole: std::ops::Range<usize>,
    rule: &str,
    errors: &mut Vec<PolicyError>,
) -> Option<ResourceRule> {
    match (path, host) {
        (Some(p), None) => path_rule(src, p, rule, errors),
        (None, Some(h)) => match HostRule::parse(h.get_ref()) {
            Ok(rule) => Some(ResourceRule::Host(rule)),
            Err(e) => {
                errors.push(src.error(h.span(), &format!("{rule}.host"), e.to_string()));
                None
            }
        },
        (Some(_), Some(h)) => {
            errors.push(src.error(h.span(), rule, "give either path or host, not both"));
            None
        }
        (None, None) => {
            errors.push(src.error(whole, rule, "needs a path or a host"));
            None
        }
    }
}

fn one_of<T: Copy>(
    src: &Source<'_>,
    raw: &Spanned<String>,
    rule: &str,
    options: &[(&str, T)],
    errors: &mut Vec<PolicyError>,
) -> Option<T> {
    if let Some((_, v)) = options.iter().find(|(name, _)| name == raw.get_ref()) {
        return Some(*v);
    }
    let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
    errors.push(src.error(
        raw.span(),
        rule,
        format!("{:?} is not one of {}", raw.get_ref(), names.join(", ")),
    ));
    None
}

/// Each name of a `RawNames` with its span.
fn each_name(raw: &Spanned<RawNames>) -> Vec<(String, std::ops::Range<usize>)> {
    match raw.get_ref() {
        RawNames::One(text) => vec![(text.clone(), raw.span())],
        RawNames::Many(list) => list.iter().map(|n| (n.get_ref().clone(), n.span())).collect(),
    }
}

/// One `[[secret]]`: every field checked at its own span. `None` when any is invalid.
fn secret_rule(
    src: &Source<'_>,
    s: &RawSecret,
    index: usize,
    rule: &str,
    errors: &mut Vec<PolicyError>,
) -> Option<crate::SecretBinding> {
    let before = errors.len();
    let name = s.name.get_ref().clone();
    if !crate::valid_secret_name(&name) {
        errors.push(src.error(
            s.name.span(),
            &format!("{rule}.name"),
            "a secret name: 1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit",
        ));
    }
    let tool = tool_match(src, &s.tool, rule, errors);
    let mut hosts = Vec::new();
    let host_list = each_name(&s.host);
    if host_list.is_empty() {
        errors.push(src.error(s.host.span(), &format!("{rule}.host"), "names no host"));
    }
    for (text, span) in host_list {
        match HostRule::parse(&text) {
            Ok(HostRule::AnyName) => errors.push(src.error(
                span,
                &format!("{rule}.host"),
                "a secret goes to hosts named one by one, never to \"*\"",
            )),
            Ok(h) => hosts.push(h),
            Err(e) => errors.push(src.error(span, &format!("{rule}.host"), e.to_string())),
        }
    }
    let mut places = |table: &Option<std::collections::BTreeMap<String, Spanned<String>>>,
                      what: &str,
                      check_key: fn(&str) -> Result<(), crate::secret::SecretRuleError>,
                      lower: bool|
     -> Vec<(String, String)> {
        let mut out = Vec::new();
        let Some(table) = table else { return out };
        for (key, value) in table {
            let at = format!("{rule}.{what}.{key}");
            if let Err(why) = check_key(key) {
                errors.push(src.error(value.span(), &at, why.to_string()));
            }
            if let Err(why) = crate::secret::check_template(&name, value.get_ref()) {
                errors.push(src.error(value.span(), &at, why.to_string()));
            }
            let key = if lower { key.to_ascii_lowercase() } else { key.clone() };
            out.push((key, value.get_ref().clone()));
        }
        out
    };
    // Header names are compared ignoring case; query names keep theirs (servers read
    // them as written).
    let headers = places(&s.header, "header", crate::secret::check_header_name, true);
    let query = places(&s.query, "query", crate::secret::check_query_name, false);
    let mut env = Vec::new();
    if let Some(raw_env) = &s.env {
        for (var, span) in each_name(raw_env) {
            match crate::secret::check_env_name(&var) {
                Ok(()) => env.push(var),
                Err(why) => errors.push(src.error(span, &format!("{rule}.env"), why.to_string())),
            }
        }
    }
    let tool = tool?;
    (errors.len() == before).then_some(crate::SecretBinding {
        index,
        line: 0,
        name,
        tool,
        hosts,
        headers,
        query,
        env,
    })
}

impl Policy {
    /// Parses and validates policy text read from `file` (the name is only for errors).
    /// Returns every error found; the examples are checked last, against the policy.
    pub fn parse(file: &str, text: &str) -> Result<Policy, PolicyErrors> {
        let src = Source::new(file, text);
        crate::toml_shape::check(text)
            .map_err(|(at, why)| PolicyErrors(vec![src.error(at..at + 1, "toml", why)]))?;
        let raw: RawPolicy = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            PolicyErrors(vec![src.error(span, "toml", e.message().trim().to_owned())])
        })?;
        let mut errors = Vec::new();
        let mut policy = Policy::default();
        // (tool, resource, mode) of each grant kept, to refuse duplicates in linear time.
        let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (index, g) in raw.grant.iter().enumerate() {
            let rule = format!("grant[{index}]");
            let whole = g.span();
            let g = g.get_ref();
            let tool = tool_match(&src, &g.tool, &rule, &mut errors);
            let mode = one_of(
                &src,
                &g.mode,
                &format!("{rule}.mode"),
                &[
                    ("read", Mode::Read),
                    ("write", Mode::Write),
                    ("fetch", Mode::Fetch),
                    ("call", Mode::Call),
                ],
                &mut errors,
            );
            // A call grant names a tool and nothing else: the upstream's manifest labels
            // its calls (docs/gateway.md#labels).
            let (res, label) = if mode == Some(Mode::Call) {
                for (field, span) in [
                    ("path", g.path.as_ref().map(Spanned::span)),
                    ("host", g.host.as_ref().map(Spanned::span)),
                    ("label", g.label.as_ref().map(Spanned::span)),
                ] {
                    if let Some(span) = span {
                        errors.push(src.error(
                            span,
                            &format!("{rule}.{field}"),
                            "a call grant names only its tool; the upstream's manifest labels its calls (docs/gateway.md#labels)",
                        ));
                    }
                }
                (Some(ResourceRule::Call), Some(Label::CLEAN))
            } else {
                let res = resource(
                    &src,
                    g.path.as_ref(),
                    g.host.as_ref(),
                    whole.clone(),
                    &rule,
                    &mut errors,
                );
                let label = match &g.label {
                    Some(l) => parse_label(l.get_ref())
                        .map_err(|e| {
                            errors.push(src.error(
                                l.span(),
                                &format!("{rule}.label"),
                                e.to_string(),
                            ))
                        })
                        .ok(),
                    None => {
                        errors.push(src.error(whole.clone(), &rule, "needs a label"));
                        None
                    }
                };
                (res, label)
            };
            let when_tainted = match &g.when_tainted {
                Some(w) => one_of(
                    &src,
                    w,
                    &format!("{rule}.when_tainted"),
                    &[
                        ("allow", OnTainted::Allow),
                        ("ask", OnTainted::Ask),
                        ("deny", OnTainted::Deny),
                    ],
                    &mut errors,
                ),
                None => Some(OnTainted::Ask),
            };
            let when_clean = match &g.when_clean {
                Some(w) => one_of(
                    &src,
                    w,
                    &format!("{rule}.when_clean"),
                    &[("allow", OnTainted::Allow), ("ask", OnTainted::Ask)],
                    &mut errors,
                ),
                None => Some(OnTainted::Allow),
            };
            let approver = match &g.approver {
                Some(a) => one_of(
                    &src,
                    a,
                    &format!("{rule}.approver"),
                    &[("any", Approver::Any), ("owner", Approver::Owner)],
                    &mut errors,
                ),
                None => Some(Approver::Any),
            };
            let is_path = g.path.is_some() && g.host.is_none();
            let is_host = g.host.is_some() && g.path.is_none();
            match (is_path, is_host, mode) {
                (true, _, Some(Mode::Fetch)) => errors.push(src.error(
                    g.mode.span(),
                    &format!("{rule}.mode"),
                    "a path grant's mode is read or write; fetch is for hosts",
                )),
                (_, true, Some(Mode::Read | Mode::Write | Mode::Call)) => errors.push(src.error(
                    g.mode.span(),
                    &format!("{rule}.mode"),
                    "a host grant's mode is fetch",
                )),
                _ => {}
            }
            if let (
                Some(tool),
                Some(resource),
                Some(mode),
                Some(label),
                Some(when_tainted),
                Some(when_clean),
                Some(approver),
            ) = (tool, res, mode, label, when_tainted, when_clean, approver)
            {
                let line = src.line_of(whole.start.min(text.len()));
                let key = format!("{tool}\0{resource}\0{mode:?}");
                if let Some(dup) = seen.get(&key) {
                    errors.push(src.error(
                        whole,
                        &rule,
                        format!("duplicates grant[{dup}] (same tool, resource and mode)"),
                    ));
                    continue;
                }
                seen.insert(key, index);
                policy.grants.push(GrantRule {
                    index,
                    line,
                    tool,
                    resource,
                    mode,
                    label,
                    when_tainted,
                    when_clean,
                    approver,
                });
            }
        }
        for (index, d) in raw.deny.iter().enumerate() {
            let rule = format!("deny[{index}]");
            let whole = d.span();
            let d = d.get_ref();
            let tool = tool_match(&src, &d.tool, &rule, &mut errors);
            // A deny of / is allowed (it refuses everything); only grants of / are invalid.
            // `mode = "call"` alone refuses every call of an upstream tool.
            let res = match (&d.path, &d.host, &d.name) {
                _ if d.mode.is_some() => match (&d.mode, &d.path, &d.host, &d.name) {
                    (Some(m), None, None, None) if m.get_ref() == "call" => {
                        Some(ResourceRule::Call)
                    }
                    (Some(m), ..) => {
                        errors.push(src.error(
                            m.span(),
                            &format!("{rule}.mode"),
                            "a deny takes mode = \"call\" alone, to refuse every call of an upstream tool",
                        ));
                        None
                    }
                    (None, ..) => None,
                },
                (None, None, Some(n)) => {
                    names_rule(&src, n, &rule, &mut errors).map(ResourceRule::Names)
                }
                (_, _, Some(n)) => {
                    errors.push(src.error(n.span(), &rule, "give one of path, host or name"));
                    None
                }
                (Some(p), None, None) => match rule_path(p.get_ref()) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        errors.push(src.error(p.span(), &format!("{rule}.path"), e.to_string()));
                        None
                    }
                },
                (None, None, None) => {
                    errors.push(src.error(
                        whole.clone(),
                        &rule,
                        "needs a path, a host, a name, or mode = \"call\"",
                    ));
                    None
                }
                _ => resource(
                    &src,
                    d.path.as_ref(),
                    d.host.as_ref(),
                    whole.clone(),
                    &rule,
                    &mut errors,
                ),
            };
            if let (Some(tool), Some(resource)) = (tool, res) {
                let line = src.line_of(whole.start.min(text.len()));
                policy.denies.push(DenyRule { index, line, tool, resource });
            }
        }
        for (index, a) in raw.ask.iter().enumerate() {
            let rule = format!("ask[{index}]");
            let whole = a.span();
            let a = a.get_ref();
            let tool = tool_match(&src, &a.tool, &rule, &mut errors);
            let names = names_rule(&src, &a.name, &rule, &mut errors);
            let mode = one_of(
                &src,
                &a.mode,
                &format!("{rule}.mode"),
                &[("read", Mode::Read), ("write", Mode::Write)],
                &mut errors,
            );
            if let (Some(tool), Some(names), Some(mode)) = (tool, names, mode) {
                let line = src.line_of(whole.start.min(text.len()));
                policy.asks.push(AskRule { index, line, tool, names, mode });
            }
        }
        let mut bound: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (index, raw_secret) in raw.secret.iter().enumerate() {
            let rule = format!("secret[{index}]");
            let whole = raw_secret.span();
            if let Some(binding) =
                secret_rule(&src, raw_secret.get_ref(), index, &rule, &mut errors)
            {
                let key = format!("{}\0{}", binding.name, binding.tool);
                if let Some(dup) = bound.get(&key) {
                    errors.push(src.error(
                        whole,
                        &rule,
                        format!("duplicates secret[{dup}] (same secret and tool)"),
                    ));
                    continue;
                }
                bound.insert(key, index);
                let line = src.line_of(whole.start.min(text.len()));
                policy.secrets.push(crate::SecretBinding { line, ..binding });
            }
        }
        for (index, l) in raw.limit.iter().enumerate() {
            let rule = format!("limit[{index}]");
            let whole = l.span();
            let l = l.get_ref();
            let tool = tool_match(&src, &l.tool, &rule, &mut errors);
            let per_minute = match u32::try_from(*l.per_minute.get_ref()) {
                Ok(n @ 1..=MAX_PER_MINUTE) => Some(n),
                _ => {
                    errors.push(src.error(
                        l.per_minute.span(),
                        &format!("{rule}.per_minute"),
                        format!("calls a minute: 1 to {MAX_PER_MINUTE}"),
                    ));
                    None
                }
            };
            if let (Some(tool), Some(per_minute)) = (tool, per_minute) {
                let line = src.line_of(whole.start.min(text.len()));
                policy.limits.push(LimitRule { index, line, tool, per_minute });
            }
        }
        for (index, e) in raw.example.iter().enumerate() {
            let rule = format!("example[{index}]");
            let span = e.span();
            let e = e.get_ref();
            let mut resources = Vec::new();
            if let Some(r) = &e.read {
                resources.push(crate::Resource::PathRead(r.get_ref().clone()));
            }
            if let Some(w) = &e.write {
                resources.push(crate::Resource::PathWrite(w.get_ref().clone()));
            }
            if let Some(f) = &e.fetch {
                resources.push(crate::Resource::Url(f.get_ref().clone()));
            }
            let taint = match &e.taint {
                Some(t) => parse_label(t.get_ref())
                    .map_err(|m| {
                        errors.push(src.error(t.span(), &format!("{rule}.taint"), m.to_string()))
                    })
                    .ok(),
                None => Some(Label::CLEAN),
            };
            let workspace = match &e.workspace {
                Some(w) => match normalize(Path::new(w.get_ref())) {
                    Ok(p) => Some(Some(p)),
                    Err(m) => {
                        errors.push(src.error(
                            w.span(),
                            &format!("{rule}.workspace"),
                            m.to_string(),
                        ));
                        None
                    }
                },
                None => Some(None),
            };
            let expect = one_of(
                &src,
                &e.expect,
                &format!("{rule}.expect"),
                &[("allow", Expect::Allow), ("ask", Expect::Ask), ("deny", Expect::Deny)],
                &mut errors,
            );
            if let (Some(taint), Some(expect), Some(workspace)) = (taint, expect, workspace) {
                policy.examples.push(Example {
                    index,
                    tool: e.tool.get_ref().clone(),
                    resources,
                    taint,
                    workspace,
                    expect,
                    span,
                });
            }
        }
        policy.index_labels();
        if errors.is_empty() {
            for ex in &policy.examples {
                let call = crate::CallRequest {
                    tool: ex.tool.clone(),
                    digest: String::new(),
                    resources: ex.resources.clone(),
                };
                let decided = policy.for_workspace(ex.workspace.as_deref());
                let (got, why) = match crate::decide(&decided, ex.taint, &call) {
                    crate::Decision::Allow(_) => (Expect::Allow, "allowed".to_owned()),
                    crate::Decision::Ask(a) => (Expect::Ask, a.reasons.join("; ")),
                    crate::Decision::Deny(d) => (Expect::Deny, d.message),
                };
                if got != ex.expect {
                    // The reason keeps its case: it quotes the owner's paths.
                    let name = |e: Expect| match e {
                        Expect::Allow => "allow",
                        Expect::Ask => "ask",
                        Expect::Deny => "deny",
                    };
                    let message = format!(
                        "expected {}, the policy decides {}: {why}",
                        name(ex.expect),
                        name(got)
                    );
                    errors.push(src.error(
                        ex.span.clone(),
                        &format!("example[{}]", ex.index),
                        message,
                    ));
                }
            }
        }
        errors.sort_by_key(|e| (e.line, e.column));
        if errors.is_empty() { Ok(policy) } else { Err(PolicyErrors(errors)) }
    }
}
