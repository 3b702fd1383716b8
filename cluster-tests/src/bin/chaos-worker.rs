//! A worker as its own process, so a test can SIGSTOP it past its lease. Takes one
//! argument, a JSON [`ProcWorker`](leasehold_cluster_tests::workload::ProcWorker); prints
//! each recorded operation as one JSON line on stdout, as it completes.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use leasehold_cluster_tests::history::Op;
use leasehold_cluster_tests::workload::{self, Actor, ProcMode, ProcWorker};

fn emit(op: Op) {
    let line = serde_json::to_string(&op).expect("ops encode");
    let mut out = std::io::stdout().lock();
    // A parent that went away cannot be told anything more: stop quietly.
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn main() -> anyhow::Result<()> {
    let arg = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: chaos-worker '<ProcWorker JSON>'"))?;
    let w: ProcWorker = serde_json::from_str(&arg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = workload::worker_client(&w.endpoints);
        let mut actor = Actor::new(&w.config.owner, client, &w.config.dest, emit);
        match w.mode {
            ProcMode::Loop { seconds } => {
                let stop = Arc::new(AtomicBool::new(false));
                let s = stop.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                    s.store(true, std::sync::atomic::Ordering::Relaxed);
                });
                workload::run_worker(w.config, actor, stop).await;
            }
            ProcMode::Once { hold_ms } => {
                let job = w.config.jobs[0].clone();
                if let Ok(lease) = actor.claim(&job, w.config.ttl_ms).await {
                    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                    // Deliberately no local-deadline check: the fences must stop it.
                    actor.write(&lease, 0).await;
                    let _ = actor.complete(&lease).await;
                }
            }
        }
        Ok(())
    })
}
