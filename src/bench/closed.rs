//! The closed loop: C workers pull request numbers from one counter until the level's count
//! or duration is done, each sending its next request as soon as the previous one ended.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;

use super::level::Level;
use super::report::RequestResult;

/// Run one closed-loop level at `concurrency`; results in request order.
pub async fn run(level: &Arc<Level>, concurrency: u32) -> anyhow::Result<Vec<RequestResult>> {
    let next = Arc::new(AtomicU32::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.min(level.count) {
        let (level, next) = (level.clone(), next.clone());
        workers.spawn(async move {
            let mut done: Vec<(u32, RequestResult)> = Vec::new();
            // When this worker came free: the start of its next request's send lag.
            let mut free = Instant::now();
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
