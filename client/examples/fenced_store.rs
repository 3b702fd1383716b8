//! A fenced destination: a small HTTP key-value store that only accepts a write whose
//! fencing token is at least the highest it has seen for that resource, and stores each
//! idempotency key once. Its core is `leasehold_client::fence::http` (feature
//! `fence-http`), so tests run the very same service in-process.
//!
//! ```sh
//! cargo run -p leasehold-client --features fence-http --example fenced_store -- 127.0.0.1:7100
//! curl -s -X POST localhost:7100/v1/writes \
//!   -d '{"resource":"invoice-42","token":8,"key":"b-1","value":{"sent":true}}'   # 200 accepted
//! curl -s -X POST localhost:7100/v1/writes \
//!   -d '{"resource":"invoice-42","token":8,"key":"b-1","value":{"sent":true}}'   # 200 duplicate
//! curl -s -X POST localhost:7100/v1/writes \
//!   -d '{"resource":"invoice-42","token":7,"key":"a-1","value":{"sent":true}}'   # 409 stale
//! ```

use std::sync::Arc;

use leasehold_client::fence::http::{serve, FencedStore};

/// Where it listens when no address is given.
const LISTEN_DEFAULT: &str = "127.0.0.1:7100";

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| LISTEN_DEFAULT.to_owned());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!(
        "fenced store listening on http://{}",
        listener.local_addr()?
    );
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve(listener, Arc::new(FencedStore::new()), shutdown).await
}
