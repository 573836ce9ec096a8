//! `workers = n`: n threads, each a single-threaded runtime accepting on its own socket of
//! the listening address's SO_REUSEPORT group (`listen`), or on a duplicate of the one
//! listening socket when it is not in a group (a listener handed in, as tests do). A
//! connection, its requests and their upstream connections stay on one thread: no work
//! stealing, no wake-ups from another core. On tokio's shared runtime the same build spent
//! about a third more user time per request (README, Performance). Shared across the
//! workers: the state (metrics, pools, health, the drain) and the connection cap. Background
//! work (health checks, discovery, the metrics port) stays on tokio's runtime, which runs
//! the drain's clock here too.
//!
//! Supervision is fail-fast, as a process supervisor expects: the workers' runtimes are all
//! built before any accepts (or `run` fails at once), and a worker that stops before the
//! drain (its accept loop fails or panics) is logged, the others drain, and `run` returns the error, so `lingo serve` exits non-zero rather
//! than go on with fewer workers unnoticed. The workers live no longer than `run`'s future:
//! dropped (an embedding runtime shutting down, a test ending), it stops them at once, as
//! dropping the shared runtime's accept loop drops its connections.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::{accept, conn, listen, AppState};

/// What a worker thread reports to `run`: at most one of each per worker.
enum Event {
    /// Its connections are drained; its runtime is kept until `release`.
    Drained,
    /// The thread is ending, with its accept loop's result.
    Ended(std::io::Result<()>),
}

/// What every worker holds to report and to learn when its runtime may go.
#[derive(Clone)]
struct Link {
    events: mpsc::Sender<(usize, Event)>,
    release: watch::Receiver<bool>,
    /// Closed when `run`'s future is gone: the worker stops where it is.
    abort: watch::Receiver<()>,
}

pub(super) async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shared: Arc<conn::Shared>,
    n: usize,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let socket = listener.into_std()?;
    // Two events per worker at most, so `try_send` never finds it full.
    let (events, mut reports) = mpsc::channel(2 * n);
    let (release, released) = watch::channel(false);
    // Never sent on: its sender dropping with this future (or at its end) is the signal.
    let (_abort, aborted) = watch::channel(());
    let link = Link {
        events,
        release: released,
        abort: aborted,
    };
    let seats = seats(n, &socket)?;
    let mut threads = Vec::with_capacity(n);
    for (i, seat) in seats.into_iter().enumerate() {
        let (state, shared, link) = (state.clone(), shared.clone(), link.clone());
        let thread = std::thread::Builder::new()
            .name(format!("lingo-worker-{i}"))
            .spawn(move || supervised(i, seat, state, shared, link))?;
        threads.push(thread);
    }
    drop((socket, link));
    tracing::info!(workers = n, "client connections on worker threads");
    let mut watch = Watch::new(n);
    // The workers stop accepting when the drain starts, and each drains its own.
    tokio::select! {
        () = shutdown => {}
        _ = state.drain.draining() => {}
        Some((i, event)) = reports.recv() => watch.note(i, event),
    }
    state.drain.start();
    while watch.running > 0 {
        let Some((i, event)) = reports.recv().await else {
            break;
        };
        watch.note(i, event);
    }
    // Only now may a worker drop its runtime: an upstream connection task on it (hyper's
    // pool, for https and HTTP/2 upstreams) may be serving another worker's last requests.
    let _ = release.send(true);
    join(threads).await?;
    watch.failed.map_or(Ok(()), Err)
}

/// The workers' progress as `run` hears of it.
struct Watch {
    /// Workers neither drained nor ended.
    running: usize,
    drained: Vec<bool>,
    /// The first worker that ended before it drained.
    failed: Option<std::io::Error>,
}

impl Watch {
    fn new(n: usize) -> Watch {
        Watch {
            running: n,
            drained: vec![false; n],
            failed: None,
        }
    }

    fn note(&mut self, i: usize, event: Event) {
        match event {
            Event::Drained => {
                self.drained[i] = true;
                self.running -= 1;
            }
            Event::Ended(_) if self.drained[i] => {}
            Event::Ended(result) => {
                self.running -= 1;
                let e = result.err().unwrap_or_else(|| {
                    std::io::Error::other("stopped accepting before the drain started")
                });
                tracing::error!(worker = i, error = %e, "worker stopped early: draining the others");
                self.failed
                    .get_or_insert_with(|| std::io::Error::other(format!("worker {i}: {e}")));
            }
        }
    }
}

/// What a worker needs to start: its runtime and its listening socket.
/// All are made before any worker accepts: each takes descriptors (epoll, an eventfd, its
/// socket), and a worker already accepting could leave none for the next.
struct Seat {
    rt: Unstarted,
    socket: std::net::TcpListener,
}

/// A worker's runtime until its thread runs it. One never run (a thread that could not be
/// spawned, a later seat that could not be made) is shut down without blocking: `run` is
/// async, where dropping a runtime panics.
struct Unstarted(Option<tokio::runtime::Runtime>);

impl Unstarted {
    fn start(mut self) -> tokio::runtime::Runtime {
        self.0
            .take()
            .expect("only `start` and `drop` take the runtime")
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

fn seats(n: usize, socket: &std::net::TcpListener) -> std::io::Result<Vec<Seat>> {
    (0..n)
        .map(|i| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            // A socket of its own in the group (`listen`), else a duplicate of the one.
            let own = match i {
                0 => None,
                _ => listen::next_member(socket)?,
            };
            let seat = Seat {
                rt: Unstarted(Some(rt)),
                socket: own.map_or_else(|| socket.try_clone(), Ok)?,
            };
            Ok(seat)
        })
        .collect()
}

/// Join the threads without blocking the runtime `run` is on.
async fn join(threads: Vec<std::thread::JoinHandle<()>>) -> std::io::Result<()> {
    let joined = tokio::task::spawn_blocking(move || {
        for t in threads {
            // A panic was caught and reported in `supervised`; nothing is left to say.
            let _ = t.join();
        }
    });
    joined.await.map_err(std::io::Error::other)
}

/// One worker thread, its end (error or panic) reported to `run`.
fn supervised(i: usize, seat: Seat, state: Arc<AppState>, shared: Arc<conn::Shared>, link: Link) {
    let events = link.events.clone();
    let run = std::panic::AssertUnwindSafe(|| worker(i, seat, state, shared, link));
    let result = std::panic::catch_unwind(run)
        .unwrap_or_else(|_| Err(std::io::Error::other("the worker thread panicked")));
    let _ = events.try_send((i, Event::Ended(result)));
}

fn worker(
    i: usize,
    seat: Seat,
    state: Arc<AppState>,
    shared: Arc<conn::Shared>,
    mut link: Link,
) -> std::io::Result<()> {
    crate::shard::set(i as u32 + 1);
    let Seat { rt, socket } = seat;
    let rt = rt.start();
    let mut abort = link.abort.clone();
    let served = async move {
        let listener = TcpListener::from_std(socket)?;
        accept(listener, &state, shared, std::future::pending()).await?;
        let _ = link.events.try_send((i, Event::Drained));
        // Keep this runtime's tasks running until every worker is drained (see `run`).
        let _ = link.release.wait_for(|go| *go).await;
        Ok(())
    };
    // Aborted, the runtime drops with its connections' tasks and their hold on the state.
    rt.block_on(async move {
        tokio::select! {
            r = served => r,
            _ = abort.changed() => Ok(()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_ends_before_draining_fails_the_run() {
        let mut w = Watch::new(3);
        w.note(1, Event::Ended(Err(std::io::Error::other("no runtime"))));
        assert_eq!(w.running, 2);
        w.note(0, Event::Drained);
        w.note(0, Event::Ended(Ok(())));
        w.note(2, Event::Drained);
        assert_eq!(w.running, 0);
        let e = w.failed.expect("the early end is the run's error");
        assert_eq!(e.to_string(), "worker 1: no runtime");
    }

    #[test]
    fn an_early_end_without_an_error_still_fails_and_a_drained_end_does_not() {
        let mut w = Watch::new(2);
        w.note(0, Event::Drained);
        w.note(0, Event::Ended(Ok(())));
        assert!(w.failed.is_none());
        w.note(1, Event::Ended(Ok(())));
        assert_eq!(w.running, 0);
        assert!(w.failed.unwrap().to_string().contains("before the drain"));
    }
}
