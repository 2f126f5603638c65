//! The page's HTML, made with maud: every value written into it is escaped for HTML by
//! maud (nothing is written with `PreEscaped`), and every string that came from a model,
//! a tool, a server or the log is first escaped as the terminal escapes it
//! ([`bx_broker::escape_untrusted`]: bidi overrides and other hidden characters shown as
//! `\u{…}`) and bounded. The page has no script at all.

use bx_audit::{Kind, Record};
use bx_protocol::{ApprovalSummary, SessionSummary};
use maud::{DOCTYPE, Markup, html};

use super::gather::{CallRow, SessionView, ToolRow, Verified};

/// The most bytes of one string shown from a record, a tool or a session.
const MAX_SHOWN: usize = 1 << 10;
/// The most bytes of a record's summary in the overview's list.
const MAX_SUMMARY: usize = 300;
/// Width of one call in a session's picture, in pixels.
const CELL: usize = 18;

/// A string from outside bx, as one bounded line of inert text.
fn shown(text: &str) -> String {
    bx_broker::escape_untrusted(&bx_audit::bounded(text, MAX_SHOWN), false)
}

/// A block or arguments from outside bx, newlines kept, as inert text.
fn shown_lines(text: &str) -> String {
    bx_broker::escape_untrusted(text, true)
}

/// A link to session `id`'s page, when the id is one (a session id is letters, digits
/// and `._-`, so it needs no escaping in a path).
fn session_link(id: &str) -> Markup {
    html! {
        @if bx_state::valid_session_id(id) {
            a.session href={ "/session/" (id) } { (shown(id)) }
        } @else {
            (shown(id))
        }
    }
}

/// The frame of every page. `csrf` is the login's form token, for the log-out button.
pub(super) fn page(title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="same-origin";
                title { "bx: " (title) }
                link rel="stylesheet" href="/style.css";
            }
            body {
                header {
                    a.home href="/" { "bx" }
                    span.where { "the owner's page" }
                    @if let Some(csrf) = csrf {
                        form.logout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The login form.
pub(super) fn login(token_path: &str, wrong: bool) -> Markup {
    page(
        "log in",
        None,
        html! {
            h1 { "Log in" }
            @if wrong {
                p.problem #wrong-token { "That is not the token. Nothing was answered." }
            }
            form #login method="post" action="/login" {
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" required;
                button type="submit" { "log in" }
            }
            p {
                "The token is in " code { (token_path) } ", made at the first "
                code { "bx serve --web" } " and readable by its owner alone. Paste it here; "
                "it never goes in a link."
            }
        },
    )
}

/// What happened to a form's request, and the way back.
pub(super) fn outcome(csrf: &str, title: &str, message: &str, ok: bool) -> Markup {
    page(
        title,
        Some(csrf),
        html! {
            h1 { (title) }
            p #outcome class=(if ok { "done" } else { "problem" }) { (shown(message)) }
            p { a href="/" { "back to the page" } }
        },
    )
}

/// An approval's forms: approve by typing its id (with a scope it offers), or refuse
/// with a reason. `seen` is the seal of a block shown in part, once the owner was shown
/// the rest.
fn answer_forms(csrf: &str, a: &ApprovalSummary, seen: Option<&str>) -> Markup {
    let scopes = html! {
        select name="scope" {
            option value="" { "this call only" }
            @for s in &a.scopes {
                option value=(s) { "and later calls within scope " (s) }
            }
        }
    };
    html! {
        form.approve method="post" action="/approve" {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="approval" value=(a.approval);
            @if let Some(seen) = seen {
                input type="hidden" name="seen" value=(seen);
            }
            label { "Type its id to approve it: "
                input.typed type="text" name="typed" autocomplete="off" spellcheck="false" required; }
            (scopes)
            button type="submit" { "approve" }
        }
        form.refuse method="post" action="/refuse" {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="approval" value=(a.approval);
            label { "Or refuse it: "
                input.reason type="text" name="reason" maxlength="1000" placeholder="why (the model reads it)"; }
            (scopes)
            button type="submit" { "refuse" }
        }
    }
}

/// One waiting call: its whole block and how to answer it.
fn approval(csrf: &str, a: &ApprovalSummary) -> Markup {
    html! {
        section.approval id={ "approval-" (a.approval) } {
            h3 {
                "Approval " code.id { (a.approval) } ": " code { (shown(&a.tool)) }
                " in session " (session_link(&a.session))
            }
            p.expires { "expires in " (a.expires_in_s) " s" }
            pre.block { (shown_lines(&a.block)) }
            p { a href={ "/approval/" (a.approval) } { "its whole arguments" } }
            (answer_forms(csrf, a, None))
        }
    }
}

/// The overview's parts, each what was gathered or why it could not be.
pub(super) struct Overview {
    pub(super) approvals: anyhow::Result<(Vec<ApprovalSummary>, u64)>,
    pub(super) sessions: anyhow::Result<Vec<SessionSummary>>,
    pub(super) records: anyhow::Result<Vec<Record>>,
    /// The latest verification of the log, and when it was made.
    pub(super) verified: anyhow::Result<(std::time::Instant, std::sync::Arc<Verified>)>,
    pub(super) tools: anyhow::Result<Vec<ToolRow>>,
}

fn failed(e: &anyhow::Error) -> Markup {
    html! { p.problem { (shown(&format!("{e:#}"))) } }
}

/// The overview: calls waiting, sessions, the log, the tools.
pub(super) fn overview(csrf: &str, o: &Overview) -> Markup {
    page(
        "overview",
        Some(csrf),
        html! {
            section #waiting {
                h2 { "Calls waiting" }
                @match &o.approvals {
                    Err(e) => (failed(e)),
                    Ok((items, more)) => {
                        @if items.is_empty() { p.none { "No call waits." } }
                        @for a in items { (approval(csrf, a)) }
                        @if *more > 0 { p { (more) " more wait than one listing holds; answer some and reload." } }
                    }
                }
                p { a href="/" { "reload" } }
            }
            section #sessions {
                h2 { "Sessions" }
                @match &o.sessions {
                    Err(e) => (failed(e)),
                    Ok(items) => {
                        @if items.is_empty() { p.none { "No sessions." } }
                        table {
                            tr { th { "session" } th { "taint" } th { "turn" } th { "works in" } }
                            @for s in items {
                                tr {
                                    td { (session_link(&s.session)) }
                                    td.taint { (shown(&s.taint)) }
                                    td { @if s.busy { "running" } @else { "idle" } }
                                    td { @if let Some(w) = &s.workspace { code { (shown(w)) } } }
                                }
                            }
                        }
                    }
                }
            }
            section #audit {
                h2 { "The audit log" }
                @match &o.verified {
                    Err(e) => (failed(e)),
                    Ok((at, v)) => (verified(v, at.elapsed().as_secs())),
                }
                @match &o.records {
                    Err(e) => (failed(e)),
                    Ok(records) => {
                        h3 { "The latest " (records.len()) " records" }
                        table.records {
                            tr { th { "seq" } th { "time" } th { "kind" } th { "session" } th { "what" } }
                            @for r in records {
                                tr {
                                    td { (r.seq) }
                                    td { (shown(&r.time)) }
                                    td { (kind_name(r.kind)) }
                                    td { (session_link(field(r, "session"))) }
                                    td.what { (summary(r)) }
                                }
                            }
                        }
                    }
                }
            }
            section #tools {
                h2 { "Tools" }
                @match &o.tools {
                    Err(e) => (failed(e)),
                    Ok(rows) => {
                        @if rows.is_empty() { p.none { "No tools installed." } }
                        table.tools {
                            tr { th { "tool" } th { "kind" } th { "digest" } th { "source" } th { "signed by" } th { "reach" } }
                            @for t in rows {
                                tr {
                                    td { code { (shown(&t.name)) } }
                                    td { (t.kind) }
                                    td.digest { code { (shown(&t.digest)) } }
                                    td { (t.source.as_deref().map_or_else(|| "-".to_owned(), shown)) }
                                    td { (t.signer.as_deref().map_or_else(|| "no signature was required".to_owned(), shown)) }
                                    td { ul { @for r in &t.reach { li { (shown(r)) } } } }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

fn verified(v: &Verified, age_s: u64) -> Markup {
    html! {
        p #verified class=(if v.clean { "done" } else { "problem" }) {
            @if v.clean { "bx audit verify: the log verifies" } @else { "bx audit verify: the log does NOT verify (see docs/runbook.md#audit-broken)" }
            ": " (v.records) " records"
            @if let Some(head) = v.head { ", head at seq " (head) }
            " (checked " (age_s) " s ago)."
        }
        @if !v.problems.is_empty() {
            ul.problems { @for p in &v.problems { li { (shown(p)) } } }
            @if v.problems_more > 0 { p { "and " (v.problems_more) " more; run bx audit verify" } }
        }
        @for n in &v.notes { p.note { "note: " (shown(n)) } }
    }
}

fn kind_name(kind: Kind) -> String {
    serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

fn field<'r>(r: &'r Record, name: &str) -> &'r str {
    r.fields.get(name).and_then(|v| v.as_str()).unwrap_or_default()
}

/// One record in a line: what it says, bounded and escaped.
fn summary(r: &Record) -> String {
    let f = |name: &str| field(r, name);
    let text = match r.kind {
        Kind::Request => format!("{} {} {}", f("call"), f("tool"), f("args")),
        Kind::Decision => {
            format!("{} {} at taint {} {}", f("call"), f("decision"), f("taint"), f("why"))
        }
        Kind::Approval => {
            let by = r
                .fields
                .get("by")
                .and_then(|b| b.pointer("/reviewer/command"))
                .and_then(|c| c.as_str());
            format!(
                "{} {} by {} {}",
                f("call"),
                f("answer"),
                by.map_or_else(|| "the owner".to_owned(), |c| format!("the reviewer {c}")),
                f("reason")
            )
        }
        Kind::Result => format!("{} {} {}", f("call"), f("status"), f("label")),
        _ => serde_json::Value::Object(r.fields.clone()).to_string(),
    };
    bx_broker::escape_untrusted(&bx_audit::bounded(&text, MAX_SUMMARY), false)
}

/// A session's page: its taint and where it came from, its scoped answers (each
/// revocable), and its picture.
pub(super) fn session(csrf: &str, id: &str, s: &SessionView) -> Markup {
    page(
        id,
        Some(csrf),
        html! {
            h1 { "Session " code { (shown(id)) } }
            p { "Taint: " span #taint { (shown(&s.taint)) } }
            @if let Some(w) = &s.workspace { p { "Works in " code { (shown(w)) } } }
            @if let Some(d) = &s.damage { p.problem { (shown(d)) " (see docs/runbook.md#session-state-damaged)" } }
            @if !s.taint_from.is_empty() {
                ul.taint-from { @for t in &s.taint_from { li { "taint from " (shown(t)) } } }
            }
            h2 { "Scoped answers" }
            @if s.scopes.is_empty() { p.none #no-scopes { "No scoped answers." } }
            @else {
                table #scopes {
                    tr { th { "answer" } th { "covers" } th { "state" } th {} }
                    @for sc in &s.scopes {
                        tr.scope {
                            td { code { (shown(&sc.id)) } }
                            td { (shown(&sc.what)) }
                            td { (shown(&sc.state)) }
                            td {
                                form.revoke method="post" action="/revoke" {
                                    input type="hidden" name="csrf" value=(csrf);
                                    input type="hidden" name="session" value=(id);
                                    input type="hidden" name="answer" value=(sc.id);
                                    button type="submit" { "revoke" }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Its calls" }
            (picture(s))
            @if s.calls_more > 0 { p { "and " (s.calls_more) " earlier calls, not drawn (bx audit show --session)" } }
            (calls_table(&s.calls))
        },
    )
}

/// Confidentiality and integrity of a taint written `conf/integrity`, as classes.
fn taint_classes(taint: &str) -> (String, String) {
    let (c, i) = taint.split_once('/').unwrap_or(("", ""));
    let known =
        |v: &str, of: &[&str]| if of.contains(&v) { v.to_owned() } else { "unknown".to_owned() };
    (
        format!("c-{}", known(c, &["public", "private", "secret"])),
        format!("i-{}", known(i, &["trusted", "untrusted"])),
    )
}

/// The session's calls in time order, one column each: its taint's confidentiality and
/// integrity at the decision (so the taint shows as it rose) over the call, coloured by
/// how it ended. Each column's title says what it was.
fn picture(s: &SessionView) -> Markup {
    let width = (s.calls.len() * CELL).max(CELL);
    html! {
        div.picture {
            svg #picture xmlns="http://www.w3.org/2000/svg" width=(width) height="76" role="img" {
                title { "Each column a call, in time order: its taint (confidentiality, integrity) when it was decided, and how it ended" }
                @for (i, c) in s.calls.iter().enumerate() {
                    @let (conf, integ) = taint_classes(&c.taint);
                    @let x = i * CELL;
                    @let what = format!("seq {}: {} {} at taint {}", c.seq, shown(&c.tool), c.outcome(), shown(&c.taint));
                    g.call {
                        title { (what) }
                        rect class=(conf) x=(x) y="0" width=(CELL - 3) height="16" {}
                        rect class=(integ) x=(x) y="19" width=(CELL - 3) height="16" {}
                        rect class={ "o-" (c.outcome()) } x=(x) y="40" width=(CELL - 3) height="36" {}
                    }
                }
            }
        }
        p.legend {
            "Top rows: confidentiality "
            span.key.c-public { "public" } span.key.c-private { "private" } span.key.c-secret { "secret" }
            ", integrity " span.key.i-trusted { "trusted" } span.key.i-untrusted { "untrusted" }
            ". Bottom row: " span.key.o-ran { "ran" } span.key.o-approved { "approved" }
            span.key.o-refused { "refused" } span.key.o-denied { "denied by the policy" }
            span.key.o-expired { "expired" } span.key.o-waiting { "waiting" }
        }
    }
}

fn calls_table(calls: &[CallRow]) -> Markup {
    html! {
        table #calls {
            tr { th { "seq" } th { "time" } th { "tool" } th { "decided" } th { "at taint" } th { "answer" } th { "result" } }
            @for c in calls {
                tr class={ "o-" (c.outcome()) } {
                    td { (c.seq) }
                    td { (shown(&c.time)) }
                    td { code { (shown(&c.tool)) } }
                    td { (shown(&c.decision)) }
                    td { (shown(&c.taint)) }
                    td {
                        @if let Some(a) = &c.answer {
                            (shown(a))
                            @if let Some(by) = &c.by { " by " (shown(by)) }
                        }
                    }
                    td { @if let Some(r) = &c.result { (shown(r)) } }
                }
            }
        }
    }
}

/// A waiting call's whole arguments, and its forms: what the owner reads before
/// approving a block that shows its call in part.
pub(super) fn whole(csrf: &str, a: &ApprovalSummary, args: &str, seal: Option<&str>) -> Markup {
    page(
        &a.approval,
        Some(csrf),
        html! {
            h1 { "Approval " code.id { (a.approval) } }
            pre.block { (shown_lines(&a.block)) }
            h2 { "Its whole arguments (" (args.len()) " bytes), escaped" }
            pre.args #args { (shown_lines(args)) }
            (answer_forms(csrf, a, seal))
            p { a href="/" { "back to the page" } }
        },
    )
}
