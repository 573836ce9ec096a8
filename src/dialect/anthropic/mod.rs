//! Anthropic's Messages API, `POST /v1/messages` (dialects.md section 6).
//!
//! Quirks handled here:
//! - `model` and `max_tokens` are required (there is no default length); unknown top-level
//!   fields are a 400 naming the field, as Anthropic answers ("Extra inputs are not permitted").
//! - Roles are `user` and `assistant` only; the system prompt is the top-level `system` (a
//!   string or text blocks). A final assistant message is a prefill the model continues (sent
//!   upstream as vLLM's and SGLang's `continue_final_message`); the answer holds only the
//!   continuation.
//! - Only text content is translated. `image`, `document`, `tool_use`, `tool_result`,
//!   `thinking` and other blocks are refused with the path of the block's `type`
//!   (`messages[1].content[0].type`). `cache_control` on a text block is a caching hint:
//!   accepted and ignored, since vLLM and SGLang cache prompt prefixes on their own.
//! - `metadata` carries a `user_id` Anthropic uses for abuse tracking; nothing upstream has a
//!   use for it, so it is accepted and ignored. So are the fields that ask nothing of the
//!   generation: `service_tier`, `speed`, `inference_geo` (Anthropic capacity, speed mode and
//!   region), `user_profile_id`, `workspace_id` (account attribution), the top-level
//!   `cache_control` and `diagnostics` (the answer has no cache-miss report). `tools`,
//!   `tool_choice` (other than `none`), `thinking` (other than `disabled`), `output_config`,
//!   `container`, `mcp_servers` and `context_management` are refused by name.
//! - Current SDKs (2.x) no longer offer `temperature`, `top_p` and `top_k` as arguments; the
//!   API still takes them (clients send them through `extra_body`), and so does lingo.
//! - `temperature` is 0 to 1 here (OpenAI's is 0 to 2, same meaning at the same value), so
//!   larger values are a 400 as on Anthropic.
//! - `ignore_eos` is a lingo extension (vLLM's name), so that `lingo bench --dialect anthropic`
//!   gets exact output lengths through lingo; Anthropic itself rejects the field.
//! - `usage.input_tokens` excludes prompt tokens read from cache, which Anthropic reports as
//!   `cache_read_input_tokens`: lingo puts the upstream's cached count there when it has one.
//!   It never reports `cache_creation_input_tokens` (upstream caching is automatic).
//! - `stop_reason` (dialects.md 8.3): EOS or a stop token ⇒ `end_turn`; a stop string ⇒
//!   `stop_sequence` with the string in `stop_sequence`; length ⇒ `max_tokens`.
//! - Streams are named SSE events. `message_start` carries `usage.input_tokens`, which lingo
//!   learns from the upstream's first chunk (the OpenAI encoder asks vLLM and SGLang for
//!   `continuous_usage_stats`, a cumulative `usage` on every chunk): `message_start`,
//!   `content_block_start` and `ping` are written together with the first upstream chunk, so
//!   no output waits. `content_block_stop` follows the finish; `message_delta` (stop reason,
//!   cumulative `output_tokens`, and `input_tokens` again) and `message_stop` follow the
//!   upstream's end marker, when its usage totals are in.
//! - Errors are `{"type":"error","error":{"type","message"}}` with Anthropic's status table
//!   (503 becomes 529 `overloaded_error`); after a stream started, an `event: error` and
//!   nothing more.
//! - As an upstream (what `lingo bench` speaks; no upstream kind uses it yet): chat prompts
//!   only; `n > 1`, seeds, logprobs, penalties, `min_p`, min tokens, stop token ids and
//!   structured output are refused, since the Messages API has none of them.

mod encode;
pub mod error;
mod events;
mod request;
mod response;
mod stream;

pub use encode::encode_request;
pub use events::Decoder;
pub use request::{decode_request, field_name};
pub use response::{decode_response, encode_response};
pub use stream::StreamEncoder;
