//! An unprivileged TCP fault proxy, one per directed network link.
//!
//! The chaos tests route node A's connections to node B through the [`LinkProxy`] of
//! link A→B, so A's requests and B's answers on them both cross it. Faults are set at
//! run time and act at once on new and existing connections (a [`watch`] channel wakes
//! every pump):
//!
//! - [`Fault::None`]: bytes pass unchanged, chunk by chunk as they are read;
//! - [`Fault::Blackhole`]: a partition. Connects still succeed locally (a partitioned
//!   host does not refuse a SYN), but nothing moves: pumps stop reading and writing, so
//!   pending bytes are neither delivered nor lost, and flow again after the heal, like
//!   TCP retransmitting;
//! - [`Fault::Drop`]: every connection is reset, and new ones are reset on accept;
//! - [`Fault::Delay`]: each chunk is written `d` after it was read, order kept.
//!
//! One connection is two directions, each a reader and a writer joined by a bounded
//! queue of timestamped chunks, so a delay costs latency, not throughput:
//!
//! ```text
//!   client ──read──▶ [queue: (read_at, bytes)] ──write at read_at + d──▶ target
//!   client ◀──write at read_at + d── [queue] ◀──read── target
//! ```
//!
//! No root, no `tc`/`iptables`: it is plain sockets on loopback, so the tests run
//! anywhere.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep, sleep_until, timeout, Instant};

/// Largest chunk one read takes from a socket.
pub const CHUNK_BYTES_MAX: usize = 16 * 1024;
/// Chunks read but not yet written, per direction. Bounds memory per connection
/// (`CHUNK_BYTES_MAX × QUEUE_CHUNKS_MAX`) and, under a delay `d`, caps throughput at
/// this many chunks per `d`: far above what a Raft link of three nodes carries.
pub const QUEUE_CHUNKS_MAX: usize = 256;
/// Bound on connecting to the target; past it the client side is closed, as if the
/// target were down.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a failed `accept` (e.g. out of file descriptors), so the loop does not
/// spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// The fault a link currently has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Bytes pass both ways, unchanged and promptly.
    None,
    /// A partition: connections are accepted, nothing passes until the fault is lifted.
    Blackhole,
    /// Every connection, existing or new, is reset.
    Drop,
    /// Every chunk is delivered this long after it was read.
    Delay(Duration),
}

/// Counters of one proxy since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyStats {
    /// Connections accepted, including those reset at once under [`Fault::Drop`].
    pub connections_accepted: u64,
    /// Bytes written to the target (client → target).
    pub bytes_to_target: u64,
    /// Bytes written back to clients (target → client).
    pub bytes_from_target: u64,
}

#[derive(Default)]
struct Counters {
    connections_accepted: AtomicU64,
    bytes_to_target: AtomicU64,
    bytes_from_target: AtomicU64,
}

/// A TCP proxy on `127.0.0.1` to one target, with a settable [`Fault`].
///
/// Dropping it stops it: the listener and every connection's sockets are closed.
pub struct LinkProxy {
    addr: SocketAddr,
    target: SocketAddr,
    fault: watch::Sender<Fault>,
    counters: Arc<Counters>,
    // Owns the listener and, in its `JoinSet`, every connection task: aborting it
    // drops them all, so nothing outlives the proxy.
    accept_task: JoinHandle<()>,
}

impl LinkProxy {
    /// Binds `127.0.0.1:0` and forwards every accepted connection to `target`.
    pub async fn start(target: SocketAddr) -> io::Result<LinkProxy> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (fault, fault_rx) = watch::channel(Fault::None);
        let counters = Arc::new(Counters::default());
        let accept_task = tokio::spawn(accept_loop(
            listener,
            target,
            fault_rx,
            Arc::clone(&counters),
        ));
        Ok(LinkProxy {
            addr,
            target,
            fault,
            counters,
            accept_task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address connections are forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Sets the fault; it takes effect at once on new and existing connections.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            connections_accepted: c.connections_accepted.load(Ordering::Relaxed),
            bytes_to_target: c.bytes_to_target.load(Ordering::Relaxed),
            bytes_from_target: c.bytes_from_target.load(Ordering::Relaxed),
        }
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl std::fmt::Debug for LinkProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkProxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("fault", &self.fault())
            .finish()
    }
}

/// What a pump may do with the bytes in front of it under a fault.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Gate {
    /// Go ahead.
    Pass,
    /// Go ahead at this instant (a delayed chunk not yet due).
    At(Instant),
    /// Wait for the fault to change.
    Freeze,
    /// Reset the connection.
    Close,
}

/// The decision for a pump under `fault`. `read_at` is when the chunk about to be
/// written was read; `None` for a reader, which a delay does not hold back.
fn gate(fault: Fault, read_at: Option<Instant>) -> Gate {
    match (fault, read_at) {
        (Fault::None, _) | (Fault::Delay(_), None) => Gate::Pass,
        (Fault::Delay(d), Some(t)) => Gate::At(t + d),
        (Fault::Blackhole, _) => Gate::Freeze,
        (Fault::Drop, _) => Gate::Close,
    }
}

/// The connection must be reset: [`Fault::Drop`], an I/O error on either side, or the
/// proxy going away.
#[derive(Debug)]
struct Abort;

/// Waits until [`gate`] lets the pump go on, re-deciding on every fault change.
async fn wait_gate(
    fault: &mut watch::Receiver<Fault>,
    read_at: Option<Instant>,
) -> Result<(), Abort> {
    loop {
        // Copied out first: a `watch::Ref` held across an await would block the sender.
        let current = *fault.borrow_and_update();
        match gate(current, read_at) {
            Gate::Pass => return Ok(()),
            Gate::Close => return Err(Abort),
            Gate::Freeze => fault.changed().await.map_err(|_| Abort)?,
            Gate::At(due) => tokio::select! {
                _ = sleep_until(due) => return Ok(()),
                changed = fault.changed() => changed.map_err(|_| Abort)?,
            },
        }
    }
}

/// Resolves when the fault becomes [`Fault::Drop`] (or the proxy is gone).
async fn until_drop(fault: &mut watch::Receiver<Fault>) {
    let _ = fault.wait_for(|f| *f == Fault::Drop).await;
}

/// Closes with an RST rather than a FIN, as a dropped link looks to the peer.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    fault: watch::Receiver<Fault>,
    counters: Arc<Counters>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    counters.connections_accepted.fetch_add(1, Ordering::Relaxed);
                    if *fault.borrow() == Fault::Drop {
                        reset(client);
                        continue;
                    }
                    connections.spawn(serve(client, target, fault.clone(), Arc::clone(&counters)));
                }
                Err(e) => {
                    eprintln!("link proxy to {target}: accept failed: {e}");
                    sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
            // Reap finished connections so the set does not grow with the run.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One connection: connect to the target once the link lets bytes through, then pump
/// both directions until both end; reset both sockets if either aborts.
async fn serve(
    mut client: TcpStream,
    target: SocketAddr,
    mut fault: watch::Receiver<Fault>,
    counters: Arc<Counters>,
) {
    let _ = client.set_nodelay(true);
    let Ok(mut server) = connect(target, &mut fault).await else {
        reset(client);
        return;
    };
    let outcome = {
        let (client_rd, client_wr) = client.split();
        let (server_rd, server_wr) = server.split();
        let up = pump(
            client_rd,
            server_wr,
            fault.clone(),
            &counters.bytes_to_target,
        );
        let down = pump(server_rd, client_wr, fault, &counters.bytes_from_target);
        tokio::try_join!(up, down)
    };
    if outcome.is_err() {
        reset(client);
        reset(server);
    }
}

/// Connects to the target, after a blackhole lifts if one is on: a connection made
/// during a partition reaches the target only after the heal.
async fn connect(
    target: SocketAddr,
    fault: &mut watch::Receiver<Fault>,
) -> Result<TcpStream, Abort> {
    wait_gate(fault, None).await?;
    let server = tokio::select! {
        connected = timeout(CONNECT_TIMEOUT, TcpStream::connect(target)) => {
            connected.map_err(|_| Abort)?.map_err(|_| Abort)?
        }
        _ = until_drop(fault) => return Err(Abort),
    };
    let _ = server.set_nodelay(true);
    Ok(server)
}

/// A chunk read from one side, waiting to be written to the other.
struct Chunk {
    read_at: Instant,
    bytes: Vec<u8>,
}

/// One direction: `rd` → `wr`, counting the bytes written into `written`.
async fn pump(
    rd: impl AsyncRead + Unpin,
    wr: impl AsyncWrite + Unpin,
    fault: watch::Receiver<Fault>,
    written: &AtomicU64,
) -> Result<(), Abort> {
    let (tx, rx) = mpsc::channel(QUEUE_CHUNKS_MAX);
    tokio::try_join!(
        read_side(rd, tx, fault.clone()),
        write_side(wr, rx, fault, written)
    )?;
    Ok(())
}

/// Reads chunks as they arrive and queues them, stamped with their read time. Ends
/// at EOF, which closes the queue so the writer passes the EOF on once drained.
async fn read_side(
    mut rd: impl AsyncRead + Unpin,
    queue: mpsc::Sender<Chunk>,
    mut fault: watch::Receiver<Fault>,
) -> Result<(), Abort> {
    let mut buf = vec![0; CHUNK_BYTES_MAX];
    loop {
        // Reserve before reading, so a full queue stops the reading (backpressure)
        // instead of a read chunk waiting in hand.
        let permit = tokio::select! {
            permit = queue.reserve() => match permit {
                Ok(permit) => permit,
                Err(_) => return Ok(()), // the writer is gone; `try_join!` ends us anyway
            },
            _ = until_drop(&mut fault) => return Err(Abort),
        };
        let n = loop {
            wait_gate(&mut fault, None).await?;
            tokio::select! {
                // Biased: a fault change seen together with readable bytes wins, so
                // nothing is read once a blackhole is on.
                biased;
                changed = fault.changed() => changed.map_err(|_| Abort)?,
                read = rd.read(&mut buf) => break read.map_err(|_| Abort)?,
            }
        };
        if n == 0 {
            return Ok(());
        }
        permit.send(Chunk {
            read_at: Instant::now(),
            bytes: buf[..n].to_vec(),
        });
    }
}

/// Writes each queued chunk when the fault lets it through; at the end of the queue,
/// shuts down the write side (a FIN) so a half-close passes through.
async fn write_side(
    mut wr: impl AsyncWrite + Unpin,
    mut queue: mpsc::Receiver<Chunk>,
    mut fault: watch::Receiver<Fault>,
    written: &AtomicU64,
) -> Result<(), Abort> {
    loop {
        let chunk = tokio::select! {
            chunk = queue.recv() => chunk,
            _ = until_drop(&mut fault) => return Err(Abort),
        };
        let Some(chunk) = chunk else {
            return wr.shutdown().await.map_err(|_| Abort);
        };
        wait_gate(&mut fault, Some(chunk.read_at)).await?;
        // A write under way finishes even if a blackhole starts meanwhile: cancelling
        // `write_all` would lose how much of the chunk went out. Only a drop cuts it.
        tokio::select! {
            res = wr.write_all(&chunk.bytes) => res.map_err(|_| Abort)?,
            _ = until_drop(&mut fault) => return Err(Abort),
        }
        written.fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_decides_per_fault() {
        let t = Instant::now();
        let d = Duration::from_millis(200);
        assert_eq!(gate(Fault::None, None), Gate::Pass);
        assert_eq!(gate(Fault::None, Some(t)), Gate::Pass);
        assert_eq!(gate(Fault::Blackhole, None), Gate::Freeze);
        assert_eq!(gate(Fault::Blackhole, Some(t)), Gate::Freeze);
        assert_eq!(gate(Fault::Drop, None), Gate::Close);
        assert_eq!(gate(Fault::Drop, Some(t)), Gate::Close);
        // A delay holds back writes, never reads: reading on keeps the pipeline full.
        assert_eq!(gate(Fault::Delay(d), None), Gate::Pass);
        assert_eq!(gate(Fault::Delay(d), Some(t)), Gate::At(t + d));
    }
}
