//! Storage: the durable Raft log and the in-memory state machine with snapshot files.
