//! `lingo bench`: a load driver that speaks any of lingo's dialects. Closed-loop concurrency
//! sweeps and open-loop request-rate runs (Poisson or gamma arrivals, or a replayed request
//! log), random, dataset or replayed prompts, and reports by lingo's metric definitions (TTFT,
//! E2E, token-weighted ITL, TPOT, output tokens from the server's own counts), with a check
//! per level that the driver itself kept up.
//!
//! The bench is a client: it builds canonical requests and uses the dialect's upstream-side
//! codecs (`encode_request`, `stream_decoder`, `decode_response`) and `model::Tally`, so wire
//! formats have one source of truth. It writes no wire JSON of its own.
//!
//! Module map: `config` (what to run) -> `workload` (+ `tokens`, `dataset`, `rng`,
//! `conversation` for multi-turn histories) builds the bodies -> `level` runs one level through
//! `closed`, `multiturn` or `open` (+ `schedule`, `sessions` for a replay's conversations),
//! each request through `exchange` and `measure` to one of the level's urls -> `report` (raw
//! results) -> `summary` (every figure, with `selfcheck`, `scrape` and `turns`) -> `table`,
//! `csv`, `json`, `compare` render it.

mod closed;
pub mod compare;
mod config;
mod conn;
mod conversation;
pub mod csv;
mod dataset;
mod exchange;
pub mod json;
mod level;
mod measure;
mod multiturn;
mod observe;
mod open;
mod report;
mod rng;
pub mod schedule;
mod scrape;
mod selfcheck;
mod sessions;
mod stats;
mod summary;
mod table;
mod tokens;
mod turns;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

pub use config::{BenchConfig, Load, Rate, Slo, Source, Split, WorkloadKind};
pub use observe::{Observer, Quiet};
pub use report::{ErrorKind, InputLengths, LevelReport, RequestResult};
pub use scrape::ServerSide;
pub use selfcheck::{sole_driver, SelfCheck};
pub use summary::{Dist, Summary};
pub use table::{render, render_detail, render_table};
pub use turns::{Dialogue, TurnSummary};

use crate::config::Timeouts;
use crate::dialect::Dialect;
use crate::upstream::{list_models, Client};
use exchange::Target;
use tokens::{Calibration, Counter};
use workload::{Items, Shapes, TextShape, Workload};

/// Longest wait for a TCP connection, when the request timeout is longer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Dataset samples whose answers are measured for their output length, at most.
const DATASET_SAMPLES: usize = 10_000;

/// Run the warmup, then every level in order; one report per level (two with `vs_url`:
/// A then B).
///
/// Fails only when the configuration or an input file is invalid, or every warmup request of
/// a target failed (the server is unreachable or refuses the requests); failures during the
/// levels are counted in the reports.
pub async fn run(config: &BenchConfig) -> anyhow::Result<Vec<LevelReport>> {
    run_with(config, Arc::new(Quiet)).await
}

/// `run`, telling `observer` about progress.
pub async fn run_with(
    config: &BenchConfig,
    observer: Arc<dyn Observer>,
) -> anyhow::Result<Vec<LevelReport>> {
    config.validate()?;
    // Target A is `url` with any repeated urls (sharing each level); B is `vs_url`.
    let groups: Vec<Vec<String>> = std::iter::once(config.urls())
        .chain(config.vs_url.iter().map(|u| vec![u.clone()]))
        .collect();
    let mut targets: Vec<Vec<Arc<Target>>> = Vec::new();
    let mut workloads = Vec::new();
    let mut shared: Option<Workload> = None;
    for (index, urls) in groups.iter().enumerate() {
        let mut group = Vec::new();
        let mut model = None;
        for url in urls {
            let (target, m) = connect(config, index, url).await;
            // The group's model is its first url's: every url of a group serves the same.
            model = model.or(Some(m));
            group.push(Arc::new(target));
        }
        let model = model.flatten();
        let base = match &shared {
            Some(w) => w.clone(),
            None => prepare(config, &group[0].client, model.clone()).await?,
        };
        let workload = Arc::new(Workload {
            model,
            ..base.clone()
        });
        workload.item(0, 0).context("building the first request")?;
        shared.get_or_insert(base);
        targets.push(group);
        workloads.push(workload);
    }
    let mut seq = 0;
    for (group, workload) in targets.iter().zip(&workloads) {
        for target in group {
            warmup(target, workload, config.warmup, seq).await?;
            seq += u64::from(config.warmup);
        }
    }
    let mut levels = Vec::new();
    for load in config.loads() {
        for (group, workload) in targets.iter().zip(&workloads) {
            let report = level::run(config, load, group, workload, &observer, seq).await?;
            seq += report.results.len() as u64;
            levels.push(report);
        }
    }
    Ok(levels)
}

/// A target's client and the model to ask for.
async fn connect(config: &BenchConfig, index: usize, url: &str) -> (Target, Option<String>) {
    // The pool's idle timeout stays the proxy's default: under uvicorn's keep-alive.
    let timeouts = Timeouts {
        connect: config.timeout.min(CONNECT_TIMEOUT),
        response_headers: config.timeout,
        ..Timeouts::default()
    };
    let mut client = Client::new(url, &timeouts);
    let mut auth = None;
    if let Some(key) = &config.api_key {
        match client.clone().with_api_key(key) {
            Ok(c) => client = c,
            Err(e) => tracing::warn!(error = %e, "API key not used"),
        }
        auth = http::HeaderValue::try_from(format!("Bearer {key}"))
            .ok()
            .map(|mut v| {
                v.set_sensitive(true);
                v
            });
    }
    let model = match (&config.model, config.dialect) {
        (Some(m), _) => Some(m.clone()),
        // SGLang's native /generate serves its one model and takes no name.
        (None, Dialect::Sglang) => None,
        (None, _) => list_models(&client)
            .await
            .and_then(|models| models.into_iter().next())
            .map(|m| m.id),
    };
    let target = Target {
        index,
        direct: conn::Direct::parse(url, auth, timeouts.connect),
        client,
        dialect: config.dialect,
        stream: config.stream,
        output_len: config.output_len,
        timeout: config.timeout,
        keep_answers: config.is_multiturn(),
    };
    (target, model)
}

/// The workload: prompt shapes from the dialect's encoder, a tokenizer where text must be
/// sized, and the items from the configured source.
async fn prepare(
    config: &BenchConfig,
    client: &Client,
    model: Option<String>,
) -> anyhow::Result<Workload> {
    let shapes = Shapes::probe(config.dialect, config.flavor());
    let sharegpt = match &config.source {
        Source::Dataset(path) => Some(dataset::load(path)?),
        _ => None,
    };
    // Multi-turn histories are text whatever the dialect takes.
    let needs_counter = !shapes.token_ids
        || config.is_multiturn()
        || sharegpt
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x.reply.is_some()));
    let counter = match needs_counter {
        false => None,
        true => match Counter::server(client, model.as_deref()).await {
            Some(c) => Some(c),
            None => config
                .tokenizer
                .as_deref()
                .map(Counter::local)
                .transpose()?,
        },
    };
    let calibration = match (&counter, shapes.token_ids && !config.is_multiturn()) {
        (Some(c), false) => {
            let special = shapes.text == TextShape::Raw;
            let (cal, why) = Calibration::measure(c, special).await?;
            if let Some(why) = why {
                tracing::warn!("input lengths will be approximate: {why}");
            }
            cal
        }
        _ => Calibration::approximate(),
    };
    let items = match (&config.source, sharegpt) {
        (Source::Replay(path), _) => {
            let log = dataset::load_log(path)?;
            let links = sessions::Links::of(&log);
            Items::Replay(log, links)
        }
        (Source::Dataset(_), Some(samples)) => {
            Items::Dataset(dataset_items(config, samples, counter.as_ref()).await?)
        }
        _ => Items::Random {
            input: config.input_span(),
            output: config.output_span(),
        },
    };
    let mut workload = Workload {
        dialect: config.dialect,
        flavor: config.flavor(),
        model,
        stream: config.stream,
        seed: config.seed,
        shapes,
        calibration,
        items: Arc::new(items),
    };
    if config.is_multiturn() {
        workload.items = Arc::new(Items::Multiturn(dialogues(config, &workload)));
    }
    Ok(workload)
}

/// The multi-turn shape, with its shared system prompt drawn from the run's seed.
fn dialogues(config: &BenchConfig, w: &Workload) -> conversation::Dialogues {
    conversation::Dialogues {
        conversations: config.conversations,
        turns: config.turns,
        input: config.input_span(),
        output: config.output_span(),
        system: conversation::Dialogues::system_prompt(w, config.system_prompt_len),
    }
}

/// Dataset samples in seeded order, with output lengths: the line's own, else the reference
/// answer's length in tokens (a word per token without a tokenizer), else `output_len`.
async fn dataset_items(
    config: &BenchConfig,
    mut samples: Vec<dataset::Sample>,
    counter: Option<&Counter>,
) -> anyhow::Result<Vec<(dataset::Sample, u32)>> {
    use futures_util::{StreamExt, TryStreamExt};
    rng::Rng::new(config.seed, 0xDA7A).shuffle(&mut samples);
    // Only as many as the run can send (sequence numbers wrap around the samples).
    let targets = 1 + usize::from(config.vs_url.is_some());
    let needed = match config.requests_per_level {
        u32::MAX => DATASET_SAMPLES,
        n => (config.warmup as usize + n as usize * config.loads().len()) * targets,
    };
    samples.truncate(needed.min(DATASET_SAMPLES));
    let output_len = |s: dataset::Sample| async move {
        let out = match (&s.output_len, &s.reply, counter) {
            (Some(n), _, _) => *n,
            (None, Some(reply), Some(c)) => c.count(reply, false).await?,
            (None, Some(reply), None) => reply.split_whitespace().count() as u32,
            (None, None, _) => config.output_len,
        };
        Ok::<_, anyhow::Error>((s, out.max(1)))
    };
    futures_util::stream::iter(samples)
        .map(output_len)
        .buffered(16)
        .try_collect()
        .await
}

/// Send the warmup requests all at once (so `--warmup 64` also opens the 64 connections a
/// level of 64 will use); an error only if all of them failed.
async fn warmup(target: &Target, workload: &Workload, count: u32, seq: u64) -> anyhow::Result<()> {
    let sends = (0..u64::from(count)).map(|i| async move {
        let body = workload.item(i, seq + i)?.body;
        Ok::<_, anyhow::Error>(target.send(body, None, None).await.0.error)
    });
    let errors = futures_util::future::join_all(sends).await;
    let mut last_error = None;
    let mut any_ok = count == 0;
    for e in errors {
        match e? {
            None => any_ok = true,
            Some(e) => last_error = Some(e),
        }
    }
    match (any_ok, last_error) {
        (false, Some(e)) => bail!(
            "every warmup request to {} failed, so the levels would too: {e}",
            target.client.base()
        ),
        _ => Ok(()),
    }
}
