//! The closed loop: C workers pull request numbers from one counter until the level's count
//! or duration is done, each sending its next request as soon as the previous one ended;
//! with a ramp-up, worker k starts `k / C` of it after the level.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::level::Level;
use super::report::RequestResult;

/// Wait for worker `k` of `n`'s slot in the ramp (`k / n` of `ramp_up` after the level's
/// start) and return when it came free: the start of its first request's send lag (its
/// slot, so a late wake-up counts; now, without a ramp).
pub(super) async fn ramp_slot(level: &Level, k: u32, n: u32, ramp_up: Duration) -> Instant {
    let offset = ramp_up.mul_f64(f64::from(k) / f64::from(n.max(1)));
    let start = level.start + offset;
    if Instant::now() < start {
        tokio::time::sleep_until(start.into()).await;
    }
    match offset.is_zero() {
        true => Instant::now(),
        false => start,
    }
}

/// Run one closed-loop level at `concurrency`; results in request order.
pub async fn run(
    level: &Arc<Level>,
    concurrency: u32,
    ramp_up: Duration,
) -> anyhow::Result<Vec<RequestResult>> {
    let next = Arc::new(AtomicU32::new(0));
    let mut workers = JoinSet::new();
    let n = concurrency.min(level.count);
    for k in 0..n {
        let (level, next) = (level.clone(), next.clone());
        workers.spawn(async move {
            let mut done: Vec<(u32, RequestResult)> = Vec::new();
            let mut free = ramp_slot(&level, k, n, ramp_up).await;
            while !level.past_duration(free) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= level.count {
                    break;
                }
                let r = level.request(u64::from(i), None, free).await;
                done.push((i, r));
                free = Instant::now();
            }
            done
        });
    }
    let mut results = Vec::with_capacity(level.count.min(1 << 16) as usize);
    while let Some(done) = workers.join_next().await {
        results.extend(done?);
    }
    results.sort_by_key(|(i, _)| *i);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}
