//! What an OpenAPI client or fuzzer reads off a real node (issue 34 item 4): the document
//! at `GET /v1/openapi.json`, open without a token and the same as docs/openapi.json, and
//! the 405 answers it relies on — a method a path is not served under answers 405 with
//! the path's own methods in `Allow`, with a body or without.

use std::time::Duration;

use crate::common::{raw_request, RawResp, TestCluster};

const RESPONSE_WAIT: Duration = Duration::from_secs(10);

async fn send(c: &TestCluster, head: &str, body: &str) -> RawResp {
    let req = format!(
        "{head} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    raw_request(c.addr(1), req.as_bytes(), RESPONSE_WAIT)
        .await
        .unwrap_or_else(|e| panic!("{head}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn document_is_served_open_and_405s_name_the_paths_methods() {
    let c = TestCluster::start().await;
    let doc = send(&c, "GET /v1/openapi.json", "").await;
    assert_eq!(doc.status, 200);
    let served: serde_json::Value = serde_json::from_slice(&doc.body).expect("JSON");
    assert_eq!(&served, leasehold_node::http::openapi::document());
    assert_eq!(served["openapi"], "3.1.0");

    let cases = [
        // (request line, body, status, Allow)
        ("OPTIONS /v1/jobs/a/cancel", "", 405, Some("POST")),
        ("PUT /v1/jobs/a", "", 405, Some("GET, HEAD, DELETE")),
        ("GET /v1/leases/renew", "{}", 405, Some("POST")),
        ("DELETE /v1/jobs/a/claim", "{}", 405, Some("POST")),
        // A GET the path serves, with a body: refused as before, and not a 405.
        ("GET /v1/jobs/a", "{}", 400, None),
    ];
    for (head, body, status, allow) in cases {
        let r = send(&c, head, body).await;
        assert_eq!(r.status, status, "{head} with body {body:?}");
        assert_eq!(r.header("allow"), allow, "{head} with body {body:?}");
    }
    c.shutdown().await;
}
