//! The mixed random fault schedule ("nemesis") shared by `tests/chaos.rs`'
//! `mixed_random_schedule` and the `soak` binary: node specs drawn from the seed (wall
//! clock offsets within ±2×TTL, one monotonic clock 0.5 % fast) and a menu of faults —
//! leader and node crashes (power losses too, on a cluster with fault journals:
//! [`crate::power::crash`]), SIGSTOPs of nodes, leader isolation, one-way blackholes,
//! delays, dropped connections, flapping partitions, worker processes frozen past their
//! lease — each applied and healed before the next.
//! Imports [`crate::scenario`], [`crate::power`] and the fixture's types; the tests and
//! the soak import it.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::fixture::NodeSpec;
use crate::power::crash;
use crate::proxy::Fault;
use crate::scenario::{Chaos, LEADER_BOUND};

/// The kinds of fault [`inject_random_fault`] applies, in the order of its menu (the
/// names the soak counts them under).
pub const FAULT_KINDS: [&str; 9] = [
    "kill_leader",
    "kill_node",
    "pause_node",
    "isolate_leader",
    "one_way_blackhole",
    "delay_link",
    "drop_connections",
    "flapping_partitions",
    "pause_worker_process",
];

/// Three node specs drawn from `seed`: wall clocks within ±2×`ttl_ms`, one node's
/// monotonic clock 0.5 % fast (inside the checker's drift allowance).
pub fn mixed_specs(seed: u64, ttl_ms: u64) -> Vec<NodeSpec> {
    let mut specs = vec![NodeSpec::default(); 3];
    let mut r = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
    for s in specs.iter_mut() {
        s.clock_offset_ms = r.gen_range(-2 * ttl_ms as i64..=2 * ttl_ms as i64);
    }
    specs[r.gen_range(0..3)].clock_rate = 1.005;
    specs
}

/// The leader the running nodes agree on, within [`LEADER_BOUND`].
async fn leader(c: &Chaos) -> u64 {
    c.cluster.wait_leader(LEADER_BOUND).await
}

/// A random node of the cluster.
fn pick(c: &mut Chaos) -> u64 {
    let ids = c.cluster.ids();
    ids[c.ms(0, ids.len() as u64 - 1).as_millis() as usize]
}

/// One fault from the menu, applied and then healed; returns its [`FAULT_KINDS`] name
/// (`None` if the draw applied nothing, e.g. a link from a node to itself).
pub async fn inject_random_fault(c: &mut Chaos) -> Option<&'static str> {
    let kind = c.ms(0, FAULT_KINDS.len() as u64 - 1).as_millis() as usize;
    let applied = match kind {
        0..=2 => node_fault(c, kind).await,
        3..=7 => network_fault(c, kind).await,
        _ => pause_worker_process(c).await,
    };
    applied.then_some(FAULT_KINDS[kind])
}

/// Crashes of the leader or of any node (restarted later; a power loss or a SIGKILL,
/// see [`crash`]), and SIGSTOPs of a node.
async fn node_fault(c: &mut Chaos, kind: usize) -> bool {
    let ttl = c.ttl_ms;
    match kind {
        0 => {
            let l = leader(c).await;
            let how = crash(&mut c.cluster, l, &mut c.rng).await;
            c.fault(format!("{how} (the leader)"));
            let d = c.ms(1_000, 5_000);
            c.run_for(d).await;
            c.cluster.restart(l);
            c.fault(format!("restart {l} after {d:?}"));
        }
        1 => {
            let n = pick(c);
            let how = crash(&mut c.cluster, n, &mut c.rng).await;
            c.fault(how);
            let d = c.ms(500, 3_000);
            c.run_for(d).await;
            c.cluster.restart(n);
            c.fault(format!("restart {n} after {d:?}"));
        }
        _ => {
            let n = if c.ms(0, 1).as_millis() == 0 {
                leader(c).await
            } else {
                pick(c)
            };
            let d = c.ms(200, 2 * ttl + 1_000);
            c.cluster.pause(n);
            c.fault(format!("SIGSTOP node {n} for {d:?}"));
            c.run_for(d).await;
            c.cluster.resume(n);
            c.fault(format!("SIGCONT node {n}"));
        }
    }
    true
}

/// Faults of the links, through the proxies; each ends with the network healed.
async fn network_fault(c: &mut Chaos, kind: usize) -> bool {
    let ttl = c.ttl_ms;
    match kind {
        3 => {
            let l = leader(c).await;
            c.cluster.isolate(&[l]);
            let d = c.ms(500, 2 * ttl);
            c.fault(format!("isolate leader {l} for {d:?}"));
            c.run_for(d).await;
        }
        4 | 5 => {
            let (a, b) = (pick(c), pick(c));
            if a == b {
                return false;
            }
            link_fault(c, kind, a, b).await;
        }
        6 => {
            let n = pick(c);
            let to = (n % 3) + 1;
            c.cluster.set_link(n, to, Fault::Drop);
            let d = c.ms(300, 2_000);
            c.fault(format!("drop connections {n}->{to} for {d:?}"));
            c.run_for(d).await;
        }
        _ => {
            flapping_partitions(c).await;
            return true;
        }
    }
    c.cluster.heal_network();
    c.fault("heal network");
    true
}

/// A one-way blackhole a→b (`kind` 4) or a delay both ways (5).
async fn link_fault(c: &mut Chaos, kind: usize, a: u64, b: u64) {
    if kind == 4 {
        c.cluster.set_link(a, b, Fault::Blackhole);
        let d = c.ms(500, 3_000);
        c.fault(format!("one-way blackhole {a}->{b} for {d:?}"));
        c.run_for(d).await;
    } else {
        let delay = c.ms(20, 300);
        c.cluster.set_link(a, b, Fault::Delay(delay));
        c.cluster.set_link(b, a, Fault::Delay(delay));
        let d = c.ms(1_000, 4_000);
        c.fault(format!("delay {a}<->{b} by {delay:?} for {d:?}"));
        c.run_for(d).await;
    }
}

/// Random single-node isolations, healed between, for 2–5 s.
async fn flapping_partitions(c: &mut Chaos) {
    let until = Instant::now() + c.ms(2_000, 5_000);
    c.fault("flapping partitions");
    while Instant::now() < until {
        let n = pick(c);
        c.cluster.isolate(&[n]);
        let d = c.ms(150, 700);
        c.run_for(d).await;
        c.cluster.heal_network();
        let d = c.ms(100, 400);
        c.run_for(d).await;
    }
    c.fault("flapping over");
}

/// A worker process frozen (SIGSTOP) for longer than its lease, then resumed.
async fn pause_worker_process(c: &mut Chaos) -> bool {
    if c.process_count() == 0 {
        return false;
    }
    let ttl = c.ttl_ms;
    let i = c.ms(0, c.process_count() as u64 - 1).as_millis() as usize;
    let d = c.ms(ttl + 500, 3 * ttl);
    c.process(i).pause();
    c.fault(format!("SIGSTOP worker process {i} for {d:?}"));
    c.run_for(d).await;
    c.process(i).resume();
    c.fault(format!("SIGCONT worker process {i}"));
    true
}

/// Runs the mixed schedule for `length`: quiet spells of 0.3–2 s between faults, and
/// `between` called after each (the soak samples memory there). Returns the name of
/// each fault applied, in order.
pub async fn run_mixed_schedule(
    c: &mut Chaos,
    length: Duration,
    mut between: impl FnMut(&Chaos),
) -> Vec<&'static str> {
    let until = Instant::now() + length;
    let mut applied = Vec::new();
    while Instant::now() < until {
        let quiet = c.ms(300, 2_000);
        c.run_for(quiet).await;
        applied.extend(inject_random_fault(c).await);
        between(c);
    }
    applied
}
