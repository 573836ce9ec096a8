//! Which runtime the current thread belongs to, with `workers` set (one single-threaded
//! runtime per worker thread, see `proxy::server::workers`): 0 on tokio's shared runtime,
//! 1..=n on the workers. Upstream connections are kept per runtime (`upstream::h1::pool`).

use std::cell::Cell;

thread_local! {
    static SHARD: Cell<u32> = const { Cell::new(0) };
}

/// This thread's runtime.
pub fn current() -> u32 {
    SHARD.with(Cell::get)
}

/// Mark this thread as worker `n`'s (called once, as the worker thread starts).
pub fn set(n: u32) {
    SHARD.with(|s| s.set(n));
}
