//! Our own accept loop in place of `axum::serve`, so that every resource a client can tie
//! up is bounded (issue 7 part 4, issue 17 items 2 and 6):
//!
//! | what | limit | past it |
//! |---|---|---|
//! | open connections | [`MAX_CONNECTIONS`]; past [`conns::HIGH_WATER_PERCENT`] of it, idle ones are evicted | the new connection is closed at once, only if none is idle |
//! | evicted connections that never sent a byte | held, unread, for [`opening::EVICTED_LINGER_MS`] (so reconnecting on close cannot churn the node), at most `max_connections` of them | closed at once |
//! | open connections from one source address | [`MAX_CONNECTIONS_PER_SOURCE`] | the new connection is closed at once |
//! | request head (slow loris) and keep-alive idle time | [`HEADER_READ_TIMEOUT_MS`]; under pressure [`conns::PRESSURE_IDLE_MS`] | connection closed |
//! | request head size / header count | [`MAX_HEADER_BYTES`] / [`MAX_HEADERS`] | 431, connection closed |
//! | a body on GET, HEAD or DELETE | none is read | 400 `invalid_argument` after [`BODY_REFUSAL_DELAY_MS`] (a tarpit, holding no slot), connection closed |
//! | client requests in flight | [`MAX_INFLIGHT`] | 503 `unavailable` + `Retry-After`, at once |
//! | … of one caller (token, else source address; a member's address uncapped without auth) | [`MAX_INFLIGHT_PER_CALLER`] | 503 + `Retry-After`, at once |
//! | claim-next waits (`wait_ms` > 0), a separate budget | [`MAX_LONG_POLLS`], per caller [`MAX_LONG_POLLS_PER_CALLER`] | 503 + `Retry-After`, at once |
//! | `/raft/…` requests in flight | [`MAX_INFLIGHT_RAFT`], a separate budget, taken only once the request's peer-auth header is verified (`http/raft_rpc.rs`) | 503, at once |
//! | one client request, body upload included | [`REQUEST_TIMEOUT_MS`] | 504 `timeout` |
//! | one `/raft/…` request | [`RAFT_REQUEST_TIMEOUT_MS`] | 504 |
//!
//! Every refusal is counted in `leasehold_listener_refused_total{reason}` (`Refused`).
//!
//! Peers share this port with clients (Raft RPC, and a follower forwarding a client's
//! write to the leader). They are kept reachable by eviction rather than by a second
//! `--peer-listen` port: a port of its own would need every peer address and the
//! membership API to carry two addresses, while an evicting table already leaves a new
//! connection room whenever some connection is idle, and an attacker's idle sockets are
//! always evicted before a peer's busy link (listener/conns.rs says how). The per-source
//! cap and the per-caller slots (listener/slots.rs) keep one address or one token from
//! owning the table or a budget; peers on one host with the attacker are protected by
//! the eviction, not by the per-source cap.
//!
//! Body sizes are bounded by each handler (`http::read_body`, `RAFT_BODY_BYTES_MAX`); a
//! Raft body must also arrive within its own deadline (`http::raft_rpc::body_deadline`).
//!
//! Nothing waits in a queue here: a request over its in-flight budget is answered 503 at
//! once, so a burst turns into fast retries with the same `Idempotency-Key`, never into
//! unbounded memory or latency. Raft traffic has its own budget, so client load can never
//! starve heartbeats and appends (and cost this node its leadership).
//!
//! A request cut off by its timeout is answered 504 `timeout` and not 503: if it was a
//! write, it may already have been proposed, and an entry that reached Raft may still
//! commit and apply after the answer — its outcome is unknown, exactly docs/api.md's 504. A
//! retry with the same `Idempotency-Key` gets the real answer.
//!
//! # Why these limits are not `tower` layers
//!
//! The router is a tower service, and this loop calls it as one. Issue 18 asked for the
//! request timeout, the in-flight limits and load shedding as tower layers where they
//! fit; they were weighed and kept here, because each needs what a layer on the router
//! does not have or does not do:
//! - `tower::limit::ConcurrencyLimit` makes a request *wait* for a permit, one pool for
//!   all; the budgets here refuse at once (503 + `Retry-After`), share a pool fairly per
//!   caller (a token, else the source address, which only the accept loop knows), and
//!   let a handler move its slot to the long-poll budget (`HeldSlot`).
//!   `tower::load_shed` sheds only when the inner service is not ready, which a router
//!   always is.
//! - The request timeout depends on the budget (client or Raft) and answers 504 with the
//!   API's error body, counted by reason; `tower::timeout` + `HandleErrorLayer` could give
//!   the 504, but not the per-budget choice without a second router.
//! - The connection limits (the table, eviction, the per-source cap, the opening
//!   linger, header read timeout, the body tarpit's evictability) act on connections,
//!   below any request service: they are what axum's own `serve` cannot do.
//!
//! So [`handle`] is the one place a request's slot and deadline are decided, from the
//! budget class of its route (`http/routes.rs`), which it resolves once for everyone
//! after it and hands on as the request's [`Admission`].
//!
//! Imports `answer.rs` and `routes.rs` of `http` (and its own files); `node`, `telemetry`.
//!
//! [`serve_connection`] is generic over the byte stream so that TLS can wrap the accepted
//! `TcpStream` (a tokio-rustls acceptor) before hyper sees it.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use leasehold_statemachine::{ApiError, ErrorCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use self::conns::{Activity, Admitted, ConnGuard, Conns};
use self::opening::Opening;
use self::slots::{CallerKey, Full, HeldSlot, Pool};
use super::answer::{error_response, stamp};
use super::routes::{self, BudgetClass, Resolved};
use crate::node::Node;
use crate::telemetry::metrics::Refused;

pub mod conns;
pub mod opening;
pub mod slots;

/// Open connections at most. Past [`conns::HIGH_WATER_PERCENT`] of it idle connections
/// are evicted to make room; a new connection is closed at once only when none is idle.
pub const MAX_CONNECTIONS: usize = 1024;
/// Open connections from one source address at most: a quarter of the table, so one
/// address cannot own it, with room for a host running several nodes and their clients.
pub const MAX_CONNECTIONS_PER_SOURCE: usize = 256;
/// A request head must arrive whole within this long of the connection becoming ready
/// for it — on a new connection, and after each response on a kept-alive one, so this is
/// also the keep-alive idle timeout (hyper starts the timer when it starts reading a head).
pub const HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Largest request head (request line + headers) read, in bytes; hyper's floor is 8 KiB.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most headers in one request.
pub const MAX_HEADERS: usize = 64;
/// Client requests (everything but `/raft/…` and `/healthz`) in flight at once.
pub const MAX_INFLIGHT: usize = 256;
/// Client requests one caller (token, or source address without one) may have in
/// flight: a quarter of [`MAX_INFLIGHT`], so one token never takes every slot.
pub const MAX_INFLIGHT_PER_CALLER: usize = 64;
/// Claim-next requests waiting (`wait_ms > 0`) at once: their own budget, apart from
/// [`MAX_INFLIGHT`], since each may hold its request for 30 s.
pub const MAX_LONG_POLLS: usize = 512;
/// Claim-next waits one caller may have at once: a quarter of [`MAX_LONG_POLLS`].
pub const MAX_LONG_POLLS_PER_CALLER: usize = 128;
/// `/raft/…` requests in flight at once: a separate budget client load cannot use.
pub const MAX_INFLIGHT_RAFT: usize = 64;
/// Longest a client request may take, reading its body included. Above the longest
/// legitimate one: a queue claim's `wait_ms` (30 s) plus a write's timeout (5 s).
pub const REQUEST_TIMEOUT_MS: u64 = 45_000;
/// Longest a `/raft/…` request may take (a 64 MiB snapshot chunk on a slow link).
pub const RAFT_REQUEST_TIMEOUT_MS: u64 = 120_000;
/// On shutdown, how long open connections get to finish their requests.
pub const SHUTDOWN_DRAIN_MS: u64 = 5_000;

/// The limits of one listener; `Default` is the constants above.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    pub max_connections: usize,
    pub max_connections_per_source: usize,
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_inflight: usize,
    pub max_inflight_per_caller: usize,
    pub max_long_polls: usize,
    pub max_long_polls_per_caller: usize,
    pub max_inflight_raft: usize,
    pub request_timeout: Duration,
    pub raft_request_timeout: Duration,
    /// How long an evicted connection that never sent a byte is held before it is closed
    /// (listener/opening.rs).
    pub evicted_linger: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: MAX_CONNECTIONS,
            max_connections_per_source: MAX_CONNECTIONS_PER_SOURCE,
            header_read_timeout: Duration::from_millis(HEADER_READ_TIMEOUT_MS),
            max_header_bytes: MAX_HEADER_BYTES,
            max_headers: MAX_HEADERS,
            max_inflight: MAX_INFLIGHT,
            max_inflight_per_caller: MAX_INFLIGHT_PER_CALLER,
            max_long_polls: MAX_LONG_POLLS,
            max_long_polls_per_caller: MAX_LONG_POLLS_PER_CALLER,
            max_inflight_raft: MAX_INFLIGHT_RAFT,
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS),
            raft_request_timeout: Duration::from_millis(RAFT_REQUEST_TIMEOUT_MS),
            evicted_linger: Duration::from_millis(opening::EVICTED_LINGER_MS),
        }
    }
}

/// Longest a streamed response ([`BudgetClass::Stream`], the planned event feed) stays
/// open; then it ends and the client reconnects where it left off.
pub const STREAM_TIMEOUT_MS: u64 = 300_000;

/// What the listener decided for one request, handed to the router as one request
/// extension (one allocation, as the slot alone was): its route, resolved here once
/// (`routes::resolve`) for the token check, the metrics, the handlers and the answer;
/// and the slot of its budget it holds.
#[derive(Clone)]
pub struct Admission {
    pub route: Resolved,
    /// A client request's slot, fair per caller; a handler may move it to the long polls.
    pub slot: Option<HeldSlot>,
    /// For `/raft/…`: the pool its handler takes a slot from once peer auth verifies.
    pub raft: Option<RaftSlots>,
}

impl Admission {
    /// A request the router serves without this listener (tests): its route, no slot.
    pub fn unlimited(route: Resolved) -> Admission {
        Admission {
            route,
            slot: None,
            raft: None,
        }
    }
}

/// The [`Admission`] of a request, if it came through the listener or the router's
/// outer layer (which resolves the route of a request that did not).
pub fn admission_of<B>(req: &Request<B>) -> Option<&Admission> {
    req.extensions().get::<Admission>()
}

/// The route of a request (`Unknown` if it was never resolved, which the router's outer
/// layer rules out).
pub fn route_of<B>(req: &Request<B>) -> Resolved {
    admission_of(req).map_or(Resolved::Unknown, |a| a.route)
}

/// What every connection of one listener shares.
struct ListenerState {
    app: Router,
    /// For the `X-Leasehold-Node`/`-Leader` headers of the answers given here.
    node: Arc<Node>,
    limits: ListenerLimits,
    client_slots: Arc<Pool>,
    long_polls: Arc<Pool>,
    raft_slots: Arc<Semaphore>,
    /// Evicted never-spoken connections held open (listener/opening.rs), at most
    /// `max_connections`.
    lingering: Arc<Semaphore>,
}

/// The accept queue's length asked of the kernel (capped by `net.core.somaxconn`, 4096 on
/// current kernels). tokio's (mio's) default, 128, overflowed under issue 17's connection flood:
/// a client's SYN was dropped and retried a second later, its call's latency 1 s.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds a listener for [`serve`] with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as tokio's
/// `TcpListener::bind` sets, so a restarted node rebinds its port at once).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `app` on `listener` until `cancel` fires, then drains open connections for at
/// most [`SHUTDOWN_DRAIN_MS`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    node: Arc<Node>,
    limits: ListenerLimits,
    tls: Option<TlsAcceptor>,
    cancel: CancellationToken,
) {
    let conns = Conns::new(limits.max_connections, limits.max_connections_per_source);
    let shared = Arc::new(ListenerState {
        app,
        node,
        client_slots: Pool::new(limits.max_inflight, limits.max_inflight_per_caller),
        long_polls: Pool::new(limits.max_long_polls, limits.max_long_polls_per_caller),
        raft_slots: Arc::new(Semaphore::new(limits.max_inflight_raft)),
        lingering: Arc::new(Semaphore::new(limits.max_connections)),
        limits,
    });
    let mut tasks = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set stays as small as the open ones.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off briefly rather than spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(permit) = admit(&conns, &shared.node, peer) else {
            drop(tcp);
            continue;
        };
        // Without TCP_NODELAY a response written in two parts waits for the peer's
        // delayed ACK (~40 ms) before its second part: that capped a replication round
        // at ~40 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        tasks.spawn(serve_tcp(
            tcp,
            peer,
            tls.clone(),
            shared.clone(),
            permit,
            cancel.clone(),
        ));
        // One connection per turn: a burst of connects (an attacker's reconnect wave) must
        // not hold this worker while requests on open connections wait behind it.
        tokio::task::yield_now().await;
    }
    drop(listener);
    drain(tasks).await;
}

/// Waits at most [`SHUTDOWN_DRAIN_MS`] for the open connections to finish, then closes
/// the rest.
async fn drain(mut tasks: JoinSet<()>) {
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_DRAIN_MS), drain)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown drain: closing them");
        tasks.abort_all();
    }
}

/// A place in the connection table for a connection from `peer`, counting what was
/// evicted for it or why it is refused. Refusals log at debug: anyone can make them.
fn admit(conns: &Arc<Conns>, node: &Node, peer: SocketAddr) -> Option<ConnGuard> {
    match conns.admit(peer.ip()) {
        Ok(Admitted { guard, evicted }) => {
            for _ in 0..evicted {
                node.metrics.refused(Refused::IdleEvicted);
            }
            Some(guard)
        }
        Err(why) => {
            node.metrics.refused(why);
            tracing::debug!(%peer, ?why, "connection limit reached: closing a new connection");
            None
        }
    }
}

/// One accepted connection: its opening (listener/opening.rs: an evicted connection that
/// never spoke lingers), then TLS if configured, then HTTP.
async fn serve_tcp(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    shared: Arc<ListenerState>,
    slot: ConnGuard,
    cancel: CancellationToken,
) {
    let timeout = shared.limits.header_read_timeout;
    match opening::first_byte(&tcp, &slot, timeout, &cancel).await {
        Opening::Spoke => {}
        Opening::Evicted => {
            drop(slot);
            let linger = shared.limits.evicted_linger;
            return opening::linger(tcp, &shared.lingering, linger, &cancel).await;
        }
        Opening::Silent | Opening::Shutdown => return,
    }
    match tls {
        Some(acceptor) => serve_tls_connection(tcp, peer, acceptor, shared, slot, cancel).await,
        None => serve_connection(tcp, peer.ip(), shared, slot, cancel).await,
    }
}

/// The TLS step (`serve --tls-*`, tls.rs): the handshake, in the connection's own task
/// and bounded by the header read timeout (a client that never finishes its handshake is
/// a slow client like any other), then HTTP on the decrypted stream. A failed handshake —
/// plain HTTP to this port, a certificate of another CA, no client certificate under
/// mTLS — closes the connection before any HTTP is parsed.
async fn serve_tls_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    shared: Arc<ListenerState>,
    connection_slot: ConnGuard,
    cancel: CancellationToken,
) {
    let handshake = tokio::time::timeout(shared.limits.header_read_timeout, acceptor.accept(tcp));
    let accepted = tokio::select! {
        r = handshake => r,
        _ = cancel.cancelled() => return,
    };
    match accepted {
        Ok(Ok(tls)) => serve_connection(tls, peer.ip(), shared, connection_slot, cancel).await,
        // Debug, not warn: anyone can make these, as often as they can connect.
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}

/// Serves HTTP/1 on one connection, whatever carries its bytes (TCP or TLS).
async fn serve_connection<IO>(
    io: IO,
    source: IpAddr,
    shared: Arc<ListenerState>,
    connection_slot: ConnGuard,
    cancel: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &shared.limits;
    let activity = connection_slot.activity.clone();
    let service = {
        let shared = shared.clone();
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let shared = shared.clone();
            // Refused before it counts as a request in progress: its tarpit leaves the
            // connection idle, and so evictable (a client sharing the sender's address
            // still gets in).
            let unwanted_body = declares_unwanted_body(&req);
            let in_progress = (!unwanted_body).then(|| InProgress::start(activity.clone()));
            async move {
                let resp = if unwanted_body {
                    refuse_body(&shared, &req).await
                } else {
                    handle(&shared, source, req).await
                };
                drop(in_progress);
                Ok::<_, Infallible>(resp)
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(HYPER_BUF_MIN))
        .max_headers(limits.max_headers);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = cancel.cancelled() => {
            // Finish the request in progress, then close.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        _ = connection_slot.closing.cancelled() => {
            // Evicted while idle: close, giving a request that raced in a moment.
            conn.as_mut().graceful_shutdown();
            let grace = Duration::from_millis(EVICTED_GRACE_MS);
            tokio::time::timeout(grace, conn).await.unwrap_or(Ok(()))
        }
    };
    if let Err(e) = result {
        // Timeouts, oversized heads and clients that hang up: normal operating events.
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// How long an evicted connection may finish a request that started as it was picked.
const EVICTED_GRACE_MS: u64 = 200;

/// A request in progress on a connection, for the connection table's idea of idle;
/// ended on drop, so a request cut off by its connection's end still ends.
struct InProgress(Arc<Activity>);

impl InProgress {
    fn start(activity: Arc<Activity>) -> InProgress {
        activity.request_started();
        InProgress(activity)
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// hyper refuses a read buffer under 8 KiB (it panics).
const HYPER_BUF_MIN: usize = 8 * 1024;

// The defaults leave room for the longest legitimate request (a queue claim's longest
// wait plus a write's 5 s timeout), and are ones hyper accepts.
const _: () = assert!(REQUEST_TIMEOUT_MS > leasehold_statemachine::limits::WAIT_MS_MAX + 5_000);
const _: () = assert!(MAX_HEADER_BYTES >= HYPER_BUF_MIN);

/// The Raft budget, handed to `/raft/…` handlers in the request's extensions: they take
/// a slot only once the request's header has authenticated it (`http/raft_rpc.rs`), so a
/// sender without the peer secret never holds one.
#[derive(Clone)]
pub struct RaftSlots(pub Arc<Semaphore>);

/// One request (a body where none belongs was refused before, `refuse_body`): resolve
/// its route (the one time it is), take an in-flight slot of its budget or answer 503 at
/// once, then run the router under the budget's timeout. A Raft request takes its slot
/// in its handler, once authenticated ([`RaftSlots`]).
async fn handle(
    shared: &ListenerState,
    source: IpAddr,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let route = routes::resolve(req.method(), req.uri().path());
    let budget = route.budget();
    let timeout = timeout_of(&shared.limits, budget);
    let slot = match take_slot(shared, source, &req, budget) {
        Ok(slot) => slot,
        Err(why) => {
            shared.node.metrics.refused(why);
            return stamped(&shared.node, overloaded(why));
        }
    };
    let raft = (budget == BudgetClass::Raft).then(|| RaftSlots(shared.raft_slots.clone()));
    req.extensions_mut().insert(Admission { route, slot, raft });
    let mut app = shared.app.clone();
    let call = tower_service::Service::call(&mut app, req);
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(never)) => match never {},
        Err(_) => {
            shared.node.metrics.refused(match budget {
                BudgetClass::Raft => Refused::RaftRequestTimeout,
                _ => Refused::RequestTimeout,
            });
            timed_out(&shared.node, timeout)
        }
    }
}

/// The timeout of a budget class: a long poll's is the client one, which is kept above
/// the longest wait plus a write (the assertion below).
fn timeout_of(limits: &ListenerLimits, budget: BudgetClass) -> Duration {
    match budget {
        BudgetClass::Client | BudgetClass::LongPoll | BudgetClass::Exempt => limits.request_timeout,
        BudgetClass::Stream => Duration::from_millis(STREAM_TIMEOUT_MS),
        BudgetClass::Raft => limits.raft_request_timeout,
    }
}

/// A slot of `budget` for this request (`None` for the exempt `/healthz`, and for Raft,
/// whose handler takes one once the peer-auth header verifies), or why not. A stream
/// moves to the long-poll pool at once: it never holds an ordinary slot.
fn take_slot(
    shared: &ListenerState,
    source: IpAddr,
    req: &Request<Incoming>,
    budget: BudgetClass,
) -> Result<Option<HeldSlot>, Refused> {
    match budget {
        BudgetClass::Exempt | BudgetClass::Raft => Ok(None),
        BudgetClass::Client | BudgetClass::LongPoll | BudgetClass::Stream => {
            let key = caller_key(&shared.node, source, req);
            let held = match shared.client_slots.try_take(&key) {
                Ok(slot) => HeldSlot::new(key, slot, shared.long_polls.clone()),
                Err(Full::Total) => return Err(Refused::Inflight),
                Err(Full::Caller) => return Err(Refused::InflightPerCaller),
            };
            if budget == BudgetClass::Stream {
                held.into_long_poll()?;
            }
            Ok(Some(held))
        }
    }
}

/// Who a client request counts against: with an auth file, the token entry its
/// `Authorization` names (two entries of one `name` share a key); else, or without a
/// valid token, its source address. A follower's forward carries the client's token,
/// so behind auth the leader counts the client, not the follower. Without an auth file
/// a forward carries nothing to tell its client by, so a member's address is not capped
/// ([`CallerKey::Member`]): else every client of a follower would share one caller's
/// share on the leader.
fn caller_key(node: &Node, source: IpAddr, req: &Request<Incoming>) -> CallerKey {
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    match (node.guards.auth.as_deref(), header) {
        (Some(policy), Some(h)) => match policy.authenticate(Some(h)) {
            Ok(caller) => CallerKey::Token(caller.label.clone()),
            Err(_) => CallerKey::Source(source),
        },
        (Some(_), None) => CallerKey::Source(source),
        (None, _) if is_member_address(node, source) => CallerKey::Member,
        (None, _) => CallerKey::Source(source),
    }
}

/// Whether `ip` is the address of a cluster member (as the membership or `--peer-dial`
/// names it; only IP literals count, nothing is resolved per request).
fn is_member_address(node: &Node, ip: IpAddr) -> bool {
    let members = crate::node::member_addrs(&node.raft.metrics().borrow());
    members
        .values()
        .chain(node.peers.dial.values())
        .filter_map(|a| a.parse::<std::net::SocketAddr>().ok())
        .any(|a| a.ip() == ip)
}

/// A GET, HEAD or DELETE that declares a body (a `Content-Length` above 0, or chunked):
/// no route of these methods reads one, and waiting for it would hold a slot.
fn declares_unwanted_body(req: &Request<Incoming>) -> bool {
    use hyper::body::Body as _;
    let bodiless = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::DELETE
    );
    bodiless && !req.body().is_end_stream()
}

/// How long a request that declares a body where none belongs waits for its 400: a
/// tarpit, as for forged peer heads (`http::PEER_REFUSAL_DELAY_MS`). No client of the API
/// sends one; a sender that reopens its connection after each 400 (issue 17's stalled
/// GETs) gets one answer per second per socket, not thousands a second. The wait holds
/// no slot, and its connection counts as idle (evictable).
pub const BODY_REFUSAL_DELAY_MS: u64 = 1_000;

/// The tarpitted 400 of [`BODY_REFUSAL_DELAY_MS`], counted.
async fn refuse_body(shared: &ListenerState, req: &Request<Incoming>) -> Response<Body> {
    shared.node.metrics.refused(Refused::BodyNotAllowed);
    tokio::time::sleep(Duration::from_millis(BODY_REFUSAL_DELAY_MS)).await;
    stamped(&shared.node, body_not_allowed(req))
}

/// 400 (405 when the path is not served under this method as docs/openapi.json describes
/// it — `GET /v1/jobs/{id}/cancel` —, as the router answers without a body),
/// and the connection closes after it: the body is never read, so the connection cannot
/// carry another request.
fn body_not_allowed(req: &Request<Incoming>) -> Response<Body> {
    let (method, path) = (req.method(), req.uri().path());
    let allow = routes::allowed(path);
    let unserved = !allow.is_empty() && !allow.split(", ").any(|m| m == method.as_str());
    let mut resp = if unserved {
        // As the router's 405: no body, the methods that are served.
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = axum::http::StatusCode::METHOD_NOT_ALLOWED;
        if let Ok(allow) = HeaderValue::from_str(&allow) {
            resp.headers_mut().insert(axum::http::header::ALLOW, allow);
        }
        resp
    } else {
        error_response(&ApiError::new(
            ErrorCode::InvalidArgument,
            format!("a {method} request carries no body"),
        ))
    };
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        HeaderValue::from_static("close"),
    );
    resp
}

/// 504 `timeout`: the request ran past its budget's timeout.
fn timed_out(node: &Node, timeout: Duration) -> Response<Body> {
    stamped(
        node,
        error_response(&ApiError::new(
            ErrorCode::Timeout,
            format!(
                "the request did not finish within {} ms; if it was a write its outcome \
                 is unknown: retry with the same Idempotency-Key",
                timeout.as_millis()
            ),
        )),
    )
}

/// docs/api.md: every response carries `X-Leasehold-Node` and, when known, the leader — also
/// the ones given here, outside the router.
fn stamped(node: &Node, mut resp: Response<Body>) -> Response<Body> {
    stamp(node, resp.headers_mut());
    resp
}

/// 503 `unavailable` (with `Retry-After`, `http::error_response`) naming the limit.
pub fn overloaded(why: Refused) -> Response<Body> {
    let what = match why {
        Refused::InflightRaft => "this node is at its limit of concurrent Raft requests",
        Refused::InflightPerCaller => "this caller is at its limit of concurrent requests",
        _ => "this node is at its limit of concurrent requests",
    };
    error_response(&ApiError::new(
        ErrorCode::Unavailable,
        format!("{what}: retry later"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 600 connections queue on a listener nobody accepts from: with mio's default
    /// backlog (128) the rest would wait on SYN retransmits until connect gives up.
    #[tokio::test]
    async fn bind_keeps_a_long_accept_queue() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut connects = JoinSet::new();
        for _ in 0..600 {
            connects.spawn(TcpStream::connect(addr));
        }
        let all = async {
            let mut held = Vec::new();
            while let Some(r) = connects.join_next().await {
                held.push(r.unwrap().expect("connect"));
            }
            held
        };
        let held = tokio::time::timeout(Duration::from_secs(20), all)
            .await
            .expect("every connection is queued, none waits on a SYN retransmit");
        assert_eq!(held.len(), 600);
        drop(listener);
    }
}
