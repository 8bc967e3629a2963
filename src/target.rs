//! Where the orchestrator may send a request it was asked to make (a push
//! notification, a callback): not to itself, nor into the network it runs
//! in, unless the configuration says so. A URL's host is checked as
//! written and each address it resolves to is checked again when the
//! request connects (so a name that resolves elsewhere later, or a
//! redirect, is caught too).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// The kinds of address a target is refused for unless allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// 127.0.0.0/8, `::1`, `localhost`.
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, 100.64/10 (carrier-grade NAT) and
    /// IPv6 unique-local `fc00::/7`.
    Private,
    /// 169.254/16 (where cloud metadata services answer) and `fe80::/10`.
    LinkLocal,
}

/// What kind of address `ip` is, when it is one a target must not be
/// unless allowed; `None` for a public address. Unspecified, broadcast,
/// multicast and documentation addresses count as private: nothing
/// outside should be reached through them.
pub fn reach(ip: IpAddr) -> Option<Reach> {
    match ip {
        IpAddr::V4(v4) => reach_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => reach_v4(v4),
            None => reach_v6(v6),
        },
    }
}

/// The IPv4 address an IPv6 form carries, which is where a packet to it
/// may end up: mapped (`::ffff:a.b.c.d`), translated
/// (`::ffff:0:a.b.c.d`), compatible (`::a.b.c.d`), NAT64
/// (`64:ff9b::a.b.c.d`, `64:ff9b:1::/48`) and 6to4 (`2002:AABB:CCDD::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let last = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    match s {
        // ::ffff:0:a.b.c.d
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(last),
        // ::a.b.c.d, but not :: and ::1 (their own kinds)
        [0, 0, 0, 0, 0, 0, _, _] if !ip.is_unspecified() && !ip.is_loopback() => Some(last),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last),
        [0x64, 0xff9b, 1, ..] => Some(last),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

fn reach_v4(ip: Ipv4Addr) -> Option<Reach> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some(Reach::Loopback)
    } else if ip.is_link_local() {
        Some(Reach::LinkLocal)
    } else if ip.is_private()
        || (a == 100 && (64..128).contains(&b))
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
    {
        Some(Reach::Private)
    } else {
        None
    }
}

fn reach_v6(ip: Ipv6Addr) -> Option<Reach> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some(Reach::Loopback)
    } else if first & 0xffc0 == 0xfe80 {
        Some(Reach::LinkLocal)
    } else if first & 0xfe00 == 0xfc00
        || ip.is_unspecified()
        || ip.is_multicast()
        // Teredo (2001::/32) hides its IPv4 addresses: not to be trusted
        // as public.
        || (first == 0x2001 && ip.segments()[1] == 0)
    {
        Some(Reach::Private)
    } else {
        None
    }
}

/// Whether a request may go to `ip` when the kinds in `allowed` are.
pub fn allowed(ip: IpAddr, allowed: &[Reach]) -> bool {
    reach(ip).is_none_or(|r| allowed.contains(&r))
}

/// Why a target URL is refused, in words for the one who gave it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The URL, parsed, if it may be a target as written: `http` or `https`,
/// a host, no credentials in it, and a host that is not an address (or
/// `localhost`) of a kind not in `allowed`. A name is checked again by
/// [`resolved`] once it is resolved.
pub fn check(url: &str, allowed: &[Reach]) -> Result<reqwest::Url, Refused> {
    let parsed = reqwest::Url::parse(url).map_err(|e| Refused(format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Refused(format!(
            "the scheme is `{}`; a target is http or https",
            parsed.scheme()
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Refused(
            "a target URL carries no credentials: give them as `authentication`".into(),
        ));
    }
    match parsed.host() {
        None => return Err(Refused("the URL has no host".into())),
        Some(url::Host::Ipv4(ip)) => literal(IpAddr::V4(ip), allowed)?,
        Some(url::Host::Ipv6(ip)) => literal(IpAddr::V6(ip), allowed)?,
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            let local = name == "localhost" || name.ends_with(".localhost");
            if local && !allowed.contains(&Reach::Loopback) {
                return Err(Refused(format!(
                    "`{name}` is this machine (a loopback name), which targets may not be \
                     unless `deliveries.allow_addresses` has `loopback`"
                )));
            }
        }
    }
    Ok(parsed)
}

fn literal(ip: IpAddr, allowed: &[Reach]) -> Result<(), Refused> {
    match reach(ip) {
        Some(r) if !allowed.contains(&r) => Err(Refused(refusal(ip, r))),
        _ => Ok(()),
    }
}

/// The words for a refused address.
pub fn refusal(ip: IpAddr, r: Reach) -> String {
    let (what, name) = match r {
        Reach::Loopback => ("a loopback address", "loopback"),
        Reach::Private => ("a private address", "private"),
        Reach::LinkLocal => ("a link-local address", "link_local"),
    };
    format!(
        "{ip} is {what}, which targets may not be unless `deliveries.allow_addresses` has `{name}`"
    )
}

/// [`check`], then the name resolved (for at most `within`): a name that
/// resolves to an address of a kind not allowed is refused now. One that
/// does not resolve in time is taken: it is checked again at each
/// connection.
pub async fn check_resolving(
    url: &str,
    allowed: &[Reach],
    within: std::time::Duration,
) -> Result<reqwest::Url, Refused> {
    let parsed = check(url, allowed)?;
    if let Some(url::Host::Domain(name)) = parsed.host() {
        let port = parsed.port_or_known_default().unwrap_or(443);
        let lookup = tokio::net::lookup_host((name, port));
        if let Ok(Ok(addrs)) = tokio::time::timeout(within, lookup).await {
            let addrs: Vec<std::net::SocketAddr> = addrs.collect();
            if !addrs.is_empty() {
                resolved(name, addrs, allowed)?;
            }
        }
    }
    Ok(parsed)
}

/// How long a target's name may take to resolve when it is given.
pub const RESOLVE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The addresses a name resolved to that may be reached, or why none may.
pub fn resolved(
    name: &str,
    addrs: impl IntoIterator<Item = std::net::SocketAddr>,
    allowed: &[Reach],
) -> Result<Vec<std::net::SocketAddr>, Refused> {
    let mut ok = Vec::new();
    let mut refused = None;
    for a in addrs {
        match reach(a.ip()) {
            Some(r) if !allowed.contains(&r) => refused = Some(refusal(a.ip(), r)),
            _ => ok.push(a),
        }
    }
    match (ok.is_empty(), refused) {
        // A name with one refused address is refused whole: which address
        // a connection takes is not ours to choose.
        (_, Some(why)) => Err(Refused(format!("`{name}` resolves to {why}"))),
        (true, None) => Err(Refused(format!("`{name}` resolves to no address"))),
        (false, None) => Ok(ok),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_told_apart() {
        let r = |s: &str| reach(s.parse().unwrap());
        assert_eq!(r("127.0.0.1"), Some(Reach::Loopback));
        assert_eq!(r("::1"), Some(Reach::Loopback));
        assert_eq!(r("::ffff:127.0.0.1"), Some(Reach::Loopback));
        // IPv6 forms that carry 127.0.0.1, 10.0.0.1, 169.254.169.254.
        assert_eq!(r("::127.0.0.1"), Some(Reach::Loopback));
        assert_eq!(r("::ffff:0:127.0.0.1"), Some(Reach::Loopback));
        assert_eq!(r("64:ff9b::127.0.0.1"), Some(Reach::Loopback));
        assert_eq!(r("64:ff9b:1::7f00:1"), Some(Reach::Loopback));
        assert_eq!(r("2002:7f00:1::"), Some(Reach::Loopback));
        assert_eq!(r("2002:a00:1::1"), Some(Reach::Private));
        assert_eq!(r("64:ff9b::a9fe:a9fe"), Some(Reach::LinkLocal));
        assert_eq!(
            r("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            Some(Reach::Private)
        );
        assert_eq!(r("2002:5db8:d70e::1"), None, "6to4 of a public address");
        assert_eq!(r("10.1.2.3"), Some(Reach::Private));
        assert_eq!(r("172.20.0.1"), Some(Reach::Private));
        assert_eq!(r("192.168.1.1"), Some(Reach::Private));
        assert_eq!(r("100.100.1.1"), Some(Reach::Private));
        assert_eq!(r("fd00::1"), Some(Reach::Private));
        assert_eq!(r("0.0.0.0"), Some(Reach::Private));
        assert_eq!(r("169.254.169.254"), Some(Reach::LinkLocal));
        assert_eq!(r("fe80::1"), Some(Reach::LinkLocal));
        assert_eq!(r("93.184.215.14"), None);
        assert_eq!(r("2606:2800:21f:cb07:6820:80da:af6b:8b2c"), None);
    }

    #[test]
    fn urls_are_checked_as_written() {
        let none: &[Reach] = &[];
        assert!(check("https://example.com/hook", none).is_ok());
        for bad in [
            "http://127.0.0.1:9/x",
            "http://[::1]/x",
            "http://localhost/x",
            "http://169.254.169.254/latest/meta-data",
            "http://10.0.0.5/x",
            "ftp://example.com/x",
            "https://user:pw@example.com/x",
            "not a url",
        ] {
            assert!(check(bad, none).is_err(), "{bad} was taken");
        }
        assert!(check("http://127.0.0.1:9/x", &[Reach::Loopback]).is_ok());
        assert!(check("http://localhost/x", &[Reach::Loopback]).is_ok());
        assert!(check("http://10.0.0.5/x", &[Reach::Loopback]).is_err());
        let why = check("http://169.254.169.254/", none).unwrap_err().0;
        assert!(
            why.contains("link-local") && why.contains("link_local"),
            "{why}"
        );
    }

    /// This machine's own name resolves to one of its addresses: refused
    /// when given, though nothing in the URL says so.
    #[tokio::test]
    async fn a_name_that_resolves_inward_is_refused_when_given() {
        let host = std::fs::read_to_string("/etc/hostname")
            .unwrap_or_default()
            .trim()
            .to_string();
        let addrs: Vec<std::net::SocketAddr> =
            std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 80))
                .map(Iterator::collect)
                .unwrap_or_default();
        if host.is_empty() || addrs.is_empty() || addrs.iter().any(|a| reach(a.ip()).is_none()) {
            eprintln!("this machine's name ({host:?}) does not resolve inward only: {addrs:?}");
            return;
        }
        let url = format!("http://{host}/hook");
        assert!(check(&url, &[]).is_ok(), "nothing in the URL says so");
        let why = check_resolving(&url, &[], RESOLVE_WITHIN)
            .await
            .unwrap_err()
            .0;
        assert!(why.contains("resolves to"), "{why}");
        let all = [Reach::Loopback, Reach::Private, Reach::LinkLocal];
        assert!(check_resolving(&url, &all, RESOLVE_WITHIN).await.is_ok());
    }

    #[test]
    fn a_name_with_one_refused_address_is_refused() {
        let a = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let public = a("93.184.215.14:443");
        let private = a("10.0.0.1:443");
        assert_eq!(resolved("x", [public], &[]).unwrap(), vec![public]);
        assert!(resolved("x", [public, private], &[]).is_err());
        assert!(resolved("x", [], &[]).is_err());
        assert!(resolved("x", [private], &[Reach::Private]).is_ok());
    }
}
