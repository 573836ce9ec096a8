//! Ollama's error shape: `{"error":"msg"}`, and the same object as an NDJSON line mid-stream.

use bytes::BytesMut;
use serde_json::json;

use crate::error::ProxyError;

pub fn encode(err: &ProxyError) -> Vec<u8> {
    json!({"error": err.to_string()}).to_string().into_bytes()
}

pub fn write_stream_error(err: &ProxyError, out: &mut BytesMut) {
    out.extend_from_slice(&encode(err));
    out.extend_from_slice(b"\n");
}
