//! Anthropic's error envelope and status table (dialects.md 6 and 8.4).

use bytes::BytesMut;
use http::StatusCode;
use serde_json::{json, Value};

use crate::error::ProxyError;
use crate::stream::framing::write_sse_event;

/// The status an Anthropic client gets: validation is 400, an overloaded upstream (503) is
/// Anthropic's 529, other server-side failures are 500 except a timeout (504).
pub fn status(err: &ProxyError) -> StatusCode {
    let code = match err.status().as_u16() {
        422 => 400,
        503 => 529,
        s @ (400..=499 | 500 | 504) => s,
        _ => 500,
    };
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

pub fn error_json(err: &ProxyError) -> Value {
    json!({"type": "error", "error": {
        "type": error_type(status(err).as_u16()),
        "message": err.to_string(),
    }})
}

pub fn encode(err: &ProxyError) -> Vec<u8> {
    error_json(err).to_string().into_bytes()
}

/// The in-band error of a stream that already started: `event: error`, and nothing after.
pub fn write_stream_error(err: &ProxyError, out: &mut BytesMut) {
    write_sse_event(out, "error", error_json(err).to_string().as_bytes());
}
