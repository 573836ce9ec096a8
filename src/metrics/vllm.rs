//! vLLM-compatible names (`--metrics-compat vllm`): the same measurements also exported under
//! vLLM's names, buckets and `model_name` label, so vLLM's own Grafana dashboards work
//! against lingo unchanged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use super::relay::{ModelRelay, Relayed};
use super::RequestRecord;

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
const TOKEN_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0,
    50000.0, 100000.0,
];

pub struct VllmCompat {
    ttft: HistogramVec,
    itl: HistogramVec,
    tpot: HistogramVec,
    e2e: HistogramVec,
    prompt_hist: HistogramVec,
    generation_hist: HistogramVec,
    prompt_tokens: IntCounterVec,
    generation_tokens: IntCounterVec,
    success: IntCounterVec,
    decode: HistogramVec,
    max_generation: HistogramVec,
    /// Exported: the engines' running batch where they report it, else lingo's own count.
    running: IntGaugeVec,
    waiting: IntGaugeVec,
    kv_usage: GaugeVec,
    /// lingo's own requests in flight per model.
    own_running: Mutex<BTreeMap<String, i64>>,
    relayed: Arc<Relayed>,
}

fn hist(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    let h = HistogramVec::new(opts, &["model_name"]).expect("valid metric");
    r.register(Box::new(h.clone())).expect("unique metric");
    h
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["model_name"]).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

impl VllmCompat {
    pub fn register(r: &Registry) -> VllmCompat {
        let running = int_gauge(
            r,
            "vllm:num_requests_running",
            "Requests in the engines' running batches (relayed), or in flight through lingo where no engine reports it.",
        );
        let waiting = int_gauge(
            r,
            "vllm:num_requests_waiting",
            "Requests waiting in the engines' queues, summed over the model's endpoints (relayed).",
        );
        let kv_usage = GaugeVec::new(
            Opts::new(
                "vllm:kv_cache_usage_perc",
                "KV-cache use of the model's engines, 0 to 1, averaged over its endpoints (relayed).",
            ),
            &["model_name"],
        )
        .expect("valid metric");
        r.register(Box::new(kv_usage.clone()))
            .expect("unique metric");
        let relayed = Arc::new(Relayed::new());
        r.register(Box::new(RelayedHandle(relayed.clone())))
            .expect("unique metric");
        VllmCompat {
            decode: hist(
                r,
                "vllm:request_decode_time_seconds",
                "Time from a request's first token to its last (measured by lingo).",
                E2E_BUCKETS,
            ),
            max_generation: hist(
                r,
                "vllm:request_max_num_generation_tokens",
                "The output cap each request asked for (its generated tokens when it set none; measured by lingo).",
                TOKEN_BUCKETS,
            ),
            waiting,
            kv_usage,
            own_running: Mutex::new(BTreeMap::new()),
            relayed,
            ttft: hist(
                r,
                "vllm:time_to_first_token_seconds",
                "Time to first token.",
                TTFT_BUCKETS,
            ),
            itl: hist(
                r,
                "vllm:inter_token_latency_seconds",
                "Inter-token latency (token-weighted).",
                ITL_BUCKETS,
            ),
            tpot: hist(
                r,
                "vllm:request_time_per_output_token_seconds",
                "Time per output token per request.",
                ITL_BUCKETS,
            ),
            e2e: hist(
                r,
                "vllm:e2e_request_latency_seconds",
                "End-to-end request latency.",
                E2E_BUCKETS,
            ),
            prompt_hist: hist(
                r,
                "vllm:request_prompt_tokens",
                "Prompt tokens per request.",
                TOKEN_BUCKETS,
            ),
            generation_hist: hist(
                r,
                "vllm:request_generation_tokens",
                "Generated tokens per request.",
                TOKEN_BUCKETS,
            ),
            prompt_tokens: counter(
                r,
                "vllm:prompt_tokens_total",
                "Prompt tokens.",
                &["model_name"],
            ),
            generation_tokens: counter(
                r,
                "vllm:generation_tokens_total",
                "Generated tokens.",
                &["model_name"],
            ),
            success: counter(
                r,
                "vllm:request_success_total",
                "Finished requests by finish reason.",
                &["finished_reason", "model_name"],
            ),
            running,
        }
    }

    fn own(&self, model: &str, by: i64) {
        let mut own = self.own_running.lock().unwrap_or_else(|e| e.into_inner());
        // Twice per request: the name is copied only the first time a model is seen.
        match own.get_mut(model) {
            Some(n) => *n += by,
            None => {
                own.insert(model.to_string(), by);
            }
        }
    }

    pub fn started(&self, model: &str) {
        self.own(model, 1);
    }

    pub fn relabelled(&self, old: &str, new: &str) {
        if old != new {
            self.own(old, -1);
            self.own(new, 1);
        }
    }

    /// The served models, so each has its `model_name` series from the start (vLLM's
    /// dashboard picks its model from those label values).
    pub fn models_known(&self, models: &[String]) {
        for m in models {
            self.own(m, 0);
        }
    }

    /// The figures the endpoints serving `models` reported (`fleet::load`).
    pub fn relay(&self, models: &[String], r: &ModelRelay) {
        let mut map = self
            .relayed
            .models
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for m in models {
            map.insert(m.clone(), r.clone());
        }
    }

    /// Bring the exported gauges up to date (before each exposition).
    pub fn refresh(&self) {
        let own = self
            .own_running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let relayed = self
            .relayed
            .models
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (m, n) in &own {
            let r = relayed.get(m);
            let running = r.and_then(|r| r.running).map_or(*n, |v| v as i64);
            self.running.with_label_values(&[m]).set(running);
            let waiting = r.and_then(|r| r.waiting).unwrap_or(0);
            self.waiting.with_label_values(&[m]).set(waiting as i64);
            if let Some(k) = r.and_then(|r| r.kv_usage) {
                self.kv_usage.with_label_values(&[m]).set(k);
            }
        }
        for (m, r) in relayed.iter().filter(|(m, _)| !own.contains_key(*m)) {
            self.running
                .with_label_values(&[m])
                .set(r.running.unwrap_or(0) as i64);
            self.waiting
                .with_label_values(&[m])
                .set(r.waiting.unwrap_or(0) as i64);
            if let Some(k) = r.kv_usage {
                self.kv_usage.with_label_values(&[m]).set(k);
            }
        }
    }

    pub fn finished(&self, r: &RequestRecord) {
        self.counted(r);
        // Last, as lingo's own in-flight gauge: not running means counted.
        self.own(&r.labels.model, -1);
    }

    fn counted(&self, r: &RequestRecord) {
        let m = &*r.labels.model;
        self.prompt_tokens
            .with_label_values(&[m])
            .inc_by(r.prompt_tokens.unwrap_or(0));
        self.generation_tokens
            .with_label_values(&[m])
            .inc_by(r.tokens);
        if r.outcome != super::Outcome::Ok {
            return;
        }
        self.success.with_label_values(&[r.finish_label(), m]).inc();
        if let Some(p) = r.prompt_tokens {
            self.prompt_hist.with_label_values(&[m]).observe(p as f64);
        }
        self.generation_hist
            .with_label_values(&[m])
            .observe(r.tokens as f64);
        if let Some(e2e) = r.e2e() {
            self.e2e.with_label_values(&[m]).observe(e2e);
        }
        // vLLM records 0 for requests with at most one token.
        self.tpot
            .with_label_values(&[m])
            .observe(r.tpot().unwrap_or(0.0));
        if let (Some(first), Some(last)) = (r.first_token, r.last_token) {
            let decode = last.saturating_duration_since(first).as_secs_f64();
            self.decode.with_label_values(&[m]).observe(decode);
        }
        let cap = r.max_tokens.unwrap_or(r.tokens);
        self.max_generation
            .with_label_values(&[m])
            .observe(cap as f64);
    }

    pub fn ttft(&self, model: &str, seconds: f64) {
        self.ttft.with_label_values(&[model]).observe(seconds);
    }

    pub fn itl(&self, model: &str, each: f64, tokens: u32) {
        let h = self.itl.with_label_values(&[model]);
        for _ in 0..tokens {
            h.observe(each);
        }
    }
}

/// The registry owns its collectors; this shares the relayed histograms with `VllmCompat`.
struct RelayedHandle(Arc<Relayed>);

impl prometheus::core::Collector for RelayedHandle {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.0.collect()
    }
}
