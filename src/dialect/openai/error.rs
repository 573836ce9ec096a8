//! OpenAI's error envelope, as vLLM >= 0.10.1 writes it.

use bytes::BytesMut;
use serde_json::{json, Value};

use crate::error::ProxyError;
use crate::stream::framing::write_sse;

fn error_type(err: &ProxyError) -> &'static str {
    match err.status().as_u16() {
        400 | 422 => "BadRequestError",
        401 => "AuthenticationError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        408 => "TimeoutError",
        413 => "RequestTooLargeError",
        429 => "RateLimitError",
        502..=504 => "ServiceUnavailableError",
        _ => "InternalServerError",
    }
}

pub fn error_json(err: &ProxyError) -> Value {
    json!({"error": {
        "message": err.to_string(),
        "type": error_type(err),
        "param": err.param(),
        "code": err.status().as_u16(),
    }})
}

pub fn encode(err: &ProxyError) -> Vec<u8> {
    error_json(err).to_string().into_bytes()
}

/// vLLM's in-band stream error: the error object, then `[DONE]`.
pub fn write_stream_error(err: &ProxyError, out: &mut BytesMut) {
    write_sse(out, error_json(err).to_string().as_bytes());
    write_sse(out, b"[DONE]");
}
