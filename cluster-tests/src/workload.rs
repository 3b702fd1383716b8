//! Workers: clients that claim jobs, write effects under the lease's token to the fenced
//! destination, renew, complete or release — and record every operation with its
//! invoke/complete instants and outcome (ok, failed with a code, or unknown).
//!
//! A worker keeps the client crate's conservative local deadline: it writes an effect or
//! completes only before it (unless `reckless`, which shows the fences hold without it).
//! The same code runs as tasks inside the test and as separate `chaos-worker` processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_client::fence::http::{send_write, WriteRequest, WriteStatus};
use leasehold_client::{Client, Error, Lease};
use leasehold_statemachine::ErrorCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::history::{mono_now, to_mono, Op, OpKind, Outcome};

/// What a worker does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// The worker's name, used as the lease owner.
    pub owner: String,
    /// Jobs it competes for (picked at random).
    pub jobs: Vec<String>,
    pub ttl_ms: u64,
    /// Base URL of the fenced destination.
    pub dest: String,
    pub seed: u64,
    /// Ignore the local deadline: write and complete whenever, to prove the fences.
    pub reckless: bool,
    /// Of finished holds: the share completed, the share released; the rest is
    /// abandoned (the worker walks away, the lease expires).
    pub p_complete: f64,
    pub p_release: f64,
    /// Effects written per hold: 1..=max_writes.
    pub max_writes: u32,
    /// Pause between steps of a hold, at most this fraction of the TTL.
    pub think_frac: f64,
    /// Release as a failed attempt (`"retry": true`, with an error): the job's backoff
    /// applies before anyone may claim it again.
    #[serde(default)]
    pub retry_release: bool,
}

impl WorkerConfig {
    pub fn new(owner: impl Into<String>, jobs: Vec<String>, ttl_ms: u64, dest: &str) -> Self {
        WorkerConfig {
            owner: owner.into(),
            jobs,
            ttl_ms,
            dest: dest.to_owned(),
            seed: 0,
            reckless: false,
            p_complete: 0.1,
            p_release: 0.6,
            max_writes: 3,
            think_frac: 0.25,
            retry_release: false,
        }
    }
}

/// The client settings workers use: short timeouts so a worker notices a dead node
/// quickly, enough attempts to ride out an election.
pub fn worker_client(endpoints: &[String]) -> Client {
    worker_client_with_attempts(endpoints, 6)
}

/// [`worker_client`] with another number of attempts (backoff 50 ms doubling to 800 ms).
pub fn worker_client_with_attempts(endpoints: &[String], max_attempts: u32) -> Client {
    Client::builder(endpoints.iter().cloned())
        .connect_timeout(Duration::from_millis(300))
        .request_timeout(Duration::from_secs(3))
        .max_attempts(max_attempts)
        .backoff(Duration::from_millis(50), Duration::from_millis(800))
        .build()
        .expect("valid client settings")
}

/// How an error is recorded: refusals are failures; a lost answer is unknown.
pub fn outcome_of(e: &Error) -> Outcome {
    match e {
        Error::Api { code, .. } => match code {
            leasehold_statemachine::ErrorCode::Timeout
            | leasehold_statemachine::ErrorCode::Internal => Outcome::Unknown,
            c => Outcome::Failed {
                code: c.as_str().to_owned(),
            },
        },
        // The client guarantees no attempt was in an unknown state.
        Error::Unavailable { .. } => Outcome::Failed {
            code: "unavailable".into(),
        },
        Error::OutcomeUnknown { .. } | Error::Protocol { .. } => Outcome::Unknown,
        Error::Config(m) => panic!("client misconfigured: {m}"),
    }
}

/// Performs lease operations and records them.
pub struct Actor<S> {
    pub owner: String,
    pub client: Client,
    pub dest: String,
    pub http: reqwest::Client,
    pub sink: S,
}

impl<S: FnMut(Op)> Actor<S> {
    pub fn new(owner: &str, client: Client, dest: &str, sink: S) -> Self {
        Actor {
            owner: owner.to_owned(),
            client,
            dest: dest.to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .connect_timeout(Duration::from_millis(500))
                .build()
                .expect("destination client"),
            sink,
        }
    }

    fn op(&self, job: &str, kind: OpKind, generation: Option<u64>, invoke: u64) -> Op {
        Op {
            process: self.owner.clone(),
            job: job.to_owned(),
            kind,
            generation,
            invoke,
            complete: mono_now(),
            outcome: Outcome::Ok,
            deadline: None,
            key: None,
            cluster_time_ms: None,
        }
    }

    pub async fn claim(&mut self, job: &str, ttl_ms: u64) -> Result<Lease, Error> {
        let invoke = mono_now();
        let r = self.client.claim(job, &self.owner, ttl_ms).await;
        let mut op = self.op(job, OpKind::Claim, None, invoke);
        match &r {
            Ok(l) => {
                op.generation = Some(l.generation());
                op.deadline = Some(to_mono(l.deadline_instant().into_std()));
                op.cluster_time_ms = Some(l.wire().cluster_time_ms);
            }
            Err(e) => op.outcome = outcome_of(e),
        }
        (self.sink)(op);
        r
    }

    pub async fn renew(&mut self, lease: &Lease) -> Result<(), Error> {
        let invoke = mono_now();
        let r = lease.renew().await;
        let mut op = self.op(
            lease.job_id(),
            OpKind::Renew,
            Some(lease.generation()),
            invoke,
        );
        match &r {
            Ok(()) => {
                op.deadline = Some(to_mono(lease.deadline_instant().into_std()));
                op.cluster_time_ms = Some(lease.wire().cluster_time_ms);
            }
            Err(e) => op.outcome = outcome_of(e),
        }
        (self.sink)(op);
        r
    }

    pub async fn complete(&mut self, lease: &Lease) -> Result<(), Error> {
        let invoke = mono_now();
        let r = lease
            .complete(serde_json::json!({"by": self.owner}))
            .await
            .map(|_| ());
        self.finish(lease, OpKind::Complete, invoke, &r);
        r
    }

    pub async fn release(&mut self, lease: &Lease) -> Result<(), Error> {
        let invoke = mono_now();
        let r = lease.release().await.map(|_| ());
        self.finish(lease, OpKind::Release, invoke, &r);
        r
    }

    /// Releases as a failed attempt: the job's backoff applies.
    pub async fn release_failed(&mut self, lease: &Lease) -> Result<(), Error> {
        let invoke = mono_now();
        let how = leasehold_client::Release::failed_attempt(format!("{} gave up", self.owner));
        let r = lease.release_with(&how).await.map(|_| ());
        self.finish(lease, OpKind::Release, invoke, &r);
        r
    }

    fn finish(&mut self, lease: &Lease, kind: OpKind, invoke: u64, r: &Result<(), Error>) {
        let mut op = self.op(lease.job_id(), kind, Some(lease.generation()), invoke);
        if let Err(e) = r {
            op.outcome = outcome_of(e);
        }
        (self.sink)(op);
    }

    /// Writes one effect under the lease's token; `Ok(true)` when accepted.
    pub async fn write(&mut self, lease: &Lease, step: u32) -> Outcome {
        let key = format!(
            "{}/{}/{}/{step}",
            self.owner,
            lease.job_id(),
            lease.generation()
        );
        let w = WriteRequest {
            resource: lease.job_id().to_owned(),
            token: lease.token(),
            key: key.clone(),
            value: serde_json::json!({"owner": self.owner, "step": step}),
        };
        let invoke = mono_now();
        let r = send_write(&self.http, &self.dest, &w).await;
        let mut op = self.op(lease.job_id(), OpKind::Write, Some(lease.token()), invoke);
        op.key = Some(key);
        op.outcome = match r {
            Ok(reply) => match reply.status {
                WriteStatus::Accepted | WriteStatus::Duplicate => Outcome::Ok,
                WriteStatus::Stale => Outcome::Failed {
                    code: "stale_token".into(),
                },
                WriteStatus::Full => Outcome::Failed {
                    code: "full".into(),
                },
            },
            Err(Error::Unavailable { .. }) => Outcome::Failed {
                code: "unavailable".into(),
            },
            Err(_) => Outcome::Unknown,
        };
        let out = op.outcome.clone();
        (self.sink)(op);
        out
    }
}

/// Runs a worker until `stop` is set (checked between holds and between steps).
pub async fn run_worker<S: FnMut(Op)>(
    cfg: WorkerConfig,
    mut actor: Actor<S>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let ttl = Duration::from_millis(cfg.ttl_ms);
    // A completed (or failed) job is done for good: the slot moves on to a successor id,
    // which every worker reaches the same way, so the contest goes on in a long run.
    let mut epochs = vec![0u64; cfg.jobs.len()];
    while !stop.load(Ordering::Relaxed) {
        let slot = rng.gen_range(0..cfg.jobs.len());
        let job = job_in_epoch(&cfg.jobs[slot], epochs[slot]);
        let lease = match actor.claim(&job, cfg.ttl_ms).await {
            Ok(l) => l,
            Err(e) => {
                if matches!(
                    e.code(),
                    Some(ErrorCode::JobCompleted | ErrorCode::JobFailed)
                ) {
                    epochs[slot] += 1;
                }
                tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
                continue;
            }
        };
        hold(&cfg, &mut actor, &lease, &mut rng, ttl, &stop).await;
    }
}

/// The id of a job slot's `epoch`-th successor (`epoch` 0 is the slot's own id).
pub fn job_in_epoch(base: &str, epoch: u64) -> String {
    if epoch == 0 {
        base.to_owned()
    } else {
        format!("{base}.{epoch}")
    }
}

async fn hold<S: FnMut(Op)>(
    cfg: &WorkerConfig,
    actor: &mut Actor<S>,
    lease: &Lease,
    rng: &mut StdRng,
    ttl: Duration,
    stop: &AtomicBool,
) {
    let writes = rng.gen_range(1..=cfg.max_writes.max(1));
    let think_max = ttl.mul_f64(cfg.think_frac).as_millis() as u64;
    for step in 0..writes {
        if !cfg.reckless && !lease.is_live() {
            return; // the lease lapsed locally: walk away
        }
        match actor.write(lease, step).await {
            Outcome::Failed { code } if code == "stale_token" => return,
            _ => {}
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=think_max))).await;
        if lease.remaining() < ttl / 2 && (cfg.reckless || lease.is_live()) {
            match actor.renew(lease).await {
                Ok(()) => {}
                Err(e) if e.is_lease_gone() => return,
                Err(_) => {}
            }
        }
    }
    if !cfg.reckless && !lease.is_live() {
        return;
    }
    let r: f64 = rng.gen();
    if r < cfg.p_complete {
        let _ = actor.complete(lease).await;
    } else if r < cfg.p_complete + cfg.p_release {
        let _ = match cfg.retry_release {
            true => actor.release_failed(lease).await,
            false => actor.release(lease).await,
        };
    }
}

/// What a `chaos-worker` process does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ProcMode {
    /// [`run_worker`] for this long.
    Loop { seconds: f64 },
    /// Claim `jobs[0]`, sleep `hold_ms`, then write one effect and complete — with no
    /// local-deadline check (the worked example's frozen worker).
    Once { hold_ms: u64 },
}

/// The single argument of a `chaos-worker` process, as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcWorker {
    pub endpoints: Vec<String>,
    pub config: WorkerConfig,
    pub mode: ProcMode,
}

/// A running `chaos-worker` process whose operations flow into a recorder (and, when
/// asked, to a channel as they arrive).
pub struct WorkerProcess {
    pub owner: String,
    child: tokio::process::Child,
    reader: tokio::task::JoinHandle<()>,
    paused: bool,
}

impl WorkerProcess {
    pub fn spawn(
        bin: &std::path::Path,
        w: &ProcWorker,
        rec: crate::history::Recorder,
        tap: Option<tokio::sync::mpsc::UnboundedSender<Op>>,
    ) -> WorkerProcess {
        use tokio::io::AsyncBufReadExt;
        let arg = serde_json::to_string(w).expect("worker args encode");
        let mut child = tokio::process::Command::new(bin)
            .arg(arg)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let reader = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let op: Op = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("worker printed a bad op line {line:?}: {e}"));
                if let Some(t) = &tap {
                    let _ = t.send(op.clone());
                }
                rec.record(op);
            }
        });
        WorkerProcess {
            owner: w.config.owner.clone(),
            child,
            reader,
            paused: false,
        }
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    }

    /// SIGSTOP: the worker freezes wherever it is, lease and all.
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
        self.paused = true;
    }

    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
        self.paused = false;
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Resumes it if paused and waits (at most `bound`) for it to finish on its own and
    /// for its last lines; a worker still running after `bound` is killed (its
    /// in-flight operation is then never recorded) and this returns false.
    pub async fn wait(mut self, bound: Duration) -> bool {
        if self.paused {
            self.resume();
        }
        let exited = tokio::time::timeout(bound, self.child.wait()).await.is_ok();
        if !exited {
            let _ = self.child.kill().await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.reader).await;
        exited
    }
}

/// A client of one node's own port only (as clients of a cut-off node are): it posts a
/// claim of a fresh throwaway job (`probe-N`, owner `prober`) every `every`, without
/// waiting for the answers, until aborted. A node that still leads while cut off from its
/// quorum stamps each of these proposals, which never commit: the stamps a leader issues
/// for its clients. Nothing is recorded; the jobs are disjoint from the workers'.
pub fn spawn_prober(endpoint: String, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::builder()
            // Longer than the node's write timeout: the answer is the 504 of a proposal
            // that could not commit, not a dropped connection.
            .timeout(Duration::from_secs(10))
            .build()
            .expect("prober client");
        let mut inflight = tokio::task::JoinSet::new();
        for n in 0u64.. {
            let req = http
                .post(format!("{endpoint}/v1/jobs/probe-{n}/claim"))
                .json(&serde_json::json!({"owner": "prober", "ttl_ms": 1_000}));
            inflight.spawn(async move {
                let _ = req.send().await;
            });
            tokio::time::sleep(every).await;
            while inflight.try_join_next().is_some() {}
        }
    })
}
