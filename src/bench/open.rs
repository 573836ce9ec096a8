//! The open loop: requests leave at their scheduled arrival times whatever the server does,
//! each on its own task; at most `max_concurrency` in flight, the rest wait in order. Latency
//! runs from the scheduled time, so neither a slow server nor a slow driver hides queueing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::level::Level;
use super::report::RequestResult;

/// Run one open-loop level on `arrivals` (offsets from the level start); results in order.
pub async fn run(
    level: &Arc<Level>,
    arrivals: impl Iterator<Item = Duration>,
    max_concurrency: Option<u32>,
) -> anyhow::Result<Vec<RequestResult>> {
    let slots = max_concurrency.map(|m| Arc::new(Semaphore::new(m as usize)));
    let mut tasks = JoinSet::new();
    for (i, offset) in arrivals.take(level.count as usize).enumerate() {
        let due = level.start + offset;
        if level.past_duration(due) {
            break;
        }
        if Instant::now() < due {
            tokio::time::sleep_until(due.into()).await;
        }
        // Free to go at its arrival, or when a slot came free after it.
        let (permit, free) = match &slots {
            Some(s) => {
                let p = s.clone().acquire_owned().await?;
                (Some(p), Instant::now().max(due))
            }
            None => (None, due),
        };
        let level = level.clone();
        tasks.spawn(async move {
            let r = level.request(i as u64, Some(due), free).await;
            drop(permit);
            (i, r)
        });
    }
    let mut results = Vec::with_capacity(tasks.len());
    while let Some(done) = tasks.join_next().await {
        results.push(done?);
    }
    results.sort_by_key(|(i, _)| *i);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}
