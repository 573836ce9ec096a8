//! `POST /v1/completions`: raw prompts (text or token ids), delta streams.

mod logprobs;
mod request;
mod response;
mod stream;

pub use request::{decode_request, encode_request};
pub(crate) use response::decode_by_serde;
pub use response::{decode_response, encode_response};
pub use stream::StreamEncoder;

/// Read completions logprobs from a raw JSON value (stream chunks keep them untyped).
pub fn logprobs_from_value(
    v: serde_json::Value,
    ids: Option<&[u32]>,
) -> Vec<crate::model::TokenLogprob> {
    // llama.cpp answers completions with chat-shaped logprobs (`content`).
    if v.get("content").is_some() {
        return crate::dialect::openai::chat::logprobs_from_value(v, ids);
    }
    serde_json::from_value::<logprobs::LogprobsWire>(v)
        .map(|w| logprobs::from_wire(w, ids))
        .unwrap_or_default()
}
