//! lingo's own accept loop: HTTP/1 and HTTP/2 on one port, a cap on open connections, and
//! the graceful drain (stop accepting, let in-flight requests finish for `shutdown_grace`,
//! then make open streams end, then return).

mod conn;
pub(crate) mod h1;
mod limit;
mod listen;
mod workers;

pub use limit::default_max_connections;
pub use listen::bind;

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::AppState;
use limit::{Gate, Place, Throttle};

/// After the grace period, how long streams have to send their in-band error and end.
const FLUSH: Duration = Duration::from_secs(1);

/// After an accept error that is not one connection's own (EMFILE, ENFILE, ENOBUFS), wait
/// this long: the connection stays in the backlog, so retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serve `state` on `listener` until `shutdown` resolves (or the drain starts elsewhere),
/// then drain.
pub(super) async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let nofile = limit::raise_nofile().unwrap_or(1024);
    let cap = state
        .config
        .limits
        .max_connections
        .unwrap_or_else(|| default_max_connections(nofile));
    tracing::info!(max_connections = cap, "client connections");
    let t = &state.config.timeouts;
    let shared = Arc::new(conn::Shared {
        builders: conn::Builders::new(builder()),
        router: super::front(state.clone()),
        gate: Gate::new(cap),
        drain: state.drain.clone(),
        header: t.client_header,
        idle: t.client_idle,
    });
    match state.config.worker_count() {
        0 => accept(listener, &state, shared, shutdown).await,
        n => workers::run(listener, state, shared, n, shutdown).await,
    }
}

/// Accept and serve connections on the current runtime until `shutdown` resolves or the
/// drain starts, then drain them.
async fn accept(
    listener: TcpListener,
    state: &Arc<AppState>,
    shared: Arc<conn::Shared>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let mut tasks = JoinSet::new();
    let mut errors = Throttle::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = state.drain.draining() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            (tcp, permit) = next(&listener, &shared.gate, &mut errors) => {
                tasks.spawn(conn::serve(tcp, shared.clone(), permit));
            }
        }
    }
    drop(listener);
    drain(state, &mut tasks).await;
    Ok(())
}

/// The next connection, once there is room for it.
async fn next(listener: &TcpListener, gate: &Gate, errors: &mut Throttle) -> (TcpStream, Place) {
    let place = gate.admit().await;
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                // Streams are many small writes: Nagle's algorithm would hold tokens back.
                let _ = tcp.set_nodelay(true);
                return (tcp, place);
            }
            Err(e) if is_per_connection(&e) => {}
            Err(e) => {
                errors.accept_error(&e);
                if is_out_of_files(&e) {
                    gate.out_of_files();
                }
                // Out of descriptors: idle connections give theirs back.
                gate.reclaim();
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Errors that concern only the connection being accepted (it is gone; take the next).
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted
    )
}

/// EMFILE or ENFILE: the process's or the system's descriptors are all in use.
fn is_out_of_files(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    e.raw_os_error()
        .is_some_and(|n| matches!(Errno::from_raw(n), Errno::EMFILE | Errno::ENFILE))
}

/// The listener is closed; every connection has seen the drain start (idle and half-sent
/// ones close, busy ones take no new request).
async fn drain(state: &AppState, tasks: &mut JoinSet<()>) {
    state.drain.start();
    let grace = state.config.timeouts.shutdown_grace;
    tracing::info!(connections = tasks.len(), ?grace, "draining");
    if !all_done(tasks, grace).await {
        tracing::warn!(
            connections = tasks.len(),
            "shutdown grace over: ending open streams"
        );
        state.drain.expire();
        all_done(tasks, FLUSH).await;
    }
    tasks.shutdown().await;
    tracing::info!("drained");
}

async fn all_done(tasks: &mut JoinSet<()>, within: Duration) -> bool {
    let done = async { while tasks.join_next().await.is_some() {} };
    tokio::time::timeout(within, done).await.is_ok()
}

/// HTTP/1 and HTTP/2 (by the client's preface) with explicit limits; header and idle
/// clocks are lingo's own (`conn`), for both protocols.
fn builder() -> Builder<TokioExecutor> {
    let mut b = Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        // `conn` keeps the header clock: hyper's restarts at idle and would override
        // `client_idle` with `client_header`.
        .header_read_timeout(None);
    b.http2()
        .timer(TokioTimer::new())
        // A client that vanished without a FIN in the middle of a long stream is found by
        // a PING left unanswered, not left holding the stream until the generation ends.
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(20))
        // Each stream is a generation holding an upstream connection: bound what one
        // client connection can open at once.
        .max_concurrent_streams(Some(256))
        // Rapid reset (CVE-2023-44487): streams opened and reset at once cost work but
        // never count as concurrent; beyond this many pending, the connection is closed.
        .max_pending_accept_reset_streams(Some(20))
        // "MadeYouReset" (2025): a client provoking lingo into resetting streams; past this
        // many the connection is closed with GOAWAY.
        .max_local_error_reset_streams(Some(1024));
    b
}
