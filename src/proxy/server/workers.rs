//! `workers = n`: n threads, each a single-threaded runtime accepting on the one listening
//! socket (each holds a duplicate of it). A connection, its requests and their upstream
//! connections stay on one thread: no work stealing, no wake-ups from another core. On
//! tokio's shared runtime the same build spent about a third more user time per request
//! (README, Performance). Shared across the workers: the state (metrics, pools, health,
//! the drain) and the connection cap. Background work (health checks, discovery, the
//! metrics port) stays on tokio's runtime, which runs the drain's clock here too.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::{accept, conn, AppState};

pub(super) async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shared: Arc<conn::Shared>,
    n: usize,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let socket = listener.into_std()?;
    let mut threads = Vec::with_capacity(n);
    for i in 0..n {
        let socket = socket.try_clone()?;
        let (state, shared) = (state.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("lingo-worker-{i}"))
            .spawn(move || worker(i as u32 + 1, socket, state, shared))?;
        threads.push(thread);
    }
    drop(socket);
    tracing::info!(workers = n, "client connections on worker threads");
    // The workers stop accepting when the drain starts, and each drains its own.
    tokio::select! {
        () = shutdown => state.drain.start(),
        _ = state.drain.draining() => {}
    }
    let joined = tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a worker panicked")))
            })
            .collect::<std::io::Result<Vec<()>>>()
    });
    joined.await.map_err(std::io::Error::other)?.map(|_| ())
}

fn worker(
    shard: u32,
    socket: std::net::TcpListener,
    state: Arc<AppState>,
    shared: Arc<conn::Shared>,
) -> std::io::Result<()> {
    crate::shard::set(shard);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = TcpListener::from_std(socket)?;
        accept(listener, &state, shared, std::future::pending()).await
    })
}
