//! The container cluster: Leasehold nodes as Docker containers of the release image
//! (`leasehold:dev`, made by `deploy/build-image.sh`), each with its own address on a
//! private network the test creates, driven from the host the way
//! [`crate::fixture::ProcCluster`] is, with faults through the engine: `docker kill`,
//! `pause`/`unpause`, `network disconnect`/`connect`, `restart`.
//!
//! - [`engine`]: running the `docker` command line (bounded), the labels on everything a
//!   test creates, the removal of what a crashed run left, and whether Docker is usable
//!   here at all ([`engine::unavailable`]);
//! - [`cluster`]: [`DockerCluster`] — the network, the containers, their faults, and what
//!   they say (through `proc-cluster`'s observers on the containers' addresses).
//!
//! Imports `nodes` (it is a [`crate::nodes::Nodes`]), `fixture` (the process cluster's
//! defaults and observers); never the scenarios.

pub mod cluster;
pub mod engine;

pub use cluster::{DockerCluster, DockerOpts};
pub use engine::{unavailable, DockerError};
