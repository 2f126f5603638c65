//! Secret bindings: the `[[secret]]` rules of the policy, which say to which hosts a
//! secret may go, from which tools, and where in a request the host puts it.
//!
//! A binding holds no value: the values live in bx's secret store, and only the runtime,
//! at the moment it sends a request, puts one in. A tool and the model only ever see the
//! placeholder `{secret:NAME}`.

use crate::net::HostRule;
use crate::policy::ToolMatch;

/// The longest secret name (it is a file key and shows in every record of its use).
pub const MAX_SECRET_NAME: usize = 64;

/// Whether `name` can name a secret: 1 to 64 of lower-case ASCII letters, digits, `_`
/// and `-`, starting with a letter or digit. Names appear in placeholders, records and
/// terminal output, so they hold nothing that needs escaping.
pub fn valid_secret_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SECRET_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// The placeholder that stands for secret `name` wherever a tool or the model can see
/// it: `{secret:NAME}`.
pub fn placeholder(name: &str) -> String {
    format!("{{secret:{name}}}")
}

/// One `[[secret]]` of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretBinding {
    /// Position among the secret rules, from 0.
    pub index: usize,
    /// Line in the policy file.
    pub line: usize,
    /// The secret's name in the store.
    pub name: String,
    /// Which tools' requests may carry it.
    pub tool: ToolMatch,
    /// The hosts it may go to (never `*`).
    pub hosts: Vec<HostRule>,
    /// Headers the host sets on every request to those hosts: `(lower-case name,
    /// template)`, the template holding the placeholder.
    pub headers: Vec<(String, String)>,
    /// Query parameters the host sets on every request to those hosts: `(name,
    /// template)`.
    pub query: Vec<(String, String)>,
    /// Environment variables the tool's instance gets, each holding the placeholder
    /// (never the value), for components written to read a key from their environment.
    pub env: Vec<String>,
}

impl SecretBinding {
    /// Whether a request to `host` on `port` may carry this secret.
    pub fn covers(&self, host: &url::Host<&str>, port: u16) -> bool {
        self.hosts.iter().any(|h| h.matches(host, port))
    }

    /// The placeholder of this binding's secret.
    pub fn placeholder(&self) -> String {
        placeholder(&self.name)
    }
}

/// `secret[0] (line 40): github for tool http.fetch to api.github.com as header
/// authorization`.
impl std::fmt::Display for SecretBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "secret[{}] (line {}): {} for tool {} to ",
            self.index, self.line, self.name, self.tool
        )?;
        for (i, h) in self.hosts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{h}")?;
        }
        let mut places: Vec<String> = Vec::new();
        places.extend(self.headers.iter().map(|(h, _)| format!("header {h}")));
        places.extend(self.query.iter().map(|(q, _)| format!("query {q}")));
        places.extend(self.env.iter().map(|e| format!("env {e}")));
        if places.is_empty() {
            f.write_str(" where a placeholder is")
        } else {
            write!(f, " as {}", places.join(", "))
        }
    }
}

/// Why a name or a template in a `[[secret]]` rule is refused. The policy's parser adds
/// where (file:line:column and the rule); this says what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SecretRuleError {
    /// The template does not hold the binding's own placeholder.
    #[error("the value must hold the placeholder {}", placeholder(.0))]
    NoPlaceholder(String),
    /// The template holds another secret's placeholder too.
    #[error("a binding puts in only its own secret ({})", placeholder(.0))]
    OtherSecret(String),
    /// The template is longer than [`MAX_TEMPLATE_BYTES`].
    #[error("longer than {MAX_TEMPLATE_BYTES} bytes")]
    TooLong,
    /// The template holds a character a header or a query cannot carry as shown.
    #[error("{0:?} cannot be sent in a header or a query (printable ASCII only)")]
    Unprintable(char),
    /// Not a header name (a token of at most 128 bytes).
    #[error("{0:?} is not a header name")]
    NotAHeaderName(String),
    /// A header the host sets from the URL and the body.
    #[error("{0:?} is set by the host from the URL and the body")]
    HostHeader(String),
    /// Not a query parameter name of unreserved URL characters.
    #[error("{0:?}: a query parameter name of letters, digits, - . _ ~")]
    NotAQueryName(String),
    /// Not an environment variable name of `A-Z`, `0-9` and `_`.
    #[error("{0:?}: an environment variable name of A-Z, 0-9 and _")]
    NotAnEnvName(String),
}

/// The longest template a binding may set (a header's or a query parameter's value).
const MAX_TEMPLATE_BYTES: usize = 1024;

/// Why `template` cannot be the value of a header or query parameter that binds secret
/// `name`.
pub(crate) fn check_template(name: &str, template: &str) -> Result<(), SecretRuleError> {
    let own = placeholder(name);
    if !template.contains(&own) {
        return Err(SecretRuleError::NoPlaceholder(name.to_owned()));
    }
    let others = template.replace(&own, "");
    if others.contains("{secret:") {
        return Err(SecretRuleError::OtherSecret(name.to_owned()));
    }
    if template.len() > MAX_TEMPLATE_BYTES {
        return Err(SecretRuleError::TooLong);
    }
    if let Some(c) = template.chars().find(|c| !(c.is_ascii_graphic() || *c == ' ')) {
        return Err(SecretRuleError::Unprintable(c));
    }
    Ok(())
}

/// Whether `name` is a header a binding may set: a token, and not one the URL and the
/// body decide.
pub(crate) fn check_header_name(name: &str) -> Result<(), SecretRuleError> {
    if name.is_empty()
        || name.len() > 128
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Err(SecretRuleError::NotAHeaderName(name.to_owned()));
    }
    if ["host", "content-length", "transfer-encoding", "connection"]
        .contains(&name.to_ascii_lowercase().as_str())
    {
        return Err(SecretRuleError::HostHeader(name.to_owned()));
    }
    Ok(())
}

/// Whether `name` is a query parameter name a binding may set (unreserved URL
/// characters only, so what is shown is what is sent).
pub(crate) fn check_query_name(name: &str) -> Result<(), SecretRuleError> {
    if name.is_empty()
        || name.len() > 128
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    {
        return Err(SecretRuleError::NotAQueryName(name.to_owned()));
    }
    Ok(())
}

/// Whether `name` is an environment variable name a binding may set.
pub(crate) fn check_env_name(name: &str) -> Result<(), SecretRuleError> {
    let first_ok = name.bytes().next().is_some_and(|b| b.is_ascii_uppercase() || b == b'_');
    if !first_ok
        || name.len() > 128
        || !name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(SecretRuleError::NotAnEnvName(name.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_templates() {
        for ok in ["github", "a", "x_1-y", "0day"] {
            assert!(valid_secret_name(ok), "{ok}");
        }
        for bad in ["", "GitHub", "-x", "a b", "a}", &"a".repeat(65), "é"] {
            assert!(!valid_secret_name(bad), "{bad}");
        }
        use SecretRuleError as E;
        assert_eq!(check_template("gh", "Bearer {secret:gh}"), Ok(()));
        assert_eq!(
            check_template("gh", "Bearer {secret:other}"),
            Err(E::NoPlaceholder("gh".into()))
        );
        assert_eq!(
            check_template("gh", "{secret:gh} {secret:other}"),
            Err(E::OtherSecret("gh".into()))
        );
        assert_eq!(check_template("gh", "{secret:gh}\n"), Err(E::Unprintable('\n')));
        let long = format!("{{secret:gh}}{}", "x".repeat(MAX_TEMPLATE_BYTES));
        assert_eq!(check_template("gh", &long), Err(E::TooLong));
        assert_eq!(
            check_header_name("Content-Length"),
            Err(E::HostHeader("Content-Length".into()))
        );
        assert_eq!(check_header_name("x y"), Err(E::NotAHeaderName("x y".into())));
        assert_eq!(check_header_name("x-api-key"), Ok(()));
        assert_eq!(check_query_name("api_key"), Ok(()));
        assert_eq!(check_query_name("a&b"), Err(E::NotAQueryName("a&b".into())));
        assert_eq!(check_env_name("GITHUB_TOKEN"), Ok(()));
        assert_eq!(check_env_name("1X"), Err(E::NotAnEnvName("1X".into())));
        // The words the owner reads under file:line:column.
        assert_eq!(
            E::NoPlaceholder("gh".into()).to_string(),
            "the value must hold the placeholder {secret:gh}"
        );
        assert_eq!(
            E::Unprintable('\n').to_string(),
            "'\\n' cannot be sent in a header or a query (printable ASCII only)"
        );
    }
}
