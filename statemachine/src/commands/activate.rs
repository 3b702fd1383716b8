//! `activate_version` (internal, rolling upgrades, `version.rs`): from this entry on,
//! the cluster version is `version`. Two forms: [`ActivateVersion`] (entry version 2)
//! and [`ActivateVersionIn`] (entry version 8, issue 44 item 5), which names the
//! membership entry the leader polled: the node applies it only while that membership
//! is still the latest (`node/src/store/activation.rs`), else it is a no-op and the
//! leader polls again.
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::{unscoped, CommandKind};
use crate::commands::tick::Tick;
use crate::descriptor::{Descriptor, Names};
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::{Outcome, Reply};
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

/// Raises the cluster version: proposed by the leader once every member applies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivateVersion {
    pub version: u32,
}

/// [`ActivateVersion`] that names the membership it was decided against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivateVersionIn {
    pub version: u32,
    pub membership: MembershipMark,
}

/// The log id of the membership entry an activation was decided against: the
/// `(term, node_id)` of the leader that proposed that entry and its index (openraft's
/// `LogId`, in this crate's own words: the state machine knows no Raft types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipMark {
    pub term: u64,
    pub node_id: u64,
    pub index: u64,
}

impl CommandKind for ActivateVersion {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "activate_version",
        since: ClusterVersion::Versions,
        ..*Tick::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::NONE
    }

    fn validate(&self) -> Result<(), ApiError> {
        crate::version::validate_activation(self.version)
    }

    fn apply(&self, m: &mut LeaseMachine, _at: At, scope: Option<&Scope>) -> Reply {
        unscoped(scope, "activate_version")?;
        m.activate(self.version);
        Ok(Outcome::Ticked)
    }

    fn example() -> Self {
        ActivateVersion { version: 2 }
    }
}

impl CommandKind for ActivateVersionIn {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        since: ClusterVersion::CheckedActivation,
        ..*ActivateVersion::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::NONE
    }

    fn validate(&self) -> Result<(), ApiError> {
        crate::version::validate_activation(self.version)
    }

    /// The membership check is the node's (the machine knows no membership); applied
    /// here, it is the plain activation.
    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
        let plain = ActivateVersion {
            version: self.version,
        };
        plain.apply(m, at, scope)
    }

    fn example() -> Self {
        ActivateVersionIn {
            version: 8,
            membership: MembershipMark {
                term: 3,
                node_id: 1,
                index: 42,
            },
        }
    }
}
