//! TLS settings of a client: the CA that signs the nodes' certificates — the only root
//! trusted, never the system's, because a cluster's certificates come from its own CA —
//! and, for nodes started with `--tls-client-auth` (mTLS), a client certificate and key.
//!
//! `https://` endpoints need the CA; `http://` ones ignore these settings.

use crate::error::Error;

/// What a client trusts and presents over TLS. `Debug` never shows the key.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    ca_pem: Option<Vec<u8>>,
    identity_pem: Option<Vec<u8>>,
}

impl TlsConfig {
    /// Trust the CA certificate(s) in `pem` (and nothing else) for `https://` endpoints.
    pub fn with_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> TlsConfig {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Present this certificate chain (PEM, leaf first) and its private key (PEM) to
    /// nodes that require client certificates.
    pub fn with_identity_pem(mut self, cert_pem: &[u8], key_pem: &[u8]) -> TlsConfig {
        let mut both = cert_pem.to_vec();
        both.push(b'\n');
        both.extend_from_slice(key_pem);
        self.identity_pem = Some(both);
        self
    }

    pub fn has_ca(&self) -> bool {
        self.ca_pem.is_some()
    }

    pub fn has_identity(&self) -> bool {
        self.identity_pem.is_some()
    }

    /// Adds the CA as the only root and the identity, if any, to `b`.
    pub(crate) fn apply(
        &self,
        mut b: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, Error> {
        b = b.use_rustls_tls().tls_built_in_root_certs(false);
        if let Some(pem) = &self.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::Config(format!("the CA certificate: {}", chain(&e))))?;
            if certs.is_empty() {
                return Err(Error::Config(
                    "the CA certificate: no PEM certificate in it".into(),
                ));
            }
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        if let Some(pem) = &self.identity_pem {
            let id = reqwest::Identity::from_pem(pem).map_err(|e| {
                Error::Config(format!("the client certificate and key: {}", chain(&e)))
            })?;
            b = b.identity(id);
        }
        Ok(b)
    }
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca_pem.is_some())
            .field(
                "identity",
                &self.identity_pem.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// An error and its sources on one line: reqwest's own message names no cause, and the
/// cause ("invalid peer certificate: UnknownIssuer") is what a user must read.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        // hyper-util and reqwest repeat a cause in their own message now and then.
        if !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_key_never_shows_in_debug_output() {
        let tls = TlsConfig::default().with_identity_pem(b"CERT", b"SECRET-KEY-BYTES");
        let shown = format!("{tls:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(tls.has_identity() && !tls.has_ca(), "{shown}");
    }
}
