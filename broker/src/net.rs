//! Host rules and address classes: which URLs a grant reaches.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a host rule (`host = "example.com"`, `--allow-host`) was refused; each names the
/// rule as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostRuleError {
    /// The rule is empty.
    #[error("host rule {0:?}: empty")]
    Empty(String),
    /// The rule is a URL (a scheme or a path), not a host.
    #[error("host rule {0:?}: give a host, not a URL")]
    Url(String),
    /// The URL parser does not read it as a host.
    #[error("host rule {rule:?}: {error}")]
    Unparsable {
        /// The rule.
        rule: String,
        /// What the URL parser said (in the message, and so not also a `source()`: a
        /// chain printed whole names it once).
        error: url::ParseError,
    },
    /// The rule has a user name or password.
    #[error("host rule {0:?}: credentials are not part of a host")]
    Credentials(String),
    /// The host name is empty (only dots).
    #[error("host rule {0:?}: empty host name")]
    EmptyName(String),
    /// No host at all.
    #[error("host rule {0:?}: no host")]
    NoHost(String),
}

/// One host a grant reaches: a DNS name, or an address the owner named literally.
///
/// A name rule never matches an IP literal, and the runtime refuses a name whose
/// resolved addresses are not public; reaching loopback or a private network needs an
/// address rule, so the owner has to write the address down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRule {
    /// A lower-case DNS name without a trailing dot, optionally with a port.
    Name {
        /// The host name.
        name: String,
        /// The only port allowed, or any port when `None`.
        port: Option<u16>,
    },
    /// `*`: any DNS name (never an IP literal), on any port. Like every name rule it
    /// reaches only names that resolve to public addresses; a more specific rule (a
    /// name or an address) wins over it.
    AnyName,
    /// An IP address, optionally with a port.
    Addr {
        /// The address.
        addr: IpAddr,
        /// The only port allowed, or any port when `None`.
        port: Option<u16>,
    },
}

impl HostRule {
    /// Parses `example.com`, `example.com:8443`, `10.0.0.5`, `127.0.0.1:8080`, `[::1]:80`.
    pub fn parse(text: &str) -> Result<HostRule, HostRuleError> {
        let rule = || text.to_owned();
        if text.is_empty() {
            return Err(HostRuleError::Empty(rule()));
        }
        if text == "*" {
            return Ok(HostRule::AnyName);
        }
        if text.contains("://") || text.contains('/') {
            return Err(HostRuleError::Url(rule()));
        }
        // Let the URL parser do the host grammar (IDNA, IPv4 forms, IPv6 brackets), so a
        // rule is read exactly as a request's host will be.
        let parsed = url::Url::parse(&format!("http://{text}/"))
            .map_err(|error| HostRuleError::Unparsable { rule: rule(), error })?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(HostRuleError::Credentials(rule()));
        }
        let port = parsed.port();
        let explicit_port_80 = text.ends_with(":80");
        let port = if explicit_port_80 { Some(80) } else { port };
        match parsed.host() {
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_owned();
                if name.is_empty() {
                    return Err(HostRuleError::EmptyName(rule()));
                }
                Ok(HostRule::Name { name, port })
            }
            Some(url::Host::Ipv4(v4)) => Ok(HostRule::Addr { addr: IpAddr::V4(v4), port }),
            Some(url::Host::Ipv6(v6)) => Ok(HostRule::Addr { addr: IpAddr::V6(v6), port }),
            None => Err(HostRuleError::NoHost(rule())),
        }
    }

    fn port_matches(rule: Option<u16>, port: u16) -> bool {
        rule.is_none_or(|p| p == port)
    }

    pub(crate) fn matches(&self, host: &url::Host<&str>, port: u16) -> bool {
        match (self, host) {
            (HostRule::Name { name, port: p }, url::Host::Domain(d)) => {
                name == d.trim_end_matches('.') && Self::port_matches(*p, port)
            }
            (HostRule::AnyName, url::Host::Domain(_)) => true,
            (HostRule::Addr { addr, port: p }, url::Host::Ipv4(v4)) => {
                *addr == IpAddr::V4(*v4) && Self::port_matches(*p, port)
            }
            (HostRule::Addr { addr, port: p }, url::Host::Ipv6(v6)) => {
                *addr == IpAddr::V6(*v6) && Self::port_matches(*p, port)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for HostRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostRule::Name { name, port: None } => write!(f, "{name}"),
            HostRule::Name { name, port: Some(p) } => write!(f, "{name}:{p}"),
            HostRule::AnyName => f.write_str("*"),
            HostRule::Addr { addr: IpAddr::V6(a), port: Some(p) } => write!(f, "[{a}]:{p}"),
            HostRule::Addr { addr, port: Some(p) } => write!(f, "{addr}:{p}"),
            HostRule::Addr { addr, port: None } => write!(f, "{addr}"),
        }
    }
}

/// True for addresses on the public internet. False for loopback, private, link-local
/// (cloud metadata lives at 169.254.169.254), shared, unspecified, multicast, broadcast,
/// documentation and reserved ranges, and for IPv6 forms that embed such an IPv4 address.
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let special = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240; // reserved
    !special
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let seg = ip.segments();
    // NAT64 well-known prefix 64:ff9b::/96 carries an IPv4 address in its low bits.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        let [.., hi, lo] = seg;
        let v4 = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
        return is_public_v4(v4);
    }
    let special = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique local
        || (seg[0] & 0xffc0) == 0xfe80 // link-local
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
        || seg[0..6] == [0, 0, 0, 0, 0, 0]; // IPv4-compatible (deprecated) and friends
    !special
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classifies_addresses() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
        ] {
            assert!(!is_public_ip(ip(private)), "{private} must not count as public");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "::ffff:1.1.1.1"] {
            assert!(is_public_ip(ip(public)), "{public} is public");
        }
    }

    #[test]
    fn parses_rules() {
        assert_eq!(
            HostRule::parse("Example.COM."),
            Ok(HostRule::Name { name: "example.com".into(), port: None })
        );
        assert_eq!(
            HostRule::parse("127.0.0.1:8080"),
            Ok(HostRule::Addr { addr: ip("127.0.0.1"), port: Some(8080) })
        );
        assert_eq!(
            HostRule::parse("[::1]:80"),
            Ok(HostRule::Addr { addr: ip("::1"), port: Some(80) })
        );
        // The URL parser reads decimal and hex IPv4 forms as addresses, not names.
        assert_eq!(
            HostRule::parse("2130706433"),
            Ok(HostRule::Addr { addr: ip("127.0.0.1"), port: None })
        );
        assert_eq!(
            HostRule::parse("https://example.com"),
            Err(HostRuleError::Url("https://example.com".into()))
        );
        assert_eq!(HostRule::parse(""), Err(HostRuleError::Empty(String::new())));
        assert_eq!(
            HostRule::parse("a@example.com"),
            Err(HostRuleError::Credentials("a@example.com".into()))
        );
        assert!(matches!(HostRule::parse("exa mple.com"), Err(HostRuleError::Unparsable { .. })));
    }

    #[test]
    fn name_rule_never_matches_an_address() {
        let rule = HostRule::parse("localhost").unwrap();
        let url = url::Url::parse("http://127.0.0.1/").unwrap();
        assert!(!rule.matches(&url.host().unwrap(), 80));
        let url = url::Url::parse("http://localhost/").unwrap();
        assert!(rule.matches(&url.host().unwrap(), 80));
    }
}
