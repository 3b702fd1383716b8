//! `POST /v1/cluster/nodes` and `DELETE /v1/cluster/nodes/{id}` on an in-process
//! three-node cluster: bad input gets docs/api.md's error shape and changes nothing, a voter
//! cannot be added again, an address cannot be taken twice, and only admin tokens may
//! change the membership. (Growing and shrinking a live cluster of real processes with
//! workers holding leases is cluster-tests/tests/membership.rs.)

use std::sync::Arc;

use crate::common::{eventually, Req, TestCluster, CATCH_UP_WAIT};
use leasehold_node::security::auth::AuthPolicy;
use serde_json::{json, Value};

fn members(v: &Value) -> (Vec<u64>, Vec<u64>) {
    let ids = |f: &str| -> Vec<u64> {
        v[f].as_array()
            .unwrap_or_else(|| panic!("{f} in {v}"))
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    (ids("voters"), ids("learners"))
}

/// `GET /v1/cluster` of `node` once it reports the three voters (bounded): right after
/// start a follower may not have received the first entries yet and reports none.
async fn settled(c: &TestCluster, node: u64, req: &Req) -> Value {
    eventually(
        "the node to report voters 1, 2, 3",
        CATCH_UP_WAIT,
        || async move {
            let v = c.send(node, req).await.ok(200);
            match members(&v) == (vec![1, 2, 3], vec![]) {
                true => Ok(v),
                false => Err(v.to_string()),
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_membership_requests_are_refused_and_change_nothing() {
    let c = TestCluster::start().await;
    for node in [1, 2, 3] {
        settled(&c, node, &Req::get("/v1/cluster")).await;
    }
    let before = c.get(1, "/v1/cluster").await.ok(200);
    assert_eq!(members(&before), (vec![1, 2, 3], vec![]));
    let addr1 = c.addr(1).to_string();
    let addr2 = c.addr(2).to_string();
    let bad_bodies: Vec<(Vec<u8>, &str)> = vec![
        (b"{}".to_vec(), "missing field `id`"),
        (br#"{"id":4}"#.to_vec(), "missing field `addr`"),
        (
            br#"{"id":0,"addr":"127.0.0.1:7"}"#.to_vec(),
            "node ids start at 1",
        ),
        (br#"{"id":"4","addr":"127.0.0.1:7"}"#.to_vec(), "bad JSON"),
        (br#"{"id":4,"addr":"localhost"}"#.to_vec(), "HOST:PORT"),
        (br#"{"id":4,"addr":"127.0.0.1:0"}"#.to_vec(), "bad port"),
        (br#"{"id":4,"addr":"http://h:1"}"#.to_vec(), "bad host"),
        (
            br#"{"id":4,"addr":"127.0.0.1:7","role":"voter"}"#.to_vec(),
            "unknown field",
        ),
        (b"[4]".to_vec(), "must be a JSON object"),
        (b"{".to_vec(), "bad JSON"),
    ];
    for node in [1, 2] {
        for (body, want) in &bad_bodies {
            let r = c
                .send(node, &Req::post_raw("/v1/cluster/nodes", body.clone()))
                .await;
            let e = r.err(400, "invalid_argument");
            let msg = e["message"].as_str().unwrap_or_default();
            assert!(
                msg.contains(want),
                "{}: {msg:?} lacks {want:?}",
                String::from_utf8_lossy(body)
            );
        }
        // A voter again, or another node's address: 409, through leader and follower.
        let again = json!({"id": 2, "addr": addr2});
        let e = c
            .send(node, &Req::post("/v1/cluster/nodes", &again))
            .await
            .err(409, "already_exists");
        assert!(e["message"].as_str().unwrap().contains("remove"));
        let taken = json!({"id": 9, "addr": addr1});
        c.send(node, &Req::post("/v1/cluster/nodes", &taken))
            .await
            .err(409, "already_exists");
        for (path, status, code) in [
            ("/v1/cluster/nodes/abc", 400, "invalid_argument"),
            ("/v1/cluster/nodes/0", 400, "invalid_argument"),
            ("/v1/cluster/nodes/-1", 400, "invalid_argument"),
            ("/v1/cluster/nodes/9", 404, "not_found"),
        ] {
            c.send(node, &Req::delete(path)).await.err(status, code);
        }
    }
    for node in [1, 2, 3] {
        let after = c.get(node, "/v1/cluster").await.ok(200);
        assert_eq!(members(&after), (vec![1, 2, 3], vec![]), "node {node}");
        assert_eq!(after["nodes"], before["nodes"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_admins_change_the_membership() {
    let policy = Arc::new(
        AuthPolicy::parse(
            "[[token]]\ntoken = \"adm\"\nrole = \"admin\"\n\n\
             [[token]]\ntoken = \"wrk\"\nrole = \"worker\"\n\n\
             [[token]]\ntoken = \"rdr\"\nrole = \"reader\"\n",
        )
        .unwrap(),
    );
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let add = json!({"id": 9, "addr": "127.0.0.1:9"});
    let with = |r: Req, token: &str| {
        let mut r = r;
        r.headers
            .push(("authorization".into(), format!("Bearer {token}")));
        r
    };
    settled(&c, 3, &with(Req::get("/v1/cluster"), "rdr")).await;
    for node in [1, 2] {
        c.send(node, &Req::post("/v1/cluster/nodes", &add))
            .await
            .err(401, "unauthenticated");
        for token in ["wrk", "rdr"] {
            c.send(node, &with(Req::post("/v1/cluster/nodes", &add), token))
                .await
                .err(403, "permission_denied");
            c.send(node, &with(Req::delete("/v1/cluster/nodes/3"), token))
                .await
                .err(403, "permission_denied");
        }
        // An admin gets through to validation.
        c.send(node, &with(Req::delete("/v1/cluster/nodes/9"), "adm"))
            .await
            .err(404, "not_found");
    }
    let after = c
        .send(3, &with(Req::get("/v1/cluster"), "rdr"))
        .await
        .ok(200);
    assert_eq!(members(&after), (vec![1, 2, 3], vec![]));
}

/// openraft 0.9 panics a leader's Raft core when a follower's log goes back below what it
/// acknowledged; a member restarted on a wiped disk (an operator's mistake, or a
/// replaced volume) must not take the leader down with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_restarted_on_a_wiped_disk_does_not_take_the_leader_down() {
    let mut c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let follower = c.follower_of(leader);
    for i in 0..5 {
        c.send(
            leader,
            &Req::post("/v1/jobs", &json!({"id": format!("before-{i}")})),
        )
        .await
        .ok(201);
    }
    let term = c.get(leader, "/v1/cluster").await.ok(200)["term"].clone();
    c.stop(follower).await;
    let dir = c.data_dir(follower).to_path_buf();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    c.restart(follower).await;
    // Writes go on through the same leader in the same term while the wiped follower
    // answers (each write waits for a quorum, the other follower's ack).
    for i in 0..20 {
        c.send(
            leader,
            &Req::post("/v1/jobs", &json!({"id": format!("after-{i}")})),
        )
        .await
        .ok(201);
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let view = c.get(leader, "/v1/cluster").await.ok(200);
    assert_eq!(view["state"], "Leader", "{view}");
    assert_eq!(view["term"], term, "{view}");
    c.shutdown().await;
}
