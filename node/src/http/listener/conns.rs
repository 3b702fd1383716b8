//! The table of open connections (issue 17 item 2): a cap in all, a cap per source
//! address, and eviction of idle connections under pressure.
//!
//! Why eviction and not only a refusal past the cap: 1,024 idle sockets locked every
//! client out, and followers could no longer reach the leader to forward writes. Here,
//! once the table is past its high-water mark ([`HIGH_WATER_PERCENT`]), a new
//! connection is still accepted, and the table makes room by closing idle ones (no
//! request in progress): every connection idle for [`PRESSURE_IDLE_MS`] and, while
//! still past the mark, the *best victim* — one that never sent a request first (the
//! oldest), else the one idle longest. An attacker holding idle sockets therefore only
//! ever evicts its own; a peer link carries a heartbeat every 50 ms and is never the
//! longest idle. A new connection is refused only when the table is full of connections
//! with a request in progress — load the in-flight budgets bound anyway.
//!
//! The per-source cap stops one address from owning the table. A source at its cap
//! makes room among its *own* idle connections (the same victim order), and is refused
//! only when all of them are busy: a client sharing the attacker's address (a NAT; every
//! test and bench runs on 127.0.0.1) still gets in, and nobody else's link is touched.
//! Nothing here does IO: the listener closes an evicted connection when its
//! [`ConnGuard::closing`] token fires. Uses std, tokio-util and `crate::telemetry::metrics`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::telemetry::metrics::Refused;

/// Past this share of `max_connections` open, idle connections are evicted to make room.
pub const HIGH_WATER_PERCENT: usize = 75;
/// Under pressure (past the high-water mark) a connection idle this long is closed: the
/// keep-alive idle timeout shrinks from the header read timeout to this.
pub const PRESSURE_IDLE_MS: u64 = 1_000;

/// What the listener's service tells the table about a connection's requests.
#[derive(Debug)]
pub struct Activity {
    /// Requests in progress (hyper's HTTP/1 serves one at a time, but count anyway).
    in_flight: AtomicUsize,
    /// Requests started so far.
    served: AtomicU64,
    /// When the last request started or ended, ms since the table's epoch.
    last_active_ms: AtomicU64,
    epoch: Instant,
}

impl Activity {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.served.fetch_add(1, Ordering::Relaxed);
        self.last_active_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    pub fn request_ended(&self) {
        self.last_active_ms.store(self.now_ms(), Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
    }

    /// Lower sorts first as a victim: never served before served, then idle longest.
    fn victim_rank(&self) -> (bool, u64) {
        (
            self.served.load(Ordering::Relaxed) > 0,
            self.last_active_ms.load(Ordering::Relaxed),
        )
    }
}

struct Entry {
    source: IpAddr,
    activity: Arc<Activity>,
    closing: CancellationToken,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
    by_source: HashMap<IpAddr, usize>,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.open.remove(&id)?;
        if let Some(n) = self.by_source.get_mut(&e.source) {
            *n -= 1;
            if *n == 0 {
                self.by_source.remove(&e.source);
            }
        }
        Some(e)
    }

    /// Closes every idle connection idle since before `cutoff_ms`; how many.
    fn evict_idle_before(&mut self, cutoff_ms: u64) -> usize {
        let stale: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, e)| {
                e.activity.is_idle()
                    && e.activity.last_active_ms.load(Ordering::Relaxed) < cutoff_ms
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &stale {
            if let Some(e) = self.remove(*id) {
                e.closing.cancel();
            }
        }
        stale.len()
    }

    /// Closes the best victim (see the module doc) among the idle connections, of
    /// `source` only when given; whether there was one.
    fn evict_one(&mut self, source: Option<IpAddr>) -> bool {
        let victim = self
            .open
            .iter()
            .filter(|(_, e)| e.activity.is_idle() && source.is_none_or(|s| s == e.source))
            .min_by_key(|(id, e)| (e.activity.victim_rank(), **id))
            .map(|(id, _)| *id);
        match victim.and_then(|id| self.remove(id)) {
            Some(e) => {
                e.closing.cancel();
                true
            }
            None => false,
        }
    }
}

/// The open connections of one listener.
pub struct Conns {
    max: usize,
    per_source: usize,
    high_water: usize,
    epoch: Instant,
    table: Mutex<Table>,
}

/// An admitted connection: its place in the table until dropped.
pub struct ConnGuard {
    conns: Arc<Conns>,
    id: u64,
    pub activity: Arc<Activity>,
    /// Fires when the table evicts this connection.
    pub closing: CancellationToken,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.conns
            .table
            .lock()
            .expect("connection table lock")
            .remove(self.id);
    }
}

/// The outcome of [`Conns::admit`].
pub struct Admitted {
    pub guard: ConnGuard,
    /// Idle connections closed to make room.
    pub evicted: usize,
}

impl Conns {
    pub fn new(max: usize, per_source: usize) -> Arc<Conns> {
        Arc::new(Conns {
            max,
            per_source,
            high_water: (max * HIGH_WATER_PERCENT / 100).max(1),
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
        })
    }

    /// Admits a connection from `source`, evicting idle ones under pressure, or says
    /// which limit refuses it.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Result<Admitted, Refused> {
        let mut t = self.table.lock().expect("connection table lock");
        let mut evicted = 0;
        // A source at its cap makes room among its own idle connections, so idle sockets
        // never lock out a client that shares the attacker's address (a NAT, one host).
        if t.by_source.get(&source).copied().unwrap_or(0) >= self.per_source {
            if !t.evict_one(Some(source)) {
                return Err(Refused::ConnectionsPerSource);
            }
            evicted += 1;
        }
        if t.open.len() >= self.high_water {
            let now = self.epoch.elapsed();
            let cutoff = now.saturating_sub(Duration::from_millis(PRESSURE_IDLE_MS));
            evicted += t.evict_idle_before(cutoff.as_millis() as u64);
            while t.open.len() >= self.high_water && t.evict_one(None) {
                evicted += 1;
            }
        }
        if t.open.len() >= self.max {
            return Err(Refused::Connections);
        }
        let id = t.next_id;
        t.next_id += 1;
        let activity = Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            last_active_ms: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            epoch: self.epoch,
        });
        let closing = CancellationToken::new();
        t.open.insert(
            id,
            Entry {
                source,
                activity: activity.clone(),
                closing: closing.clone(),
            },
        );
        *t.by_source.entry(source).or_default() += 1;
        let guard = ConnGuard {
            conns: self.clone(),
            id,
            activity,
            closing,
        };
        Ok(Admitted { guard, evicted })
    }

    /// Connections in the table now.
    pub fn open(&self) -> usize {
        self.table.lock().expect("connection table lock").open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn one_source_is_capped() {
        let conns = Conns::new(100, 2);
        let a = conns.admit(ip(2)).unwrap().guard;
        let b = conns.admit(ip(2)).unwrap().guard;
        a.activity.request_started();
        b.activity.request_started();
        assert_eq!(
            conns.admit(ip(2)).err(),
            Some(Refused::ConnectionsPerSource),
            "both busy: refused"
        );
        let c = conns.admit(ip(1)).unwrap();
        drop(c);
        assert_eq!(conns.open(), 2);
        // One idle again: a new connection of the source takes its place, and only a
        // connection of that source is evicted.
        let other = conns.admit(ip(3)).unwrap().guard;
        b.activity.request_ended();
        let d = conns.admit(ip(2)).unwrap();
        assert_eq!(d.evicted, 1);
        assert!(b.closing.is_cancelled() && !a.closing.is_cancelled());
        assert!(
            !other.closing.is_cancelled(),
            "another source's idle link stays"
        );
        assert_eq!(conns.open(), 3);
    }

    #[test]
    fn idle_connections_make_room_and_busy_ones_do_not() {
        let conns = Conns::new(8, 10);
        let busy = |g: ConnGuard| {
            g.activity.request_started();
            g
        };
        // Two peers, served before (one idle now, one busy); four idle sockets that
        // never sent a request. 6 of 8 open: at the high-water mark.
        let idle_peer = conns.admit(ip(1)).unwrap().guard;
        idle_peer.activity.request_started();
        idle_peer.activity.request_ended();
        let busy_peer = busy(conns.admit(ip(1)).unwrap().guard);
        let idle: Vec<_> = (0..4).map(|_| conns.admit(ip(2)).unwrap().guard).collect();
        let mut kept = Vec::new();
        for _ in 0..4 {
            let a = conns.admit(ip(3)).unwrap();
            assert_eq!(
                a.evicted, 1,
                "one idle connection makes room for each new one"
            );
            kept.push(busy(a.guard));
        }
        assert!(
            idle.iter().all(|g| g.closing.is_cancelled()),
            "never-served go first"
        );
        assert!(!idle_peer.closing.is_cancelled());
        // Now the idle peer is the only idle connection: the next victim.
        let a = conns.admit(ip(3)).unwrap();
        assert_eq!(a.evicted, 1);
        assert!(idle_peer.closing.is_cancelled());
        kept.push(busy(a.guard));
        // Only busy connections: admitted up to the cap, then refused.
        for _ in 0..2 {
            let a = conns.admit(ip(4)).unwrap();
            assert_eq!(a.evicted, 0);
            kept.push(busy(a.guard));
        }
        assert_eq!(conns.open(), 8);
        assert_eq!(conns.admit(ip(5)).err(), Some(Refused::Connections));
        assert!(!busy_peer.closing.is_cancelled());
    }
}
