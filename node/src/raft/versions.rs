//! Entry versions between nodes (issue 29, item 5; the state machine's side is
//! `statemachine/src/version.rs`): what each node advertises, what the leader knows of
//! its members, and the decisions built on that — the proposal gate, the activation of a
//! newer cluster version — plus the start-up refusal of data written by a newer release.
//!
//! ```text
//!  POST /raft/version ──▶ {node_id, entry_version_max}   (404 from the previous release:
//!                                                          version 1; no answer: unknown,
//!                                                          counted as 1)
//!  leader: every member ≥ n, cluster version < n ──▶ propose ActivateVersion { n }
//!  leader: a command of version v > cluster version ──▶ 503, naming the member behind
//! ```
//!
//! Like etcd's cluster version and CockroachDB's version gates, the per-node versions
//! only decide the activation; a command is admitted against the *committed* cluster
//! version, which every replica also checks on apply. Once activated, a node restarted
//! on an older binary refuses to start (the previous release cannot decode the log or
//! the v4 snapshot; this one says so in [`NewerData`]), so a member that is down does
//! not hold back new commands.
//!
//! The decisions are pure functions ([`gate`], [`decide_activation`], [`check_entries`]);
//! [`poll`] asks the members. May import `network` and `store` (the log at start-up),
//! and the lower layers.

#[cfg(test)]
use leasehold_statemachine::commands::Tick;
use leasehold_statemachine::commands::{ActivateVersion, ActivateVersionIn};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use leasehold_statemachine::version::CLUSTER_VERSION_INITIAL;
use leasehold_statemachine::{Command, LeaseMachine};
use openraft::{EntryPayload, RaftLogReader};

pub use crate::raft::messages::{VersionAnswer, VersionRequest};
use crate::raft::network::{Network, VersionCall};
use crate::types::{NodeId, TypeConfig};

/// Lowers the entry version this binary claims to apply (tests only: a real process of
/// this build that behaves, at start, like one of an older release). Unset in production.
pub const ENTRY_VERSION_MAX_ENV: &str = "LEASEHOLD_ENTRY_VERSION_MAX_FOR_TESTS";
/// How often the leader asks its members (and at every membership change).
pub const POLL_INTERVAL: Duration = Duration::from_millis(1_000);
/// Bound on one member's answer.
pub const POLL_TIMEOUT: Duration = Duration::from_millis(500);
/// Entries read at once by the start-up check.
const CHECK_CHUNK: u64 = 1_024;

/// What the leader knows of one member's entry version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// It answered `/raft/version`.
    Advertised(u32),
    /// It answered 404: the release before entry versions, which applies version 1.
    NoRoute,
    /// It did not answer (down, unreachable, refused): counted as version 1.
    Unknown(String),
}

impl Seen {
    /// The version it is counted at.
    pub fn version(&self) -> u32 {
        match self {
            Seen::Advertised(v) => *v,
            Seen::NoRoute | Seen::Unknown(_) => CLUSTER_VERSION_INITIAL,
        }
    }

    /// How `/v1/cluster` names where the number came from.
    pub fn source(&self) -> &'static str {
        match self {
            Seen::Advertised(_) => "advertised",
            Seen::NoRoute => "previous_release",
            Seen::Unknown(_) => "unknown",
        }
    }
}

/// This node's own entry version, what it last learned of its members', and the lock
/// that gives the activation and membership changes one view (issue 44 item 5).
pub struct Versions {
    own: u32,
    seen: Mutex<BTreeMap<NodeId, Seen>>,
    /// Held by the leader from its poll until the activation commits, and by a
    /// membership change from the new node's check until it commits: neither decides
    /// against a membership or a cluster version the other is changing.
    changes: tokio::sync::Mutex<()>,
    /// Asks a node that is not a member yet (`POST /v1/cluster/nodes`).
    network: Network,
}

impl Versions {
    pub fn new(own: u32, network: Network) -> Self {
        Versions {
            own,
            seen: Mutex::new(BTreeMap::new()),
            changes: tokio::sync::Mutex::new(()),
            network,
        }
    }

    /// Waits for the lock of membership-and-version decisions (see the field).
    pub async fn lock_changes(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.changes.lock().await
    }

    /// Asks node `id` at `addr` which entry version it applies ([`POLL_TIMEOUT`]); an
    /// answer from another node id counts as no answer.
    pub async fn ask(&self, self_id: NodeId, id: NodeId, addr: &str) -> Seen {
        let client = self
            .network
            .clone()
            .client(id, &openraft::BasicNode::new(addr));
        let req = VersionRequest { from: self_id };
        match client.version(&req, POLL_TIMEOUT).await {
            VersionCall::Answered(a) if a.node_id == id => Seen::Advertised(a.entry_version_max),
            VersionCall::Answered(a) => Seen::Unknown(format!(
                "{addr} answered as node {}, not node {id}",
                a.node_id
            )),
            VersionCall::NoRoute => Seen::NoRoute,
            VersionCall::Failed(why) => Seen::Unknown(why),
        }
    }

    /// The newest entry version this node applies (what it advertises).
    pub fn own(&self) -> u32 {
        self.own
    }

    /// The members' versions as last polled (empty on a node that has not led).
    pub fn seen(&self) -> BTreeMap<NodeId, Seen> {
        self.seen.lock().expect("versions lock").clone()
    }

    pub fn record(&self, seen: BTreeMap<NodeId, Seen>) {
        *self.seen.lock().expect("versions lock") = seen;
    }
}

/// The entry version this binary applies: the build's, unless [`ENTRY_VERSION_MAX_ENV`]
/// lowers it (never raises it: a binary cannot apply what it cannot decode).
pub fn own_entry_version(build_max: u32) -> u32 {
    lowered(
        std::env::var(ENTRY_VERSION_MAX_ENV).ok().as_deref(),
        build_max,
    )
}

/// [`own_entry_version`] for the variable's value `var`.
fn lowered(var: Option<&str>, build_max: u32) -> u32 {
    var.and_then(|v| v.trim().parse::<u32>().ok())
        .map_or(build_max, |v| v.clamp(CLUSTER_VERSION_INITIAL, build_max))
}

/// Whether the leader may propose a command of entry version `version` now: at or below
/// the committed `cluster_version`, yes. Above it, no (503), and the message names the
/// lowest member behind it, or says the activation is still to come.
pub fn gate(
    version: u32,
    cluster_version: u32,
    seen: &BTreeMap<NodeId, Seen>,
) -> Result<(), String> {
    if version <= cluster_version {
        return Ok(());
    }
    let behind = seen.iter().find(|(_, s)| s.version() < version);
    Err(match behind {
        Some((id, Seen::Unknown(why))) => format!(
            "node {id} has not said which entry versions it applies ({why}), so it counts \
             as 1; this command needs entry version {version}; start node {id} on the new \
             release first"
        ),
        Some((id, s)) => format!(
            "node {id} applies entry versions up to {}; this command needs entry version \
             {version}; upgrade node {id} first",
            s.version()
        ),
        None => format!(
            "this command needs entry version {version}, and the cluster version is still \
             {cluster_version}: every member applies it, and the leader activates it \
             shortly; retry"
        ),
    })
}

/// The version the leader should activate now, if any: the lowest its members apply
/// (`members` must hold every voter and learner, this node included), when that is
/// above the committed `cluster_version`.
pub fn decide_activation(cluster_version: u32, members: &BTreeMap<NodeId, Seen>) -> Option<u32> {
    let lowest = members.values().map(Seen::version).min()?;
    (lowest > cluster_version).then_some(lowest)
}

/// Whether a node that answered `seen` may join a cluster at `cluster_version` (issue 44
/// item 5): it must apply every entry the cluster may already hold. The message says
/// what to do.
pub fn admit_member(id: NodeId, seen: &Seen, cluster_version: u32) -> Result<(), String> {
    if seen.version() >= cluster_version {
        return Ok(());
    }
    Err(match seen {
        Seen::Unknown(why) => format!(
            "node {id} has not said which entry versions it applies ({why}), and the cluster \
             version is {cluster_version}: start node {id} (serve --join) before adding it"
        ),
        seen => format!(
            "node {id} applies entry versions up to {}, and the cluster version is \
             {cluster_version}: it could not decode this cluster's log; start it on a \
             release at least as new as the cluster's",
            seen.version()
        ),
    })
}

/// Asks every member in `members` (id → address) which entry version it applies, all
/// at once; this node answers for itself with `own`.
pub async fn poll(
    network: &mut Network,
    self_id: NodeId,
    own: u32,
    members: &BTreeMap<NodeId, String>,
) -> BTreeMap<NodeId, Seen> {
    let mut asks = tokio::task::JoinSet::new();
    for (&id, addr) in members.iter().filter(|(&id, _)| id != self_id) {
        let client = network.client(id, &openraft::BasicNode::new(addr));
        asks.spawn(async move {
            let req = VersionRequest { from: self_id };
            let seen = match client.version(&req, POLL_TIMEOUT).await {
                VersionCall::Answered(a) => Seen::Advertised(a.entry_version_max),
                VersionCall::NoRoute => Seen::NoRoute,
                VersionCall::Failed(why) => Seen::Unknown(why),
            };
            (id, seen)
        });
    }
    let mut out = BTreeMap::new();
    while let Some(answer) = asks.join_next().await {
        if let Ok((id, seen)) = answer {
            out.insert(id, seen);
        }
    }
    // A task that panicked left its member out: it counts as unknown.
    for &id in members.keys() {
        out.entry(id)
            .or_insert_with(|| Seen::Unknown("not asked".into()));
    }
    out.insert(self_id, Seen::Advertised(own));
    out
}

/// Data this binary cannot apply: it was written by a newer release.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this data dir was written by a newer leasehold: {what} has entry version {found}, and \
     this binary applies up to {own}; start the newer binary on it (a downgrade is only \
     possible before the newer cluster version was activated, see docs/operations.md, \
     \"Upgrading\")"
)]
pub struct NewerData {
    /// Where it was found: the snapshot, or a log entry at an index.
    pub what: String,
    pub found: u32,
    pub own: u32,
}

/// The start-up check of the restored snapshot's cluster version.
pub fn check_machine(machine: &LeaseMachine, own: u32) -> Result<(), NewerData> {
    let found = machine.cluster_version();
    if found > own {
        return Err(NewerData {
            what: format!("the snapshot (cluster version {found})"),
            found,
            own,
        });
    }
    Ok(())
}

/// The start-up check of log entries: the first whose command is newer than `own`.
pub fn check_entries<'a>(
    entries: impl IntoIterator<Item = (u64, &'a Command)>,
    own: u32,
) -> Result<(), NewerData> {
    for (index, cmd) in entries {
        let found = match cmd {
            Command::ActivateVersion(ActivateVersion { version })
            | Command::ActivateVersionIn(ActivateVersionIn { version, .. }) => {
                cmd.since().max(*version)
            }
            cmd => cmd.since(),
        };
        if found > own {
            return Err(NewerData {
                what: format!("the {} entry at log index {index}", cmd.kind()),
                found,
                own,
            });
        }
    }
    Ok(())
}

/// Reads the whole log (`log`, at start-up, before Raft runs) through [`check_entries`].
pub async fn check_log<L: RaftLogReader<TypeConfig>>(
    log: &mut L,
    first: u64,
    last: u64,
    own: u32,
) -> Result<(), CheckError> {
    let mut at = first;
    while at <= last {
        let end = at.saturating_add(CHECK_CHUNK).min(last.saturating_add(1));
        let entries = log
            .try_get_log_entries(at..end)
            .await
            .map_err(|e| CheckError::Read(e.to_string()))?;
        let commands = entries.iter().filter_map(|e| match &e.payload {
            EntryPayload::Normal(n) => Some((e.log_id.index, &n.command)),
            _ => None,
        });
        check_entries(commands, own)?;
        at = end;
    }
    Ok(())
}

/// Why the start-up version check failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Newer(#[from] NewerData),
    #[error("reading the log to check its entry versions: {0}")]
    Read(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(list: &[(NodeId, Seen)]) -> BTreeMap<NodeId, Seen> {
        list.iter().cloned().collect()
    }

    #[test]
    fn a_command_at_or_below_the_cluster_version_passes_whoever_is_behind() {
        let s = seen(&[(1, Seen::Advertised(2)), (2, Seen::Unknown("down".into()))]);
        assert_eq!(gate(1, 1, &s), Ok(()));
        assert_eq!(
            gate(2, 2, &s),
            Ok(()),
            "activated: a member that is down holds nothing back"
        );
    }

    #[test]
    fn a_newer_command_is_refused_naming_the_node_behind() {
        let s = seen(&[
            (1, Seen::Advertised(2)),
            (2, Seen::Advertised(2)),
            (3, Seen::NoRoute),
        ]);
        let why = gate(2, 1, &s).unwrap_err();
        assert!(
            why.contains("node 3 applies entry versions up to 1")
                && why.contains("needs entry version 2")
                && why.contains("upgrade node 3 first"),
            "{why}"
        );
        let s = seen(&[
            (1, Seen::Advertised(2)),
            (2, Seen::Unknown("timed out".into())),
        ]);
        let why = gate(2, 1, &s).unwrap_err();
        assert!(
            why.contains("node 2 has not said") && why.contains("timed out"),
            "{why}"
        );
        let s = seen(&[(1, Seen::Advertised(2)), (2, Seen::Advertised(2))]);
        let why = gate(2, 1, &s).unwrap_err();
        assert!(why.contains("cluster version is still 1"), "{why}");
    }

    #[test]
    fn the_activation_waits_for_every_member() {
        let all_new = seen(&[(1, Seen::Advertised(2)), (2, Seen::Advertised(2))]);
        assert_eq!(decide_activation(1, &all_new), Some(2));
        assert_eq!(decide_activation(2, &all_new), None, "already active");
        let one_old = seen(&[(1, Seen::Advertised(2)), (2, Seen::NoRoute)]);
        assert_eq!(decide_activation(1, &one_old), None);
        let one_unknown = seen(&[(1, Seen::Advertised(2)), (2, Seen::Unknown("x".into()))]);
        assert_eq!(decide_activation(1, &one_unknown), None);
        assert_eq!(decide_activation(1, &BTreeMap::new()), None);
    }

    #[test]
    fn the_start_up_check_finds_the_first_newer_entry() {
        let tick = Command::Tick(Tick);
        let activate = Command::ActivateVersion(ActivateVersion { version: 2 });
        let future = Command::ActivateVersion(ActivateVersion { version: 3 });
        assert_eq!(check_entries([(1, &tick), (2, &activate)], 2), Ok(()));
        let e = check_entries([(1, &tick), (2, &activate)], 1).unwrap_err();
        assert_eq!((e.found, e.own), (2, 1));
        assert!(e.to_string().contains("written by a newer leasehold: the activate_version entry at log index 2 has entry version 2, and this binary applies up to 1; start the newer binary"), "{e}");
        let e = check_entries([(5, &future)], 2).unwrap_err();
        assert_eq!(
            e.found, 3,
            "an activation of a newer version than it can apply"
        );
    }

    #[test]
    fn the_start_up_check_reads_the_snapshot_s_cluster_version() {
        let mut m = LeaseMachine::default();
        assert_eq!(check_machine(&m, 1), Ok(()));
        let entry = leasehold_statemachine::Entry {
            stamp_ms: 1,
            term: 1,
            idempotency_key: None,
            command: Command::ActivateVersion(ActivateVersion { version: 2 }),
        };
        m.apply(1, &entry).unwrap();
        assert!(check_machine(&m, 2).is_ok());
        let e = check_machine(&m, 1).unwrap_err();
        assert!(e.what.contains("snapshot"), "{e}");
    }

    #[test]
    fn a_new_member_must_apply_the_cluster_version() {
        assert_eq!(admit_member(4, &Seen::Advertised(8), 8), Ok(()));
        assert_eq!(admit_member(4, &Seen::Advertised(9), 8), Ok(()));
        assert_eq!(
            admit_member(4, &Seen::NoRoute, 1),
            Ok(()),
            "nothing activated yet"
        );
        let why = admit_member(4, &Seen::Advertised(7), 8).unwrap_err();
        assert!(
            why.contains("node 4 applies entry versions up to 7, and the cluster version is 8"),
            "{why}"
        );
        let why = admit_member(4, &Seen::Unknown("connection refused".into()), 8).unwrap_err();
        assert!(
            why.contains("node 4 has not said") && why.contains("connection refused"),
            "{why}"
        );
        assert!(
            admit_member(4, &Seen::NoRoute, 2).is_err(),
            "the release before versions"
        );
        let checked = Command::ActivateVersionIn(ActivateVersionIn {
            version: 9,
            membership: leasehold_statemachine::MembershipMark {
                term: 1,
                node_id: 1,
                index: 1,
            },
        });
        let e = check_entries([(3, &checked)], 8).unwrap_err();
        assert_eq!(
            (e.found, e.own),
            (9, 8),
            "the named form is checked at start-up too"
        );
    }

    #[test]
    fn the_test_override_only_lowers() {
        assert_eq!(lowered(None, 2), 2);
        assert_eq!(lowered(Some("1"), 2), 1);
        assert_eq!(
            lowered(Some("7"), 2),
            2,
            "never above what the build decodes"
        );
        assert_eq!(lowered(Some("0"), 2), 1);
        assert_eq!(lowered(Some("x"), 2), 2);
    }
}
