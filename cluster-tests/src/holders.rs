//! Lease holders: tasks that each claim a job once and renew it on a fixed period until
//! stopped, recording every operation in the run's history. A renewal refused, or a
//! generation other than the first claim's, is a lost lease: [`Holders::finish`] fails
//! on it. Used where a scenario promises that live leases survive what it does
//! (membership changes, rolling restarts), on processes or containers alike.
//! Imports `scenario` (the run), `nodes`, `workload` (the client settings).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::nodes::Nodes;
use crate::scenario::Chaos;
use crate::workload::worker_client_with_attempts;

/// Bound on a holder finishing its current renewal once told to stop.
const HOLDER_STOP_BOUND: Duration = Duration::from_secs(30);

/// How the holders hold.
#[derive(Debug, Clone, Copy)]
pub struct HoldSpec {
    /// The TTL of each holder's lease.
    pub ttl_ms: u64,
    /// How often each renews.
    pub renew_every: Duration,
    /// Client attempts per call: enough backoff to outlast a leader change (12 back off
    /// over ~6 s, where the workers' 6 give up after ~1.6 s); a renewal refused as
    /// expired after that is still a lost lease.
    pub attempts: u32,
}

/// Running holders (see the module doc).
pub struct Holders {
    stop: Arc<AtomicBool>,
    renewed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Result<u64, String>>>,
}

impl Holders {
    /// `n` holders of jobs `held-0`…: each has claimed its job when this returns.
    pub async fn start<C: Nodes>(c: &mut Chaos<C>, n: usize, spec: HoldSpec) -> Holders {
        let stop = Arc::new(AtomicBool::new(false));
        let renewed = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..n {
            let client = worker_client_with_attempts(&c.cluster.endpoints(), spec.attempts);
            let mut a = c.actor_with(&format!("holder-{i}"), client);
            let job = format!("held-{i}");
            let lease = a.claim(&job, spec.ttl_ms).await.expect("a holder's claim");
            let (stop, renewed) = (stop.clone(), renewed.clone());
            tasks.push(tokio::spawn(async move {
                let generation = lease.generation();
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(spec.renew_every).await;
                    a.renew(&lease).await.map_err(|e| {
                        format!("holder of {job} lost generation {generation}: {e}")
                    })?;
                    renewed.fetch_add(1, Ordering::Relaxed);
                }
                Ok(generation)
            }));
        }
        Holders {
            stop,
            renewed,
            tasks,
        }
    }

    /// Stops them; every one must have renewed until the end, on its first generation.
    /// Returns how many renewals were granted in all.
    pub async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let r = tokio::time::timeout(HOLDER_STOP_BOUND, t)
                .await
                .expect("a holder stops")
                .expect("a holder task does not panic");
            assert_eq!(r, Ok(1), "a holder lost its lease");
        }
        let renewed = self.renewed.load(Ordering::Relaxed);
        assert!(renewed > 0, "no holder renewed");
        renewed
    }
}
