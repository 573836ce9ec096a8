//! The mock's `/metrics`: the load figures under the names the real servers use, so lingo can
//! poll a mock as it polls an engine.
//!
//! Every kind exports vLLM's names (`vllm/v1/metrics/loggers.py`): the scheduler gauges, the
//! KV-cache usage, the prefix-cache and token counters and three timing histograms with vLLM's
//! buckets, all labelled `model_name` and `engine="0"` as vLLM labels them. Kind `sglang` adds
//! `sglang:*` gauges (`model_name`), `tgi` adds `tgi_queue_size` and `tgi_batch_current_size`,
//! `llamacpp` adds `llamacpp:requests_processing` and `llamacpp:requests_deferred` (neither
//! labelled, as those servers export them). Gauges are set from the live figures at each
//! scrape; a renamed model (tests) shows under its new name from the next scrape.

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
    Registry, TextEncoder,
};

use super::sched::{FirstToken, Load};
use super::MockKind;

/// vLLM's TTFT buckets.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's request latency buckets (queue, prefill, e2e...).
const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
const VLLM_LABELS: &[&str] = &["model_name", "engine"];
const ENGINE: &str = "0";

/// The metric families of one mock.
pub(crate) struct MockMetrics {
    registry: Registry,
    running: GaugeVec,
    waiting: GaugeVec,
    kv_usage: GaugeVec,
    queries: IntCounterVec,
    hits: IntCounterVec,
    prompt_tokens: IntCounterVec,
    generation_tokens: IntCounterVec,
    queue_time: HistogramVec,
    prefill_time: HistogramVec,
    ttft: HistogramVec,
    extra: Extra,
}

/// A kind's own gauges.
enum Extra {
    None,
    Sglang {
        running: GaugeVec,
        queue: GaugeVec,
        token_usage: GaugeVec,
        hit_rate: GaugeVec,
    },
    Tgi {
        queue: Gauge,
        batch: Gauge,
    },
    Llamacpp {
        processing: Gauge,
        deferred: Gauge,
    },
}

/// Metric construction only fails on an invalid name or a duplicate, both fixed at compile time.
fn register<M: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: M) -> M {
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn gauges(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    register(
        r,
        GaugeVec::new(Opts::new(name, help), labels).expect("valid metric"),
    )
}

fn gauge(r: &Registry, name: &str, help: &str) -> Gauge {
    register(
        r,
        Gauge::with_opts(Opts::new(name, help)).expect("valid metric"),
    )
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounterVec {
    register(
        r,
        IntCounterVec::new(Opts::new(name, help), VLLM_LABELS).expect("valid metric"),
    )
}

fn hist(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    register(
        r,
        HistogramVec::new(opts, VLLM_LABELS).expect("valid metric"),
    )
}

impl Extra {
    fn register(r: &Registry, kind: MockKind) -> Extra {
        let m = &["model_name"];
        match kind {
            MockKind::Sglang => Extra::Sglang {
                running: gauges(
                    r,
                    "sglang:num_running_reqs",
                    "The number of running requests.",
                    m,
                ),
                queue: gauges(
                    r,
                    "sglang:num_queue_reqs",
                    "The number of requests in the waiting queue.",
                    m,
                ),
                token_usage: gauges(r, "sglang:token_usage", "The token usage.", m),
                hit_rate: gauges(r, "sglang:cache_hit_rate", "The prefix cache hit rate.", m),
            },
            MockKind::Tgi => Extra::Tgi {
                queue: gauge(r, "tgi_queue_size", "Current queue size"),
                batch: gauge(r, "tgi_batch_current_size", "Current batch size"),
            },
            MockKind::Llamacpp => Extra::Llamacpp {
                processing: gauge(
                    r,
                    "llamacpp:requests_processing",
                    "Number of requests processing.",
                ),
                deferred: gauge(
                    r,
                    "llamacpp:requests_deferred",
                    "Number of requests deferred.",
                ),
            },
            MockKind::Vllm | MockKind::Ollama | MockKind::Openai => Extra::None,
        }
    }

    fn set(&self, model: &str, load: &Load) {
        let waiting = load.reported_waiting() as f64;
        match self {
            Extra::None => {}
            Extra::Sglang {
                running,
                queue,
                token_usage,
                hit_rate,
            } => {
                for (g, v) in [
                    (running, load.running as f64),
                    (queue, waiting),
                    (token_usage, load.kv_usage()),
                    (hit_rate, load.hit_rate()),
                ] {
                    g.reset();
                    g.with_label_values(&[model]).set(v);
                }
            }
            Extra::Tgi { queue, batch } => {
                queue.set(waiting);
                batch.set(load.running as f64);
            }
            Extra::Llamacpp {
                processing,
                deferred,
            } => {
                processing.set(load.running as f64);
                deferred.set(waiting);
            }
        }
    }
}

impl MockMetrics {
    pub fn new(kind: MockKind, model: &str) -> MockMetrics {
        let r = Registry::new();
        let m = MockMetrics {
            running: gauges(
                &r,
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                VLLM_LABELS,
            ),
            waiting: gauges(
                &r,
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                VLLM_LABELS,
            ),
            kv_usage: gauges(
                &r,
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                VLLM_LABELS,
            ),
            queries: counter(
                &r,
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
            ),
            hits: counter(
                &r,
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
            ),
            prompt_tokens: counter(
                &r,
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
            ),
            generation_tokens: counter(
                &r,
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
            ),
            queue_time: hist(
                &r,
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                LATENCY_BUCKETS,
            ),
            prefill_time: hist(
                &r,
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                LATENCY_BUCKETS,
            ),
            ttft: hist(
                &r,
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            ),
            extra: Extra::register(&r, kind),
            registry: r,
        };
        m.touch(model);
        m
    }

    /// Creates the model's counter and histogram series at zero, so they exist before the first
    /// request (a dashboard's model picker reads them).
    fn touch(&self, model: &str) {
        let l = &[model, ENGINE];
        self.queries.with_label_values(l);
        self.hits.with_label_values(l);
        self.prompt_tokens.with_label_values(l);
        self.generation_tokens.with_label_values(l);
        self.queue_time.with_label_values(l);
        self.prefill_time.with_label_values(l);
        self.ttft.with_label_values(l);
    }

    /// A request started running: its queried and hit prompt tokens.
    pub fn queried(&self, model: &str, queries: u64, hits: u64) {
        let l = &[model, ENGINE];
        self.queries.with_label_values(l).inc_by(queries);
        self.hits.with_label_values(l).inc_by(hits);
    }

    /// The model's prompt and generation token counters, resolved once per request (the
    /// generation counter moves with every chunk).
    pub fn token_counters(&self, model: &str) -> (IntCounter, IntCounter) {
        let l = &[model, ENGINE];
        (
            self.prompt_tokens.with_label_values(l),
            self.generation_tokens.with_label_values(l),
        )
    }

    pub fn first_token(&self, model: &str, t: &FirstToken) {
        let l = &[model, ENGINE];
        self.queue_time
            .with_label_values(l)
            .observe(t.queue.as_secs_f64());
        self.prefill_time
            .with_label_values(l)
            .observe(t.prefill.as_secs_f64());
        self.ttft.with_label_values(l).observe(t.ttft.as_secs_f64());
    }

    /// The Prometheus text of every family, gauges set from `load`.
    pub fn render(&self, model: &str, load: &Load) -> Vec<u8> {
        let l = &[model, ENGINE];
        for (g, v) in [
            (&self.running, load.running as f64),
            (&self.waiting, load.reported_waiting() as f64),
            (&self.kv_usage, load.kv_usage()),
        ] {
            g.reset();
            g.with_label_values(l).set(v);
        }
        self.extra.set(model, load);
        let mut out = Vec::new();
        // Encoding into a Vec fails only on invalid families, which registration rules out.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}
