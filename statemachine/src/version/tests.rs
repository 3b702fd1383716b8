//! The version table's tests: it is consecutive, its newest is the build's and no
//! command is newer; what version each command needs. May import anything of the crate.

use super::*;
use crate::commands::{ActivateVersion, BatchItem, Claim, Command, Tick};

#[test]
fn the_version_table_is_consecutive_and_its_newest_is_the_build_s() {
    use ClusterVersion as V;
    let all = [
        V::First,
        V::Versions,
        V::Scoped,
        V::Lifecycle,
        V::Events,
        V::Batches,
        V::BoundedReplies,
        V::CheckedActivation,
    ];
    let numbers: Vec<u32> = all.iter().map(|v| v.number()).collect();
    assert_eq!(numbers, (1..=ENTRY_VERSION_MAX).collect::<Vec<_>>());
    assert_eq!(all.last(), Some(&V::NEWEST));
    let newest_since = crate::commands::DESCRIPTORS.iter().map(|d| d.since).max();
    assert!(
        newest_since <= Some(V::NEWEST),
        "a command newer than the table"
    );
    assert!(V::Events.active_at(5) && !V::Events.active_at(4));
    let formats: Vec<_> = (1..=ENTRY_VERSION_MAX).map(V::snapshot_format).collect();
    use crate::snapshot::format::SnapshotFormat as F;
    assert_eq!(
        formats,
        [F::V3, F::V4, F::V4, F::V5, F::V6, F::V6, F::V6, F::V6]
    );
}

#[test]
fn every_command_of_the_first_release_is_version_1_and_activation_is_2() {
    let claim = Command::Claim(Claim {
        job_id: "a".into(),
        owner: "w".into(),
        ttl_ms: 1_000,
    });
    assert_eq!(Command::since(&claim), 1);
    assert_eq!(Command::since(&Command::Tick(Tick)), 1);
    let activate = Command::ActivateVersion(ActivateVersion { version: 2 });
    assert_eq!(Command::since(&activate), 2);
    assert!(Command::since(&activate) <= ENTRY_VERSION_MAX);
    let item = |command| BatchItem {
        idempotency_key: None,
        command,
    };
    let batch = Command::Batch(vec![item(claim), item(activate)]);
    assert_eq!(
        Command::since(&batch),
        2,
        "a batch is as new as its newest item"
    );
}

#[test]
fn the_cluster_version_only_rises() {
    assert_eq!(activated(CLUSTER_VERSION_INITIAL, 2), 2);
    assert_eq!(activated(2, 2), 2);
    assert_eq!(activated(3, 2), 3);
}
