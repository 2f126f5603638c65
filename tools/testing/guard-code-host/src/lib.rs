//! The guard of the fixture code host (`fixtures/gateway/code_host.py`), as its owner
//! would write it: a repository is private or public, and so is what is read from it and
//! what is posted to it. Issues and comments anyone can write are untrusted; files are
//! the repository's own. What it does not know it labels private and untrusted, and a
//! post it cannot place goes nowhere public.
#![deny(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

#[allow(unsafe_code, reason = "generated bindings and exports")]
mod bindings {
    wit_bindgen::generate!({ world: "guard", path: "../../../wit/guard" });
    use super::Guard;
    export!(Guard);
}

/// The fixture's private repositories.
const PRIVATE: &[&str] = &["owner/payroll"];

/// The repository a call names, if it names one.
fn repo(args: &str) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(args).ok()?;
    args.get("repo")?.as_str().map(str::to_owned)
}

fn confidentiality(repo: &str) -> &'static str {
    if PRIVATE.contains(&repo) { "private" } else { "public" }
}

struct Guard;

impl bindings::Guest for Guard {
    fn label_result(tool: String, args: String, _output: String) -> String {
        match (tool.as_str(), repo(&args)) {
            ("get_issue", Some(r)) => format!("{}/untrusted", confidentiality(&r)),
            ("read_file", Some(r)) => format!("{}/trusted", confidentiality(&r)),
            ("list_repos", _) => "public/trusted".to_owned(),
            _ => "private/untrusted".to_owned(),
        }
    }

    fn label_sink(tool: String, args: String) -> Option<String> {
        match (tool.as_str(), repo(&args)) {
            ("post_comment", Some(r)) => Some(format!("{}/untrusted", confidentiality(&r))),
            ("post_comment", None) => Some("public/trusted".to_owned()),
            _ => None,
        }
    }
}
