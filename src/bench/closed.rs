//! The closed loop: C workers pull request numbers from one counter until the level's count
//! or duration is done, each sending its next request as soon as the previous one ended;
//! with a ramp-up, worker k starts `k / C` of it after the level.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::level::Level;
use super::report::RequestResult;

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
        let offset = ramp_up.mul_f64(f64::from(k) / f64::from(n.max(1)));
        workers.spawn(async move {
            let mut done: Vec<(u32, RequestResult)> = Vec::new();
            let start = level.start + offset;
            if Instant::now() < start {
                tokio::time::sleep_until(start.into()).await;
            }
            // When this worker came free: the start of its next request's send lag (its slot
            // in the ramp: a late wake-up counts).
            let mut free = match offset.is_zero() {
                true => Instant::now(),
                false => start,
            };
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
