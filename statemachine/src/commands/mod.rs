//! Every command of the log, one file each (issue 45 item 1): a file holds the
//! command's log struct — its forms side by side where a release added fields
//! (`Submit` → `SubmitWith`) —, its [`Descriptor`], its own checks, its rule (`apply`,
//! over the machine's rules) and an example for the tests that walk every kind.
//!
//! [`list`] is the one place a command is named: the enum of every command, in log order,
//! and every `match` over it. [`kind`] is the trait each file implements. [`requests`]
//! turns docs/api.md's request bodies into commands (node and client).
//!
//! This file only declares the folder and re-exports; no file of it imports this one.

pub(crate) mod activate;
pub(crate) mod batch;
pub(crate) mod cancel;
pub(crate) mod claim;
pub(crate) mod claim_next;
pub(crate) mod claim_next_many;
pub(crate) mod complete;
pub(crate) mod complete_many;
pub(crate) mod delete;
pub(crate) mod fail;
pub(crate) mod kind;
pub(crate) mod lease_item;
pub(crate) mod leases_many;
pub(crate) mod list;
pub(crate) mod redrive;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod renew_many;
mod requests;
pub(crate) mod retry;
pub(crate) mod scoped;
pub(crate) mod submit;
pub(crate) mod tick;

#[cfg(test)]
mod tests;

pub use crate::machine::At;
pub use activate::{ActivateVersion, ActivateVersionIn, MembershipMark};
pub use cancel::Cancel;
pub use claim::Claim;
pub use claim_next::ClaimNext;
pub use claim_next_many::ClaimNextMany;
pub use complete::Complete;
pub use complete_many::CompleteMany;
pub use delete::Delete;
pub use fail::Fail;
pub use kind::CommandKind;
pub use lease_item::LeaseItem;
pub use list::{
    one_of_each, BatchItem, Command, CommandOf, NoBatch, NoScope, ScopedCommand, DESCRIPTORS,
};
pub use redrive::Redrive;
pub use release::{Release, ReleaseWith};
pub use renew::{Renew, RenewWith};
pub use renew_many::RenewMany;
pub use requests::activation;
pub use retry::Retry;
pub use submit::{Submit, SubmitWith};
pub use tick::Tick;
