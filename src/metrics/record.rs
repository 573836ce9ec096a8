//! What is known about one request while it is served.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a request ended; a closed set used as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    ClientError,
    UpstreamError,
    Timeout,
    /// The client went away before the response ended.
    Cancelled,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::ClientError,
        Outcome::UpstreamError,
        Outcome::Timeout,
        Outcome::Cancelled,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ClientError => "client_error",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Label values, each from a closed set (the model is already mapped to a known name or
/// `other`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels {
    pub dialect: &'static str,
    /// Shared (an `Arc`, not a `String`): a request's labels are copied into its record, its
    /// relabelling and its series lookup, and each copy is a reference count, not a malloc.
    pub upstream: Arc<str>,
    pub model: Arc<str>,
}

impl Labels {
    /// The same strings, by address alone: a quick `same` for values shared from one place.
    pub fn identical(&self, other: &Labels) -> bool {
        std::ptr::eq(self.dialect, other.dialect)
            && std::ptr::eq(&*self.upstream, &*other.upstream)
            && std::ptr::eq(&*self.model, &*other.model)
    }

    /// Equal, by pointer first: label values are shared (the endpoint's group, the model
    /// registry's names), so the per-token check that a record's series still fits its
    /// labels is three pointer comparisons, where comparing the strings was three `memcmp`
    /// calls a token.
    pub fn same(&self, other: &Labels) -> bool {
        let str_same = |a: &str, b: &str| std::ptr::eq(a, b) || a == b;
        str_same(self.dialect, other.dialect)
            && str_same(&self.upstream, &other.upstream)
            && str_same(&self.model, &other.model)
    }
}

#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub labels: Labels,
    pub started: Instant,
    /// The client's `x-request-id`, kept only when there is a request log to write it.
    pub request_id: Option<String>,
    /// The model as the client named it (the label may be `other`; the log keeps the name).
    pub model: Option<String>,
    pub stream: bool,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    /// The last piece after the first token that carried no counted token: where tokens the
    /// upstream counted only in its final usage arrived (vLLM's finish chunk holds the last
    /// token, whose text may be empty).
    pub last_event: Option<Instant>,
    pub tokens: u64,
    /// `None` while unknown: a request that ends before anyone counted its prompt records no
    /// count rather than a false 0.
    pub prompt_tokens: Option<u64>,
    pub estimated: bool,
    /// The request ended before its response did (the client left): the counts are what was
    /// known by then.
    pub partial: bool,
    /// The response body is being metered, so `tokens` counts what has left so far (before
    /// that, a request that ends knows nothing of its output).
    pub counting: bool,
    pub finish: Option<&'static str>,
    pub outcome: Outcome,
    pub error_kind: Option<&'static str>,
    pub upstream_headers: Option<Duration>,
    /// Time spent waiting on the upstream (headers plus body reads).
    pub upstream_wait: Duration,
    pub ended: Option<Instant>,
    /// This request's series, looked up when it opens and when its labels change
    /// (`OpenRecord`) rather than hashed out of the label set at every use.
    pub series: Option<std::sync::Arc<super::Series>>,
    /// The client key's name and budget, when `[auth]` is on.
    pub key: Option<crate::auth::ClientKey>,
    /// The output cap the client asked for (whatever its dialect calls it), if any.
    pub max_tokens: Option<u64>,
    /// The conversation the client said this request belongs to (`x-session-id`, else the
    /// OpenAI `user` field), at most `MAX_SESSION` bytes; for replaying sessions in order.
    pub session: Option<String>,
}

/// Longest session key logged, in bytes (a longer one is cut at a character boundary).
pub const MAX_SESSION: usize = 128;

/// A client-supplied session key as logged: trimmed, bounded, `None` when empty.
pub fn session_key(s: &str) -> Option<String> {
    let s = s.trim();
    let mut end = s.len().min(MAX_SESSION);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (end > 0).then(|| s[..end].to_string())
}

impl RequestRecord {
    pub fn new(labels: Labels, started: Instant) -> RequestRecord {
        RequestRecord {
            labels,
            started,
            request_id: None,
            model: None,
            stream: false,
            first_token: None,
            last_token: None,
            last_event: None,
            tokens: 0,
            prompt_tokens: None,
            estimated: false,
            partial: false,
            counting: false,
            finish: None,
            outcome: Outcome::Ok,
            error_kind: None,
            upstream_headers: None,
            upstream_wait: Duration::ZERO,
            ended: None,
            series: None,
            key: None,
            max_tokens: None,
            session: None,
        }
    }

    /// Take the OpenAI `user` field as the session, unless a header already gave one.
    pub fn session_from_user(&mut self, user: Option<&str>) {
        if self.session.is_none() {
            self.session = user.and_then(session_key);
        }
    }

    /// The client key's name (a closed set, from the key file), or `none` without auth.
    pub fn key_label(&self) -> &str {
        self.key.as_ref().map_or("none", |k| k.name())
    }

    /// Charge the tokens counted so far (prompt and generated) to the key's budget.
    pub fn charge_key(&mut self) {
        let total = self.prompt_tokens.unwrap_or(0) + self.tokens;
        if let Some(k) = &mut self.key {
            k.charge_up_to(total);
        }
    }

    /// Output tokens, when known: always once the request ended normally; for a partial
    /// record, only if its response had started to leave.
    pub fn completion_tokens(&self) -> Option<u64> {
        (!self.partial || self.counting).then_some(self.tokens)
    }

    pub fn finish_label(&self) -> &'static str {
        self.finish.unwrap_or("none")
    }

    pub fn ttft(&self) -> Option<f64> {
        self.first_token.map(|t| (t - self.started).as_secs_f64())
    }

    pub fn e2e(&self) -> Option<f64> {
        self.last_token.map(|t| (t - self.started).as_secs_f64())
    }

    /// (E2E - TTFT) / (N - 1), only for N > 1.
    pub fn tpot(&self) -> Option<f64> {
        match (self.first_token, self.last_token) {
            (Some(f), Some(l)) if self.tokens > 1 => {
                Some((l - f).as_secs_f64() / (self.tokens - 1) as f64)
            }
            _ => None,
        }
    }

    /// Total time minus time waiting on the upstream.
    pub fn overhead(&self) -> Option<f64> {
        let total = self.ended? - self.started;
        Some(total.saturating_sub(self.upstream_wait).as_secs_f64())
    }
}
