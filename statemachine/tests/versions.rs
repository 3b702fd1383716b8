//! The cluster version (issue 29 item 5, `version.rs`): `ActivateVersion` raises it and
//! only raises it, a command above it is refused on apply, and a snapshot stays in the
//! v3 bytes the previous release reads until the activation, then is v4 and carries it.

use leasehold_statemachine::commands::{ActivateVersion, Claim};
use leasehold_statemachine::snapshot::{SNAPSHOT_FORMAT_V3, SNAPSHOT_FORMAT_V4};
use leasehold_statemachine::version::CLUSTER_VERSION_INITIAL;
use leasehold_statemachine::{
    Command, Entry, ErrorCode, Inconsistency, LeaseMachine, Outcome, Reply, SnapshotError,
};

fn apply(m: &mut LeaseMachine, index: u64, command: Command) -> Reply {
    let entry = Entry {
        stamp_ms: 1_000 + index,
        term: 1,
        idempotency_key: None,
        command,
    };
    let reply = m.apply(index, &entry);
    m.check_invariants();
    reply
}

fn claim(job: &str) -> Command {
    Command::Claim(Claim {
        job_id: job.into(),
        owner: "w".into(),
        ttl_ms: 10_000,
    })
}

#[test]
fn a_machine_starts_at_version_1_and_an_activation_raises_it() {
    let mut m = LeaseMachine::default();
    assert_eq!(m.cluster_version(), CLUSTER_VERSION_INITIAL);
    assert_eq!(
        m.admits(2).unwrap_err().code,
        ErrorCode::Unavailable,
        "entry version 2 is not active before the activation"
    );
    assert!(m.admits(1).is_ok());
    let r = apply(
        &mut m,
        1,
        Command::ActivateVersion(ActivateVersion { version: 2 }),
    );
    assert_eq!(r, Ok(Outcome::Ticked));
    assert_eq!(m.cluster_version(), 2);
    assert!(m.admits(2).is_ok());
    assert!(
        m.admits(3).is_err(),
        "a later version waits for its own activation"
    );
    // A repeated activation changes nothing; commands of version 1 still apply.
    assert_eq!(
        apply(
            &mut m,
            2,
            Command::ActivateVersion(ActivateVersion { version: 2 })
        ),
        Ok(Outcome::Ticked)
    );
    assert_eq!(m.cluster_version(), 2);
    assert!(apply(&mut m, 3, claim("a")).is_ok());
}

#[test]
fn an_activation_of_the_first_version_is_refused_and_changes_nothing() {
    let mut m = LeaseMachine::default();
    let r = apply(
        &mut m,
        1,
        Command::ActivateVersion(ActivateVersion { version: 1 }),
    );
    assert_eq!(r.unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(m.cluster_version(), CLUSTER_VERSION_INITIAL);
}

#[test]
fn the_cluster_version_never_goes_back() {
    let mut m = LeaseMachine::default();
    apply(
        &mut m,
        1,
        Command::ActivateVersion(ActivateVersion { version: 3 }),
    )
    .unwrap();
    apply(
        &mut m,
        2,
        Command::ActivateVersion(ActivateVersion { version: 2 }),
    )
    .unwrap();
    assert_eq!(m.cluster_version(), 3);
}

#[test]
fn snapshots_stay_v3_until_the_activation_then_are_v4_and_carry_the_version() {
    let mut m = LeaseMachine::default();
    apply(&mut m, 1, claim("a")).unwrap();
    let before = m.snapshot();
    assert_eq!(
        before[0], SNAPSHOT_FORMAT_V3,
        "the previous release can install it"
    );
    assert_eq!(
        LeaseMachine::restore(&before).unwrap().cluster_version(),
        CLUSTER_VERSION_INITIAL
    );
    apply(
        &mut m,
        2,
        Command::ActivateVersion(ActivateVersion { version: 2 }),
    )
    .unwrap();
    let after = m.snapshot();
    assert_eq!(after[0], SNAPSHOT_FORMAT_V4);
    let (v3_part, version) = after.split_at(after.len() - 4);
    assert_eq!(version, 2u32.to_le_bytes(), "the cluster version last");
    let mut as_v3 = v3_part.to_vec();
    as_v3[0] = SNAPSHOT_FORMAT_V3;
    let v3 = LeaseMachine::restore(&as_v3).expect("v4 is v3's bytes, then the version");
    assert_eq!(v3.cluster_version(), CLUSTER_VERSION_INITIAL);
    let restored = LeaseMachine::restore(&after).unwrap();
    assert_eq!(restored.cluster_version(), 2);
    assert_eq!(restored.digest(), m.digest());
    assert_eq!(m.snapshot_source().encode(), after, "both encoders agree");
}

#[test]
fn a_v4_snapshot_at_the_initial_version_is_refused() {
    let mut m = LeaseMachine::default();
    apply(&mut m, 1, claim("a")).unwrap();
    let mut bytes = m.snapshot();
    bytes[0] = SNAPSHOT_FORMAT_V4;
    bytes.extend_from_slice(&CLUSTER_VERSION_INITIAL.to_le_bytes());
    match LeaseMachine::restore(&bytes) {
        Err(SnapshotError::Inconsistent(Inconsistency::V4WithoutVersion)) => {}
        other => panic!("expected V4WithoutVersion, got {other:?}"),
    }
}
