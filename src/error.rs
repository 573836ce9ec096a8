//! The proxy's typed error, classified once: who failed, which status, which metric label.
//!
//! Dialect modules turn a `ProxyError` into their own error JSON; nothing else decides a
//! status code.

use http::StatusCode;

/// Who caused a failure; decides the outcome label and the log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Client,
    Upstream,
    Proxy,
}

/// Which phase's timer fired: a closed set, used in the `error_kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    Connect,
    ResponseHeaders,
    FirstToken,
    StreamIdle,
    Total,
    ClientBody,
}

impl Timer {
    pub fn key(self) -> &'static str {
        match self {
            Timer::Connect => "connect",
            Timer::ResponseHeaders => "response_headers",
            Timer::FirstToken => "first_token",
            Timer::StreamIdle => "stream_idle",
            Timer::Total => "total",
            Timer::ClientBody => "client_body",
        }
    }

    /// The `error_kind` label of this timer's expiry.
    pub fn kind(self) -> &'static str {
        match self {
            Timer::Connect => "timeout_connect",
            Timer::ResponseHeaders => "timeout_response_headers",
            Timer::FirstToken => "timeout_first_token",
            Timer::StreamIdle => "timeout_stream_idle",
            Timer::Total => "timeout_total",
            Timer::ClientBody => "timeout_client_body",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Timer::Connect => "timed out connecting to the upstream (timeouts.connect)",
            Timer::ResponseHeaders => {
                "the upstream timed out before answering (timeouts.response_headers)"
            }
            Timer::FirstToken => {
                "the upstream timed out before its first token (timeouts.first_token)"
            }
            Timer::StreamIdle => "the upstream timed out between chunks (timeouts.stream_idle)",
            Timer::Total => "the request timed out (timeouts.total)",
            Timer::ClientBody => "timed out reading the request body (timeouts.client_body)",
        }
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ProxyError {
    /// The body is not JSON, or a field has the wrong type or value.
    #[error("{message}")]
    InvalidRequest {
        field: Option<String>,
        message: String,
    },
    /// The request is valid but the upstream cannot honour this field faithfully.
    #[error("{field}: {reason}")]
    Unsupported { field: String, reason: String },
    /// The request body is over `limits.max_request_body`.
    #[error("the request body is larger than {limit} bytes (limits.max_request_body)")]
    TooLarge { limit: usize },
    #[error("model not found: {0}")]
    ModelNotFound(String),
    /// The upstream answered with an error status before any output.
    #[error("{message}")]
    UpstreamStatus { status: u16, message: String },
    #[error("upstream unreachable: {0}")]
    UpstreamUnreachable(String),
    /// No connection could be made (refused, unroutable): the request surely never reached
    /// the upstream, which failover relies on.
    #[error("upstream unreachable: {0}")]
    UpstreamRefused(String),
    /// The upstream's connection broke while its answer was being read.
    #[error("the upstream broke off its answer before the end")]
    UpstreamClosed,
    /// A timer of one phase fired (`timeouts.*`).
    #[error("{}", .0.message())]
    Timeout(Timer),
    /// The client sent no valid key (`[auth]`).
    #[error("{0}")]
    Unauthorized(String),
    /// A per-key limit (`auth.requests_per_minute`, `auth.tokens_per_minute`) is spent.
    #[error("rate limit reached: {what}; retry in {retry_after} s")]
    RateLimited {
        what: &'static str,
        retry_after: u64,
    },
    /// `limits.max_in_flight` requests are already in flight.
    #[error("lingo is at its limit of requests in flight; retry shortly")]
    Overloaded { status: u16, retry_after: u64 },
    /// Every endpoint of the request's pool is ejected or not yet known to work.
    #[error("no healthy endpoint in pool `{pool}`; retry in {retry_after} s")]
    NoHealthyEndpoint { pool: String, retry_after: u64 },
    /// lingo is draining for shutdown and this request ran out of grace.
    #[error("lingo is shutting down")]
    ShuttingDown,
    /// The upstream's answer could not be understood.
    #[error("bad upstream response: {0}")]
    UpstreamProtocol(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ProxyError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ProxyError {
        let field = field.into();
        let message = message.into();
        ProxyError::InvalidRequest {
            message: if field.is_empty() {
                message
            } else {
                format!("{field}: {message}")
            },
            field: Some(field).filter(|f| !f.is_empty()),
        }
    }

    pub fn unsupported(field: impl Into<String>, reason: impl Into<String>) -> ProxyError {
        ProxyError::Unsupported {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::InvalidRequest { .. } | ProxyError::Unsupported { .. } => {
                StatusCode::BAD_REQUEST
            }
            ProxyError::ModelNotFound(_) => StatusCode::NOT_FOUND,
            ProxyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::UpstreamStatus { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ProxyError::UpstreamUnreachable(_)
            | ProxyError::UpstreamRefused(_)
            | ProxyError::UpstreamClosed
            | ProxyError::UpstreamProtocol(_) => StatusCode::BAD_GATEWAY,
            ProxyError::Timeout(Timer::ClientBody) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ProxyError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::Overloaded { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
            }
            ProxyError::ShuttingDown | ProxyError::NoHealthyEndpoint { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn source(&self) -> Source {
        match self {
            ProxyError::InvalidRequest { .. }
            | ProxyError::Unsupported { .. }
            | ProxyError::ModelNotFound(_)
            | ProxyError::TooLarge { .. }
            | ProxyError::Unauthorized(_)
            | ProxyError::RateLimited { .. }
            | ProxyError::Timeout(Timer::ClientBody) => Source::Client,
            ProxyError::UpstreamStatus { status, .. } if *status < 500 => Source::Client,
            ProxyError::Internal(_) | ProxyError::Overloaded { .. } | ProxyError::ShuttingDown => {
                Source::Proxy
            }
            _ => Source::Upstream,
        }
    }

    /// A closed label for the `error_kind` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::InvalidRequest { .. } => "invalid_request",
            ProxyError::Unsupported { .. } => "unsupported",
            ProxyError::ModelNotFound(_) => "model_not_found",
            ProxyError::TooLarge { .. } => "request_too_large",
            ProxyError::UpstreamStatus { .. } => "upstream_status",
            ProxyError::UpstreamUnreachable(_) | ProxyError::UpstreamRefused(_) => {
                "upstream_unreachable"
            }
            ProxyError::UpstreamClosed => "upstream_closed",
            ProxyError::Timeout(t) => t.kind(),
            ProxyError::Unauthorized(_) => "unauthorized",
            ProxyError::RateLimited { .. } => "rate_limited",
            ProxyError::Overloaded { .. } => "overloaded",
            ProxyError::ShuttingDown => "shutting_down",
            ProxyError::NoHealthyEndpoint { .. } => "no_healthy_endpoint",
            ProxyError::UpstreamProtocol(_) => "upstream_protocol",
            ProxyError::Internal(_) => "internal",
        }
    }

    /// Seconds a client should wait before retrying (`Retry-After`), for refusals that pass.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ProxyError::RateLimited { retry_after, .. }
            | ProxyError::Overloaded { retry_after, .. }
            | ProxyError::NoHealthyEndpoint { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The field this error is about, for error shapes with a `param`.
    pub fn param(&self) -> Option<&str> {
        match self {
            ProxyError::InvalidRequest { field, .. } => field.as_deref(),
            ProxyError::Unsupported { field, .. } => Some(field),
            ProxyError::ModelNotFound(_) => Some("model"),
            _ => None,
        }
    }
}

/// Decode JSON into a wire struct, naming the offending field path on failure.
pub fn decode_json<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, ProxyError> {
    use serde_json::de::{SliceRead, StrRead};
    // One UTF-8 check for the whole body rather than one per string (`dialect::json`).
    match std::str::from_utf8(body) {
        Ok(text) => decode_from(|| StrRead::new(text), ""),
        Err(_) => decode_from(|| SliceRead::new(body), ""),
    }
}

/// Decode a JSON value found at `prefix`, kept as its text (`RawValue`) by the outer
/// decoder, naming the full field path on failure.
pub fn decode_raw_at<'a, T: serde::Deserialize<'a>>(
    raw: &'a serde_json::value::RawValue,
    prefix: &str,
) -> Result<T, ProxyError> {
    decode_from(|| serde_json::de::StrRead::new(raw.get()), prefix)
}

/// `decode_json` over a reader made by `read`: serde alone first, since tracking the path
/// costs allocations at every key; a body that fails is read again for its path (the same
/// bytes fail the same way), named under `prefix`.
fn decode_from<'a, R, T>(read: impl Fn() -> R, prefix: &str) -> Result<T, ProxyError>
where
    R: serde_json::de::Read<'a>,
    T: serde::Deserialize<'a>,
{
    if let Ok(value) = T::deserialize(&mut serde_json::Deserializer::new(read())) {
        return Ok(value);
    }
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::new(read())).map_err(|e| {
        let path = e.path().to_string();
        let field = match path.as_str() {
            "." => prefix.to_string(),
            p if prefix.is_empty() => p.to_string(),
            // A list's items are named `[i]`: no dot before them.
            p if p.starts_with('[') => format!("{prefix}{p}"),
            p => format!("{prefix}.{p}"),
        };
        ProxyError::invalid(field, user_words(&e.into_inner()))
    })
}

/// serde's message in the client's words: JSON's type names, never a Rust type (serde says
/// "expected struct Peek", "expected u32"). Syntax errors keep their position; a data error
/// is already placed by its field path.
fn user_words(e: &serde_json::Error) -> String {
    let full = e.to_string();
    if e.is_syntax() || e.is_eof() {
        return full;
    }
    let at = format!(" at line {} column {}", e.line(), e.column());
    let msg = full.strip_suffix(at.as_str()).unwrap_or(&full);
    if msg.starts_with("data did not match any variant of untagged enum") {
        return "is none of the accepted forms".into();
    }
    for lead in ["invalid type: ", "invalid value: "] {
        if let Some((got, want)) = msg
            .strip_prefix(lead)
            .and_then(|r| r.rsplit_once(", expected "))
        {
            return format!("expected {}, got {}", expected(want), unexpected(got));
        }
    }
    match msg.split_once(", expected ") {
        Some((head, want)) => format!("{head}, expected {}", expected(want)),
        None => msg.to_string(),
    }
}

/// What a serde visitor expected (`Visitor::expecting`), as a JSON type.
fn expected(want: &str) -> String {
    let word = match want {
        "u8" => "a non-negative integer (at most 255)",
        "u16" => "a non-negative integer (at most 65535)",
        "u32" => "a non-negative integer (at most 4294967295)",
        "u64" | "u128" | "usize" => "a non-negative integer",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer",
        "f32" | "f64" => "a number",
        "a map" | "map" => "a JSON object",
        "a sequence" => "an array",
        "a borrowed string" | "a string" => "a string",
        "char" | "a character" => "a single character",
        "option" => "a value or null",
        "unit" => "null",
        w if w.starts_with("struct ") || w.starts_with("struct variant ") => "a JSON object",
        w if w.starts_with("tuple") => "an array",
        w if w.starts_with("unit struct") => "null",
        w if w.starts_with("enum ") || w.starts_with("newtype") => "one of the accepted values",
        w => return w.to_string(),
    };
    word.to_string()
}

/// What serde found instead (`de::Unexpected`), as a JSON type.
fn unexpected(got: &str) -> String {
    match got {
        "map" => "an object".into(),
        "sequence" => "an array".into(),
        "unit value" | "unit" => "null".into(),
        g => match g.strip_prefix("floating point ") {
            Some(n) => format!("number {n}"),
            None => g.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Peek {
        stream: Option<bool>,
        n: Option<u32>,
        t: Option<f64>,
        stop: Option<Vec<String>>,
        prompt: Option<Either>,
        inner: Option<Inner>,
        kind: Option<Kind>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        k: i64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(untagged)]
    #[allow(dead_code)]
    enum Either {
        Text(String),
        Ids(Vec<u32>),
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        A,
    }

    fn message(body: &str) -> String {
        decode_json::<Peek>(body.as_bytes())
            .unwrap_err()
            .to_string()
    }

    const RUST_WORDS: [&str; 9] = [
        "struct", "enum", "Peek", "Inner", "Either", "u32", "i64", "f64", "sequence",
    ];

    #[test]
    fn serde_messages_speak_json() {
        let cases = [
            (r#""x""#, "expected a JSON object, got string \"x\""),
            (
                r#"{"stream": "yes"}"#,
                "stream: expected a boolean, got string \"yes\"",
            ),
            (
                r#"{"n": -1}"#,
                "n: expected a non-negative integer (at most 4294967295), got integer `-1`",
            ),
            (
                r#"{"n": 1.5}"#,
                "n: expected a non-negative integer (at most 4294967295), got number `1.5`",
            ),
            (
                r#"{"t": "hot"}"#,
                "t: expected a number, got string \"hot\"",
            ),
            (
                r#"{"stop": {"a": 1}}"#,
                "stop: expected an array, got an object",
            ),
            (
                r#"{"prompt": {"a": 1}}"#,
                "prompt: is none of the accepted forms",
            ),
            (
                r#"{"inner": 5}"#,
                "inner: expected a JSON object, got integer `5`",
            ),
            (
                r#"{"inner": {"k": "1"}}"#,
                "inner.k: expected an integer, got string \"1\"",
            ),
            (
                r#"{"kind": "b"}"#,
                "kind: unknown variant `b`, expected `a`",
            ),
        ];
        for (body, want) in cases {
            let got = message(body);
            assert_eq!(got, want, "for {body}");
            for word in RUST_WORDS {
                assert!(!got.contains(word), "`{got}` names `{word}`");
            }
        }
    }

    #[test]
    fn syntax_errors_keep_their_position() {
        let got = message(r#"{"n": "#);
        assert!(got.contains("line 1 column"), "{got}");
    }

    #[test]
    fn nested_values_keep_the_prefix_and_speak_json() {
        let raw = serde_json::value::RawValue::from_string(r#"{"k": null}"#.into()).unwrap();
        let e = decode_raw_at::<Inner>(&raw, "sampling_params").unwrap_err();
        assert_eq!(e.param(), Some("sampling_params.k"));
        assert_eq!(
            e.to_string(),
            "sampling_params.k: expected an integer, got null"
        );
    }
}
