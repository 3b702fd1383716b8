//! What the whole program shares at run time: the log setup ([`init_tracing`],
//! [`init_tracing_with`], [`DEFAULT_LOG_FILTER`]) and the shutdown signal
//! ([`shutdown_signal`]). Imports nothing of this crate, so the command line (lib.rs),
//! `events` and `worker` all import it (issue 45 item 7); lib.rs re-exports it.

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// The log filter when `RUST_LOG` is unset. openraft's `raft_core` logs at WARN each
/// stale message it drops — in every election of three nodes, the second vote grant,
/// which arrives after the first has already won ("A message will be ignored because
/// vote changed") — so it is held to ERROR, and a healthy `dev` start logs no WARN line.
pub const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,openraft::core::raft_core=error";

pub fn init_tracing() {
    init_tracing_with(std::io::stderr);
}

/// [`init_tracing`] with log lines written to `writer` (which stands for stderr: ANSI
/// colours follow whether stderr is a terminal).
pub fn init_tracing_with<W>(writer: W)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer)
        .init();
}
