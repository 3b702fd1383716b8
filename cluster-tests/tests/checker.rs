//! The history checker on hand-made histories: one good history exercising every kind of
//! op (renews, writes, unknowns, generation gaps, releases, the final state) with no
//! violation, one bad history per invariant of docs/design.md that must be caught, and the
//! "unknown is not failed" cases that must not be.
//!
//! Times are in ms from an arbitrary monotonic origin; histories are built with
//! [`History`], one line per operation, so each test reads as the story it tells.

use leasehold_cluster_tests::checker::{check, Report, ViolationKind};
use leasehold_cluster_tests::history::{
    Accepted, FeedEvent, FinalJob, Nanos, Op, OpKind, Outcome, ReplicaDigest, ReplicaFeed,
    RunRecord,
};

use ViolationKind::*;

/// A feed event as a test writes it: (seq, job, event, generation, owner, time).
type FeedLine<'a> = (u64, &'a str, &'a str, u64, Option<&'a str>, u64);

/// An arbitrary `CLOCK_MONOTONIC` reading as the histories' ms 0.
const ORIGIN: Nanos = 7_000_000_000_000;

fn at(ms: u64) -> Nanos {
    ORIGIN + ms * 1_000_000
}

/// A [`RunRecord`] under construction. Every op is recorded acknowledged (`Ok`);
/// [`History::unknown`] and [`History::failed`] change the op recorded last.
#[derive(Default)]
struct History {
    run: RunRecord,
}

impl History {
    fn new() -> Self {
        Self::default()
    }

    /// `process` asks for a lease on `job` during `span` (invoke, answer) and is granted
    /// `generation`, believing it holds the lease until `until`.
    fn claim(
        self,
        process: &str,
        job: &str,
        generation: u64,
        span: (u64, u64),
        until: u64,
    ) -> Self {
        self.op(process, job, OpKind::Claim, generation, span, Some(until))
    }

    /// A claim whose answer carried no generation: follow it with
    /// [`History::unknown`] or [`History::failed`].
    fn claim_attempt(mut self, process: &str, job: &str, span: (u64, u64)) -> Self {
        self = self.op(process, job, OpKind::Claim, 0, span, None);
        self.run.ops.last_mut().unwrap().generation = None;
        self
    }

    fn renew(
        self,
        process: &str,
        job: &str,
        generation: u64,
        span: (u64, u64),
        until: u64,
    ) -> Self {
        self.op(process, job, OpKind::Renew, generation, span, Some(until))
    }

    fn complete(self, process: &str, job: &str, generation: u64, span: (u64, u64)) -> Self {
        self.op(process, job, OpKind::Complete, generation, span, None)
    }

    fn release(self, process: &str, job: &str, generation: u64, span: (u64, u64)) -> Self {
        self.op(process, job, OpKind::Release, generation, span, None)
    }

    /// A write of effect `key` under `token`, which the destination accepts.
    fn write(mut self, process: &str, job: &str, token: u64, key: &str, span: (u64, u64)) -> Self {
        self = self.op(process, job, OpKind::Write, token, span, None);
        self.run.ops.last_mut().unwrap().key = Some(key.to_string());
        self.accept(job, token, key)
    }

    fn op(
        mut self,
        process: &str,
        job: &str,
        kind: OpKind,
        generation: u64,
        (invoke, complete): (u64, u64),
        until: Option<u64>,
    ) -> Self {
        assert!(invoke <= complete, "an op is answered after it is sent");
        self.run.ops.push(Op {
            process: process.to_string(),
            job: job.to_string(),
            kind,
            generation: Some(generation),
            invoke: at(invoke),
            complete: at(complete),
            outcome: Outcome::Ok,
            deadline: until.map(at),
            key: None,
            cluster_time_ms: None,
        });
        self
    }

    /// The last op timed out: it may or may not have taken effect. Like the workers, it
    /// then knows no deadline, and a claim no generation.
    fn unknown(self) -> Self {
        self.outcome(Outcome::Unknown)
    }

    /// The last op was refused with `code`; a refused write was not accepted.
    fn failed(self, code: &str) -> Self {
        self.outcome(Outcome::Failed {
            code: code.to_string(),
        })
    }

    fn outcome(mut self, outcome: Outcome) -> Self {
        let op = self.run.ops.last_mut().expect("an op to change");
        if op.kind == OpKind::Claim {
            op.generation = None;
        }
        if op.kind == OpKind::Write && matches!(outcome, Outcome::Failed { .. }) {
            let key = op.key.clone();
            self.run.accepted.retain(|a| Some(&a.key) != key.as_ref());
        }
        op.deadline = None;
        op.outcome = outcome;
        self
    }

    /// The last op's answer carried `cluster_time_ms` (an acked claim or renew).
    fn at_cluster_time(mut self, ms: u64) -> Self {
        self.run
            .ops
            .last_mut()
            .expect("an op to change")
            .cluster_time_ms = Some(ms);
        self
    }

    /// The destination accepts, next, `key` under `token` for `resource`.
    fn accept(mut self, resource: &str, token: u64, key: &str) -> Self {
        let seq = self.run.accepted.len() as u64 + 1;
        self.run.accepted.push(Accepted {
            seq,
            resource: resource.to_string(),
            token,
            key: key.to_string(),
        });
        self
    }

    /// After healing, the leader reports `job` at `generation` in `state`.
    fn finally(mut self, job: &str, generation: u64, state: &str, owner: Option<&str>) -> Self {
        self.run
            .final_jobs
            .get_or_insert_with(Vec::new)
            .push(FinalJob {
                id: job.to_string(),
                generation,
                state: state.to_string(),
                owner: owner.map(str::to_string),
            });
        self
    }

    /// The final state was read, and `job` was not in it.
    fn finally_missing(mut self) -> Self {
        self.run.final_jobs.get_or_insert_with(Vec::new);
        self
    }

    fn replica(mut self, node_id: u64, applied_index: u64, digest: &str) -> Self {
        self.run.replicas.push(ReplicaDigest {
            node_id,
            applied_index,
            digest: digest.to_string(),
        });
        self
    }

    /// The op recorded last was applied at store time `ms`.
    fn stored_at(mut self, ms: u64) -> Self {
        self.run.ops.last_mut().unwrap().cluster_time_ms = Some(ms);
        self
    }

    /// Node `node_id`'s feed held `events`: (seq, job, event, generation, owner, time).
    fn feed(mut self, node_id: u64, events: &[FeedLine]) -> Self {
        let events = events
            .iter()
            .map(|&(seq, job, event, generation, owner, t)| FeedEvent {
                seq,
                job_id: job.into(),
                event: event.into(),
                generation,
                owner: owner.map(String::from),
                cluster_time_ms: t,
            })
            .collect();
        self.run.feeds.push(ReplicaFeed { node_id, events });
        self
    }

    fn check(&self) -> Report {
        check(&self.run)
    }
}

#[track_caller]
fn assert_clean(h: &History) {
    let report = h.check();
    assert!(
        report.is_ok(),
        "expected no violation:\n{}",
        report.summary()
    );
}

/// `kind` is reported (at least once).
#[track_caller]
fn assert_caught(h: &History, kind: ViolationKind) -> Report {
    let report = h.check();
    assert!(
        report.violations.iter().any(|v| v.kind == kind),
        "expected {kind:?}:\n{}",
        report.summary()
    );
    report
}

/// `kind` is reported, and nothing else.
#[track_caller]
fn assert_only(h: &History, kind: ViolationKind) -> Report {
    let report = assert_caught(h, kind);
    assert!(
        report.violations.iter().all(|v| v.kind == kind),
        "expected only {kind:?}:\n{}",
        report.summary()
    );
    report
}

/// Three workers on five jobs, with a TTL of about 1 s: renews, writes, unknown and
/// refused ops, a claim that timed out and consumed a generation, a release handing a
/// job over, a rival claim answered exactly at the first holder's deadline, and a final
/// state and replicas that agree.
fn good_history() -> History {
    History::new()
        // j1: a holds it across two renews (one lost in flight), writes twice, completes.
        .claim("a", "j1", 1, (0, 5), 900)
        .renew("a", "j1", 1, (300, 305), 1200)
        .write("a", "j1", 1, "j1-e1", (310, 312))
        .renew("a", "j1", 1, (600, 620), 1500)
        .unknown()
        .renew("a", "j1", 1, (900, 910), 1800)
        .write("a", "j1", 1, "j1-e2", (950, 955))
        .complete("a", "j1", 1, (1000, 1010))
        .claim_attempt("b", "j1", (1100, 1105))
        .failed("completed")
        // j2: a pauses and loses it; b's claim times out (generation 2 may be gone); c
        // gets 3, writes, releases; a claims again (4) and completes.
        .claim("a", "j2", 1, (0, 4), 900)
        .claim_attempt("b", "j2", (1000, 3000))
        .unknown()
        .renew("a", "j2", 1, (1200, 1210), 2100)
        .failed("stale_lease")
        .claim("c", "j2", 3, (2000, 2010), 2900)
        .write("c", "j2", 3, "j2-e1", (2100, 2105))
        .write("a", "j2", 1, "j2-stale", (2200, 2205))
        .failed("stale_token")
        .release("c", "j2", 3, (2500, 2505))
        .claim("a", "j2", 4, (2600, 2610), 3500)
        .write("a", "j2", 4, "j2-e2", (2700, 2705))
        .complete("a", "j2", 4, (3000, 3010))
        // j3: c's completion times out, and took effect.
        .claim("c", "j3", 1, (100, 105), 1000)
        .complete("c", "j3", 1, (500, 9000))
        .unknown()
        // j4: b holds it to the end; c is refused meanwhile.
        .claim("b", "j4", 1, (50, 60), 950)
        .renew("b", "j4", 1, (400, 410), 1300)
        .claim_attempt("c", "j4", (500, 505))
        .failed("lease_held")
        // j5: a's lease ends exactly when b's claim is answered.
        .claim("a", "j5", 1, (0, 5), 1000)
        .claim("b", "j5", 2, (990, 1000), 1900)
        .finally("j1", 1, "completed", Some("a"))
        .finally("j2", 4, "completed", Some("a"))
        .finally("j3", 1, "completed", Some("c"))
        .finally("j4", 1, "leased", Some("b"))
        .finally("j5", 2, "leased", Some("b"))
        .replica(1, 120, "d1")
        .replica(2, 120, "d1")
        .replica(3, 120, "d1")
}

#[test]
fn a_good_history_has_no_violation() {
    let h = good_history();
    assert_clean(&h);
    let s = h.check().stats;
    assert_eq!((s.ops, s.jobs, s.writes_accepted), (h.run.ops.len(), 5, 4));
    assert_eq!((s.ok, s.failed, s.unknown), (s.ops - 7, 4, 3));
    assert_eq!((s.claims_ok, s.completes_ok), (8, 2));
}

#[test]
fn the_checker_sorts_its_inputs() {
    let mut h = good_history();
    h.run.ops.reverse();
    h.run.accepted.reverse();
    assert_clean(&h);
}

/// docs/design.md's worked example: A holds generation 7 and pauses; after expiry B claims 8;
/// A wakes up and completes with 7. The store must refuse.
#[test]
fn a_stale_completion_that_succeeded_is_caught() {
    let worked_example = || {
        History::new()
            .claim("A", "j", 7, (0, 5), 900)
            .claim("B", "j", 8, (1000, 1010), 1900)
            .complete("A", "j", 7, (1500, 1510))
    };
    let report = assert_only(&worked_example(), StaleSuccess);
    let detail = &report.violations[0].detail;
    assert!(
        detail.contains("A complete g7 [1500.000ms..1510.000ms ok]"),
        "{detail}"
    );
    assert!(
        detail.contains("B claim g8 [1000.000ms..1010.000ms ok]"),
        "{detail}"
    );

    assert_clean(&worked_example().failed("stale_lease"));
    assert_clean(&worked_example().unknown());
}

#[test]
fn a_stale_renew_or_release_that_succeeded_is_caught() {
    let h = History::new()
        .claim("A", "j", 1, (0, 5), 900)
        .claim("B", "j", 2, (1000, 1010), 1900)
        .renew("A", "j", 1, (1100, 1110), 2000);
    assert_caught(&h, StaleSuccess);
    let h = History::new()
        .claim("A", "j", 1, (0, 5), 900)
        .claim("B", "j", 2, (1000, 1010), 1900)
        .release("A", "j", 1, (1100, 1110));
    assert_only(&h, StaleSuccess);
}

#[test]
fn a_generation_granted_twice_is_caught() {
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .claim("b", "j", 1, (1000, 1010), 1900);
    assert_only(&h, GenerationGrantedTwice);
}

#[test]
fn generations_out_of_real_time_order_are_caught() {
    let h = History::new()
        .claim("a", "j", 2, (0, 5), 900)
        .release("a", "j", 2, (100, 105))
        .claim("b", "j", 1, (1000, 1010), 1900);
    // b also believes it holds a lease that generation 2 superseded before it was sent.
    assert_caught(&h, GenerationOrder);
}

#[test]
fn concurrent_claims_may_be_granted_in_either_order() {
    // b's claim was sent before a's was answered: b's, with a short TTL, may have been
    // applied first and expired before a's was applied.
    let h = History::new()
        .claim("a", "j", 2, (0, 50), 1000)
        .claim("b", "j", 1, (10, 60), 30);
    assert_clean(&h);
}

#[test]
fn a_lost_acknowledged_completion_is_caught() {
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .complete("a", "j", 1, (100, 110))
        .finally("j", 1, "leased", Some("a"));
    assert_only(&h, LostCompletion);
}

#[test]
fn a_lost_claim_generation_is_caught() {
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .claim("b", "j", 2, (1000, 1010), 1900)
        .finally("j", 1, "leased", Some("a"));
    assert_only(&h, LostClaim);

    let missing = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .finally_missing();
    assert_only(&missing, LostClaim);
}

#[test]
fn durability_is_checked_only_when_the_final_state_was_read() {
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .complete("a", "j", 1, (100, 110));
    assert_clean(&h);
}

/// a believes it holds generation 1 until 900, but b's claim of 2 is answered at 810.
fn overlapping() -> History {
    History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .claim("b", "j", 2, (800, 810), 1700)
}

#[test]
fn overlapping_believed_leases_are_caught() {
    let report = assert_only(&overlapping(), OverlappingLeases);
    assert!(
        report.violations[0].detail.contains("900.000ms"),
        "{report:?}"
    );
}

#[test]
fn a_release_sent_before_the_rival_claim_ends_the_belief() {
    // Whatever the release's outcome: the worker stopped using the lease before sending.
    assert_clean(&overlapping().release("a", "j", 1, (700, 705)));
    assert_clean(&overlapping().release("a", "j", 1, (700, 705)).unknown());
    assert_clean(
        &overlapping()
            .complete("a", "j", 1, (700, 705))
            .failed("stale_lease"),
    );
    // Sent too late, it does not help.
    let late = overlapping().release("a", "j", 1, (850, 855)).unknown();
    assert_only(&late, OverlappingLeases);
}

#[test]
fn an_acked_renew_extends_the_belief() {
    let short = || {
        History::new()
            .claim("a", "j", 1, (0, 5), 500)
            .claim("b", "j", 2, (800, 810), 1700)
    };
    assert_clean(&short());
    let renewed = short().renew("a", "j", 1, (300, 310), 1200);
    assert_only(&renewed, OverlappingLeases);
}

#[test]
fn an_unknown_renew_extends_nothing() {
    // The renew may have extended the lease on the store, but a never believed it did:
    // its belief ends with the claim's deadline, before b's claim.
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 500)
        .renew("a", "j", 1, (300, 700), 1200)
        .unknown()
        .claim("b", "j", 2, (800, 810), 1700);
    assert_clean(&h);
    // It does not excuse a claim deadline that already overlapped, either.
    let h = overlapping().renew("a", "j", 1, (300, 700), 1200).unknown();
    assert_only(&h, OverlappingLeases);
}

#[test]
fn one_worker_holding_successive_generations_is_no_overlap() {
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .claim("a", "j", 2, (800, 810), 1700);
    assert_clean(&h);
}

#[test]
fn a_destination_accepting_a_lower_token_is_caught() {
    let h = History::new()
        .accept("j", 8, "k8")
        .accept("j", 8, "k8b")
        .accept("j", 7, "k7");
    let report = assert_only(&h, DestinationOrder);
    assert_eq!(report.violations.len(), 1);
    assert_eq!(report.violations[0].job, "j");
    // Tokens are per resource: a lower token on another job is fine.
    assert_clean(&History::new().accept("j", 8, "k8").accept("i", 7, "k7"));
}

#[test]
fn a_duplicate_destination_key_is_caught() {
    let h = History::new().accept("j", 1, "k1").accept("j", 1, "k1");
    assert_only(&h, DestinationDuplicate);
}

#[test]
fn a_job_completed_twice_is_caught() {
    // Two completes in flight at once, both acknowledged.
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .complete("a", "j", 1, (100, 200))
        .complete("a", "j", 1, (150, 210));
    assert_only(&h, CompletedTwice);
}

#[test]
fn a_success_after_completion_is_caught() {
    let completed = || {
        History::new()
            .claim("a", "j", 1, (0, 5), 900)
            .complete("a", "j", 1, (100, 200))
    };
    let h = completed().claim("b", "j", 2, (300, 310), 1200);
    assert_only(&h, SuccessAfterCompletion);
    let h = completed().renew("a", "j", 1, (250, 260), 1200);
    assert_only(&h, SuccessAfterCompletion);
    assert_clean(
        &completed()
            .claim_attempt("b", "j", (300, 310))
            .failed("completed"),
    );
    // Sent before the completion was answered, a success may precede it.
    assert_clean(&completed().renew("a", "j", 1, (150, 160), 1000));
}

#[test]
fn diverging_replicas_are_caught() {
    let h = History::new()
        .replica(1, 100, "x")
        .replica(2, 100, "x")
        .replica(3, 99, "y");
    assert_only(&h, ReplicasDiverge);
    let h = History::new().replica(1, 100, "x").replica(2, 101, "x");
    assert_only(&h, ReplicasDiverge);
    let h = History::new().replica(1, 100, "x").replica(2, 100, "z");
    assert_only(&h, ReplicasDiverge);
}

#[test]
fn an_unexplained_completion_is_caught() {
    // A refused complete does not explain a completion.
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .complete("a", "j", 1, (100, 110))
        .failed("lease_expired")
        .finally("j", 1, "completed", Some("a"));
    assert_only(&h, UnexplainedCompletion);
    // Nor does a complete of another generation.
    let h = History::new()
        .claim("a", "j", 2, (0, 5), 900)
        .complete("a", "j", 2, (100, 110))
        .finally("j", 3, "completed", Some("a"));
    assert_caught(&h, UnexplainedCompletion);
    // Nor nothing at all.
    let h = History::new().finally("j", 1, "completed", None);
    assert_only(&h, UnexplainedCompletion);
}

#[test]
fn an_unknown_complete_may_have_happened_or_not() {
    let unknown_complete = || {
        History::new()
            .claim("a", "j", 1, (0, 5), 900)
            .complete("a", "j", 1, (100, 5000))
            .unknown()
    };
    assert_clean(&unknown_complete().finally("j", 1, "completed", Some("a")));
    assert_clean(&unknown_complete().finally("j", 1, "leased", Some("a")));
}

#[test]
fn an_unknown_claim_may_have_consumed_a_generation() {
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .release("a", "j", 1, (500, 505))
        .claim_attempt("b", "j", (600, 2000))
        .unknown()
        .claim("c", "j", 3, (2100, 2110), 3000)
        .finally("j", 3, "leased", Some("c"));
    assert_clean(&h);
}

#[test]
fn an_unknown_renew_is_no_violation() {
    let h = History::new()
        .claim("a", "j", 1, (0, 5), 900)
        .renew("a", "j", 1, (300, 1300), 1200)
        .unknown()
        .complete("a", "j", 1, (800, 810))
        .finally("j", 1, "completed", Some("a"));
    assert_clean(&h);
}

#[test]
fn the_summary_counts_and_names_the_violations() {
    let report = overlapping()
        .accept("j", 2, "k")
        .accept("j", 1, "k")
        .check();
    let summary = report.summary();
    assert!(
        summary.contains("2 ops (2 ok, 0 failed, 0 unknown) on 1 jobs"),
        "{summary}"
    );
    assert!(summary.contains("3 violations"), "{summary}");
    for kind in [
        "OverlappingLeases",
        "DestinationOrder",
        "DestinationDuplicate",
    ] {
        assert!(summary.contains(kind), "{summary}");
    }
    assert!(good_history().check().summary().contains("no violations"));
}

/// Issue 16, item 1: a holder renews at cluster time 100 s; 8 s of real time later the
/// rival's claim reports cluster time 115 s (a once cut-off leader's stale line). The
/// holders' leases expire early, and the rule catches it even when no rival was granted.
#[test]
fn cluster_time_running_ahead_of_real_time_is_caught() {
    let h = History::new()
        .claim("holder", "j1", 1, (0, 5), 11_000)
        .at_cluster_time(99_000)
        .renew("holder", "j1", 1, (1_000, 1_005), 12_000)
        .at_cluster_time(100_000)
        .claim("rival", "j2", 1, (9_000, 9_010), 20_000)
        .at_cluster_time(115_000);
    let report = assert_only(&h, ClusterTimeAhead);
    assert_eq!(report.violations.len(), 1, "{}", report.summary());
    let detail = &report.violations[0].detail;
    assert!(
        detail.contains("rival claim") && detail.contains("holder renew"),
        "names the answer and the worst earlier one: {detail}"
    );
}

/// Cluster time standing still (a majority down), answers whose cluster times are out of
/// their invoke order (overlapping calls), and cluster time advancing at real time plus
/// the drift allowance: all fine.
#[test]
fn cluster_time_that_stands_still_or_keeps_up_with_real_time_is_fine() {
    let h = History::new()
        .claim("a", "j1", 1, (0, 10), 900)
        .at_cluster_time(50_000)
        // Overlapping calls: b answered first but with the later stamp.
        .claim("b", "j2", 1, (100, 400), 1_000)
        .at_cluster_time(50_390)
        .claim("c", "j3", 1, (200, 300), 1_100)
        .at_cluster_time(50_250)
        // The majority is down 8 s: cluster time stands still.
        .renew("a", "j1", 1, (9_000, 9_010), 10_000)
        .at_cluster_time(50_400)
        // Then 10 s of real time, 1 % fast.
        .renew("a", "j1", 1, (19_000, 19_010), 20_000)
        .at_cluster_time(50_400 + 10_100);
    assert_clean(&h);
}

/// The allowance at its limit: `(b.complete − a.invoke) × 1.01 + 5 ms`, and 1 ms past it.
#[test]
fn cluster_time_ahead_by_one_ms_past_the_allowance_is_caught() {
    let history = |ahead_ms: u64| {
        History::new()
            .claim("a", "j1", 1, (0, 10), 900)
            .at_cluster_time(1_000)
            .claim("b", "j2", 1, (990, 1_000), 1_900)
            .at_cluster_time(1_000 + 1_010 + 5 + ahead_ms)
    };
    assert_clean(&history(0));
    assert_only(&history(1), ClusterTimeAhead);
}

/// A history recorded before ops carried `cluster_time_ms` still loads and checks.
#[test]
fn a_history_without_cluster_times_still_loads() {
    let json = r#"{"ops":[{"process":"a","job":"j1","kind":"claim","generation":1,
        "invoke":7000000000000,"complete":7000005000000,"outcome":"ok",
        "deadline":7000900000000,"key":null}],"final_jobs":null,"replicas":[],
        "accepted":[]}"#;
    let run: RunRecord = serde_json::from_str(json).expect("an old history loads");
    assert_eq!(run.ops[0].cluster_time_ms, None);
    assert!(check(&run).is_ok());
}

/// The checker's drift allowance is the client's default deadline drift.
#[test]
fn the_cluster_time_allowance_is_the_clients_default_drift() {
    let client = leasehold_client::DeadlinePolicy::default().drift;
    let checker = leasehold_cluster_tests::checker::CLUSTER_TIME_DRIFT_PERCENT as f64 / 100.0;
    assert!((client - checker).abs() < 1e-12, "{client} vs {checker}");
}

/// Issue 31: a job with a backoff is never granted again before its previous attempt's
/// end (at least the last store time seen under it) plus that attempt's backoff; a job
/// without one (not in `backoffs`) is not judged by it.
#[test]
fn a_claim_before_the_backoff_ran_out_is_caught() {
    use leasehold_cluster_tests::history::Backoff;
    // Attempt 1 last seen at 1_500 (a renew); attempt 2's backoff is 200 × 2 = 400.
    let history = |granted_at: u64, backoff: bool| {
        let mut h = History::new()
            .claim("a", "j1", 1, (0, 10), 400)
            .at_cluster_time(1_000)
            .renew("a", "j1", 1, (500, 510), 700)
            .at_cluster_time(1_500)
            .claim("b", "j1", 2, (800, 810), 1_300)
            .at_cluster_time(1_800)
            .renew("b", "j1", 2, (1_400, 1_410), 1_700)
            .at_cluster_time(2_400)
            .claim("c", "j1", 3, (1_800, 1_810), 2_700)
            .at_cluster_time(granted_at);
        if backoff {
            let b = Backoff {
                base_ms: 200,
                max_ms: 10_000,
            };
            h.run.backoffs.insert("j1".into(), b);
        }
        h
    };
    assert_clean(&history(2_800, true));
    assert_only(&history(2_799, true), ClaimedBeforeDue);
    assert_clean(&history(2_799, false));
    assert_eq!(
        Backoff {
            base_ms: 200,
            max_ms: 500
        }
        .delay_ms(5),
        500
    );
}

/// Issue 32: the cluster's event feed against the checker's own history.
#[test]
fn the_feed_must_hold_every_acked_claim_and_completion() {
    type E<'a> = FeedLine<'a>;
    let full: &[E] = &[
        (1, "j", "submitted", 0, None, 1_000),
        (2, "j", "claimed", 1, Some("a"), 1_010),
        (3, "j", "completed", 1, Some("a"), 1_020),
    ];
    let run = || {
        History::new()
            .claim("a", "j", 1, (0, 10), 900)
            .stored_at(1_010)
            .complete("a", "j", 1, (20, 30))
    };
    assert_clean(&run().feed(1, full).feed(2, full).feed(3, full));
    // A completion the feed lacks, on every node alike.
    let no_completion = &full[..2];
    let h = run().feed(1, no_completion).feed(2, no_completion);
    assert_only(&h, EventMissing);
    // The claim recorded for another owner.
    let mut other: Vec<E> = full.to_vec();
    other[1].4 = Some("b");
    assert_only(&run().feed(1, &other), EventMissing);
    // A claim applied before the feed's first event (before events were recorded) is
    // not looked for.
    let later: &[E] = &[(7, "k", "submitted", 0, None, 5_000)];
    assert_clean(&run().feed(1, later));
    // Replicas whose feeds differ, or with a gap.
    assert_only(&run().feed(1, full).feed(2, no_completion), FeedsDiverge);
    let gap: &[E] = &[full[0], full[1], (4, "j", "completed", 1, Some("a"), 1_020)];
    assert_only(&run().feed(1, gap), FeedsDiverge);
}
