//! `raft_rpc`: the first byte picks the route/kind, the rest is the input
//! (see `leasehold_node::fuzzing::raft_rpc`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((&which, rest)) = data.split_first() {
        leasehold_node::fuzzing::raft_rpc(which, rest);
    }
});
