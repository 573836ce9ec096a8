//! SGLang's native `POST /generate`.
//!
//! Quirks handled here:
//! - No `model` field: the proxy fills it from config or the upstream's model list.
//! - Streams carry the **cumulative** text (and, on current releases, cumulative `output_ids`)
//!   with the running `meta_info.completion_tokens`; `bench_serving.py` assigns
//!   `generated_text = data["text"]`, so a client must get the whole text in every chunk.
//! - Unknown `sampling_params` keys are rejected by SGLang; unknown top-level keys ignored.
//! - Batch (`text` list, `input_ids` list of lists) and `n > 1` answer a JSON array,
//!   prompt-major, and batch streams tag each chunk with `index`.
//! - Validation errors use the flat `{"object":"error",...}` shape, generation errors
//!   `{"error":{"message"}}`; after a stream started, the error is a `data:` event.

pub mod error;
mod forms;
mod logprobs;
pub mod request;
pub mod response;
pub mod stream;

/// SGLang's default `max_new_tokens`.
pub const DEFAULT_MAX_NEW_TOKENS: u32 = 128;
