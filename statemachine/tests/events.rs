//! docs/api.md "History of a job" and "Event feed", as `LeaseMachine::apply` records
//! them: one event per transition (none for a renewal), `expired` at the lease's end,
//! the seq following the log and the same on every replica and across a snapshot,
//! histories bounded at 100 and kept for a deleted id, the feed's retention and its 410,
//! and nothing recorded before cluster version 5. Every apply is followed by
//! `check_invariants()`.

use leasehold_statemachine::commands::{
    ActivateVersion, Cancel, Claim, ClaimNext, Delete, ReleaseWith, Renew, Retry, SubmitWith, Tick,
};
use leasehold_statemachine::limits::{FEED_EVENTS_KEPT_MIN, FEED_KEPT_MS, HISTORY_EVENTS_MAX};
use leasehold_statemachine::snapshot::{SNAPSHOT_FORMAT_V5, SNAPSHOT_FORMAT_V6};
use leasehold_statemachine::version::ENTRY_VERSION_MAX;
use leasehold_statemachine::{
    BatchItem, Command, Entry, ErrorCode, Event, EventFilter, EventKind, LeaseMachine, Outcome,
    Reply,
};

struct H {
    m: LeaseMachine,
    idx: u64,
}

impl H {
    /// A machine at cluster version `version`.
    fn at_version(version: u32) -> Self {
        let mut h = H {
            m: LeaseMachine::default(),
            idx: 0,
        };
        h.at(1, Command::ActivateVersion(ActivateVersion { version }))
            .unwrap();
        h
    }

    fn new() -> Self {
        H::at_version(5)
    }

    fn at(&mut self, stamp_ms: u64, command: Command) -> Reply {
        self.idx += 1;
        let entry = Entry {
            stamp_ms,
            term: 1,
            idempotency_key: None,
            command,
        };
        let r = self.m.apply(self.idx, &entry);
        self.m.check_invariants();
        r
    }

    fn history(&self, id: &str) -> Vec<Event> {
        self.m.history(id).expect("the job has a history").1.events
    }

    fn kinds(&self, id: &str) -> Vec<EventKind> {
        self.history(id).iter().map(|e| e.event).collect()
    }

    fn feed(&self, after: u64) -> Vec<Event> {
        let page = self.m.events(after, 1000, EventFilter::default()).unwrap();
        page.events
    }
}

fn submit(id: &str, backoff_ms: u64) -> Command {
    Command::SubmitWith(SubmitWith {
        id: Some(id.into()),
        queue: "q".into(),
        payload: None,
        max_attempts: None,
        run_at_ms: None,
        priority: 0,
        backoff_ms,
        backoff_ms_max: 3_600_000,
    })
}

fn submit_to(id: &str, queue: &str) -> Command {
    let mut cmd = submit(id, 0);
    if let Command::SubmitWith(SubmitWith { queue: q, .. }) = &mut cmd {
        *q = queue.into();
    }
    cmd
}

fn claim(id: &str, owner: &str, ttl_ms: u64) -> Command {
    Command::Claim(Claim {
        job_id: id.into(),
        owner: owner.into(),
        ttl_ms,
    })
}

fn generation(r: Reply) -> u64 {
    match r {
        Ok(Outcome::Lease(l)) => l.generation,
        other => panic!("expected a lease, got {other:?}"),
    }
}

fn release(id: &str, owner: &str, generation: u64, error: Option<&str>) -> Command {
    Command::ReleaseWith(ReleaseWith {
        job_id: id.into(),
        owner: owner.into(),
        generation,
        retry: false,
        delay_ms: None,
        error: error.map(String::from),
    })
}

#[test]
fn every_transition_is_one_event_and_a_renewal_is_none() {
    use EventKind::*;
    let mut h = H::new();
    h.at(10, submit("a", 0)).unwrap();
    let g = generation(h.at(20, claim("a", "w1", 100)));
    h.at(
        30,
        Command::Renew(Renew {
            job_id: "a".into(),
            owner: "w1".into(),
            generation: g,
            ttl_ms: Some(100),
        }),
    )
    .unwrap();
    h.at(40, release("a", "w1", g, Some("db down"))).unwrap();
    let g = generation(h.at(50, claim("a", "w2", 100)));
    // Nothing happens until an entry's stamp passes the lease's end (150).
    h.at(400, Command::Tick(Tick)).unwrap();
    let g3 = generation(h.at(410, claim("a", "w3", 100)));
    let cancel = Command::Cancel(Cancel {
        job_id: "a".into(),
        reason: Some("user asked".into()),
    });
    h.at(420, cancel).unwrap();
    h.at(430, release("a", "w3", g3, None)).unwrap();
    h.at(
        440,
        Command::Retry(Retry {
            job_id: "a".into(),
            run_at_ms: None,
        }),
    )
    .unwrap();
    h.at(450, Command::Delete(Delete { job_id: "a".into() }))
        .unwrap();
    let want = [
        Submitted,
        Claimed,
        Released,
        Claimed,
        Expired,
        Claimed,
        CancelRequested,
        Released,
        Cancelled,
        Retried,
        Deleted,
    ];
    assert_eq!(h.kinds("a"), want);
    let ev = h.history("a");
    let seqs: Vec<u64> = ev.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=11).collect::<Vec<_>>(),
        "one seq per event, in log order"
    );
    assert_eq!(ev[1].owner.as_deref(), Some("w1"));
    assert_eq!(ev[1].detail.as_ref().unwrap().lease_until_ms, Some(120));
    assert_eq!(
        ev[2].detail.as_ref().unwrap().error.as_deref(),
        Some("db down")
    );
    assert_eq!(ev[3].generation, g);
    // `expired` carries the lease's end, not the stamp that settled it, and its holder.
    assert_eq!(
        (ev[4].cluster_time_ms, ev[4].owner.as_deref()),
        (150, Some("w2"))
    );
    assert_eq!(ev[4].log_index, ev[3].log_index + 1);
    assert_eq!(
        ev[6].detail.as_ref().unwrap().reason.as_deref(),
        Some("user asked")
    );
    assert_eq!(
        (ev[0].owner.as_deref(), ev[9].owner.as_deref()),
        (None, None)
    );
    assert!(ev.iter().all(|e| e.job_id == "a" && e.queue == "q"));
    // The feed holds the same events in the same order.
    assert_eq!(h.feed(0), ev);
}

#[test]
fn a_claim_past_max_attempts_is_failed_and_a_backoff_shows_when_it_is_due() {
    let mut h = H::new();
    let mut cmd = submit("b", 1_000);
    if let Command::SubmitWith(SubmitWith { max_attempts, .. }) = &mut cmd {
        *max_attempts = Some(1);
    }
    h.at(10, cmd).unwrap();
    h.at(20, claim("b", "w", 100)).unwrap();
    h.at(200, Command::Tick(Tick)).unwrap();
    let ev = h.history("b");
    assert_eq!(ev[2].event, EventKind::Expired);
    // First backoff: backoff_ms × 2^0 from the lease's end.
    assert_eq!(ev[2].detail.as_ref().unwrap().due_ms, Some(120 + 1_000));
    h.at(2_000, claim("b", "w", 100)).unwrap_err();
    let last = h.history("b").pop().unwrap();
    assert_eq!(last.event, EventKind::Failed);
    assert!(last
        .detail
        .unwrap()
        .error
        .unwrap()
        .contains("1 attempts used"));
}

#[test]
fn a_history_keeps_the_last_100_and_a_re_created_id_starts_a_new_one() {
    let mut h = H::new();
    h.at(1, submit("c", 0)).unwrap();
    for i in 0..150u64 {
        let g = generation(h.at(10 + i, claim("c", "w", 1_000)));
        h.at(10 + i, release("c", "w", g, None)).unwrap();
    }
    let ev = h.history("c");
    assert_eq!(ev.len(), HISTORY_EVENTS_MAX);
    assert_eq!(ev.last().unwrap().seq, 301);
    assert_eq!(ev[0].seq, 202);
    h.at(500, Command::Delete(Delete { job_id: "c".into() }))
        .unwrap();
    assert_eq!(h.kinds("c").last(), Some(&EventKind::Deleted));
    h.at(600, submit("c", 0)).unwrap();
    // Before entry version 7 the state continues the namesake's history; a reader still
    // sees only the new job's events (issue 44 item 3).
    assert_eq!(h.kinds("c"), [EventKind::Submitted]);
    assert!(h.m.history("never").is_none());
}

/// Issue 44 item 3, as reproduced: tenant A's job `hx` is claimed, released with an
/// error, claimed again, cancelled with a reason and deleted; B submits `hx` into its own
/// queue. B's history of `hx` showed A's owners, error and reason relabelled with B's
/// queue. Now it holds B's events only, at every cluster version with events, and from
/// entry version 7 the state itself starts anew.
#[test]
fn a_re_created_id_never_shows_its_namesakes_events() {
    for version in [5, ENTRY_VERSION_MAX] {
        let mut h = H::at_version(version);
        h.at(10, submit_to("hx", "a-q")).unwrap();
        let g = generation(h.at(20, claim("hx", "a-worker", 1_000)));
        h.at(30, release("hx", "a-worker", g, Some("a's secret error")))
            .unwrap();
        let g = generation(h.at(40, claim("hx", "a-worker", 1_000)));
        let cancel = Command::Cancel(Cancel {
            job_id: "hx".into(),
            reason: Some("a's secret reason".into()),
        });
        h.at(50, cancel).unwrap();
        h.at(55, release("hx", "a-worker", g, None)).unwrap();
        h.at(
            60,
            Command::Delete(Delete {
                job_id: "hx".into(),
            }),
        )
        .unwrap();
        let a_events = h.history("hx");
        assert!(a_events.len() >= 6, "v{version}: {a_events:?}");
        assert!(a_events.iter().all(|e| e.queue == "a-q"));
        h.at(70, submit_to("hx", "b-q")).unwrap();
        let b_events = h.history("hx");
        assert_eq!(
            b_events.iter().map(|e| e.event).collect::<Vec<_>>(),
            [EventKind::Submitted],
            "v{version}"
        );
        let text = format!("{b_events:?}");
        assert!(
            !text.contains("a-worker") && !text.contains("secret"),
            "{text}"
        );
        // The feed keeps the namesake's events under their own queue.
        let feed_a = h.feed(0).into_iter().filter(|e| e.queue == "a-q").count();
        assert_eq!(feed_a, a_events.len(), "v{version}");
        // Deleted again, the history is B's, ending `deleted`.
        h.at(
            80,
            Command::Delete(Delete {
                job_id: "hx".into(),
            }),
        )
        .unwrap();
        assert_eq!(h.kinds("hx"), [EventKind::Submitted, EventKind::Deleted]);
    }
}

#[test]
fn nothing_is_recorded_before_cluster_version_5() {
    let mut h = H::at_version(4);
    h.at(10, submit("d", 0)).unwrap();
    h.at(20, claim("d", "w", 100)).unwrap();
    assert_eq!(h.m.last_event_seq(), 0);
    assert!(h.history("d").is_empty());
    assert_eq!(h.m.snapshot()[0], SNAPSHOT_FORMAT_V5);
    h.at(30, Command::ActivateVersion(ActivateVersion { version: 5 }))
        .unwrap();
    h.at(400, Command::Tick(Tick)).unwrap();
    assert_eq!(h.kinds("d"), [EventKind::Expired]);
    assert_eq!(h.m.snapshot()[0], SNAPSHOT_FORMAT_V6);
}

/// A log with every kind of event, from `seed`.
fn busy_log(seed: u64, n: u64) -> Vec<(u64, Command)> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut log = Vec::new();
    for i in 0..n {
        let stamp = 10 + i * 40;
        let id = format!("j{}", next() % 12);
        let cmd = match next() % 7 {
            0 => submit(&id, next() % 50),
            1 | 2 => claim(&id, "w", 100 + next() % 300),
            3 => Command::ClaimNext(ClaimNext {
                queue: "q".into(),
                owner: "v".into(),
                ttl_ms: 150,
            }),
            4 => Command::Cancel(Cancel {
                job_id: id,
                reason: None,
            }),
            5 => Command::Retry(Retry {
                job_id: id,
                run_at_ms: None,
            }),
            _ => Command::Delete(Delete { job_id: id }),
        };
        log.push((stamp, cmd));
    }
    log
}

#[test]
fn replicas_and_a_restored_snapshot_record_the_same_seqs() {
    let seed = 0x5eed_0032;
    let log = busy_log(seed, 600);
    let (mut a, mut b) = (H::new(), H::new());
    for (stamp, cmd) in &log[..300] {
        let _ = a.at(*stamp, cmd.clone());
        let _ = b.at(*stamp, cmd.clone());
    }
    // `b` continues from a snapshot of itself, as a restarted or lagging node would.
    let snap = b.m.snapshot();
    assert_eq!(snap[0], SNAPSHOT_FORMAT_V6);
    b.m = LeaseMachine::restore(&snap).expect("v6 restores");
    assert_eq!(
        b.m.snapshot(),
        snap,
        "seed {seed}: a v6 image round-trips byte for byte"
    );
    for (stamp, cmd) in &log[300..] {
        let _ = a.at(*stamp, cmd.clone());
        let _ = b.at(*stamp, cmd.clone());
    }
    let n = a.m.last_event_seq();
    assert!(n > 100, "seed {seed}: the log records events ({n})");
    assert_eq!(
        a.feed(0),
        b.feed(0),
        "seed {seed}: the same events, seqs and all"
    );
    assert_eq!(a.m.digest(), b.m.digest(), "seed {seed}");
    let kinds: std::collections::HashSet<_> = a.feed(0).iter().map(|e| e.event).collect();
    assert!(kinds.len() >= 6, "seed {seed}: a varied log ({kinds:?})");
}

#[test]
fn the_feed_filters_pages_and_answers_410_once_it_dropped_what_was_asked() {
    let mut h = H::new();
    h.at(1, submit("x", 0)).unwrap();
    let mut y = submit("y", 0);
    if let Command::SubmitWith(SubmitWith { queue, .. }) = &mut y {
        *queue = "other".into();
    }
    h.at(2, y).unwrap();
    let only_y = EventFilter {
        job_id: Some("y"),
        ..EventFilter::default()
    };
    let page = h.m.events(0, 10, only_y).unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!((page.events[0].seq, page.next_after), (2, 2));
    let by_queue = EventFilter {
        queue: Some("q"),
        ..EventFilter::default()
    };
    assert_eq!(h.m.events(0, 10, by_queue).unwrap().events[0].job_id, "x");
    assert_eq!(
        h.m.events(0, 0, EventFilter::default()).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    // Past the minimum kept and ten minutes old, the oldest events go.
    // Claims and releases of one job in batches: one apply (one invariant check in a
    // debug build) for 500 events.
    let mut t = 10;
    let mut g = h.m.job("x", 0).unwrap().generation;
    let item = |command| BatchItem {
        idempotency_key: None,
        command,
    };
    while h.m.last_event_seq() <= FEED_EVENTS_KEPT_MIN as u64 {
        let mut items = Vec::new();
        for _ in 0..250 {
            g += 1;
            items.push(item(claim("x", "w", 1_000)));
            items.push(item(release("x", "w", g, None)));
        }
        h.at(t, Command::Batch(items)).unwrap();
        t += 1;
    }
    assert_eq!(
        h.feed(0)[0].seq,
        1,
        "young events are kept past the minimum"
    );
    let later = t + FEED_KEPT_MS + 1;
    h.at(later, claim("x", "w", 1_000)).unwrap();
    let err = h.m.events(0, 10, EventFilter::default()).unwrap_err();
    assert_eq!(err.code, ErrorCode::EventsCompacted);
    assert_eq!(err.code.http_status(), 410);
    let oldest = h.m.last_event_seq() - FEED_EVENTS_KEPT_MIN as u64 + 1;
    assert!(
        err.message.contains(&format!("seq {oldest}")),
        "{}",
        err.message
    );
    let resumed = h.m.events(oldest - 1, 10, EventFilter::default()).unwrap();
    assert_eq!(resumed.events[0].seq, oldest);
    // Past the end, even at the largest seq: nothing, and no overflow.
    let past = h.m.events(u64::MAX, 10, EventFilter::default()).unwrap();
    assert_eq!((past.events.len(), past.next_after), (0, u64::MAX));
}
