//! TGI's error shape: `{"error","error_type"}`, and its in-band stream form.

use bytes::BytesMut;
use http::StatusCode;
use serde_json::json;

use super::stream::write_event;
use crate::error::ProxyError;

/// TGI's `error_type` for an error.
fn error_type(err: &ProxyError) -> &'static str {
    match err {
        ProxyError::InvalidRequest { .. }
        | ProxyError::Unsupported { .. }
        | ProxyError::ModelNotFound(_)
        | ProxyError::TooLarge { .. } => "validation",
        ProxyError::UpstreamStatus { status: 429, .. }
        | ProxyError::RateLimited { .. }
        | ProxyError::Overloaded { .. }
        | ProxyError::ShuttingDown
        | ProxyError::NoHealthyEndpoint { .. } => "overloaded",
        ProxyError::Unauthorized(_) => "validation",
        ProxyError::UpstreamStatus { status, .. } if *status < 500 => "validation",
        ProxyError::UpstreamStatus { .. } | ProxyError::Internal(_) => "generation",
        ProxyError::UpstreamUnreachable(_)
        | ProxyError::UpstreamRefused(_)
        | ProxyError::UpstreamClosed
        | ProxyError::Timeout(_)
        | ProxyError::UpstreamProtocol(_) => "incomplete_generation",
    }
}

/// TGI answers validation errors with 422.
pub fn status(err: &ProxyError) -> StatusCode {
    match err {
        ProxyError::InvalidRequest { .. } | ProxyError::Unsupported { .. } => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        other => other.status(),
    }
}

fn body(err: &ProxyError) -> serde_json::Value {
    json!({"error": err.to_string(), "error_type": error_type(err)})
}

/// The error body of a whole response.
pub fn encode(err: &ProxyError) -> Vec<u8> {
    body(err).to_string().into_bytes()
}

/// The error event; TGI then closes the stream, so there is no terminator.
pub fn write_stream_error(err: &ProxyError, out: &mut BytesMut) {
    write_event(out, &body(err));
}
