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
    #[error("model not found: {0}")]
    ModelNotFound(String),
    /// The upstream answered with an error status before any output.
    #[error("{message}")]
    UpstreamStatus { status: u16, message: String },
    #[error("upstream unreachable: {0}")]
    UpstreamUnreachable(String),
    #[error("upstream timed out")]
    UpstreamTimeout,
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
            ProxyError::UpstreamStatus { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ProxyError::UpstreamUnreachable(_) | ProxyError::UpstreamProtocol(_) => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn source(&self) -> Source {
        match self {
            ProxyError::InvalidRequest { .. }
            | ProxyError::Unsupported { .. }
            | ProxyError::ModelNotFound(_) => Source::Client,
            ProxyError::UpstreamStatus { status, .. } if *status < 500 => Source::Client,
            ProxyError::Internal(_) => Source::Proxy,
            _ => Source::Upstream,
        }
    }

    /// A closed label for the `error_kind` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::InvalidRequest { .. } => "invalid_request",
            ProxyError::Unsupported { .. } => "unsupported",
            ProxyError::ModelNotFound(_) => "model_not_found",
            ProxyError::UpstreamStatus { .. } => "upstream_status",
            ProxyError::UpstreamUnreachable(_) => "upstream_unreachable",
            ProxyError::UpstreamTimeout => "upstream_timeout",
            ProxyError::UpstreamProtocol(_) => "upstream_protocol",
            ProxyError::Internal(_) => "internal",
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
pub fn decode_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ProxyError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        ProxyError::invalid(field, e.into_inner().to_string())
    })
}

/// Decode an already-parsed JSON value found at `prefix`, naming the full field path on
/// failure (for nested objects the outer decoder keeps untyped).
pub fn decode_value_at<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    prefix: &str,
) -> Result<T, ProxyError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            prefix.to_string()
        } else {
            format!("{prefix}.{path}")
        };
        ProxyError::invalid(field, e.into_inner().to_string())
    })
}
