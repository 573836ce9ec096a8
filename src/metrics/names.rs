//! Every metric name, its help text and its buckets, in one place.

pub const REQUESTS: (&str, &str) = (
    "lingo_requests_total",
    "Generation requests by outcome and finish reason.",
);
pub const PROMPT_TOKENS: (&str, &str) = (
    "lingo_prompt_tokens_total",
    "Prompt tokens, from the upstream's own counts (or a token-id prompt's length).",
);
pub const GENERATION_TOKENS: (&str, &str) = (
    "lingo_generation_tokens_total",
    "Generated tokens, from the upstream's own counts where it gives them.",
);
pub const ESTIMATED: (&str, &str) = (
    "lingo_estimated_token_requests_total",
    "Requests whose token counts were estimated (the upstream reported none).",
);
pub const ERRORS: (&str, &str) = ("lingo_errors_total", "Failed requests by error kind.");
pub const TTFT: (&str, &str) = (
    "lingo_time_to_first_token_seconds",
    "Time from receiving the request to the first chunk carrying a generated token.",
);
pub const ITL: (&str, &str) = (
    "lingo_inter_token_latency_seconds",
    "Token-weighted inter-token latency: a chunk of k tokens after a gap g counts k gaps of g/k.",
);
pub const TPOT: (&str, &str) = (
    "lingo_time_per_output_token_seconds",
    "Per request (e2e - ttft) / (tokens - 1), for requests with more than one token.",
);
pub const E2E: (&str, &str) = (
    "lingo_e2e_request_latency_seconds",
    "Time from receiving the request to its last content chunk.",
);
pub const PROMPT_HIST: (&str, &str) = ("lingo_request_prompt_tokens", "Prompt tokens per request.");
pub const GEN_HIST: (&str, &str) = (
    "lingo_request_generation_tokens",
    "Generated tokens per request.",
);
pub const HEADERS: (&str, &str) = (
    "lingo_upstream_response_headers_seconds",
    "Time from sending a request upstream to its response headers.",
);
pub const OVERHEAD: (&str, &str) = (
    "lingo_overhead_seconds",
    "Time spent inside lingo per request (total minus time waiting on the upstream).",
);
pub const DECODE_ERRORS: (&str, &str) = (
    "lingo_stream_decode_errors_total",
    "Upstream stream events lingo could not decode (passthrough forwards them as they came).",
);
pub const IN_FLIGHT: (&str, &str) = (
    "lingo_requests_in_flight",
    "Requests being served, per upstream.",
);

pub const REFUSED: (&str, &str) = (
    "lingo_requests_refused_total",
    "Requests refused before any handler ran, by reason (unauthorized, rate_limited, overloaded).",
);

pub const MODEL_LABELS: &[&str] = &["dialect", "upstream", "model"];
/// `key` is the client key's name (`none` without auth): on this counter only, not on the
/// histograms, to keep their series few.
pub const REQUEST_LABELS: &[&str] = &[
    "dialect",
    "upstream",
    "model",
    "outcome",
    "finish_reason",
    "key",
];
pub const ERROR_LABELS: &[&str] = &["dialect", "upstream", "kind"];

/// vLLM's TTFT buckets, so dashboards compare like with like.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's ITL buckets, extended down to 1 ms for fast decoders.
pub const ITL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
pub const E2E_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
];
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0,
    50000.0, 100000.0,
];
pub const OVERHEAD_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Series names that readers of `/metrics` (`lingo top`) match on.
pub const TTFT_BUCKET: &str = "lingo_time_to_first_token_seconds_bucket";
pub const ITL_BUCKET: &str = "lingo_inter_token_latency_seconds_bucket";

/// Per endpoint of a pool (endpoint labels capped at `fleet::MAX_ENDPOINT_LABELS` per pool).
pub const ENDPOINT_REQUESTS: (&str, &str) = (
    "lingo_endpoint_requests_total",
    "Requests an endpoint served, by pool, endpoint and outcome.",
);
pub const ENDPOINT_IN_FLIGHT: (&str, &str) = (
    "lingo_endpoint_in_flight",
    "Requests in flight on an endpoint, held until each response body ends or is dropped.",
);
pub const ENDPOINT_HEALTHY: (&str, &str) = (
    "lingo_endpoint_healthy",
    "1 while an endpoint is healthy (taking requests), else 0 (pending, ejected or draining); for `other`, how many of those endpoints are healthy.",
);
pub const ENDPOINT_EJECTIONS: (&str, &str) = (
    "lingo_endpoint_ejections_total",
    "Times an endpoint was taken out of rotation (failures in a row, failed probes, Retry-After).",
);
pub const ENDPOINT_ENGINE_WAITING: (&str, &str) = (
    "lingo_endpoint_engine_waiting",
    "Requests waiting in the endpoint engine's own queue, as it last reported (vLLM num_requests_waiting, SGLang num_queue_reqs, TGI queue_size, llama.cpp requests_deferred).",
);
pub const ENDPOINT_ENGINE_RUNNING: (&str, &str) = (
    "lingo_endpoint_engine_running",
    "Requests the endpoint's engine reported running (in its batch).",
);
pub const ENDPOINT_KV_USAGE: (&str, &str) = (
    "lingo_endpoint_kv_cache_usage",
    "KV-cache use of the endpoint's engine, 0 to 1, as it last reported.",
);
pub const ENDPOINT_RETRIES: (&str, &str) = (
    "lingo_endpoint_retries_total",
    "Requests sent to another endpoint of their pool after one failed before its first byte, by reason.",
);
/// Exported only for pools with a mirror (its series are made when the mirror is built).
pub const MIRROR_REQUESTS: (&str, &str) = (
    "lingo_mirror_requests_total",
    "Requests chosen for a pool's mirror, by pool, group and outcome (sent, dropped_cap, dropped_load).",
);

#[cfg(test)]
mod tests {
    #[test]
    fn bucket_series_names_follow_their_histograms() {
        assert_eq!(super::TTFT_BUCKET, format!("{}_bucket", super::TTFT.0));
        assert_eq!(super::ITL_BUCKET, format!("{}_bucket", super::ITL.0));
    }
}
