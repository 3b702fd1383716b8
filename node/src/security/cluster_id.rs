//! A cluster's identity ([`ClusterId`]): 128 random bits fixed when the cluster is
//! initialized, kept in every member's identity file and carried by every signed peer
//! request, so a node never joins or answers another cluster.
//!
//! Imports `security::hex` only.

use std::fmt;

use crate::security::hex::{hex_decode, hex_encode};

pub const CLUSTER_ID_BYTES: usize = 16;

/// A cluster's random 128-bit identity, fixed when the cluster is initialized.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterId([u8; CLUSTER_ID_BYTES]);

/// Text that is not a cluster id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad cluster id {0:?}: expected {digits} hex digits", digits = 2 * CLUSTER_ID_BYTES)]
pub struct BadClusterId(pub String);

impl ClusterId {
    pub fn random() -> Self {
        ClusterId(rand::random())
    }

    pub fn from_hex(s: &str) -> Result<Self, BadClusterId> {
        let bytes = hex_decode(s)
            .filter(|b| b.len() == CLUSTER_ID_BYTES)
            .ok_or_else(|| BadClusterId(s.to_owned()))?;
        let mut id = [0u8; CLUSTER_ID_BYTES];
        id.copy_from_slice(&bytes);
        Ok(ClusterId(id))
    }
}

impl From<[u8; CLUSTER_ID_BYTES]> for ClusterId {
    fn from(bytes: [u8; CLUSTER_ID_BYTES]) -> Self {
        ClusterId(bytes)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex_encode(&self.0))
    }
}

impl fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterId({self})")
    }
}

impl std::str::FromStr for ClusterId {
    type Err = BadClusterId;
    fn from_str(s: &str) -> Result<Self, BadClusterId> {
        ClusterId::from_hex(s)
    }
}

impl serde::Serialize for ClusterId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ClusterId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ClusterId::from_hex(&s).map_err(serde::de::Error::custom)
    }
}
