//! Who may do what: client tokens and their scopes, the browser guard's rules, peer RPC
//! authentication, the data dir's identity, and TLS. Policies and pure decisions; the
//! HTTP middleware that applies them is in `http/` (`client_auth.rs`, `browser.rs`).
//!
//! - [`auth`]: client tokens (`serve --auth-file`): roles, routes, owner prefixes.
//! - [`scope`]: tenant scopes of tokens (queues, job-id prefix, idempotency keys).
//! - [`browser`]: what a web page may not make a node do (`--allow-origin`, Host names).
//! - [`peer_auth`]: peer RPC authentication (HMAC over the body) and the cluster-id check.
//! - [`peer_replay`]: the replay window of signed peer requests.
//! - [`identity`]: the data dir's identity file (node and cluster id) and its file modes.
//! - [`cluster_id`]: a cluster's identity; [`hex`]: bytes as hex text.
//! - [`tls`]: TLS for the listener and for peer calls (rustls, `ring`), mTLS.
//!
//! [`Guards`] bundles the policies a running node applies.
//!
//! A lower layer: anyone may import it. It imports only `time`, `telemetry` and `types`,
//! never a layer above (`store`, `raft`, `node`, `http`, `server`).

pub mod auth;
pub mod browser;
pub mod cluster_id;
pub mod hex;
pub mod identity;
pub mod peer_auth;
pub mod peer_replay;
pub mod scope;
pub mod tls;

use std::sync::Arc;

/// The policies a running node applies to who calls it.
pub struct Guards {
    /// Client tokens (`serve --auth-file`); `None`: the client API is open.
    pub auth: Option<Arc<auth::AuthPolicy>>,
    /// Peer RPC: the secret, this node's cluster id, what `/raft/…` admits.
    pub peer: Arc<peer_auth::PeerGuard>,
    /// What the browser guard admits (`--allow-origin`, Host names).
    pub browser: browser::BrowserPolicy,
}
