//! TLS (issue 7 part 3): the listener's side (`serve --tls-cert/--tls-key`) and the side
//! of this node's own calls to its peers (Raft RPC, forwarded requests; `--tls-ca`), both
//! rustls with the `ring` provider (no OpenSSL, no aws-lc-rs).
//!
//! Clients and peers share one listener, so `--tls-client-auth` (mTLS) asks *every*
//! connection for a certificate signed by `--tls-ca` at the handshake: a connection
//! without one never reaches HTTP, whether it meant `/raft/…` or `/v1/…`. We chose the
//! handshake over a per-route check because a refused handshake is the one place where a
//! forged peer gets no parser of ours to aim at; the cost is that clients then need a
//! certificate too (the Rust client's `identity_pem`, the CLI's `--tls-client-cert`).
//!
//! Peer calls go to `https://<the --peer address>` and trust `--tls-ca` alone (never the
//! system's roots), so a node's certificate must name the host of its `--peer` address (a
//! DNS name or an IP SAN). A node always offers its own certificate as its client
//! certificate; under mTLS that is what admits it to its peers, so node certificates need
//! the serverAuth and clientAuth extended key usages (or no EKU extension at all).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// The files `serve` was given.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// This node's certificate chain, PEM, leaf first (`--tls-cert`).
    pub cert: PathBuf,
    /// Its private key, PEM: PKCS#8, PKCS#1 or SEC1 (`--tls-key`).
    pub key: PathBuf,
    /// The CA that signs every node's (and, under mTLS, every client's) certificate.
    pub ca: PathBuf,
    /// `--tls-client-auth`: every connection must present a certificate signed by `ca`.
    pub client_auth: bool,
}

/// Why the TLS files could not be used. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    // The cause is the error's source: `chain` prints it after the message.
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no PEM certificate in it", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1)", path.display())]
    NoKey { path: PathBuf },
    #[error("{}: not valid PEM: {why}", path.display())]
    BadPem { path: PathBuf, why: String },
    #[error("{}: not a usable CA certificate: {why}", path.display())]
    BadCa { path: PathBuf, why: String },
    #[error(
        "the key in {} and the certificate in {} do not go together",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    #[error("building the peer client from {} and {}: {why}", cert.display(), key.display())]
    PeerClient {
        cert: PathBuf,
        key: PathBuf,
        why: String,
    },
}

/// The loaded TLS setup of one node: the listener's acceptor and what peer calls trust
/// and present.
pub struct NodeTls {
    acceptor: TlsAcceptor,
    peer_roots: Vec<reqwest::Certificate>,
    identity: reqwest::Identity,
    client_auth: bool,
}

impl std::fmt::Debug for NodeTls {
    // No key material, ever: the config is logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("client_auth", &self.client_auth)
            .finish_non_exhaustive()
    }
}

/// Only the `ring` provider, named here rather than taken from a process-wide default,
/// so the result never depends on which crates happen to install one.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl NodeTls {
    /// Reads and checks every file; a bad one is an error naming it (a startup error,
    /// not a failed handshake later).
    pub fn load(files: &TlsFiles) -> Result<NodeTls, TlsError> {
        let cert_pem = read(&files.cert)?;
        let key_pem = read(&files.key)?;
        let certs = certs_of(&files.cert, &cert_pem)?;
        let key = key_of(&files.key, &key_pem)?;
        let ca = certs_of(&files.ca, &read(&files.ca)?)?;
        let mut roots = RootCertStore::empty();
        for c in &ca {
            roots.add(c.clone()).map_err(|e| TlsError::BadCa {
                path: files.ca.clone(),
                why: e.to_string(),
            })?;
        }
        let server = server_config(files, roots, certs, key)?;
        let peer_roots = ca
            .iter()
            .map(|c| reqwest::Certificate::from_der(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::BadCa {
                path: files.ca.clone(),
                why: e.to_string(),
            })?;
        let peer_client_err = |why: String| TlsError::PeerClient {
            cert: files.cert.clone(),
            key: files.key.clone(),
            why,
        };
        let mut identity_pem = cert_pem;
        identity_pem.push(b'\n');
        identity_pem.extend_from_slice(&key_pem);
        let identity =
            reqwest::Identity::from_pem(&identity_pem).map_err(|e| peer_client_err(chain(&e)))?;
        let tls = NodeTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            peer_roots,
            identity,
            client_auth: files.client_auth,
        };
        // Build one peer client now, so `peer_client` cannot fail later.
        tls.peer_client(reqwest::Client::builder())
            .build()
            .map_err(|e| peer_client_err(chain(&e)))?;
        Ok(tls)
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    pub fn client_auth(&self) -> bool {
        self.client_auth
    }

    /// A peer-call client: https only, `--tls-ca` as the only root, this node's
    /// certificate as its client certificate.
    pub fn peer_client(&self, mut b: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        b = b
            .use_rustls_tls()
            .https_only(true)
            .tls_built_in_root_certs(false)
            .identity(self.identity.clone());
        for c in &self.peer_roots {
            b = b.add_root_certificate(c.clone());
        }
        b
    }
}

/// The scheme of peer URLs: peers' `--peer` addresses stay `host:port`.
pub fn peer_scheme(tls: Option<&NodeTls>) -> &'static str {
    match tls {
        Some(_) => "https",
        None => "http",
    }
}

fn server_config(
    files: &TlsFiles,
    roots: RootCertStore,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    let builder = if files.client_auth {
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| TlsError::BadCa {
                path: files.ca.clone(),
                why: e.to_string(),
            })?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config =
        builder
            .with_single_cert(certs, key)
            .map_err(|source| TlsError::KeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
                source,
            })?;
    // The listener speaks HTTP/1.1 only (listener.rs).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn certs_of(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_owned(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn key_of(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_owned(),
        },
        e => TlsError::BadPem {
            path: path.to_owned(),
            why: e.to_string(),
        },
    })
}

/// An error and its sources on one line, `outer: cause: its cause` (reqwest's own
/// message names no cause). A source whose text the line already ends with is not
/// repeated: some errors name their cause in their own message too.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
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

    struct Made {
        dir: tempfile::TempDir,
        files: TlsFiles,
    }

    /// A CA and one node certificate for 127.0.0.1, written to a temp dir.
    fn made(client_auth: bool) -> Made {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: String| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let files = TlsFiles {
            cert: write("node.pem", cert.pem()),
            key: write("node.key", key.serialize_pem()),
            ca: write("ca.pem", ca.pem()),
            client_auth,
        };
        Made { dir, files }
    }

    #[test]
    fn good_files_load_with_and_without_client_auth() {
        let m = made(false);
        assert!(!NodeTls::load(&m.files).unwrap().client_auth());
        let m = made(true);
        assert!(NodeTls::load(&m.files).unwrap().client_auth());
    }

    #[test]
    fn a_missing_file_is_named() {
        let m = made(false);
        let mut files = m.files.clone();
        files.key = m.dir.path().join("absent.key");
        let err = NodeTls::load(&files).unwrap_err().to_string();
        assert!(err.contains("absent.key"), "{err}");
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_naming_both_files() {
        let m = made(false);
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(&m.files.key, other.serialize_pem()).unwrap();
        let err = NodeTls::load(&m.files).unwrap_err();
        assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("node.key") && err.contains("node.pem"),
            "{err}"
        );
    }

    #[test]
    fn files_without_pem_items_are_named() {
        let m = made(false);
        std::fs::write(&m.files.ca, "not a certificate\n").unwrap();
        let err = NodeTls::load(&m.files).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err:?}");
        assert!(err.to_string().contains("ca.pem"), "{err}");
        let m = made(false);
        // A certificate where the key should be.
        std::fs::copy(&m.files.cert, &m.files.key).unwrap();
        let err = NodeTls::load(&m.files).unwrap_err();
        assert!(matches!(err, TlsError::NoKey { .. }), "{err:?}");
        assert!(err.to_string().contains("node.key"), "{err}");
    }
}
