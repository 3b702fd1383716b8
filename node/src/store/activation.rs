//! The state machine store's two checks of a version activation as it is applied
//! (issue 44 item 5), beside `state_machine.rs`'s apply loop:
//! - [`stale_activation`]: an activation that names a membership other than the latest
//!   applied one was decided against a membership that has changed since (a node was
//!   added or removed between the leader's poll and the entry): it is not applied, and
//!   the leader polls again. Every replica applies the same membership entries in the
//!   same order, so every replica decides alike.
//! - [`activation_above`]: an activation of a version above what this binary applies
//!   (a node rolled back while the activation was on its way) stops the node with a
//!   clear message instead of leaving it a member that refuses every later append.
//!
//! Imports only `types` and the state machine crate.

#[cfg(test)]
use leasehold_statemachine::commands::Tick;
use leasehold_statemachine::commands::{ActivateVersion, ActivateVersionIn};
use leasehold_statemachine::{ApiError, Command, Entry, ErrorCode, MembershipMark};

use crate::types::StoredMembership;

/// Why `e`, an activation naming a membership, is not applied under `membership` (the
/// latest membership entry applied); `None` for every other command.
pub fn stale_activation(e: &Entry, membership: &StoredMembership) -> Option<ApiError> {
    let Command::ActivateVersionIn(ActivateVersionIn {
        version,
        membership: named,
    }) = &e.command
    else {
        return None;
    };
    let latest = membership.log_id().map(|l| MembershipMark {
        term: l.leader_id.term,
        node_id: l.leader_id.node_id,
        index: l.index,
    });
    (latest != Some(*named)).then(|| {
        ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "the activation of entry version {version} was decided against the \
                 membership at log index {}, and the membership has changed since \
                 (now {}): not applied; the leader polls its members again",
                named.index,
                latest.map_or_else(
                    || "none".to_owned(),
                    |l| format!("at log index {}", l.index)
                ),
            ),
        )
    })
}

/// The message a node stops with when `command` activates a version above `own`, the
/// newest it applies; `None` when it does not.
pub fn activation_above(command: &Command, own: u32) -> Option<String> {
    let version = match command {
        Command::ActivateVersion(ActivateVersion { version })
        | Command::ActivateVersionIn(ActivateVersionIn { version, .. }) => *version,
        _ => return None,
    };
    (version > own).then(|| {
        format!(
            "the cluster activated entry version {version}, and this binary applies up to \
             {own}: it cannot follow the cluster's log from here. Start a release that \
             applies entry version {version} on this data dir (nothing was applied past \
             the activation)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LogId;
    use openraft::{CommittedLeaderId, Membership};

    fn entry(command: Command) -> Entry {
        Entry {
            stamp_ms: 1,
            term: 2,
            idempotency_key: None,
            command,
        }
    }

    fn membership_at(index: u64) -> StoredMembership {
        let log_id = LogId::new(CommittedLeaderId::new(2, 1), index);
        StoredMembership::new(Some(log_id), Membership::new(vec![[1, 2, 3].into()], None))
    }

    fn named(index: u64) -> Command {
        Command::ActivateVersionIn(ActivateVersionIn {
            version: 8,
            membership: MembershipMark {
                term: 2,
                node_id: 1,
                index,
            },
        })
    }

    #[test]
    fn an_activation_applies_only_under_the_membership_it_names() {
        let m = membership_at(5);
        assert_eq!(stale_activation(&entry(named(5)), &m), None);
        let e = stale_activation(&entry(named(4)), &m).expect("a newer membership");
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(
            e.message.contains("at log index 4") && e.message.contains("now at log index 5"),
            "{}",
            e.message
        );
        let other_leader = Command::ActivateVersionIn(ActivateVersionIn {
            version: 8,
            membership: MembershipMark {
                term: 3,
                node_id: 1,
                index: 5,
            },
        });
        assert!(
            stale_activation(&entry(other_leader), &m).is_some(),
            "a log id is term and index"
        );
        assert!(stale_activation(&entry(named(5)), &StoredMembership::default()).is_some());
        let plain = Command::ActivateVersion(ActivateVersion { version: 7 });
        assert_eq!(
            stale_activation(&entry(plain), &m),
            None,
            "the older form names none"
        );
        assert_eq!(stale_activation(&entry(Command::Tick(Tick)), &m), None);
    }

    #[test]
    fn an_activation_above_this_binary_stops_it() {
        assert_eq!(activation_above(&named(5), 8), None);
        let why = activation_above(&named(5), 7).expect("8 > 7");
        assert!(
            why.contains("activated entry version 8") && why.contains("applies up to 7"),
            "{why}"
        );
        assert!(
            activation_above(&Command::ActivateVersion(ActivateVersion { version: 9 }), 8)
                .is_some()
        );
        assert_eq!(activation_above(&Command::Tick(Tick), 1), None);
    }
}
