//! `POST /v1/chat/completions`: chat messages in, an assistant message (or deltas) out.

mod logprobs;
mod request;
mod response;
mod stream;

pub use logprobs::logprobs_from_value;
pub use request::{decode_request, encode_request};
pub use response::{decode_response, encode_response};
pub use stream::StreamEncoder;
