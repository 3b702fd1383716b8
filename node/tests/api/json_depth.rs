//! `JSON_DEPTH_MAX` over real HTTP (issue 17 item 9): a payload or result nested past
//! 64 levels is refused with 400 `invalid_argument` by whichever node receives it, and
//! changes nothing. Before, a 32,000-deep payload within the 64 KiB size limit was
//! stored (201), and every later `GET /v1/jobs` page broke common JSON parsers.

use crate::common::{u64_of, Req, TestCluster};
use leasehold_statemachine::limits::{JSON_DEPTH_MAX, PAYLOAD_BYTES_MAX};
use serde_json::json;

/// `depth` levels of arrays and objects alternating: `[{"k":[{"k":…1…}]}]`.
fn nested(depth: usize) -> String {
    let mut open = String::new();
    let mut close = String::new();
    for level in 0..depth {
        if level % 2 == 0 {
            open.push('[');
            close.insert(0, ']');
        } else {
            open.push_str(r#"{"k":"#);
            close.insert(0, '}');
        }
    }
    format!("{open}1{close}")
}

fn submit_body(id: &str, payload: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","payload":{payload}}}"#).into_bytes()
}

/// Submits `payload` as job `id` to `node` and asserts the refusal: 400
/// `invalid_argument` naming the limit, and no job `id` anywhere.
async fn assert_refused(c: &TestCluster, node: u64, id: &str, payload: &str) {
    let r = c
        .client
        .send(node, &Req::post_raw("/v1/jobs", submit_body(id, payload)))
        .await;
    let e = r.err(400, "invalid_argument");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("JSON_DEPTH_MAX") && msg.contains(&JSON_DEPTH_MAX.to_string()),
        "the refusal names the limit: {msg}"
    );
    for n in c.ids.clone() {
        c.get(n, &format!("/v1/jobs/{id}"))
            .await
            .err(404, "not_found");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payload_nested_one_past_json_depth_max_creates_no_job() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let follower = c.follower_of(leader);
    // Refused by the leader and by a follower before forwarding alike.
    assert_refused(&c, leader, "deep-65-l", &nested(JSON_DEPTH_MAX + 1)).await;
    assert_refused(&c, follower, "deep-65-f", &nested(JSON_DEPTH_MAX + 1)).await;
    // At the limit it is a job like any other, and the only one.
    let at_limit = nested(JSON_DEPTH_MAX);
    let r = c
        .client
        .send(
            follower,
            &Req::post_raw("/v1/jobs", submit_body("deep-64", &at_limit)),
        )
        .await;
    r.ok(201);
    let page = c.get(leader, "/v1/jobs").await.ok(200);
    let ids: Vec<_> = page["jobs"]
        .as_array()
        .expect("jobs array")
        .iter()
        .map(|j| j["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("deep-64")], "page {page}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_32000_deep_payload_within_the_size_limit_is_refused() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let deep = format!("{}{}", "[".repeat(32_000), "]".repeat(32_000));
    assert!(
        deep.len() <= PAYLOAD_BYTES_MAX,
        "the size limit is not what refuses it"
    );
    assert_refused(&c, leader, "deep-32000", &deep).await;
    let page = c.get(leader, "/v1/jobs").await.ok(200);
    assert_eq!(page["jobs"], json!([]), "page {page}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_nested_past_json_depth_max_leaves_the_job_leased() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "j"})).await.ok(201);
    let lease = c
        .post(
            leader,
            "/v1/jobs/j/claim",
            json!({"owner": "w", "ttl_ms": 60_000}),
        )
        .await
        .ok(200);
    let generation = u64_of(&lease, "generation");
    let body = format!(
        r#"{{"owner":"w","generation":{generation},"result":{}}}"#,
        nested(JSON_DEPTH_MAX + 1)
    );
    let r = c
        .client
        .send(leader, &Req::post_raw("/v1/jobs/j/complete", body))
        .await;
    r.err(400, "invalid_argument");
    let job = c.get(leader, "/v1/jobs/j").await.ok(200);
    assert_eq!(job["state"], "leased", "job {job}");
    assert_eq!(job["result"], json!(null), "job {job}");
    c.shutdown().await;
}
