//! SGLang's error shapes.

use bytes::BytesMut;
use serde_json::json;

use crate::error::ProxyError;
use crate::stream::framing::write_sse;

pub fn encode(err: &ProxyError) -> Vec<u8> {
    let v = match err {
        // FastAPI's request validation answers with the flat ErrorResponse.
        ProxyError::InvalidRequest { field, .. } => json!({
            "object": "error", "message": err.to_string(), "type": "Bad Request",
            "param": field, "code": 400,
        }),
        _ => json!({"error": {"message": err.to_string()}}),
    };
    v.to_string().into_bytes()
}

pub fn write_stream_error(err: &ProxyError, out: &mut BytesMut) {
    let v = json!({"error": {"message": err.to_string()}});
    write_sse(out, v.to_string().as_bytes());
    write_sse(out, b"[DONE]");
}
