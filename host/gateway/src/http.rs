//! An upstream over streamable HTTP: reached only at the origin the owner gave, with
//! bx's network rules. `https` always, plain `http` only to loopback; a name must resolve
//! to public addresses (every one of them) and an address must be public, unless the owner
//! added the upstream with `--allow-private`; redirects are not followed; no proxy from
//! the environment is used. rmcp's streamable HTTP client speaks MCP over the client
//! built here, with its response limits set to bx's.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest013 as reqwest;

use crate::error::GatewayError;

/// The URL of an HTTP upstream, checked: `https`, or `http` to a loopback host; no
/// credentials in it; an address in it public unless `allow_private`.
pub fn check_url(name: &str, text: &str, allow_private: bool) -> Result<url::Url, GatewayError> {
    let refuse = |why: String| GatewayError::Url { name: name.into(), url: text.into(), why };
    let url = url::Url::parse(text).map_err(|e| refuse(format!("not a URL: {e}")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("it carries credentials; bind a secret to its origin instead".into()));
    }
    let host = url.host().ok_or_else(|| refuse("it names no host".into()))?;
    let loopback = match &host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(a) => a.is_loopback(),
        url::Host::Ipv6(a) => a.is_loopback(),
    };
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => return Err(refuse("plain http is only for loopback; use https".into())),
        other => return Err(refuse(format!("scheme {other} is not http or https"))),
    }
    let literal = match host {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(d) if d.eq_ignore_ascii_case("localhost") => {
            Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
        }
        url::Host::Domain(_) => None,
    };
    if let Some(ip) = literal
        && !allow_private
        && !bx_broker::is_public_ip(ip)
    {
        return Err(refuse(format!(
            "{ip} is not a public address; add it with --allow-private if it is yours"
        )));
    }
    Ok(url)
}

/// Resolves names to public addresses only (all of them, so a name that also resolves
/// to a private one is refused whole), unless the owner allowed private ones.
struct Resolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(private) = addrs.iter().find(|a| !bx_broker::is_public_ip(a.ip()))
                && !allow_private
            {
                let why = format!("{host} resolves to {}, which is not public", private.ip());
                return Err(why.into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The HTTP client an upstream at `url` is reached through.
pub(crate) fn client(
    name: &str,
    allow_private: bool,
    connect: std::time::Duration,
) -> Result<reqwest::Client, GatewayError> {
    // rustls needs a crypto provider; the one the rest of bx's TLS uses (installing it a
    // second time is a no-op that reports the first).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(connect)
        .pool_max_idle_per_host(0)
        .dns_resolver(Arc::new(Resolver { allow_private }))
        .build()
        .map_err(|e| GatewayError::Failed {
            name: name.into(),
            step: "connect".into(),
            why: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_and_no_private_address_unless_allowed() {
        assert!(check_url("u", "https://api.example.com/mcp", false).is_ok());
        assert!(check_url("u", "http://127.0.0.1:8080/mcp", true).is_ok());
        assert!(check_url("u", "http://localhost:8080/mcp", true).is_ok());
        for (url, why) in [
            ("http://api.example.com/mcp", "plain http is only for loopback"),
            ("ftp://api.example.com/", "scheme ftp"),
            ("https://user:pw@api.example.com/", "carries credentials"),
            ("http://127.0.0.1:8080/mcp", "not a public address"),
            ("https://10.0.0.5/mcp", "not a public address"),
            ("https://[::ffff:192.168.1.1]/mcp", "not a public address"),
            ("not a url", "not a URL"),
        ] {
            let e = check_url("u", url, false).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }
}
