//! `snapshot_restore`: the input is the snapshot bytes a follower or a restarting node
//! would restore (see `leasehold_node::fuzzing::snapshot_restore`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    leasehold_node::fuzzing::snapshot_restore(data);
});
