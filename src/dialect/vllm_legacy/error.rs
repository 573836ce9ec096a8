//! The legacy server has no error envelope; lingo's is `{"error": "<message>"}`.

use bytes::BytesMut;
use serde_json::json;

use crate::error::ProxyError;
use crate::stream::framing::write_ndjson;

pub fn encode(err: &ProxyError) -> Vec<u8> {
    json!({"error": err.to_string()}).to_string().into_bytes()
}

/// A stream that already started ends with one error line.
pub fn write_stream_error(err: &ProxyError, out: &mut BytesMut) {
    write_ndjson(out, &encode(err));
}
