//! One level of a run: what its requests share, how each is prepared, sent and stamped, and
//! the measurements around the whole level (driver CPU, the server's `/metrics`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{BenchConfig, Load, Split};
use super::exchange::Target;
use super::measure::failed;
use super::observe::Observer;
use super::report::{ErrorKind, LevelReport, RequestResult};
use super::schedule::{replayed, Arrivals};
use super::selfcheck::{machine_ticks, process_cpu, Machine};
use super::sessions::Order;
use super::workload::{Item, Items, Workload};
use super::{closed, multiturn, open, scrape};

/// What every request of one level shares.
pub struct Level {
    /// Where requests go: one url, or several sharing the load by `split`.
    pub targets: Vec<Arc<Target>>,
    pub split: Split,
    /// The next target of `Split::Requests`.
    next_target: AtomicUsize,
    /// A replay's sessions, kept in order.
    order: Option<Order>,
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

    /// The target of a request of conversation `key` (the request's own index outside
    /// multi-turn runs): url `key mod n`, or with `Split::Requests` the next url in turn.
    fn target(&self, key: u64) -> &Target {
        let n = self.targets.len().max(1);
        let i = match self.split {
            Split::Conversations => (key % n as u64) as usize,
            Split::Requests => self.next_target.fetch_add(1, Ordering::Relaxed) % n,
        };
        &self.targets[i]
    }

    /// Prepare and send request `index`, due at `due` (open loop; `None`: now) and free to go
    /// since `free`.
    pub async fn request(&self, index: u64, due: Option<Instant>, free: Instant) -> RequestResult {
        let Some(order) = &self.order else {
            let item = self.workload.item(index, self.seq_base + index);
            return self.send(item, index, due, free).await;
        };
        // A session's line is due when its time came and the line before it ended.
        let at = usize::try_from(index).unwrap_or(usize::MAX);
        order.wait(at).await;
        let now = Instant::now();
        let item = self.workload.item(index, self.seq_base + index);
        let r = self
            .send(item, index, due.map(|d| d.max(now)), free.max(now))
            .await;
        order.ended(at);
        r
    }

    /// Send a prepared request of conversation `key` (see `target`), then stamp its result:
    /// its latencies run from `due`, or from the moment its first byte was written.
    pub async fn send(
        &self,
        item: anyhow::Result<Item>,
        key: u64,
        due: Option<Instant>,
        free: Instant,
    ) -> RequestResult {
        let handoff = Instant::now();
        let (mut r, wire) = match item {
            Ok(item) => {
                let session = item.session.as_deref();
                let (mut r, wire) = self.target(key).send(item.body, session, due).await;
                r.input_len = item.input_len;
                r.output_len = item.output_len;
                // A whole answer without counts or token ids (vLLM's legacy server): with
                // `ignore_eos` the server generated exactly what was asked (still marked
                // estimated).
                let uncounted = r.ok && r.estimated && r.output_tokens == 0;
                if uncounted && self.workload.shapes.ignore_eos {
                    r.output_tokens = u64::from(item.output_len);
                }
                (r, wire)
            }
            Err(e) => (
                failed(ErrorKind::Build, format!("{e:#}"), Duration::ZERO),
                handoff,
            ),
        };
        // Latencies ran from `due`, or in a closed loop from the request's first byte.
        r.scheduled = due.unwrap_or(wire).saturating_duration_since(self.start);
        r.sent = handoff.saturating_duration_since(self.start);
        r.lag = handoff.saturating_duration_since(free);
        r.to_wire = wire.saturating_duration_since(handoff);
        self.observer.request_done(r.ok);
        r
    }
}

/// Open the connections the level will hold at once before it starts, so that none is set
/// up while it is measured: its concurrency (closed loop) or `max_concurrency` (open loop),
/// shared among the targets.
async fn open_connections(load: Load, count: u32, targets: &[Arc<Target>]) {
    let at_once = match load {
        Load::Concurrency { concurrency } => Some(concurrency.min(count)),
        Load::Rate {
            max_concurrency, ..
        }
        | Load::Replay { max_concurrency } => max_concurrency.map(|m| m.min(count)),
    };
    let Some(n) = at_once else { return };
    let each = (n as usize).div_ceil(targets.len().max(1));
    futures_util::future::join_all(targets.iter().map(|t| t.open(each))).await;
}

/// Run one level of `load` against `targets` (one url, or several sharing the load), with
/// requests numbered from `seq_base`.
pub async fn run(
    config: &BenchConfig,
    load: Load,
    targets: &[Arc<Target>],
    workload: &Arc<Workload>,
    observer: &Arc<dyn Observer>,
    seq_base: u64,
) -> anyhow::Result<LevelReport> {
    let (replay, links) = match &*workload.items {
        Items::Replay(log, links) => (Some(log), links.as_ref()),
        _ => (None, None),
    };
    let dialogues = match &*workload.items {
        Items::Multiturn(d) => Some(d),
        _ => None,
    };
    let count = match (replay, dialogues) {
        (Some(log), _) => config
            .requests_per_level
            .min(u32::try_from(log.len()).unwrap_or(u32::MAX)),
        (_, Some(d)) => d.conversations.saturating_mul(d.turns),
        _ => config.requests_per_level,
    };
    // The server's own view is read only where one server took the whole level.
    let scraped = match targets {
        [one] if config.scrape_metrics => Some(&one.client),
        _ => None,
    };
    let bounded = (config.duration.is_none()).then_some(u64::from(count));
    observer.level_started(&load.label(), bounded);
    let before = match scraped {
        Some(client) => scrape::read(client).await,
        None => None,
    };
    open_connections(load, count, targets).await;
    let cpu_before = process_cpu();
    let machine_before = machine_ticks();
    let level = Arc::new(Level {
        targets: targets.to_vec(),
        split: config.split,
        next_target: AtomicUsize::new(0),
        order: links.map(Order::new),
        workload: workload.clone(),
        observer: observer.clone(),
        start: Instant::now(),
        count,
        duration: config.duration,
        seq_base,
    });
    let results = match load {
        Load::Concurrency { concurrency } => match dialogues {
            Some(d) => multiturn::run(&level, concurrency, d, config.ramp_up).await?,
            None => closed::run(&level, concurrency, config.ramp_up).await?,
        },
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
    let machine = machine_before
        .zip(machine_ticks())
        .and_then(|(a, b)| Machine::between(a, b));
    let server = match (before, scraped) {
        (Some(before), Some(client)) => scrape::read(client)
            .await
            .map(|after| scrape::between(&before, &after)),
        _ => None,
    };
    let urls: Vec<&str> = targets.iter().map(|t| t.client.base()).collect();
    let report = LevelReport {
        load,
        target: targets.first().map_or(0, |t| t.index),
        url: urls.join(","),
        dialogues: dialogues.map(|d| (d.conversations, d.turns)),
        wall,
        results,
        dialect: workload.dialect,
        stream: workload.stream,
        input: workload.input_lengths(),
        cpu,
        cores: tokio::runtime::Handle::current().metrics().num_workers(),
        machine,
        server,
    };
    observer.level_done(&report);
    Ok(report)
}
