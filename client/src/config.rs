//! Client configuration and its builder: endpoints, timeouts, retries, deadline policy,
//! the cleanup window of cancelled work, and the bearer token a node started with
//! `--auth-file` asks for.
//!
//! Every knob has a named default, chosen against the node's own timings (write timeout
//! 5 s, leader wait 3 s, election timeout 0.5–1 s) and documented where it is defined.
//!
//! Below the client (issue 45 item 7): imports `tls`, `retry`, `deadline`, `clock` and
//! `error`, never `client`, `lease` or `run`; `ClientBuilder::checked` hands `client`
//! what its `build` makes a `Client` of.

use std::time::Duration;

use crate::clock::{Clock, LocalClock};
use crate::deadline::DeadlinePolicy;
use crate::error::Error;
use crate::retry::RetryPolicy;
use crate::tls::TlsConfig;

/// Everything a client (`Client`) can be tuned with.
#[derive(Debug, Clone)]
pub struct Config {
    /// TCP connect timeout per attempt. Short, because a refused or silent node is skipped
    /// for the next one; 500 ms is ample on a LAN.
    pub connect_timeout: Duration,
    /// Whole-attempt timeout (connect to last body byte). A follower may legitimately
    /// take its leader wait (3 s) plus one forward (the leader's 3 s wait + 5 s write
    /// timeout) before answering 503/504, 11 s in all: 12 s stays above that. A timed-out
    /// write is retried with the same key, so cutting it short is safe, only wasteful.
    /// (Background renews use much shorter attempts, see `keepalive`.)
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    pub deadline: DeadlinePolicy,
    /// How long before a lease's local deadline the work of `Lease::run` is told to stop
    /// (`LeaseCtx::cancelled`, in `run`) when no renew has succeeded by then: the time it
    /// has to clean up before it is dropped. `None`: `min(TTL/10, 5 s)`. Capped at TTL/3
    /// per lease
    /// ([`cleanup_window`](crate::deadline::cleanup_window)).
    pub cleanup_window: Option<Duration>,
    /// Sent as `Authorization: Bearer <token>` on every request (lease renewals and
    /// keep-alives included). `None`: no header, for nodes without `--auth-file`.
    pub token: Option<Token>,
    /// The CA for `https://` endpoints and the client certificate for mTLS.
    pub tls: TlsConfig,
    /// The clock lease deadlines are kept on. Default [`Clock::boot`]: on Linux it
    /// counts time spent suspended (see `clock`).
    pub clock: Clock,
}

/// A client token. `Debug` never shows it, so a logged config leaks nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(token: impl Into<String>) -> Token {
        Token(token.into())
    }

    /// The token itself, for the `Authorization` header.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// Non-empty visible ASCII without spaces: what a header carries unchanged, and
    /// what `--auth-file` accepts.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.0.is_empty() || !self.0.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::Config(
                "the token must be non-empty visible ASCII without spaces".into(),
            ));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(12),
            retry: RetryPolicy::default(),
            deadline: DeadlinePolicy::default(),
            cleanup_window: None,
            token: None,
            tls: TlsConfig::default(),
            clock: Clock::default(),
        }
    }
}

/// Builds a client: `Client::builder(["127.0.0.1:7001", …]).margin(…).build()`.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    config: Config,
}

impl ClientBuilder {
    pub(crate) fn new(endpoints: Vec<String>) -> Self {
        ClientBuilder {
            endpoints,
            config: Config::default(),
        }
    }

    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.config.connect_timeout = d;
        self
    }

    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.config.request_timeout = d;
        self
    }

    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// Attempts per call, the first included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.config.retry.max_attempts = n;
        self
    }

    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.config.retry.backoff_base = base;
        self.config.retry.backoff_max = max;
        self
    }

    pub fn deadline_policy(mut self, policy: DeadlinePolicy) -> Self {
        self.config.deadline = policy;
        self
    }

    /// Fraction of a TTL assumed lost to clock-rate difference, in `[0, 1)`.
    pub fn drift(mut self, drift: f64) -> Self {
        self.config.deadline.drift = drift;
        self
    }

    /// Time kept in reserve before the store's earliest expiry to stop the work.
    pub fn margin(mut self, margin: Duration) -> Self {
        self.config.deadline.margin = margin;
        self
    }

    /// How long before the local deadline cancelled work is told to stop, when renewing
    /// fails ([`Config::cleanup_window`]).
    pub fn cleanup_window(mut self, window: Duration) -> Self {
        self.config.cleanup_window = Some(window);
        self
    }

    /// The clock lease deadlines are kept on (a test's fake clock, say).
    pub fn clock(mut self, clock: impl LocalClock) -> Self {
        self.config.clock = Clock::new(clock);
        self
    }

    /// The bearer token for nodes started with `--auth-file`.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.config.token = Some(Token::new(token));
        self
    }

    /// The CA certificate(s), PEM, that sign the nodes' certificates: the only roots
    /// trusted for `https://` endpoints (which need one).
    pub fn ca_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.config.tls = self.config.tls.with_ca_pem(pem);
        self
    }

    /// A client certificate (PEM chain, leaf first) and its key (PEM), for nodes started
    /// with `--tls-client-auth`.
    pub fn identity_pem(mut self, cert_pem: &[u8], key_pem: &[u8]) -> Self {
        self.config.tls = self.config.tls.with_identity_pem(cert_pem, key_pem);
        self
    }

    /// The checked endpoints (normalized) and config that `build` (in `client`, which
    /// this file does not import) makes a `Client` of.
    pub(crate) fn checked(self) -> Result<(Vec<String>, Config), Error> {
        self.config
            .deadline
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        if let Some(t) = &self.config.token {
            t.validate()?;
        }
        if self.config.retry.max_attempts == 0 {
            return Err(Error::Config("max_attempts must be at least 1".into()));
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| normalize_endpoint(e))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(Error::Config("at least one endpoint is needed".into()));
        }
        if let Some(e) = endpoints.iter().find(|e| e.starts_with("https://")) {
            if !self.config.tls.has_ca() {
                return Err(Error::Config(format!(
                    "endpoint {e} needs the CA that signs the nodes' certificates \
                     (ca_cert_pem; the CLI's --tls-ca)"
                )));
            }
        }
        Ok((endpoints, self.config))
    }
}

/// `host:port` or `http://host:port[/]` → `http://host:port`; `https://host:port[/]` →
/// `https://host:port`. Any other scheme is refused here rather than failing on every
/// request later.
pub(crate) fn normalize_endpoint(raw: &str) -> Result<String, Error> {
    let trimmed = raw.trim();
    let (scheme, rest) = if let Some(rest) = trimmed.strip_prefix("http://") {
        ("http", rest)
    } else if let Some(rest) = trimmed.strip_prefix("https://") {
        ("https", rest)
    } else if trimmed.contains("://") {
        return Err(Error::Config(format!(
            "endpoint {raw:?}: only http:// and https:// are supported"
        )));
    } else {
        ("http", trimmed)
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') {
        return Err(Error::Config(format!(
            "endpoint {raw:?} must be host:port, http://host:port or https://host:port"
        )));
    }
    Ok(format!("{scheme}://{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalized() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:7001").unwrap(),
            "http://127.0.0.1:7001"
        );
        assert_eq!(
            normalize_endpoint(" http://node-1:7001/ ").unwrap(),
            "http://node-1:7001"
        );
        assert_eq!(
            normalize_endpoint("https://node-1:7001/").unwrap(),
            "https://node-1:7001"
        );
        assert!(normalize_endpoint("ftp://x:1").is_err());
        assert!(normalize_endpoint("https://").is_err());
        assert!(normalize_endpoint("").is_err());
        assert!(normalize_endpoint("http://x:1/v1").is_err());
    }

    #[test]
    fn bad_configs_are_refused() {
        let b = || ClientBuilder::new(vec!["127.0.0.1:1".into()]);
        assert!(matches!(b().drift(1.0).build(), Err(Error::Config(_))));
        assert!(matches!(b().max_attempts(0).build(), Err(Error::Config(_))));
        assert!(matches!(
            ClientBuilder::new(vec![]).build(),
            Err(Error::Config(_))
        ));
        assert!(b().drift(0.05).build().is_ok());
        for bad in ["", "a b", "tab\there", "é"] {
            assert!(
                matches!(b().token(bad).build(), Err(Error::Config(_))),
                "token {bad:?}"
            );
        }
        assert!(b().token("s3cr3t-a").build().is_ok());
    }

    #[test]
    fn tokens_never_show_in_debug_output() {
        let c = ClientBuilder::new(vec!["127.0.0.1:1".into()]).token("s3cr3t-a");
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }
}
