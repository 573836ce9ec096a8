//! One level of a run: what its requests share, how each is prepared, sent and stamped, and
//! the measurements around the whole level (driver CPU, the server's `/metrics`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{BenchConfig, Load};
use super::exchange::Target;
use super::measure::failed;
use super::observe::Observer;
use super::report::{ErrorKind, LevelReport, RequestResult};
use super::schedule::{replayed, Arrivals};
use super::selfcheck::process_cpu;
use super::workload::{Items, Workload};
use super::{closed, open, scrape};

/// What every request of one level shares.
pub struct Level {
    pub target: Arc<Target>,
    pub workload: Arc<Workload>,
    pub observer: Arc<dyn Observer>,
    pub start: Instant,
    /// At most this many requests.
    pub count: u32,
    /// No request leaves after `start + duration`.
    pub duration: Option<Duration>,
    /// Sequence number of the level's first request in the run.
    pub seq_base: u64,
}

impl Level {
    pub fn past_duration(&self, t: Instant) -> bool {
        self.duration.is_some_and(|d| t >= self.start + d)
    }

    /// Prepare and send request `index`, due at `due` (open loop; `None`: now) and free to go
    /// since `free`.
    pub async fn request(&self, index: u64, due: Option<Instant>, free: Instant) -> RequestResult {
        let item = self.workload.item(index, self.seq_base + index);
        let sent = Instant::now();
        let t0 = due.unwrap_or(sent);
        let mut r = match item {
            Ok(item) => {
                let mut r = self.target.send(item.body, t0).await;
                r.input_len = item.input_len;
                r.output_len = item.output_len;
                // A whole answer without counts or token ids (vLLM's legacy server): with
                // `ignore_eos` the server generated exactly what was asked (still marked
                // estimated).
                let uncounted = r.ok && r.estimated && r.output_tokens == 0;
                if uncounted && self.workload.shapes.ignore_eos {
                    r.output_tokens = u64::from(item.output_len);
                }
                r
            }
            Err(e) => failed(ErrorKind::Build, format!("{e:#}"), Duration::ZERO),
        };
        r.scheduled = t0.saturating_duration_since(self.start);
        r.sent = sent.saturating_duration_since(self.start);
        r.lag = sent.saturating_duration_since(free);
        self.observer.request_done(r.ok);
        r
    }
}

/// Run one level of `load` against `target`, with requests numbered from `seq_base`.
pub async fn run(
    config: &BenchConfig,
    load: Load,
    target: &Arc<Target>,
    workload: &Arc<Workload>,
    observer: &Arc<dyn Observer>,
    seq_base: u64,
) -> anyhow::Result<LevelReport> {
    let replay = match &*workload.items {
        Items::Replay(log) => Some(log),
        _ => None,
    };
    let count = match replay {
        Some(log) => config
            .requests_per_level
            .min(u32::try_from(log.len()).unwrap_or(u32::MAX)),
        None => config.requests_per_level,
    };
    let bounded = (config.duration.is_none()).then_some(u64::from(count));
    observer.level_started(&load.label(), bounded);
    let before = match config.scrape_metrics {
        true => scrape::read(&target.client).await,
        false => None,
    };
    let cpu_before = process_cpu();
    let level = Arc::new(Level {
        target: target.clone(),
        workload: workload.clone(),
        observer: observer.clone(),
        start: Instant::now(),
        count,
        duration: config.duration,
        seq_base,
    });
    let results = match load {
        Load::Concurrency { concurrency } => closed::run(&level, concurrency).await?,
        Load::Rate {
            rate,
            max_concurrency,
        } => {
            let arrivals = Arrivals::new(rate, config.burstiness, config.seed, seq_base);
            open::run(&level, arrivals, max_concurrency).await?
        }
        Load::Replay { max_concurrency } => {
            let times: Vec<f64> = replay.map_or(Vec::new(), |l| l.iter().map(|e| e.time).collect());
            open::run(&level, replayed(&times).into_iter(), max_concurrency).await?
        }
    };
    let wall = level.start.elapsed();
    let cpu = cpu_before
        .zip(process_cpu())
        .map(|(a, b)| b.saturating_sub(a));
    let server = match before {
        Some(before) => scrape::read(&target.client)
            .await
            .map(|after| scrape::between(&before, &after)),
        None => None,
    };
    let report = LevelReport {
        load,
        target: target.index,
        url: target.client.base().to_string(),
        wall,
        results,
        dialect: workload.dialect,
        stream: workload.stream,
        input: workload.input_lengths(),
        cpu,
        cores: tokio::runtime::Handle::current().metrics().num_workers(),
        server,
    };
    observer.level_done(&report);
    Ok(report)
}
