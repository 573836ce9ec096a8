//! llama.cpp's `timings` from the mock's own clock.

use serde_json::{json, Value};
use tokio::time::Instant;

/// When a request started and when its first token went out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub start: Instant,
    pub first: Option<Instant>,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
            first: None,
        }
    }

    pub fn mark_first(&mut self) {
        self.first.get_or_insert_with(Instant::now);
    }

    /// `{cache_n, prompt_n, prompt_ms, ..., predicted_per_second}`; the prompt phase ends at the
    /// first token (or now, for a whole answer).
    pub fn timings(&self, prompt_n: u64, predicted_n: u64) -> Value {
        let now = Instant::now();
        let first = self.first.unwrap_or(now);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        let prompt_ms = ms(first - self.start);
        let predicted_ms = ms(now - first);
        let per_token = |ms: f64, n: u64| if n > 0 { ms / n as f64 } else { 0.0 };
        let per_second = |ms: f64, n: u64| {
            if ms > 0.0 {
                n as f64 * 1000.0 / ms
            } else {
                0.0
            }
        };
        json!({
            "cache_n": 0,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": per_token(prompt_ms, prompt_n),
            "prompt_per_second": per_second(prompt_ms, prompt_n),
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": per_token(predicted_ms, predicted_n),
            "predicted_per_second": per_second(predicted_ms, predicted_n),
        })
    }
}
