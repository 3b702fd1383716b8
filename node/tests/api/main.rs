//! The HTTP API as a client sees it, on in-process three-node clusters: the browser
//! guard, client tokens and scopes, the listener's limits and hostile load, JSON depth
//! and idempotency bounds, version 1.1's batches (`batches`) and job lifecycle (scheduling, priorities, backoff,
//! fail, retry, redrive, cancellation, progress; its limits, roles and tenant scopes:
//! `lifecycle`), the membership routes, `/metrics` and the dashboard's routes.
//!
//! One test binary (issue 18 item 6: each binary links the whole server once). The
//! modules share nothing but `common/`; libtest runs their tests in parallel threads,
//! so no test here touches process-wide state (env vars, the umask, signals), and every
//! server binds port 0. Tests that burn CPU on purpose (the fuzz replay) or drive an
//! outside program (Chromium) have binaries of their own: `store`, `ui_browser.rs`.
//!
//! May import: `leasehold_node`, `leasehold_statemachine`, dev dependencies, and
//! `common`.

#[path = "../common/mod.rs"]
mod common;

mod batches;
mod browser;
mod client_auth;
mod events;
mod hostile_load;
mod idempotency_bytes;
mod json_depth;
mod lifecycle;
mod limits;
mod membership_api;
mod metrics;
mod openapi;
mod ui_api;
