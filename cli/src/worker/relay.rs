//! Output that can never stall the worker's runtime: the commands' stdout relayed to the
//! worker's stdout, and the worker's own log lines to its stderr.
//!
//! A [`Sink`] is a dedicated writer thread fed by a queue bounded in bytes. Queuing never
//! blocks: when the queue is full (whoever reads the worker's stdout or stderr stopped
//! reading — a full pipe, a stalled log shipper, `| sleep`), the output is dropped and
//! counted, and the writer says how much once it can write again. The renewals, the
//! deadline pushes to the watchdogs and the reading of the commands' pipes go on, so a
//! command never blocks on its own stdout because of the worker's reader, and its job
//! still completes with its last line as the result ([`copy_lines`] keeps that line
//! whether or not it was relayed). Every line is relayed while the reader keeps up.
//!
//! Besides relaying, [`copy_lines`] takes a command's progress lines out of its stdout
//! ([`ProgressTap`]) and [`copy_tail`] keeps the end of its stderr.
//!
//! Imports only `std`, `tokio`'s reader traits, `serde_json` and `tracing`.

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// Bytes a [`Sink`] holds for a stalled reader before it drops output.
pub const SINK_BYTES_MAX: usize = 4 << 20;
/// The longest line [`copy_lines`] reads as one: a longer one is relayed in pieces and
/// is never the result (a result is at most 64 KiB anyway).
pub const LINE_BYTES_MAX: usize = 1 << 20;

/// Where a [`Sink`]'s thread writes.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Stdout,
    Stderr,
}

/// A queue to a writer thread; cheap to clone (clones share the queue).
#[derive(Clone)]
pub struct Sink {
    tx: mpsc::Sender<Vec<u8>>,
    shared: Arc<Shared>,
}

struct Shared {
    queued_bytes: AtomicUsize,
    dropped_bytes: AtomicU64,
    /// Signalled by the writer each time the queue shrinks (for [`Sink::flush`]).
    drained: (Mutex<()>, Condvar),
}

impl Shared {
    fn new() -> Shared {
        Shared {
            queued_bytes: AtomicUsize::new(0),
            dropped_bytes: AtomicU64::new(0),
            drained: (Mutex::new(()), Condvar::new()),
        }
    }
}

impl Sink {
    /// Starts the writer thread for `target`.
    pub fn start(target: Target) -> std::io::Result<Sink> {
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let shared = Arc::new(Shared::new());
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("{target:?}-writer").to_lowercase())
            .spawn(move || write_loop(target, &rx, &s))?;
        Ok(Sink { tx, shared })
    }

    /// Queues `bytes` for writing, or drops them if the queue is full. Never blocks.
    pub fn offer(&self, bytes: Vec<u8>) {
        let len = bytes.len();
        let queued = &self.shared.queued_bytes;
        let fits = queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                (q + len <= SINK_BYTES_MAX).then_some(q + len)
            })
            .is_ok();
        if !fits || self.tx.send(bytes).is_err() {
            if fits {
                queued.fetch_sub(len, Ordering::SeqCst);
            }
            self.shared
                .dropped_bytes
                .fetch_add(len as u64, Ordering::SeqCst);
        }
    }

    /// Waits up to `bound` for everything queued to be written (at exit).
    pub fn flush(&self, bound: Duration) -> bool {
        let (lock, cvar) = &self.shared.drained;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let empty = |_: &mut ()| self.shared.queued_bytes.load(Ordering::SeqCst) > 0;
        let (_guard, waited) = cvar
            .wait_timeout_while(guard, bound, empty)
            .unwrap_or_else(|e| e.into_inner());
        !waited.timed_out()
    }

    /// Output dropped so far, in bytes.
    pub fn dropped_bytes(&self) -> u64 {
        self.shared.dropped_bytes.load(Ordering::SeqCst)
    }
}

fn write_loop(target: Target, rx: &mpsc::Receiver<Vec<u8>>, shared: &Shared) {
    let mut reported = 0;
    while let Ok(bytes) = rx.recv() {
        let _ = write_to(target, &bytes);
        shared.queued_bytes.fetch_sub(bytes.len(), Ordering::SeqCst);
        let dropped = shared.dropped_bytes.load(Ordering::SeqCst);
        if dropped > reported {
            let note = format!(
                "[leasehold worker: {} bytes of output dropped: nobody was reading]\n",
                dropped - reported
            );
            let _ = write_to(Target::Stderr, note.as_bytes());
            reported = dropped;
        }
        let (lock, cvar) = &shared.drained;
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        cvar.notify_all();
    }
}

fn write_to(target: Target, bytes: &[u8]) -> std::io::Result<()> {
    match target {
        Target::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)?;
            out.flush()
        }
        Target::Stderr => std::io::stderr().lock().write_all(bytes),
    }
}

/// A [`Sink`] as an `io::Write` for `tracing`: one event per write, queued whole.
impl Write for &Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.offer(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A command's checkpoints on its stdout (`worker run --progress-prefix`): a whole line
/// that starts with `prefix` carries one, the rest of the line a JSON value handed to
/// `set`; such a line is neither relayed nor the job's result.
pub struct ProgressTap {
    pub prefix: String,
    pub set: Box<dyn Fn(serde_json::Value) + Send>,
}

impl ProgressTap {
    /// Whether `text` (a whole line) is a progress line; if so, its value was handed on
    /// (a line that is not valid JSON after the prefix is dropped with a warning).
    fn take(&self, text: &str) -> bool {
        let Some(rest) = text.strip_prefix(self.prefix.as_str()) else {
            return false;
        };
        match serde_json::from_str(rest.trim()) {
            Ok(v) => (self.set)(v),
            Err(e) => tracing::warn!(error = %e, "a progress line that is not JSON; ignored"),
        }
        true
    }
}

/// Relays `from` to `sink` line by line until end of file (or a read error); the last
/// non-empty line read whole, for the job's result. Progress lines (`tap`) are taken
/// out.
pub async fn copy_lines(
    from: impl AsyncRead + Unpin,
    sink: Sink,
    tap: Option<ProgressTap>,
) -> Option<String> {
    let mut reader = BufReader::new(from);
    let mut last = None;
    // The previous piece was cut at LINE_BYTES_MAX: this one continues its line.
    let mut continuing = false;
    loop {
        let mut line = Vec::new();
        let limit = LINE_BYTES_MAX as u64;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return last,
            Ok(_) => {}
        }
        let ended = line.ends_with(b"\n");
        let cut = !ended && line.len() >= LINE_BYTES_MAX;
        if cut || continuing {
            last = None; // a piece of a long line must not pass for a result
        } else {
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if tap.as_ref().is_some_and(|t| t.take(text)) {
                continue;
            }
            if !text.trim().is_empty() {
                last = Some(text.to_owned());
            }
        }
        continuing = cut;
        if !ended && !cut {
            line.push(b'\n'); // a last line without its newline, as `println!` relayed it
        }
        sink.offer(line);
    }
}

/// Relays `from` to `sink` as it comes until end of file, keeping its last `keep`
/// bytes (a failed command's stderr tail, its job's `last_error`).
pub async fn copy_tail(from: impl AsyncRead + Unpin, sink: Sink, keep: usize) -> String {
    let mut reader = BufReader::new(from);
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    let mut buf = vec![0u8; 8192];
    while let Ok(n @ 1..) = reader.read(&mut buf).await {
        sink.offer(buf[..n].to_vec());
        tail.extend(&buf[..n]);
        let excess = tail.len().saturating_sub(keep);
        tail.drain(..excess);
    }
    let bytes: Vec<u8> = tail.into();
    // The cut may split a character: what is left of it is dropped.
    String::from_utf8_lossy(&bytes)
        .trim_start_matches('\u{FFFD}')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink with no writer thread: nothing ever drains it (`rx` holds what it got).
    fn detached() -> (Sink, mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared::new());
        (Sink { tx, shared }, rx)
    }

    #[tokio::test]
    async fn the_last_whole_line_is_kept_and_a_cut_line_is_not_a_result() {
        let (sink, _rx) = detached();
        let last = |bytes: Vec<u8>| copy_lines(std::io::Cursor::new(bytes), sink.clone(), None);
        let text = b"first\n{\"ok\":true}\n\n".to_vec();
        assert_eq!(last(text).await.as_deref(), Some("{\"ok\":true}"));
        assert_eq!(
            last(b"no newline".to_vec()).await.as_deref(),
            Some("no newline")
        );
        // A line past the limit is read in two pieces; neither is a result, even when
        // the tail alone would be valid JSON.
        let mut cut = vec![b'1'; LINE_BYTES_MAX];
        cut.extend_from_slice(b"23\n");
        assert_eq!(last(cut.clone()).await, None);
        cut.extend_from_slice(b"{}\n");
        assert_eq!(last(cut).await.as_deref(), Some("{}"));
    }

    #[test]
    fn a_full_sink_drops_and_counts_instead_of_blocking() {
        let (sink, _rx) = detached();
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..(SINK_BYTES_MAX >> 16) {
            sink.offer(chunk.clone());
        }
        assert_eq!(sink.dropped_bytes(), 0);
        sink.offer(chunk.clone());
        sink.offer(vec![b'y']);
        assert_eq!(sink.dropped_bytes(), (1 << 16) + 1);
        assert!(!sink.flush(Duration::from_millis(10)));
    }
}
