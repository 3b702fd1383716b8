//! `log_segment`: the first byte picks the mode, the rest is a Raft log segment as a node
//! replays it on open (see `leasehold_node::fuzzing::log_segment`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    leasehold_node::fuzzing::log_segment(data);
});
