//! The link fault proxy against a real echo server on loopback: bytes pass unchanged
//! and are counted; a blackhole holds bytes and delivers them after the heal; a drop
//! resets existing and new connections; a delay delays without serialising; a dead
//! target closes the client; dropping the proxy closes everything it had.
//!
//! Every wait is bounded. Where the assertion is "nothing arrived", a timeout of
//! [`QUIET`] is the assertion itself.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_cluster_tests::proxy::{Fault, LinkProxy, ProxyStats};
use rand::RngCore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout, Instant};

/// How long "nothing arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);
/// Liveness bound on anything that should happen.
const LIVE: Duration = Duration::from_secs(5);

/// An echo server on `127.0.0.1:0`: every connection gets its bytes back, and a FIN
/// after the client's FIN.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let (mut rd, mut wr) = stream.split();
                if tokio::io::copy(&mut rd, &mut wr).await.is_ok() {
                    let _ = wr.shutdown().await;
                }
            });
        }
    });
    addr
}

/// An address nothing listens on.
async fn dead_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = timeout(LIVE, TcpStream::connect(addr))
        .await
        .expect("connect timed out")
        .expect("connect failed");
    stream.set_nodelay(true).unwrap();
    stream
}

/// Writes `msg` and reads its echo back, within [`LIVE`].
async fn assert_echo(stream: &mut TcpStream, msg: &[u8]) {
    stream.write_all(msg).await.unwrap();
    let mut got = vec![0; msg.len()];
    timeout(LIVE, stream.read_exact(&mut got))
        .await
        .expect("echo timed out")
        .expect("echo read failed");
    assert_eq!(got, msg);
}

/// Asserts nothing is readable for [`QUIET`].
async fn assert_quiet(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    if let Ok(read) = timeout(QUIET, stream.read(&mut buf)).await {
        panic!("expected nothing through a blackhole, got {read:?}");
    }
}

/// Asserts the connection is closed (EOF or reset) within [`LIVE`].
async fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match timeout(LIVE, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!("expected a closed connection, read {n} bytes"),
        Err(_) => panic!("connection still open after {LIVE:?}"),
    }
}

#[tokio::test]
async fn bytes_pass_unchanged_both_ways_and_are_counted() {
    let echo = echo_server().await;
    let proxy = LinkProxy::start(echo).await.unwrap();
    assert_eq!(proxy.target(), echo);
    assert_ne!(proxy.addr(), echo);
    let mut data = vec![0u8; 1 << 20];
    rand::thread_rng().fill_bytes(&mut data);

    let stream = connect(proxy.addr()).await;
    let (mut rd, mut wr) = stream.into_split();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&sent).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let mut echoed = Vec::new();
    timeout(LIVE, rd.read_to_end(&mut echoed))
        .await
        .expect("echo of 1 MiB timed out")
        .unwrap();
    writer.await.unwrap();

    assert!(echoed == data, "echo differs from what was sent");
    // The echo's EOF comes after the proxy's last write each way, so the counters are
    // final here.
    let expected = ProxyStats {
        connections_accepted: 1,
        bytes_to_target: data.len() as u64,
        bytes_from_target: data.len() as u64,
    };
    assert_eq!(proxy.stats(), expected);
    assert_eq!(proxy.fault(), Fault::None);
}

#[tokio::test]
async fn blackhole_holds_bytes_and_delivers_them_after_heal() {
    let proxy = LinkProxy::start(echo_server().await).await.unwrap();
    let mut stream = connect(proxy.addr()).await;
    assert_echo(&mut stream, b"before").await;

    proxy.set(Fault::Blackhole);
    assert_eq!(proxy.fault(), Fault::Blackhole);
    stream.write_all(b"during").await.unwrap();
    assert_quiet(&mut stream).await;

    proxy.set(Fault::None);
    let mut got = [0u8; 6];
    timeout(LIVE, stream.read_exact(&mut got))
        .await
        .expect("held bytes not delivered after heal")
        .unwrap();
    assert_eq!(&got, b"during");
    assert_echo(&mut stream, b"after").await;
}

#[tokio::test]
async fn connection_opened_during_blackhole_works_after_heal() {
    let proxy = LinkProxy::start(echo_server().await).await.unwrap();
    proxy.set(Fault::Blackhole);

    // A partitioned host does not refuse: the connect succeeds, then nothing passes.
    let mut stream = connect(proxy.addr()).await;
    stream.write_all(b"x").await.unwrap();
    assert_quiet(&mut stream).await;
    assert_eq!(proxy.stats().bytes_to_target, 0);

    proxy.set(Fault::None);
    let mut got = [0u8; 1];
    timeout(LIVE, stream.read_exact(&mut got))
        .await
        .expect("connection from the blackhole never reached the target")
        .unwrap();
    assert_eq!(&got, b"x");
}

#[tokio::test]
async fn drop_resets_existing_and_new_connections_until_lifted() {
    let proxy = LinkProxy::start(echo_server().await).await.unwrap();
    let mut existing = connect(proxy.addr()).await;
    assert_echo(&mut existing, b"hello").await;

    proxy.set(Fault::Drop);
    assert_closed(&mut existing).await;

    let mut new = connect(proxy.addr()).await;
    // The write may fail if the reset already arrived; either way it must be closed.
    let _ = new.write_all(b"x").await;
    assert_closed(&mut new).await;

    proxy.set(Fault::None);
    let mut healed = connect(proxy.addr()).await;
    assert_echo(&mut healed, b"again").await;
    assert_eq!(proxy.stats().connections_accepted, 3);
}

#[tokio::test]
async fn delay_delays_each_direction_without_serialising() {
    let delay = Duration::from_millis(200);
    let proxy = LinkProxy::start(echo_server().await).await.unwrap();
    let mut stream = connect(proxy.addr()).await;
    assert_echo(&mut stream, b"warm").await;

    proxy.set(Fault::Delay(delay));
    let started = Instant::now();
    assert_echo(&mut stream, b"a").await;
    // The echo crosses the link twice (request, answer): each way is delayed.
    assert!(
        started.elapsed() >= 2 * delay,
        "echo took {:?}",
        started.elapsed()
    );

    const WRITES: u32 = 100;
    let (mut rd, mut wr) = stream.into_split();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        for i in 0..WRITES {
            wr.write_all(&i.to_be_bytes()).await.unwrap();
            // Pacing, not synchronisation: spreads the writes so the proxy reads
            // them as separate chunks rather than one coalesced read.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        wr
    });
    let mut got = vec![0u8; 4 * WRITES as usize];
    timeout(LIVE, rd.read_exact(&mut got))
        .await
        .expect("burst not echoed")
        .unwrap();
    let elapsed = started.elapsed();
    let _wr = writer.await.unwrap();

    let order: Vec<u32> = got
        .chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(order, (0..WRITES).collect::<Vec<_>>());
    assert!(elapsed >= 2 * delay, "burst took {elapsed:?}");
    // One chunk per delay would take 100 × 400 ms.
    assert!(elapsed < LIVE, "burst took {elapsed:?}");
}

#[tokio::test]
async fn lifting_a_delay_releases_queued_chunks_at_once() {
    let proxy = LinkProxy::start(echo_server().await).await.unwrap();
    let mut stream = connect(proxy.addr()).await;
    assert_echo(&mut stream, b"warm").await;

    proxy.set(Fault::Delay(Duration::from_secs(60)));
    stream.write_all(b"slow").await.unwrap();
    assert_quiet(&mut stream).await;
    proxy.set(Fault::None);
    let mut got = [0u8; 4];
    timeout(LIVE, stream.read_exact(&mut got))
        .await
        .expect("queued chunk not released when the delay was lifted")
        .unwrap();
    assert_eq!(&got, b"slow");
}

#[tokio::test]
async fn dead_target_closes_the_client() {
    let proxy = LinkProxy::start(dead_addr().await).await.unwrap();
    let mut stream = connect(proxy.addr()).await;
    assert_closed(&mut stream).await;
}

#[tokio::test]
async fn dropping_the_proxy_closes_listener_and_connections() {
    let echo = echo_server().await;
    let tasks_before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let proxy = LinkProxy::start(echo).await.unwrap();
    let addr = proxy.addr();
    let mut open = connect(addr).await;
    assert_echo(&mut open, b"hello").await;

    drop(proxy);
    assert_closed(&mut open).await;

    // The abort is asynchronous: a connect racing it may still land in the backlog,
    // and is then reset when the listener closes.
    if let Ok(Ok(mut late)) = timeout(LIVE, TcpStream::connect(addr)).await {
        assert_closed(&mut late).await;
    }

    // No proxy task survives (the echo server's task for `open` ends at the proxy's
    // close too). There is no event for "a task ended", so poll, bounded.
    let deadline = Instant::now() + LIVE;
    loop {
        let alive = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        if alive <= tasks_before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{alive} tasks alive, {tasks_before} before the proxy"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
