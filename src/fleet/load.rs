//! The engines' own load: each endpoint's waiting queue, running requests and KV-cache use,
//! read from what its kind exports (vLLM's, SGLang's, TGI's and llama.cpp's Prometheus
//! names; SGLang's `/get_load` where its metrics are off), polled every `load.interval`.
//! Ollama and plain OpenAI servers export none: lingo's own in-flight count stands alone.
//! A figure older than `load.stale_after` is ignored, so a server whose metrics stop
//! answering is still used, balanced by lingo's count.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Endpoint, Health, Pool};
use crate::config::LoadConfig;
use crate::metrics::relay::{parse_hist, Hist, ModelRelay, HISTOGRAMS};
use crate::upstream::Kind;

/// One reading of an engine's load; a figure its kind does not export is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    pub waiting: Option<u32>,
    pub running: Option<u32>,
    /// KV-cache use, 0..=1.
    pub kv_usage: Option<f64>,
}

/// An endpoint's last reading and when it was taken (lock-free: pickers read it per request).
#[derive(Debug)]
pub struct EngineLoad {
    /// `u32::MAX` for a figure not known.
    waiting: AtomicU32,
    running: AtomicU32,
    /// KV use in millionths, `u32::MAX` when not known.
    kv_ppm: AtomicU32,
    /// Milliseconds since `epoch()` of the reading, 0 for none yet.
    at_ms: AtomicU64,
    /// What the engine held beyond lingo's own requests when it was read (other clients,
    /// other lingo replicas).
    others: AtomicU32,
    stale_ms: u64,
}

const UNKNOWN: u32 = u32::MAX;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    // Never 0, which means "no reading".
    epoch().elapsed().as_millis() as u64 + 1
}

impl EngineLoad {
    pub fn new(stale_after: Duration) -> EngineLoad {
        EngineLoad {
            waiting: AtomicU32::new(UNKNOWN),
            running: AtomicU32::new(UNKNOWN),
            kv_ppm: AtomicU32::new(UNKNOWN),
            at_ms: AtomicU64::new(0),
            others: AtomicU32::new(0),
            stale_ms: stale_after.as_millis() as u64,
        }
    }

    /// A reading, taken while lingo had `in_flight` requests on the endpoint.
    pub fn set(&self, s: Sample, in_flight: usize) {
        let put = |a: &AtomicU32, v: Option<u32>| {
            a.store(v.map_or(UNKNOWN, |v| v.min(UNKNOWN - 1)), Ordering::Relaxed);
        };
        put(&self.waiting, s.waiting);
        put(&self.running, s.running);
        let ppm = s.kv_usage.map(|k| (k.clamp(0.0, 1.0) * 1e6) as u32);
        put(&self.kv_ppm, ppm);
        // The engine's queue and batch include lingo's own requests: what is beyond them is
        // other traffic. With a queue alone, ours cannot be told apart: all of it counts.
        let mine = u32::try_from(in_flight).unwrap_or(u32::MAX);
        let others = match (s.running, s.waiting) {
            (Some(r), Some(w)) => r.saturating_add(w).saturating_sub(mine),
            (None, Some(w)) => w,
            _ => 0,
        };
        self.others.store(others, Ordering::Relaxed);
        self.at_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// The last reading and its age, if it is not stale.
    pub fn fresh(&self) -> Option<(Sample, Duration)> {
        let at = self.at_ms.load(Ordering::Relaxed);
        let age = now_ms().checked_sub(at).filter(|_| at > 0)?;
        if age > self.stale_ms {
            return None;
        }
        let get = |a: &AtomicU32| Some(a.load(Ordering::Relaxed)).filter(|v| *v != UNKNOWN);
        let sample = Sample {
            waiting: get(&self.waiting),
            running: get(&self.running),
            kv_usage: get(&self.kv_ppm).map(|p| f64::from(p) / 1e6),
        };
        Some((sample, Duration::from_millis(age)))
    }

    /// The load policies compare: lingo's own `in_flight` now, plus what the engine held
    /// beyond lingo's requests at its last fresh reading. lingo's own count is never taken
    /// from the engine, whose figures are a poll old: a stale reading of lingo's own queue
    /// would make the load bound spill turns that fit.
    pub fn load(&self, in_flight: usize) -> usize {
        match self.fresh() {
            Some(_) => in_flight + self.others.load(Ordering::Relaxed) as usize,
            None => in_flight,
        }
    }
}

/// Where a kind publishes its load.
fn source(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Vllm | Kind::Sglang | Kind::Tgi | Kind::Llamacpp => Some("/metrics"),
        Kind::Ollama | Kind::Openai => None,
    }
}

/// The names each kind uses: (waiting, running, KV use).
fn names(
    kind: Kind,
) -> (
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
) {
    match kind {
        Kind::Vllm | Kind::Openai | Kind::Ollama => (
            &["vllm:num_requests_waiting"],
            &["vllm:num_requests_running"],
            &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        ),
        Kind::Sglang => (
            &["sglang:num_queue_reqs"],
            &["sglang:num_running_reqs"],
            &["sglang:token_usage"],
        ),
        Kind::Tgi => (&["tgi_queue_size"], &["tgi_batch_current_size"], &[]),
        Kind::Llamacpp => (
            &["llamacpp:requests_deferred"],
            &["llamacpp:requests_processing"],
            &["llamacpp:kv_cache_usage_ratio"],
        ),
    }
}

/// A reading from a Prometheus exposition: queue and running summed over series (one per
/// engine of a data-parallel server), KV use averaged. `None` if none of the names is there.
///
/// Most of an exposition is other names (histogram buckets above all): a line's name is
/// found with memchr and its value parsed only when the name is wanted (parsing every
/// value, the name by a `char` pattern, cost the mock's vLLM page 116k instructions a poll).
pub fn parse_metrics(kind: Kind, text: &str) -> Option<Sample> {
    let (w, r, k) = names(kind);
    let mut sums = [(0.0f64, 0u32); 3];
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        // The name ends at its labels or its value: the same as the part before the last
        // space (the series) cut at `{` or a space, for any line that has a space.
        let end = memchr::memchr2(b'{', b' ', line.as_bytes()).unwrap_or(line.len());
        let name = &line[..end];
        let wanted = [w, r, k].map(|set| set.contains(&name));
        if !wanted.contains(&true) {
            continue;
        }
        let Some((_, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        for (i, _) in wanted.iter().enumerate().filter(|(_, &yes)| yes) {
            if v.is_finite() && v >= 0.0 {
                sums[i].0 += v;
                sums[i].1 += 1;
            }
        }
    }
    if sums.iter().all(|s| s.1 == 0) {
        return None;
    }
    let count = |i: usize| (sums[i].1 > 0).then(|| sums[i].0.min(f64::from(UNKNOWN - 1)) as u32);
    let kv = (sums[2].1 > 0).then(|| sums[2].0 / f64::from(sums[2].1));
    Some(Sample {
        waiting: count(0),
        running: count(1),
        kv_usage: kv,
    })
}

/// SGLang's `/get_load`: one entry per data-parallel rank.
#[derive(Deserialize)]
struct RankLoad {
    #[serde(default)]
    num_reqs: u64,
    #[serde(default)]
    num_waiting_reqs: u64,
}

pub fn parse_sglang_load(body: &[u8]) -> Option<Sample> {
    let ranks: Vec<RankLoad> = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => vec![serde_json::from_slice(body).ok()?],
    };
    let waiting: u64 = ranks.iter().map(|r| r.num_waiting_reqs).sum();
    let all: u64 = ranks.iter().map(|r| r.num_reqs).sum();
    let clamp = |v: u64| u32::try_from(v).unwrap_or(UNKNOWN - 1);
    Some(Sample {
        waiting: Some(clamp(waiting)),
        running: Some(clamp(all.saturating_sub(waiting))),
        kv_usage: None,
    })
}

/// One poll's findings: the load, and (vLLM) the histograms relayed under vLLM's names.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub sample: Sample,
    pub hists: [Option<Hist>; 2],
}

/// Read one endpoint's load now (and, when `relay`, the histograms relayed under vLLM's
/// names); `None` when it exports none (or did not answer).
pub async fn read(ep: &Endpoint, relay: bool) -> Option<Reading> {
    let kind = ep.kind_now()?;
    let path = source(kind)?;
    if let Ok(resp) = ep.client.get(path).await {
        if resp.status.is_success() {
            if let Ok(body) = resp.bytes().await {
                // `from_utf8` checks ASCII a word at a time; `from_utf8_lossy` walked the page
                // by chunks (60k instructions a poll), and is left for a page that is not UTF-8.
                let text = match std::str::from_utf8(&body) {
                    Ok(t) => std::borrow::Cow::Borrowed(t),
                    Err(_) => String::from_utf8_lossy(&body),
                };
                if let Some(sample) = parse_metrics(kind, &text) {
                    let hists = match kind {
                        Kind::Vllm if relay => HISTOGRAMS.map(|(name, _)| parse_hist(&text, name)),
                        _ => [None, None],
                    };
                    return Some(Reading { sample, hists });
                }
            }
        }
    }
    if kind != Kind::Sglang {
        return None;
    }
    let resp = ep.client.get("/get_load").await.ok()?;
    if !resp.status.is_success() {
        return None;
    }
    let sample = parse_sglang_load(&resp.bytes().await.ok()?)?;
    Some(Reading {
        sample,
        hists: [None, None],
    })
}

/// After a round: what the pool's engines reported, per model, for vLLM's names. Queues,
/// batches and histograms sum over endpoints; KV use averages; an endpoint that reports no
/// running batch counts lingo's own requests on it.
fn relay(p: &Pool) {
    let metrics = p.metrics();
    if !metrics.relays_vllm() {
        return;
    }
    let models: Vec<String> = p.model_cards().into_iter().map(|c| c.id).collect();
    let mut r = ModelRelay::default();
    let (mut kv_sum, mut kv_n) = (0.0, 0u32);
    for e in p.endpoints().iter() {
        let Some((s, _)) = e.engine.fresh() else {
            continue;
        };
        let add = |acc: &mut Option<u64>, v: Option<u32>| {
            if let Some(v) = v {
                *acc = Some(acc.unwrap_or(0) + u64::from(v));
            }
        };
        add(&mut r.waiting, s.waiting);
        add(&mut r.running, s.running.or(Some(e.in_flight() as u32)));
        if let Some(k) = s.kv_usage {
            kv_sum += k;
            kv_n += 1;
        }
        for (i, h) in e.engine_hists().into_iter().enumerate() {
            if let Some(h) = h {
                r.hists[i].get_or_insert_with(Hist::default).add(&h);
            }
        }
    }
    r.kv_usage = (kv_n > 0).then(|| kv_sum / f64::from(kv_n));
    metrics.vllm_relay(&models, &r);
}

/// Poll every endpoint of `pool` that takes requests, every `cfg.interval`, for as long as
/// the pool lives. An endpoint that exports nothing is asked again less and less often (up
/// to every 30 s), so a server without metrics costs nearly nothing.
pub fn spawn(pool: &Arc<Pool>, cfg: LoadConfig) {
    if !cfg.enabled {
        return;
    }
    let weak: Weak<Pool> = Arc::downgrade(pool);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(p) = weak.upgrade() else { return };
            // The histograms are read only for `--metrics-compat vllm`, which relays them.
            let relays = p.metrics().relays_vllm();
            let set = p.endpoints();
            let due = set
                .iter()
                .filter(|e| matches!(e.health(), Health::Healthy | Health::Pending))
                .filter(|e| e.load_poll_due());
            let reads = due.map(|e| async move {
                // Bounded by the interval: a slow server's figure would be stale anyway.
                let got = tokio::time::timeout(
                    cfg.interval.max(Duration::from_millis(100)),
                    read(e, relays),
                )
                .await;
                e.note_load(got.ok().flatten());
            });
            futures_util::future::join_all(reads).await;
            relay(&p);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_names_are_summed_and_kv_averaged() {
        let text = "# HELP vllm:num_requests_waiting x\n\
            vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3.0\n\
            vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 4.0\n\
            vllm:num_requests_running{model_name=\"m\"} 2\n\
            vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n\
            vllm:kv_cache_usage_perc{engine=\"1\"} 0.25\n\
            vllm:num_requests_waiting_by_reason{reason=\"capacity\"} 9\n";
        let s = parse_metrics(Kind::Vllm, text).unwrap();
        assert_eq!((s.waiting, s.running), (Some(7), Some(2)));
        assert_eq!(s.kv_usage, Some(0.375));
        assert_eq!(parse_metrics(Kind::Vllm, "other_metric 1\n"), None);
    }

    /// `parse_metrics` as it was, parsing every line's value: the reference.
    fn parse_every_line(kind: Kind, text: &str) -> Option<Sample> {
        let (w, r, k) = names(kind);
        let mut sums = [(0.0f64, 0u32); 3];
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split(['{', ' ']).next().unwrap_or_default();
            let Ok(v) = value.trim().parse::<f64>() else {
                continue;
            };
            for (i, set) in [w, r, k].iter().enumerate() {
                if set.contains(&name) && v.is_finite() && v >= 0.0 {
                    sums[i].0 += v;
                    sums[i].1 += 1;
                }
            }
        }
        if sums.iter().all(|s| s.1 == 0) {
            return None;
        }
        let count =
            |i: usize| (sums[i].1 > 0).then(|| sums[i].0.min(f64::from(UNKNOWN - 1)) as u32);
        let kv = (sums[2].1 > 0).then(|| sums[2].0 / f64::from(sums[2].1));
        Some(Sample {
            waiting: count(0),
            running: count(1),
            kv_usage: kv,
        })
    }

    #[test]
    fn only_wanted_values_are_parsed_and_the_reading_is_the_same() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        // Lines a page may hold, odd ones included (no value, no space, a space in a
        // label, a wanted name as another's prefix, NaN, negative, `+Inf`, trailing space).
        const LINES: &[&str] = &[
            "# HELP vllm:num_requests_waiting x",
            "vllm:num_requests_waiting 3",
            "vllm:num_requests_waiting{engine=\"0\"} 4.5",
            "vllm:num_requests_waiting{a=\"b c\"} 2",
            "vllm:num_requests_waiting_by_reason{reason=\"capacity\"} 9",
            "vllm:num_requests_running{model_name=\"m\"} 2",
            "vllm:num_requests_running NaN",
            "vllm:num_requests_running -1",
            "vllm:num_requests_running +Inf",
            "vllm:num_requests_running",
            "vllm:num_requests_running{x=\"1\"}",
            "vllm:kv_cache_usage_perc 0.25 ",
            "vllm:gpu_cache_usage_perc{engine=\"1\"} 0.5",
            "vllm:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"m\"} 7",
            "sglang:num_queue_reqs 5",
            "sglang:num_running_reqs{name=\"m\"} 1e2",
            "sglang:token_usage 0.1",
            "tgi_queue_size 2",
            "tgi_batch_current_size 8 1700000000",
            "llamacpp:requests_deferred 1",
            "llamacpp:requests_processing 4",
            "llamacpp:kv_cache_usage_ratio 0.75",
            "",
            " vllm:num_requests_waiting 1",
            "vllm:num_requests_waiting\t6",
        ];
        let kinds = [
            Kind::Vllm,
            Kind::Sglang,
            Kind::Tgi,
            Kind::Llamacpp,
            Kind::Ollama,
        ];
        // Bounded: 5,000 random pages of up to 12 lines.
        let mut rng = StdRng::seed_from_u64(9);
        let mut read = 0;
        for _ in 0..5_000 {
            let n = rng.random_range(0..12);
            let page: Vec<&str> = (0..n)
                .map(|_| LINES[rng.random_range(0..LINES.len())])
                .collect();
            let text = page.join("\n");
            for kind in kinds {
                let got = parse_metrics(kind, &text);
                read += usize::from(got.is_some());
                assert_eq!(got, parse_every_line(kind, &text), "{kind:?}\n{text}");
            }
        }
        assert!(read > 1_000, "only {read} pages gave a reading");
    }

    #[test]
    fn each_kind_reads_its_own_names() {
        let s = parse_metrics(Kind::Sglang, "sglang:num_queue_reqs{name=\"m\"} 5\n").unwrap();
        assert_eq!((s.waiting, s.running), (Some(5), None));
        let s = parse_metrics(Kind::Tgi, "tgi_queue_size 2\ntgi_batch_current_size 8\n").unwrap();
        assert_eq!((s.waiting, s.running), (Some(2), Some(8)));
        let text = "llamacpp:requests_deferred 1\nllamacpp:requests_processing 4\n";
        let s = parse_metrics(Kind::Llamacpp, text).unwrap();
        assert_eq!((s.waiting, s.running), (Some(1), Some(4)));
        let s = parse_sglang_load(br#"[{"num_reqs":5,"num_waiting_reqs":2},{"num_reqs":1}]"#);
        assert_eq!(s.unwrap().waiting, Some(2));
        assert_eq!(parse_sglang_load(b"nonsense"), None);
    }

    #[test]
    fn a_reading_goes_stale() {
        let l = EngineLoad::new(Duration::ZERO);
        assert_eq!(l.fresh(), None);
        l.set(
            Sample {
                waiting: Some(3),
                ..Sample::default()
            },
            0,
        );
        // Stale after 0 ms: fresh only within the same millisecond.
        let f = l.fresh().map(|(s, _)| s.waiting);
        assert!(f.is_none() || f == Some(Some(3)));
        let l = EngineLoad::new(Duration::from_secs(60));
        l.set(
            Sample {
                waiting: Some(3),
                running: None,
                kv_usage: Some(0.5),
            },
            0,
        );
        let (s, _) = l.fresh().unwrap();
        assert_eq!(
            (s.waiting, s.running, s.kv_usage),
            (Some(3), None, Some(0.5))
        );
        assert_eq!(l.load(2), 5);
        // lingo's own 6 are the engine's 4 running and 2 waiting: counted once, and lingo's
        // count since (3 ended) is what stands, not the reading.
        let both = |w, r| Sample {
            waiting: Some(w),
            running: Some(r),
            kv_usage: None,
        };
        l.set(both(2, 4), 6);
        assert_eq!((l.load(6), l.load(3)), (6, 3));
        // 10 in the engine with lingo's 6 among them: the other 4 show.
        l.set(both(4, 6), 6);
        assert_eq!(l.load(6), 10);
    }
}
