//! The server's own view of a level, from its Prometheus `/metrics` read before and after:
//! mean TTFT (the histogram's sum over its count) and generated tokens. lingo, vLLM and SGLang
//! use the same base names under their prefixes (`lingo_`, `vllm:`, `sglang:`); the first
//! prefix found is used, and every series of a name is summed (all models, all labels).

use serde::{Deserialize, Serialize};

use crate::top::{parse, Sample};
use crate::upstream::Client;

const PREFIXES: [&str; 3] = ["lingo_", "vllm:", "sglang:"];
const TTFT_SUM: &str = "time_to_first_token_seconds_sum";
const TTFT_COUNT: &str = "time_to_first_token_seconds_count";
const TOKENS: &str = "generation_tokens_total";

/// The totals read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    prefix: &'static str,
    ttft_sum: f64,
    ttft_count: f64,
    tokens: f64,
}

/// What the server counted during a level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSide {
    /// The metric prefix read: `lingo_`, `vllm:` or `sglang:`.
    pub prefix: String,
    /// Mean TTFT in seconds by the server's clock (from its arrival, not the client's send).
    pub ttft_mean: Option<f64>,
    pub ttft_count: f64,
    pub generation_tokens: f64,
}

/// Read the server's totals; `None` when it serves no `/metrics` with a known prefix.
pub async fn read(client: &Client) -> Option<Reading> {
    let resp = client.get("/metrics").await.ok()?;
    if !resp.status.is_success() {
        return None;
    }
    let body = resp.bytes().await.ok()?;
    reading(&String::from_utf8_lossy(&body))
}

/// Totals from a Prometheus text page.
pub fn reading(text: &str) -> Option<Reading> {
    let samples = parse(text).ok()?;
    let prefix = PREFIXES.into_iter().find(|p| {
        samples.iter().any(|s| {
            s.name.strip_prefix(p) == Some(TOKENS) || s.name.strip_prefix(p) == Some(TTFT_COUNT)
        })
    })?;
    let total = |name: &str| -> f64 {
        samples
            .iter()
            .filter(|s: &&Sample| s.name.strip_prefix(prefix) == Some(name))
            .map(|s| s.value)
            .sum()
    };
    Some(Reading {
        prefix,
        ttft_sum: total(TTFT_SUM),
        ttft_count: total(TTFT_COUNT),
        tokens: total(TOKENS),
    })
}

/// The increase between two readings.
pub fn between(before: &Reading, after: &Reading) -> ServerSide {
    let count = after.ttft_count - before.ttft_count;
    ServerSide {
        prefix: after.prefix.to_string(),
        ttft_mean: (count > 0.0).then(|| (after.ttft_sum - before.ttft_sum) / count),
        ttft_count: count,
        generation_tokens: after.tokens - before.tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_series_of_the_first_known_prefix() {
        let a = "# HELP x\nvllm:time_to_first_token_seconds_sum{model_name=\"m\"} 1.5\n\
                 vllm:time_to_first_token_seconds_count{model_name=\"m\"} 10\n\
                 vllm:generation_tokens_total{model_name=\"m\"} 100\n\
                 vllm:generation_tokens_total{model_name=\"n\"} 50\n";
        let b = a
            .replace("} 1.5", "} 3.5")
            .replace("count{model_name=\"m\"} 10", "count{model_name=\"m\"} 20")
            .replace("} 100", "} 400");
        let (a, b) = (reading(a).unwrap(), reading(&b).unwrap());
        let s = between(&a, &b);
        assert_eq!(s.prefix, "vllm:");
        assert_eq!(s.ttft_mean, Some(0.2));
        assert_eq!(s.generation_tokens, 300.0);
        assert!(reading("other_metric 1\n").is_none());
    }
}
