//! The history checker: the invariants of docs/design.md ("Invariants a history must
//! satisfy") checked over one [`RunRecord`], as a pure function — no IO, no clock — so a
//! recorded run can be re-checked offline and every rule is tested on hand-made histories.
//!
//! Vocabulary: an op is *acked* when its outcome is [`Outcome::Ok`]. An `Unknown` op may
//! or may not have taken effect, so no rule treats it as failed, and no rule requires it
//! to have happened (docs/design.md, house style "Unknown is not absent"). Ops may come in any
//! order; the checker sorts what it needs. Rules are per job unless said otherwise.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::Serialize;

use crate::history::{
    Accepted, Backoff, FinalJob, Nanos, Op, OpKind, Outcome, ReplicaDigest, ReplicaFeed, RunRecord,
};

/// How many violations [`Report::summary`] spells out.
const SUMMARY_VIOLATIONS_MAX: usize = 20;

/// Which invariant a [`Violation`] breaks. Each variant documents its rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// Two acked claims of one job were granted the same generation (docs/design.md: "each
    /// granted once").
    GenerationGrantedTwice,
    /// Acked claims `a`, `b` with `a.complete < b.invoke` but `a.generation >
    /// b.generation` (docs/design.md: generations 1, 2, 3… in order). Gaps are fine — an
    /// unknown claim may have consumed a generation — and equal generations are
    /// [`Self::GenerationGrantedTwice`].
    GenerationOrder,
    /// An acked renew/complete/release with generation `g`, invoked after an acked claim
    /// of the same job with a generation above `g` was answered (docs/design.md: "no renew,
    /// complete or release succeeds with a generation older than one already granted").
    StaleSuccess,
    /// More than one acked complete of a job (docs/design.md: "at most one successful
    /// completion per job").
    CompletedTwice,
    /// An acked claim/renew/complete/release invoked after an acked complete of the job
    /// was answered (docs/design.md: "nothing succeeds on it afterwards").
    SuccessAfterCompletion,
    /// A worker still believed it held generation `ga` after another worker's claim of a
    /// higher generation was answered (docs/design.md: "real-time mutual exclusion").
    OverlappingLeases,
    /// The final state lacks an acked claim's generation: the job is missing or its
    /// generation is lower (docs/design.md: "the latest acknowledged generation [is] visible").
    LostClaim,
    /// An acked complete of generation `g`, but the final job is not `completed` at `g`
    /// (docs/design.md: "every acknowledged completion [is] visible").
    LostCompletion,
    /// The final job is `completed` at generation `g`, but no complete of `g` was acked
    /// or unknown: nobody asked for it.
    UnexplainedCompletion,
    /// Replicas report different `(applied_index, digest)` after healing (docs/design.md:
    /// acknowledged writes are "visible on every node").
    ReplicasDiverge,
    /// The destination accepted, for one resource, a token below one it had already
    /// accepted (docs/design.md: "tokens in non-decreasing order per job").
    DestinationOrder,
    /// The destination accepted one idempotency key twice (docs/design.md: "no duplicate").
    DestinationDuplicate,
    /// Cluster time ran ahead of real time (docs/design.md, "Never faster than real time";
    /// issue 16 item 1): acked claim/renew answers `a`, `b` whose `cluster_time_ms`
    /// differ by more than the real time from `a`'s send to `b`'s answer allows (see
    /// [`Checker::cluster_time`]). Leases would expire before their holders' deadlines.
    ClusterTimeAhead,
    /// A job submitted with a backoff (`RunRecord::backoffs`) was granted generation
    /// `g + 1` at a store time before generation `g`'s attempt could have been waited
    /// out (docs/api.md "Job lifecycle": due at the lease's end + the backoff of attempt
    /// `g`). The end is at least the last store time any acked claim or renew of `g`
    /// answered, so the rule only ever errs towards silence.
    ClaimedBeforeDue,
    /// The replicas' event feeds differ after healing, or one's seqs are not consecutive
    /// (docs/api.md: "every node serves the same sequence … never with a gap").
    FeedsDiverge,
    /// An acked claim or complete has no `claimed`/`completed` event with its job,
    /// generation and owner in the feed, although the feed covers its time (issue 32:
    /// the feed records every transition; the checker trusts its own history, not the
    /// cluster's).
    EventMissing,
}

/// Drift allowance of [`ViolationKind::ClusterTimeAhead`], in percent: the client's
/// `DeadlinePolicy` default drift (1 %), what workers' deadlines already allow for. A
/// scenario must not run a node's monotonic clock faster than this (`--clock-rate`).
pub const CLUSTER_TIME_DRIFT_PERCENT: u64 = 1;
/// Slack of [`ViolationKind::ClusterTimeAhead`]: stamps and node clocks count whole
/// milliseconds, so each hop of cluster time (stamp, apply, next leader's estimate) may
/// round by up to a millisecond.
pub const CLUSTER_TIME_SLACK_MS: u64 = 5;

/// One broken invariant, with the ops involved named in `detail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub kind: ViolationKind,
    /// The job (or destination resource); empty for cluster-wide rules.
    pub job: String,
    /// The ops involved: process, kind, generation, invoke/complete in ms relative to
    /// the first op's invoke.
    pub detail: String,
}

/// Counts over the run, for the summary and for judging how much a run exercised.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub ops: usize,
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Distinct jobs among the ops.
    pub jobs: usize,
    pub claims_ok: usize,
    pub completes_ok: usize,
    /// Writes the destination accepted (`RunRecord::accepted`).
    pub writes_accepted: usize,
    /// Replicas whose event feed was read, and the events of the first.
    pub feeds: usize,
    pub events: usize,
}

/// The checker's verdict on one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub violations: Vec<Violation>,
    pub stats: Stats,
}

impl Report {
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Human text: the counts, the violations per kind, then the first
    /// [`SUMMARY_VIOLATIONS_MAX`] violations.
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let mut out = format!(
            "{} ops ({} ok, {} failed, {} unknown) on {} jobs; {} claims ok, \
             {} completes ok, {} writes accepted; {} events in each of {} feeds\n",
            s.ops,
            s.ok,
            s.failed,
            s.unknown,
            s.jobs,
            s.claims_ok,
            s.completes_ok,
            s.writes_accepted,
            s.events,
            s.feeds
        );
        if self.is_ok() {
            out.push_str("no violations\n");
            return out;
        }
        let mut per_kind: BTreeMap<ViolationKind, usize> = BTreeMap::new();
        for v in &self.violations {
            *per_kind.entry(v.kind).or_default() += 1;
        }
        let _ = writeln!(out, "{} violations: {per_kind:?}", self.violations.len());
        for v in self.violations.iter().take(SUMMARY_VIOLATIONS_MAX) {
            let _ = writeln!(out, "- {:?} [{}]: {}", v.kind, v.job, v.detail);
        }
        if self.violations.len() > SUMMARY_VIOLATIONS_MAX {
            let more = self.violations.len() - SUMMARY_VIOLATIONS_MAX;
            let _ = writeln!(out, "… and {more} more");
        }
        out
    }
}

/// Checks every invariant over `run`. Violations come per job (in job-id order, rules
/// in [`ViolationKind`] order), then durability, replicas, destination, cluster time.
pub fn check(run: &RunRecord) -> Report {
    let mut c = Checker {
        origin: run.ops.iter().map(|o| o.invoke).min().unwrap_or(0),
        violations: Vec::new(),
    };
    let jobs = by_job(&run.ops);
    for (job, ops) in &jobs {
        let h = JobOps::new(job, ops);
        c.generations(&h);
        c.stale_success(&h);
        c.completion(&h);
        c.overlapping_leases(&h);
        if let Some(&backoff) = run.backoffs.get(*job) {
            c.due_times(&h, backoff);
        }
    }
    if let Some(finals) = &run.final_jobs {
        c.durability(&jobs, finals);
    }
    c.replicas(&run.replicas);
    c.feeds(&run.feeds, &jobs);
    c.destination(&run.accepted);
    c.cluster_time(&run.ops);
    Report {
        violations: c.violations,
        stats: stats(run, jobs.len()),
    }
}

fn stats(run: &RunRecord, jobs: usize) -> Stats {
    let acked = |kind| {
        run.ops
            .iter()
            .filter(|o| o.kind == kind && is_ok(o))
            .count()
    };
    let outcome = |f: fn(&Outcome) -> bool| run.ops.iter().filter(|o| f(&o.outcome)).count();
    Stats {
        ops: run.ops.len(),
        ok: outcome(|o| matches!(o, Outcome::Ok)),
        failed: outcome(|o| matches!(o, Outcome::Failed { .. })),
        unknown: outcome(|o| matches!(o, Outcome::Unknown)),
        jobs,
        claims_ok: acked(OpKind::Claim),
        completes_ok: acked(OpKind::Complete),
        writes_accepted: run.accepted.len(),
        feeds: run.feeds.len(),
        events: run.feeds.first().map_or(0, |f| f.events.len()),
    }
}

fn is_ok(op: &Op) -> bool {
    op.outcome == Outcome::Ok
}

/// The ops of each job, sorted by `(invoke, complete)`.
fn by_job(ops: &[Op]) -> BTreeMap<&str, Vec<&Op>> {
    let mut jobs: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        jobs.entry(op.job.as_str()).or_default().push(op);
    }
    for ops in jobs.values_mut() {
        ops.sort_by_key(|o| (o.invoke, o.complete));
    }
    jobs
}

/// One job's ops, with its acked claims indexed for "the highest generation granted
/// before instant t".
struct JobOps<'a> {
    job: &'a str,
    /// Sorted by `(invoke, complete)`.
    ops: &'a [&'a Op],
    /// Acked claims carrying a generation, sorted by `complete`. An acked claim without
    /// a generation is a recording bug the generation rules cannot use; it is skipped.
    claims: Vec<(&'a Op, u64)>,
    /// `best[i]`: the index in `claims` of the highest generation among `claims[..=i]`.
    best: Vec<usize>,
}

impl<'a> JobOps<'a> {
    fn new(job: &'a str, ops: &'a [&'a Op]) -> Self {
        let mut claims: Vec<(&Op, u64)> = ops
            .iter()
            .filter(|o| o.kind == OpKind::Claim && is_ok(o))
            .filter_map(|o| Some((*o, o.generation?)))
            .collect();
        claims.sort_by_key(|(o, g)| (o.complete, *g));
        let mut best: Vec<usize> = Vec::with_capacity(claims.len());
        for (i, (_, g)) in claims.iter().enumerate() {
            let keep = i > 0 && claims[best[i - 1]].1 >= *g;
            best.push(if keep { best[i - 1] } else { i });
        }
        JobOps {
            job,
            ops,
            claims,
            best,
        }
    }

    /// The acked claim with the highest generation among those answered strictly
    /// before `t`.
    fn highest_granted_before(&self, t: Nanos) -> Option<(&'a Op, u64)> {
        let n = self.claims.partition_point(|(o, _)| o.complete < t);
        n.checked_sub(1).map(|i| self.claims[self.best[i]])
    }

    /// The acked ops of `kinds`, in invoke order.
    fn acked(&self, kinds: &[OpKind]) -> Vec<&'a Op> {
        let ops: &'a [&'a Op] = self.ops;
        ops.iter()
            .copied()
            .filter(|o| kinds.contains(&o.kind) && is_ok(o))
            .collect()
    }
}

struct Checker {
    /// The first op's invoke: every instant in a detail is shown relative to it.
    origin: Nanos,
    violations: Vec<Violation>,
}

impl Checker {
    fn push(&mut self, kind: ViolationKind, job: &str, detail: String) {
        self.violations.push(Violation {
            kind,
            job: job.to_string(),
            detail,
        });
    }

    fn ms(&self, t: Nanos) -> String {
        format!("{:.3}ms", (t as i128 - self.origin as i128) as f64 / 1e6)
    }

    /// `w1 claim g3 [12.000ms..15.500ms ok]`
    fn op(&self, o: &Op) -> String {
        let kind = match o.kind {
            OpKind::Claim => "claim",
            OpKind::Renew => "renew",
            OpKind::Complete => "complete",
            OpKind::Release => "release",
            OpKind::Write => "write",
        };
        let generation = o.generation.map_or("-".to_string(), |g| g.to_string());
        let outcome = match &o.outcome {
            Outcome::Ok => "ok".to_string(),
            Outcome::Failed { code } => format!("failed {code}"),
            Outcome::Unknown => "unknown".to_string(),
        };
        let (invoke, complete) = (self.ms(o.invoke), self.ms(o.complete));
        format!(
            "{} {kind} g{generation} [{invoke}..{complete} {outcome}]",
            o.process
        )
    }

    /// Rules 1–2: each generation granted once, and in real-time order.
    fn generations(&mut self, h: &JobOps) {
        let mut by_generation: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
        for &(o, g) in &h.claims {
            by_generation.entry(g).or_default().push(o);
        }
        for claims in by_generation.values() {
            for dup in &claims[1..] {
                let detail = format!("{} and {}", self.op(claims[0]), self.op(dup));
                self.push(ViolationKind::GenerationGrantedTwice, h.job, detail);
            }
        }
        for &(b, gb) in &h.claims {
            if let Some((a, ga)) = h.highest_granted_before(b.invoke).filter(|c| c.1 > gb) {
                let detail = format!(
                    "{} was answered before {} was sent, yet has the higher generation \
                     ({ga} > {gb})",
                    self.op(a),
                    self.op(b)
                );
                self.push(ViolationKind::GenerationOrder, h.job, detail);
            }
        }
    }

    /// Rule 3: nothing succeeds with a generation older than one already granted.
    fn stale_success(&mut self, h: &JobOps) {
        let kinds = [OpKind::Renew, OpKind::Complete, OpKind::Release];
        for x in h.acked(&kinds) {
            let Some(g) = x.generation else { continue };
            if let Some((c, gc)) = h.highest_granted_before(x.invoke).filter(|c| c.1 > g) {
                let detail = format!(
                    "{} succeeded, sent after {} granted generation {gc}",
                    self.op(x),
                    self.op(c)
                );
                self.push(ViolationKind::StaleSuccess, h.job, detail);
            }
        }
    }

    /// Rule 4: one acked complete at most, and no success sent after it was answered.
    fn completion(&mut self, h: &JobOps) {
        let mut completes: Vec<&Op> = h.acked(&[OpKind::Complete]);
        completes.sort_by_key(|o| (o.complete, o.invoke));
        let Some(&first) = completes.first() else {
            return;
        };
        for other in &completes[1..] {
            let detail = format!("{} and {}", self.op(first), self.op(other));
            self.push(ViolationKind::CompletedTwice, h.job, detail);
        }
        let kinds = [
            OpKind::Claim,
            OpKind::Renew,
            OpKind::Complete,
            OpKind::Release,
        ];
        for x in h.acked(&kinds) {
            if !std::ptr::eq(x, first) && x.invoke > first.complete {
                let detail = format!("{} after {}", self.op(x), self.op(first));
                self.push(ViolationKind::SuccessAfterCompletion, h.job, detail);
            }
        }
    }

    /// Rule 5, real-time mutual exclusion: for acked claims `a` (generation `ga`, process
    /// `pa`) and `b` (`gb > ga`, another process), `believed_end(a) <= b.complete`.
    /// `believed_end(a)` is the latest `deadline` of the acked claim/renews of `(ga, pa)`,
    /// cut to the invoke of the first release/complete of `(ga, pa)` (any outcome): the
    /// worker stops using the lease before it sends those. One violation per `a`, naming
    /// the earliest-answered such `b`.
    fn overlapping_leases(&mut self, h: &JobOps) {
        let beliefs = believed_ends(h.ops);
        for &(a, ga) in &h.claims {
            let Some(&end) = beliefs.get(&(ga, a.process.as_str())) else {
                continue;
            };
            let first_rival = h
                .claims
                .iter()
                .filter(|(b, gb)| *gb > ga && b.process != a.process)
                .map(|(b, _)| *b)
                .min_by_key(|b| b.complete);
            if let Some(b) = first_rival.filter(|b| end > b.complete) {
                let detail = format!(
                    "{} believed its lease until {}, but {} was answered at {}",
                    self.op(a),
                    self.ms(end),
                    self.op(b),
                    self.ms(b.complete)
                );
                self.push(ViolationKind::OverlappingLeases, h.job, detail);
            }
        }
    }

    /// Rule 6, durability (only when the final state was read): every acked claim's
    /// generation and every acked completion survive, and no completion appears from
    /// nowhere.
    fn durability(&mut self, jobs: &BTreeMap<&str, Vec<&Op>>, finals: &[FinalJob]) {
        let finals: HashMap<&str, &FinalJob> = finals.iter().map(|f| (f.id.as_str(), f)).collect();
        for (job, ops) in jobs {
            self.lost_claim(job, ops, finals.get(job).copied());
            self.lost_completion(job, ops, finals.get(job).copied());
        }
        let mut completed: Vec<&FinalJob> = finals
            .values()
            .copied()
            .filter(|f| f.state == "completed")
            .collect();
        completed.sort_by(|a, b| a.id.cmp(&b.id));
        for f in completed {
            self.unexplained_completion(
                f,
                jobs.get(f.id.as_str()).map_or(&[][..], |v| v.as_slice()),
            );
        }
    }

    fn lost_claim(&mut self, job: &str, ops: &[&Op], fin: Option<&FinalJob>) {
        let highest = ops
            .iter()
            .filter(|o| o.kind == OpKind::Claim && is_ok(o))
            .filter_map(|o| o.generation.map(|g| (g, *o)))
            .max_by_key(|(g, _)| *g);
        let Some((g, claim)) = highest else { return };
        let final_generation = fin.map(|f| f.generation);
        if final_generation.is_none_or(|fg| fg < g) {
            let detail = format!(
                "{} but final generation is {final_generation:?}",
                self.op(claim)
            );
            self.push(ViolationKind::LostClaim, job, detail);
        }
    }

    fn lost_completion(&mut self, job: &str, ops: &[&Op], fin: Option<&FinalJob>) {
        for c in ops
            .iter()
            .filter(|o| o.kind == OpKind::Complete && is_ok(o))
        {
            let kept =
                fin.is_some_and(|f| f.state == "completed" && Some(f.generation) == c.generation);
            if !kept {
                let state = fin.map(|f| format!("{} g{}", f.state, f.generation));
                let detail = format!("{} but final state is {state:?}", self.op(c));
                self.push(ViolationKind::LostCompletion, job, detail);
            }
        }
    }

    fn unexplained_completion(&mut self, f: &FinalJob, ops: &[&Op]) {
        let explained = ops.iter().any(|o| {
            o.kind == OpKind::Complete
                && o.generation == Some(f.generation)
                && matches!(o.outcome, Outcome::Ok | Outcome::Unknown)
        });
        if !explained {
            let detail = format!(
                "final state completed g{} (owner {:?}) but no complete of g{} was ok or unknown",
                f.generation, f.owner, f.generation
            );
            self.push(ViolationKind::UnexplainedCompletion, &f.id, detail);
        }
    }

    /// Rule 7: after healing, every replica has applied the same log to the same state.
    fn replicas(&mut self, replicas: &[ReplicaDigest]) {
        let Some(first) = replicas.first() else {
            return;
        };
        let same = |r: &ReplicaDigest| {
            (r.applied_index, &r.digest) == (first.applied_index, &first.digest)
        };
        if !replicas.iter().all(same) {
            let mut sorted: Vec<&ReplicaDigest> = replicas.iter().collect();
            sorted.sort_by_key(|r| r.node_id);
            let detail = sorted
                .iter()
                .map(|r| {
                    format!(
                        "node {}: index {} digest {}",
                        r.node_id, r.applied_index, r.digest
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            self.push(ViolationKind::ReplicasDiverge, "", detail);
        }
    }

    /// Rule 8: in `seq` order, each resource's accepted tokens never go below the
    /// highest accepted before, and no idempotency key is accepted twice.
    fn destination(&mut self, accepted: &[Accepted]) {
        let mut sorted: Vec<&Accepted> = accepted.iter().collect();
        sorted.sort_by_key(|a| a.seq);
        let mut highest: HashMap<&str, &Accepted> = HashMap::new();
        let mut keys: HashMap<&str, &Accepted> = HashMap::new();
        for a in sorted {
            match highest.get(a.resource.as_str()) {
                Some(h) if h.token > a.token => {
                    let detail = format!("{} accepted after {}", accepted_str(a), accepted_str(h));
                    self.push(ViolationKind::DestinationOrder, &a.resource, detail);
                }
                Some(h) if h.token == a.token => {}
                _ => {
                    highest.insert(&a.resource, a);
                }
            }
            if let Some(prev) = keys.insert(&a.key, a) {
                let detail = format!("{} and {}", accepted_str(prev), accepted_str(a));
                self.push(ViolationKind::DestinationDuplicate, &a.resource, detail);
            }
        }
    }
}

/// The cluster-time rule's ordering key of an answer: `v × 100 − t × (100 + drift %)`,
/// in ns × 100 (i128: cluster time in ns × 100 overflows an i64). `key(b) − key(a)` is
/// `100 × (v_b − v_a − (t_b − t_a) × (1 + drift))`.
fn drift_key(cluster_time_ms: u64, t: Nanos) -> i128 {
    let v = cluster_time_ms as i128 * 1_000_000;
    v * 100 - t as i128 * (100 + CLUSTER_TIME_DRIFT_PERCENT as i128)
}

impl Checker {
    /// Rule 9, cluster time never runs ahead of real time. An acked claim/renew answer
    /// `x` reports the store time at which its entry was applied on the leader, at some
    /// instant `p_x` in `[x.invoke, x.complete]`. Store time is a function of the log
    /// prefix (the running maximum of the stamps), so for `p_a <= p_b` the rule is
    /// `v_b − v_a <= (p_b − p_a) × (1 + drift)`; since `p_b − p_a <= b.complete −
    /// a.invoke`, a violation is sure when
    ///
    /// ```text
    ///   v_b − v_a > (b.complete − a.invoke) × (1 + drift) + slack
    /// ```
    ///
    /// and it needs `a.invoke <= b.complete`: otherwise `b` applied first and `v_b <=
    /// v_a`. (When `p_b < p_a` the right side is positive and `v_b <= v_a`, so no false
    /// alarm.) A sweep over answers by `complete`, with the least `drift_key` of those
    /// invoked so far: O(n log n). One violation per `b`, naming the worst `a`.
    fn cluster_time(&mut self, ops: &[Op]) {
        let stamped: Vec<(&Op, u64)> = ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Claim | OpKind::Renew) && is_ok(o))
            .filter_map(|o| Some((o, o.cluster_time_ms?)))
            .collect();
        let mut by_invoke = stamped.clone();
        by_invoke.sort_by_key(|(o, _)| o.invoke);
        let mut by_complete = stamped;
        by_complete.sort_by_key(|(o, _)| o.complete);
        let slack = CLUSTER_TIME_SLACK_MS as i128 * 1_000_000 * 100;
        let mut next = 0;
        let mut least: Option<(i128, &Op, u64)> = None;
        for (b, vb) in by_complete {
            while let Some(&(a, va)) = by_invoke.get(next).filter(|(a, _)| a.invoke <= b.complete) {
                let key = drift_key(va, a.invoke);
                if least.is_none_or(|(k, _, _)| key < k) {
                    least = Some((key, a, va));
                }
                next += 1;
            }
            let Some((ka, a, va)) = least else { continue };
            if drift_key(vb, b.complete) - ka > slack {
                let detail = format!(
                    "{} on {} answered cluster time {vb} ms, {} ms past the {va} ms of {} on \
                     {}, but only {:.3} ms of real time passed from that send to this answer \
                     (allowed: {CLUSTER_TIME_DRIFT_PERCENT} % drift + {CLUSTER_TIME_SLACK_MS} ms)",
                    self.op(b),
                    b.job,
                    vb as i128 - va as i128,
                    self.op(a),
                    a.job,
                    (b.complete as i128 - a.invoke as i128) as f64 / 1e6,
                );
                self.push(ViolationKind::ClusterTimeAhead, "", detail);
            }
        }
    }
}

impl Checker {
    /// [`ViolationKind::ClaimedBeforeDue`]: each acked claim of generation `g + 1` whose
    /// predecessor `g` was acked too (nothing unknown between them) is answered at a store
    /// time no earlier than the last store time seen under `g` plus attempt `g`'s backoff
    /// (a fresh job starts at generation 0 with 0 attempts, so generation `g` is attempt
    /// `g` while no retry resets the attempts).
    fn due_times(&mut self, h: &JobOps, backoff: Backoff) {
        let stamps = |g: u64| {
            h.ops
                .iter()
                .filter(|o| is_ok(o) && o.generation == Some(g))
                .filter(|o| matches!(o.kind, OpKind::Claim | OpKind::Renew))
                .filter_map(|o| o.cluster_time_ms)
                .max()
        };
        for &(b, g) in &h.claims {
            let (Some(prev), Some(vb)) = (g.checked_sub(1).filter(|p| *p > 0), b.cluster_time_ms)
            else {
                continue;
            };
            let Some(end) = stamps(prev) else { continue };
            let due = end + backoff.delay_ms(prev);
            if vb < due {
                let detail = format!(
                    "{} granted at store time {vb} ms, before {due} ms: generation {prev} was \
                     still seen at {end} ms and its backoff is {} ms",
                    self.op(b),
                    backoff.delay_ms(prev)
                );
                self.push(ViolationKind::ClaimedBeforeDue, h.job, detail);
            }
        }
    }
}

/// `seq 4: token 7 key k-1`
fn accepted_str(a: &Accepted) -> String {
    format!(
        "seq {}: {} token {} key {}",
        a.seq, a.resource, a.token, a.key
    )
}

/// `believed_end` of each `(generation, process)` holding of one job (see
/// [`Checker::overlapping_leases`]); absent when no acked claim/renew carried a deadline.
fn believed_ends<'a>(ops: &[&'a Op]) -> HashMap<(u64, &'a str), Nanos> {
    let mut deadline: HashMap<(u64, &str), Nanos> = HashMap::new();
    let mut stop: HashMap<(u64, &str), Nanos> = HashMap::new();
    for o in ops {
        let Some(g) = o.generation else { continue };
        let key = (g, o.process.as_str());
        match o.kind {
            OpKind::Claim | OpKind::Renew if is_ok(o) => {
                if let Some(d) = o.deadline {
                    let e = deadline.entry(key).or_insert(d);
                    *e = (*e).max(d);
                }
            }
            OpKind::Release | OpKind::Complete => {
                let e = stop.entry(key).or_insert(o.invoke);
                *e = (*e).min(o.invoke);
            }
            _ => {}
        }
    }
    for (key, end) in deadline.iter_mut() {
        if let Some(&s) = stop.get(key) {
            *end = (*end).min(s);
        }
    }
    deadline
}

/// The feed rules ([`ViolationKind::FeedsDiverge`], [`ViolationKind::EventMissing`]).
impl Checker {
    fn feeds(&mut self, feeds: &[ReplicaFeed], jobs: &BTreeMap<&str, Vec<&Op>>) {
        let Some(first) = feeds.first() else { return };
        for f in feeds {
            if let Some(w) = f.events.windows(2).find(|w| w[0].seq + 1 != w[1].seq) {
                let detail = format!("node {}: seq {} then {}", f.node_id, w[0].seq, w[1].seq);
                self.push(ViolationKind::FeedsDiverge, "", detail);
            }
            if f.events != first.events {
                let at = f.events.iter().zip(&first.events).position(|(a, b)| a != b);
                let detail = format!(
                    "node {} ({} events) and node {} ({} events) differ from index {:?}",
                    f.node_id,
                    f.events.len(),
                    first.node_id,
                    first.events.len(),
                    at
                );
                self.push(ViolationKind::FeedsDiverge, "", detail);
            }
        }
        let Some(start) = first.events.first() else {
            return;
        };
        let recorded: HashMap<(&str, &str, u64), Option<&str>> = first
            .events
            .iter()
            .map(|e| {
                (
                    (e.job_id.as_str(), e.event.as_str(), e.generation),
                    e.owner.as_deref(),
                )
            })
            .collect();
        for (job, ops) in jobs {
            self.events_of(job, ops, start.cluster_time_ms, &recorded);
        }
    }

    /// Each acked claim applied after the feed's first event (by store time), and each
    /// acked complete of such a claim, has its event with the worker as owner.
    fn events_of(
        &mut self,
        job: &str,
        ops: &[&Op],
        feed_start_ms: u64,
        recorded: &HashMap<(&str, &str, u64), Option<&str>>,
    ) {
        let covered: Vec<u64> = ops
            .iter()
            .filter(|o| o.kind == OpKind::Claim && is_ok(o))
            .filter(|o| o.cluster_time_ms.is_some_and(|t| t > feed_start_ms))
            .filter_map(|o| o.generation)
            .collect();
        for op in ops.iter().filter(|o| is_ok(o)) {
            let kind = match op.kind {
                OpKind::Claim => "claimed",
                OpKind::Complete => "completed",
                _ => continue,
            };
            let Some(g) = op.generation.filter(|g| covered.contains(g)) else {
                continue;
            };
            match recorded.get(&(job, kind, g)) {
                Some(Some(owner)) if *owner == op.process => {}
                found => {
                    let detail = format!(
                        "acked {kind} of generation {g} by {}: the feed has {found:?}",
                        op.process
                    );
                    self.push(ViolationKind::EventMissing, job, detail);
                }
            }
        }
    }
}
