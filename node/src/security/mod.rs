//! Who may do what: client tokens and their scopes, peer RPC authentication, the data
//! dir's identity, and TLS.
//!
//! - [`auth`]: client tokens (`serve --auth-file`): roles, routes, owner prefixes.
//! - [`scope`]: tenant scopes of tokens (queues, job-id prefix, idempotency keys).
//! - [`peer_auth`]: peer RPC authentication (HMAC over the body) and the cluster-id check.
//! - [`peer_replay`]: the replay window of signed peer requests.
//! - [`identity`]: the data dir's identity file (node and cluster id) and its file modes.
//! - [`tls`]: TLS for the listener and for peer calls (rustls, `ring`), mTLS.
//!
//! A lower layer: anyone may import it. It imports only `time`, `telemetry` and `types`,
//! never a layer above (`store`, `raft`, `node`, `http`, `server`, `cli`).

pub mod auth;
pub mod identity;
pub mod peer_auth;
pub mod peer_replay;
pub mod scope;
pub mod tls;
