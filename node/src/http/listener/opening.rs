//! A connection's first moments (issue 17 item 2): from its accept to its first byte it
//! is only a socket, and an idle-socket attacker's connections never leave this stage.
//!
//! Why a stage of its own: the connection table (listener/conns.rs) makes room by
//! evicting idle connections, and an attacker who reconnects whenever one is closed
//! turned each eviction into a new connection at once — 1,800 accepts and closes a
//! second per node from 1,024 sockets, a churn the attacker sets and the node pays for.
//! So an evicted connection that never sent a byte is not closed at once: it *lingers*
//! — out of the table, never read, never served — for [`EVICTED_LINGER_MS`], and is
//! closed then, or as soon as its peer sends or hangs up (a client that shares the
//! attacker's address and raced its first request in is told at once, and retries). A
//! socket that lingers cannot be reopened, so the churn is bounded by the lingering
//! pool over the linger time; each linger is drawn at random within ±50 %, so a burst
//! of evictions does not come back as a burst of reconnects. The pool holds at most as many sockets as the table
//! (`max_connections`); past it an evicted connection is closed at once, as before.
//! A connection that has been served (a client's idle keep-alive) is closed at once when
//! evicted, by hyper (listener/mod.rs).
//!
//! Uses tokio, rand and `conns::ConnGuard` only.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::conns::ConnGuard;

/// How long an evicted connection that never sent a byte is held open before it is closed
/// (on average: each draws its own within ±50 %).
pub const EVICTED_LINGER_MS: u64 = 5_000;

/// How a connection's opening ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Opening {
    /// Bytes arrived (or the peer hung up): serve it.
    Spoke,
    /// Nothing arrived within the header read timeout: close it.
    Silent,
    /// The connection table evicted it before its first byte.
    Evicted,
    /// The listener is shutting down.
    Shutdown,
}

/// Waits for the connection's first byte, its eviction, the header read timeout or the
/// shutdown, whichever comes first. Reads nothing: the bytes stay for TLS or hyper.
pub async fn first_byte(
    tcp: &TcpStream,
    slot: &ConnGuard,
    timeout: Duration,
    shutdown: &CancellationToken,
) -> Opening {
    tokio::select! {
        // Data and a hang-up alike; an error also ends in hyper's hands.
        _ = peek(tcp) => Opening::Spoke,
        _ = slot.closing.cancelled() => Opening::Evicted,
        _ = tokio::time::sleep(timeout) => Opening::Silent,
        _ = shutdown.cancelled() => Opening::Shutdown,
    }
}

/// Holds an evicted, never-spoken connection for `linger` if the pool has room (closes it
/// at once if not), ending early when its peer sends or hangs up, or on shutdown.
pub async fn linger(
    tcp: TcpStream,
    pool: &Arc<Semaphore>,
    linger: Duration,
    shutdown: &CancellationToken,
) {
    let Ok(_held) = pool.clone().try_acquire_owned() else {
        return;
    };
    tokio::select! {
        _ = tokio::time::sleep(spread(linger)) => {}
        _ = peek(&tcp) => {}
        _ = shutdown.cancelled() => {}
    }
}

/// `linger` ± half, at random: sockets evicted in one burst (an attacker's first wave)
/// come back one by one, not as the next burst.
fn spread(linger: Duration) -> Duration {
    use rand::Rng;
    let ms = linger.as_millis().min(u64::MAX as u128) as u64;
    Duration::from_millis(rand::thread_rng().gen_range(ms / 2..=ms.saturating_add(ms / 2)))
}

/// Waits until `tcp` has a byte to read or its peer hung up, reading nothing. (Not
/// `readable()`: that may be ready with nothing to read.)
async fn peek(tcp: &TcpStream) {
    let _ = tcp.peek(&mut [0u8; 1]).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// Bound on waits in these tests (liveness only).
    const WAIT: Duration = Duration::from_secs(10);

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (client, server)
    }

    /// Whether the server side closed `client` within `within`.
    async fn closed_within(client: &mut TcpStream, within: Duration) -> bool {
        let mut b = [0u8; 1];
        matches!(
            tokio::time::timeout(within, client.read(&mut b)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    #[tokio::test]
    async fn a_lingering_socket_stays_open_until_the_linger_ends() {
        let (mut client, server) = pair().await;
        let pool = Arc::new(Semaphore::new(1));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let pool = pool.clone();
            async move { linger(server, &pool, Duration::from_secs(3600), &shutdown).await }
        });
        assert!(!closed_within(&mut client, Duration::from_millis(300)).await);
        assert_eq!(
            pool.available_permits(),
            0,
            "the socket holds the pool's place"
        );
        task.abort();
    }

    #[tokio::test]
    async fn a_lingering_socket_closes_when_its_linger_ends() {
        let (mut client, server) = pair().await;
        let pool = Arc::new(Semaphore::new(1));
        linger(
            server,
            &pool,
            Duration::from_millis(20),
            &CancellationToken::new(),
        )
        .await;
        assert!(closed_within(&mut client, WAIT).await);
        assert_eq!(pool.available_permits(), 1, "the place is given back");
    }

    #[tokio::test]
    async fn a_lingering_socket_closes_at_once_when_its_peer_speaks() {
        use tokio::io::AsyncWriteExt;
        let (mut client, server) = pair().await;
        let pool = Arc::new(Semaphore::new(1));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(async move {
            linger(server, &pool, Duration::from_secs(3600), &shutdown).await
        });
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("linger ended")
            .unwrap();
        assert!(closed_within(&mut client, WAIT).await);
    }

    #[tokio::test]
    async fn a_full_pool_closes_at_once() {
        let (mut client, server) = pair().await;
        let pool = Arc::new(Semaphore::new(0));
        let shutdown = CancellationToken::new();
        tokio::time::timeout(
            WAIT,
            linger(server, &pool, Duration::from_secs(3600), &shutdown),
        )
        .await
        .expect("no linger without a place in the pool");
        assert!(closed_within(&mut client, WAIT).await);
    }
}
