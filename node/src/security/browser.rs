//! The browser guard's rules: what keeps a web page the user happens to visit from
//! driving a node (`leasehold dev` on a laptop has no auth). One table of rules
//! ([`RULES`]), one pure decision ([`decide`]) over the few request facts it needs
//! ([`Facts`]), and the [`BrowserPolicy`] the node was started with. The middleware that
//! applies them, and the security headers of every response, are `http/browser.rs`: the
//! policy lives here, below `node` (a `Node` holds it), like the token policy of
//! `auth.rs` beside its HTTP check in `http/client_auth.rs`.
//!
//! | rule | applies to | refused when | answer |
//! |---|---|---|---|
//! | host | every route | HTTP/1.1+ without `Host`; or, on a loopback listener, a `Host` that is not `localhost`, `127.x.y.z`, `[::1]` or a `--peer` address | 400 `invalid_argument` / 403 `permission_denied` |
//! | origin | every route, every method | `Origin` is not the request's own origin (scheme of the listener, `Host`), or `Sec-Fetch-Site` is `cross-site`/`same-site`; unless the origin is `--allow-origin`ed | 403 `permission_denied` |
//! | content type | POST on `/v1/*` | the body may be non-empty and `Content-Type` is present but not `application/json` | 415 `unsupported_media_type` |
//!
//! Why a body with *no* `Content-Type` is accepted: curl without `-H`, Python's
//! `requests.post(data=…)` and other plain clients send none, and a browser cannot send
//! one cross-origin without either a CORS-safelisted type (`text/plain`,
//! `application/x-www-form-urlencoded`, `multipart/form-data`: refused by the
//! content-type rule) or an `Origin` header (refused by the origin rule; browsers send
//! `Origin` on every cross-origin request that is not a GET/HEAD). A cross-site top-level
//! navigation (a link clicked elsewhere: GET or HEAD, `Sec-Fetch-Mode: navigate`,
//! `Sec-Fetch-Dest: document`, no `Origin`) passes the origin rule: its answer goes to
//! the user's tab, never to the page that linked it, and GETs change nothing.
//!
//! DNS rebinding makes a hostile page same-origin with the node (its own name, now
//! resolving to 127.0.0.1): only the `Host` check stops it, hence the host rule on
//! loopback listeners. Nodes call each other with the callee's `--peer` address in
//! `Host` (forwarding, Raft RPC, the dashboard's member probes), so those pass.
//! `/raft/*` bodies are bincode, authenticated by `peer_auth/`: the content-type rule
//! is for client routes only.
//!
//! Imports: http types (through axum) and `telemetry::metrics::Refused`; nothing else of
//! the node.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use axum::http::{Method, Version};
use leasehold_statemachine::{ApiError, ErrorCode};

use crate::telemetry::metrics::Refused;

/// The only body type client routes take (parameters such as `charset` allowed).
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// What the node was started with that the rules need.
#[derive(Debug, Clone, Default)]
pub struct BrowserPolicy {
    /// `http` or `https`: the scheme of this node's listener, hence of its own origin.
    pub scheme: &'static str,
    /// The listener is bound to a loopback address: the host rule applies.
    pub loopback: bool,
    /// `host:port` (lowercase, explicit port) of every `--peer` entry.
    pub peer_hosts: BTreeSet<String>,
    /// `scheme://host:port` (lowercase, explicit port) of every `--allow-origin`.
    pub allowed_origins: BTreeSet<String>,
}

/// `--allow-origin` values that are not an origin.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--allow-origin {0:?}: expected an origin, scheme://host[:port] (http or https, no path; `*` is not allowed)")]
pub struct BadOrigin(pub String);

impl BrowserPolicy {
    pub fn new<'a>(
        scheme: &'static str,
        loopback: bool,
        peers: impl IntoIterator<Item = &'a String>,
        allow_origins: &[String],
    ) -> Result<BrowserPolicy, BadOrigin> {
        let peer_hosts = peers
            .into_iter()
            .filter_map(|p| authority(p, default_port(scheme)))
            .map(|(h, port)| format!("{h}:{port}"))
            .collect();
        let allowed_origins = allow_origins
            .iter()
            .map(|o| origin(o).ok_or_else(|| BadOrigin(o.clone())))
            .collect::<Result<_, _>>()?;
        Ok(BrowserPolicy {
            scheme,
            loopback,
            peer_hosts,
            allowed_origins,
        })
    }
}

/// Checks one `--allow-origin` value (clap's value parser).
pub fn parse_allow_origin(s: &str) -> Result<String, BadOrigin> {
    origin(s)
        .map(|_| s.to_owned())
        .ok_or_else(|| BadOrigin(s.to_owned()))
}

/// The request facts the rules look at. A header that is not visible ASCII reads as
/// [`UNREADABLE`], which matches nothing.
#[derive(Debug, Clone, Default)]
pub struct Facts<'a> {
    pub method: Method,
    pub path: &'a str,
    pub version: Version,
    /// `Host`, or the request target's authority (HTTP/2's `:authority`).
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub sec_fetch_site: Option<&'a str>,
    pub sec_fetch_mode: Option<&'a str>,
    pub sec_fetch_dest: Option<&'a str>,
    pub content_type: Option<&'a str>,
    /// The body is known to be empty (`Content-Length: 0`, or no body at all).
    pub body_empty: bool,
}

/// What an unreadable header value reads as.
pub const UNREADABLE: &str = "\u{fffd}";

/// Why the guard refused a request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("an HTTP/1.1 request must carry a Host header")]
    NoHost,
    #[error("Host {0:?} does not name this node: a node listening on a loopback address answers only Host localhost, 127.x.y.z, [::1] or its --peer address (DNS rebinding protection)")]
    ForeignHost(String),
    #[error("cross-origin request from {0:?} refused: to let a web page at that origin call this node, start it with --allow-origin ORIGIN")]
    CrossOrigin(String),
    #[error("cross-site browser request (Sec-Fetch-Site: {0}) refused: to let a web page call this node, start it with --allow-origin ORIGIN")]
    CrossSite(String),
    #[error("request bodies must be JSON: Content-Type {0:?} is not application/json (curl -d sends a form type: add -H 'Content-Type: application/json')")]
    ContentType(String),
}

impl Refusal {
    pub fn to_api(&self) -> ApiError {
        let code = match self {
            Refusal::NoHost => ErrorCode::InvalidArgument,
            Refusal::ContentType(_) => ErrorCode::UnsupportedMediaType,
            Refusal::ForeignHost(_) | Refusal::CrossOrigin(_) | Refusal::CrossSite(_) => {
                ErrorCode::PermissionDenied
            }
        };
        ApiError::new(code, self.to_string())
    }

    /// The `leasehold_listener_refused_total` reason it is counted under.
    pub fn counted_as(&self) -> Refused {
        match self {
            Refusal::NoHost | Refusal::ForeignHost(_) => Refused::Host,
            Refusal::CrossOrigin(_) | Refusal::CrossSite(_) => Refused::CrossOrigin,
            Refusal::ContentType(_) => Refused::ContentType,
        }
    }
}

type Rule = fn(&BrowserPolicy, &Facts) -> Result<(), Refusal>;

/// The rules, in the order they are checked (the module doc's table).
pub const RULES: [(&str, Rule); 3] = [
    ("host", host_rule),
    ("origin", origin_rule),
    ("content type", content_type_rule),
];

/// The decision: the first rule that refuses, or `Ok`.
pub fn decide(policy: &BrowserPolicy, facts: &Facts) -> Result<(), Refusal> {
    RULES.iter().try_for_each(|(_, rule)| rule(policy, facts))
}

fn host_rule(p: &BrowserPolicy, f: &Facts) -> Result<(), Refusal> {
    let Some(host) = f.host else {
        // HTTP/1.0 had no Host; RFC 9112 §3.2: a 1.1 request without one is a 400.
        return match f.version {
            Version::HTTP_09 | Version::HTTP_10 => Ok(()),
            _ => Err(Refusal::NoHost),
        };
    };
    if !p.loopback {
        return Ok(());
    }
    let allowed = authority(host, default_port(p.scheme)).is_some_and(|(h, port)| {
        is_loopback_name(&h) || p.peer_hosts.contains(&format!("{h}:{port}"))
    });
    if allowed {
        Ok(())
    } else {
        Err(Refusal::ForeignHost(host.to_owned()))
    }
}

fn origin_rule(p: &BrowserPolicy, f: &Facts) -> Result<(), Refusal> {
    let normalized = f.origin.and_then(origin);
    if normalized
        .as_ref()
        .is_some_and(|o| p.allowed_origins.contains(o))
    {
        return Ok(());
    }
    if let Some(o) = f.origin {
        let own = f
            .host
            .and_then(|h| authority(h, default_port(p.scheme)))
            .map(|(h, port)| format!("{}://{h}:{port}", p.scheme));
        if normalized.is_none() || normalized != own {
            return Err(Refusal::CrossOrigin(o.to_owned()));
        }
    }
    match f.sec_fetch_site {
        Some(s) if is(s, "cross-site") || is(s, "same-site") => {
            if f.origin.is_none() && is_top_level_navigation(f) {
                Ok(())
            } else {
                Err(Refusal::CrossSite(s.to_owned()))
            }
        }
        _ => Ok(()),
    }
}

fn content_type_rule(_: &BrowserPolicy, f: &Facts) -> Result<(), Refusal> {
    if f.method != Method::POST || !f.path.starts_with("/v1/") || f.body_empty {
        return Ok(());
    }
    match f.content_type {
        Some(ct) if !is_json(ct) => Err(Refusal::ContentType(ct.to_owned())),
        _ => Ok(()),
    }
}

fn is(value: &str, want: &str) -> bool {
    value.trim().eq_ignore_ascii_case(want)
}

/// `application/json`, any case, with or without parameters.
fn is_json(content_type: &str) -> bool {
    is(
        content_type.split(';').next().unwrap_or_default(),
        JSON_CONTENT_TYPE,
    )
}

fn is_top_level_navigation(f: &Facts) -> bool {
    (f.method == Method::GET || f.method == Method::HEAD)
        && f.sec_fetch_mode.is_some_and(|m| is(m, "navigate"))
        && f.sec_fetch_dest.is_some_and(|d| is(d, "document"))
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" {
        443
    } else {
        80
    }
}

/// `host[:port]` → (lowercase host without a trailing dot, port or the default); `None`
/// for anything else (user info, a path, junk).
fn authority(s: &str, default: u16) -> Option<(String, u16)> {
    if s.contains(['@', '/', '?', '#']) || s.is_empty() {
        return None;
    }
    let a: axum::http::uri::Authority = s.parse().ok()?;
    let host = a.host().trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    Some((host, a.port_u16().unwrap_or(default)))
}

/// `scheme://host[:port]` (http or https) → `scheme://host:port`, lowercase.
fn origin(s: &str) -> Option<String> {
    let (scheme, rest) = s.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let (host, port) = authority(rest, default_port(&scheme))?;
    Some(format!("{scheme}://{host}:{port}"))
}

/// `localhost`, an IPv4 address in 127/8, or `[::1]`.
fn is_loopback_name(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return ip.is_loopback();
    }
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .and_then(|h| h.parse::<Ipv6Addr>().ok())
        .is_some_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(loopback: bool) -> BrowserPolicy {
        let peers = ["127.0.0.1:7001".to_owned(), "Node2.Example:7002".to_owned()];
        let allowed = ["https://app.example".to_owned()];
        BrowserPolicy::new("http", loopback, &peers, &allowed).unwrap()
    }

    fn get(host: &'static str) -> Facts<'static> {
        Facts {
            method: Method::GET,
            path: "/v1/jobs",
            version: Version::HTTP_11,
            host: Some(host),
            body_empty: true,
            ..Facts::default()
        }
    }

    fn post(ct: Option<&'static str>) -> Facts<'static> {
        Facts {
            method: Method::POST,
            content_type: ct,
            body_empty: false,
            ..get("127.0.0.1:7001")
        }
    }

    #[test]
    fn host_rule_on_loopback() {
        let p = policy(true);
        for ok in [
            "127.0.0.1:7001",
            "127.8.9.10:1",
            "localhost:7001",
            "LOCALHOST",
            "localhost.:9",
            "[::1]:7001",
            "node2.example:7002",
        ] {
            assert_eq!(decide(&p, &get(ok)), Ok(()), "{ok}");
        }
        for bad in [
            "evil.example:7001",
            "evil.example",
            "node2.example:7003",
            "0.0.0.0:7001",
            "[::2]:7001",
            "localhost.evil.example",
            "user@127.0.0.1:7001",
            UNREADABLE,
            "",
        ] {
            let r = decide(&p, &get(bad));
            assert_eq!(r, Err(Refusal::ForeignHost(bad.into())), "{bad}");
            assert_eq!(r.unwrap_err().to_api().code.http_status(), 403);
        }
        // Not on loopback: any Host (the node may be behind any name).
        assert_eq!(decide(&policy(false), &get("evil.example:7001")), Ok(()));
    }

    #[test]
    fn a_missing_host_is_400_on_http_1_1_only() {
        for loopback in [true, false] {
            let f = Facts {
                host: None,
                ..get("x")
            };
            let r = decide(&policy(loopback), &f);
            assert_eq!(r, Err(Refusal::NoHost));
            assert_eq!(r.unwrap_err().to_api().code.http_status(), 400);
            let old = Facts {
                version: Version::HTTP_10,
                ..f
            };
            assert_eq!(decide(&policy(loopback), &old), Ok(()));
        }
    }

    #[test]
    fn origin_rule() {
        let p = policy(true);
        let with = |origin: &'static str, site: Option<&'static str>| Facts {
            origin: Some(origin),
            sec_fetch_site: site,
            ..get("127.0.0.1:7001")
        };
        // Same origin (default ports and case normalized), and the allowed one.
        for ok in [
            with("http://127.0.0.1:7001", Some("same-origin")),
            with("HTTP://127.0.0.1:7001", None),
            with("https://app.example", Some("cross-site")),
            with("https://APP.example:443", Some("cross-site")),
            Facts {
                host: Some("localhost"),
                ..with("http://localhost:80", None)
            },
        ] {
            assert_eq!(decide(&p, &ok), Ok(()), "{ok:?}");
        }
        for bad in [
            "http://evil.example",
            "http://127.0.0.1:7002",
            "https://127.0.0.1:7001",
            "http://app.example",
            "null",
            "https://app.example/path",
            UNREADABLE,
        ] {
            let r = decide(&p, &with(bad, None));
            assert_eq!(r, Err(Refusal::CrossOrigin(bad.into())), "{bad}");
            assert_eq!(r.as_ref().unwrap_err().counted_as(), Refused::CrossOrigin);
            assert!(r.unwrap_err().to_string().contains("--allow-origin"));
        }
        // Also for POSTs, and before the content type is looked at.
        let f = Facts {
            origin: Some("http://evil.example"),
            ..post(Some("text/plain"))
        };
        assert!(matches!(decide(&p, &f), Err(Refusal::CrossOrigin(_))));
    }

    #[test]
    fn sec_fetch_site_without_origin() {
        let p = policy(true);
        let site = |s: &'static str| Facts {
            sec_fetch_site: Some(s),
            ..get("127.0.0.1:7001")
        };
        assert_eq!(decide(&p, &site("same-origin")), Ok(()));
        assert_eq!(decide(&p, &site("none")), Ok(()), "typed or bookmarked");
        for s in ["cross-site", "same-site", "Cross-Site"] {
            assert_eq!(decide(&p, &site(s)), Err(Refusal::CrossSite(s.into())));
        }
        // A link clicked on another site: a top-level GET navigation passes.
        let nav = |method| Facts {
            method,
            sec_fetch_mode: Some("navigate"),
            sec_fetch_dest: Some("document"),
            ..site("cross-site")
        };
        assert_eq!(decide(&p, &nav(Method::GET)), Ok(()));
        assert!(decide(&p, &nav(Method::POST)).is_err(), "a form POST");
        let framed = Facts {
            sec_fetch_dest: Some("iframe"),
            ..nav(Method::GET)
        };
        assert!(decide(&p, &framed).is_err());
    }

    #[test]
    fn content_type_rule() {
        let p = policy(true);
        for ok in [
            post(Some("application/json")),
            post(Some("Application/JSON; charset=utf-8")),
            post(None),
            Facts {
                body_empty: true,
                ..post(Some("application/x-www-form-urlencoded"))
            },
            Facts {
                path: "/raft/append",
                ..post(Some("application/octet-stream"))
            },
        ] {
            assert_eq!(decide(&p, &ok), Ok(()), "{ok:?}");
        }
        for bad in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "application/json-seq",
            UNREADABLE,
        ] {
            let r = decide(&p, &post(Some(bad)));
            assert_eq!(r, Err(Refusal::ContentType(bad.into())), "{bad}");
            let api = r.unwrap_err().to_api();
            assert_eq!(
                (api.code.as_str(), api.code.http_status()),
                ("unsupported_media_type", 415)
            );
        }
    }

    #[test]
    fn allow_origin_values() {
        for ok in [
            "http://localhost:3000",
            "https://app.example",
            "http://[::1]:8",
        ] {
            assert_eq!(parse_allow_origin(ok), Ok(ok.to_owned()));
        }
        for bad in [
            "*",
            "app.example",
            "ftp://x",
            "https://x/",
            "null",
            "http://",
        ] {
            assert_eq!(
                parse_allow_origin(bad),
                Err(BadOrigin(bad.to_owned())),
                "{bad}"
            );
        }
        let refs = [String::from("*")];
        let none: [String; 0] = [];
        let r = BrowserPolicy::new("http", true, &none, &refs);
        assert_eq!(r.unwrap_err(), BadOrigin("*".into()));
    }
}
