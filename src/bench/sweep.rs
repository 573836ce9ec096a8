//! The closed loop: C workers pull request numbers from one counter until the level's count
//! is done, each sending its next request as soon as the previous one ended.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::exchange::Target;
use super::measure::failed;
use super::report::{LevelReport, RequestResult};
use super::workload::Workload;

/// Run one level: `requests` requests at `concurrency`, keyed from `first_key` upwards.
pub async fn level(
    target: &Arc<Target>,
    workload: &Arc<Workload>,
    concurrency: u32,
    requests: u32,
    first_key: u64,
) -> anyhow::Result<LevelReport> {
    let next = Arc::new(AtomicU32::new(0));
    let mut workers = JoinSet::new();
    let start = Instant::now();
    for _ in 0..concurrency.min(requests) {
        let (target, workload, next) = (target.clone(), workload.clone(), next.clone());
        workers.spawn(async move {
            let mut done: Vec<(u32, RequestResult)> = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return done;
                }
                let result = match workload.body(first_key + u64::from(i)) {
                    Ok(body) => target.send(body).await,
                    Err(e) => failed(e.to_string(), Duration::ZERO),
                };
                done.push((i, result));
            }
        });
    }
    let mut results = Vec::with_capacity(requests as usize);
    while let Some(done) = workers.join_next().await {
        results.extend(done?);
    }
    let wall = start.elapsed();
    results.sort_by_key(|(i, _)| *i);
    Ok(LevelReport {
        concurrency,
        wall,
        results: results.into_iter().map(|(_, r)| r).collect(),
        dialect: workload.dialect,
        stream: workload.stream,
    })
}
