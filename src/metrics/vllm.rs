//! vLLM-compatible names (`--metrics-compat vllm`): the same measurements also exported under
//! vLLM's names, buckets and `model_name` label, so vLLM's own Grafana dashboards work
//! against lingo unchanged.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

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
    running: IntGaugeVec,
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

impl VllmCompat {
    pub fn register(r: &Registry) -> VllmCompat {
        let running = IntGaugeVec::new(
            Opts::new(
                "vllm:num_requests_running",
                "Requests in flight through lingo.",
            ),
            &["model_name"],
        )
        .expect("valid metric");
        r.register(Box::new(running.clone()))
            .expect("unique metric");
        VllmCompat {
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

    pub fn started(&self, model: &str) {
        self.running.with_label_values(&[model]).inc();
    }

    pub fn relabelled(&self, old: &str, new: &str) {
        if old != new {
            self.running.with_label_values(&[old]).dec();
            self.running.with_label_values(&[new]).inc();
        }
    }

    pub fn finished(&self, r: &RequestRecord) {
        let m = r.labels.model.as_str();
        self.running.with_label_values(&[m]).dec();
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
