//! Fuzz entry points: every decoder that sees bytes from the network or the disk, called
//! through the same functions the handlers and stores use, with no server around them.
//!
//! Each function must return normally on every input — an error is a fine answer, a
//! panic, an abort, a hang or a huge allocation is a bug. The cargo-fuzz targets in
//! `fuzz/` call these, and so does `tests/store/fuzz_replay.rs`, which replays the
//! committed corpus plus seeded random inputs on the stable toolchain in CI.

use leasehold_statemachine::{limits, LeaseMachine};

use crate::http::routes::{self, RouteId};
use crate::http::{jobs, params};
use crate::node::Limits;
use crate::types::{SnapshotMeta, TypeConfig};

/// How many client routes [`client_request`] knows; `route` is taken modulo this.
pub const CLIENT_ROUTES: u8 = 9;
/// How many Raft RPC kinds [`raft_rpc`] knows; `kind` is taken modulo this.
pub const RAFT_KINDS: u8 = 5;

/// Splits a fuzz input into the path part (up to the first `\n`) and the body.
fn path_and_body(input: &[u8]) -> (String, &[u8]) {
    match input.iter().position(|&b| b == b'\n') {
        Some(i) => (
            String::from_utf8_lossy(&input[..i]).into_owned(),
            &input[i + 1..],
        ),
        None => (String::new(), input),
    }
}

/// Decodes and validates a client request as its handler would. For routes with a path
/// parameter, `input` is `raw path part \n JSON body`.
///
/// | route | what |
/// |---|---|
/// | 0 | `POST /v1/jobs` body |
/// | 1 | `POST /v1/queues/{queue}/claim`: queue, body |
/// | 2–5 | `POST /v1/jobs/{raw rest}` claim, renew, complete, release: raw id, body |
/// | 6 | `POST /v1/jobs/{raw rest}`: route resolved and action split from the raw path, body |
/// | 7 | `GET`/`DELETE /v1/jobs/{raw rest}`: raw id |
/// | 8 | `GET /v1/jobs?{query}` and the `Idempotency-Key` check |
pub fn client_request(route: u8, input: &[u8]) {
    let limits = Limits::default();
    let (path, body) = path_and_body(input);
    match route % CLIENT_ROUTES {
        0 => drop(jobs::decode_body(
            routes::by_id(RouteId::SubmitJob),
            &limits,
            "",
            input,
        )),
        1 => drop(jobs::decode_body(
            routes::by_id(RouteId::ClaimNext),
            &limits,
            &path,
            body,
        )),
        r @ 2..=5 => {
            let action = [
                RouteId::ClaimJob,
                RouteId::RenewJob,
                RouteId::CompleteJob,
                RouteId::ReleaseJob,
            ][usize::from(r - 2)];
            drop(jobs::decode_action(&limits, action, &path, body));
        }
        6 => {
            let full = format!("/v1/jobs/{path}");
            let route = routes::resolve(&axum::http::Method::POST, &full);
            if let Ok((id, Some(action))) = params::split_action(route, &path) {
                drop(jobs::decode_action(&limits, action, &id, body));
            }
        }
        7 => drop(params::decode_job_path(&path)),
        _ => {
            let query = String::from_utf8_lossy(input);
            if let Ok(uri) = format!("/v1/jobs?{query}").parse::<axum::http::Uri>() {
                drop(jobs::list_op(&uri));
            }
            drop(limits::validate_idempotency_key(&query));
        }
    }
}

/// Decodes a Raft RPC body as `/raft/…` does (see `http/raft_rpc.rs`):
/// 0 AppendEntries, 1 Vote, 2 InstallSnapshot, 3 a snapshot's meta, 4 a pre-vote.
pub fn raft_rpc(kind: u8, body: &[u8]) {
    use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
    match kind % RAFT_KINDS {
        0 => drop(decode_raft::<AppendEntriesRequest<TypeConfig>>(body)),
        1 => drop(decode_raft::<VoteRequest<u64>>(body)),
        2 => drop(decode_raft::<InstallSnapshotRequest<TypeConfig>>(body)),
        3 => drop(decode_raft::<SnapshotMeta>(body)),
        _ => drop(decode_raft::<crate::raft::election::PreVoteRequest>(body)),
    }
}

fn decode_raft<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, bincode::Error> {
    bincode::deserialize(body)
}

/// Replays bytes as a Raft log segment, as a node does on open (`store/wal/`). The first
/// byte picks: bit 0, the last segment (a torn tail is cut) or an earlier one (damage is
/// an error); bit 1, the rest is read as `len ++ body` pieces framed with correct CRCs,
/// so that the record decoding behind the CRC is reached too.
pub fn log_segment(input: &[u8]) {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let framed;
    let bytes = if mode & 2 != 0 {
        framed = crate::store::frame_batches_for_fuzzing(rest);
        &framed[..]
    } else {
        rest
    };
    drop(crate::store::replay_segment_for_fuzzing(
        bytes,
        mode & 1 != 0,
    ));
}

/// Restores a lease machine from snapshot bytes (what a follower does with a snapshot a
/// leader sent, and a node with its snapshot file). A restored machine must be one the
/// state machine can run: its invariants hold and it snapshots back to a machine with
/// the same digest.
pub fn snapshot_restore(bytes: &[u8]) {
    let Ok(machine) = LeaseMachine::restore(bytes) else {
        return;
    };
    machine.check_invariants();
    let again = LeaseMachine::restore(&machine.snapshot())
        .expect("a restored machine's own snapshot restores");
    assert_eq!(again.digest(), machine.digest(), "snapshot round trip");
}
