//! llama.cpp's error envelope: `{"error":{"code":<status>,"message","type"}}`.

use bytes::BytesMut;
use serde_json::{json, Value};

use crate::error::ProxyError;
use crate::stream::framing::write_sse;

/// llama.cpp's `type` for a status (server-common's `format_error_response`).
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        501 => "not_supported_error",
        503 => "unavailable_error",
        _ => "server_error",
    }
}

pub fn error_json(err: &ProxyError) -> Value {
    let code = err.status().as_u16();
    json!({"error": {"code": code, "message": err.to_string(), "type": error_type(code)}})
}

pub fn encode(err: &ProxyError) -> Vec<u8> {
    error_json(err).to_string().into_bytes()
}

/// Recent llama-server builds send the error object as a `data:` event, then close.
pub fn write_stream_error(err: &ProxyError, out: &mut BytesMut) {
    write_sse(out, error_json(err).to_string().as_bytes());
}
