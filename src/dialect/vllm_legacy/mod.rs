//! vLLM's legacy demo server (`vllm.entrypoints.api_server`), `POST /generate`
//! (dialects.md 2.6).
//!
//! Quirks handled here:
//! - The body is `{"prompt": str, "stream": bool}` plus any vLLM `SamplingParams` field at the
//!   top level, passed verbatim to `SamplingParams(**kwargs)`; `max_tokens` defaults to 16.
//! - The real server answers a bare 500 ("Internal Server Error", from a Python `TypeError` or
//!   `KeyError`) for an unknown key or a missing prompt; lingo answers 400 naming the key.
//! - The prompt is one string: there are no token-id prompts (the server asserts a text
//!   prompt) and no batches.
//! - The answer is `{"text": [prompt + output_0, prompt + output_1, ...]}`, one entry per `n`,
//!   the **prompt included**: lingo writes it from the client's own request (`Request::echo`).
//! - Streams are newline-delimited JSON, every line the whole object again with cumulative text
//!   (prompt + text so far); no SSE, no `[DONE]`, the end is the connection closing. (vLLM
//!   <= 0.6.3 separated lines with NUL; the framing parser reads both, lingo writes `\n`.) The
//!   real server sets no content type on streams; lingo says `application/json`.
//! - No model, token counts or finish reasons anywhere. `logprobs` and `prompt_logprobs` are
//!   accepted and have no effect, as on the real server, whose answer has no place for them.
//! - No error envelope: the real server's errors are FastAPI's plain-text 500. lingo answers
//!   `{"error": "<message>"}` with its own status (400 for a bad request) and, after a stream
//!   started, ends with one `{"error": "<message>"}` line where the real server would drop the
//!   connection.
//! - As an upstream (what `lingo bench --dialect vllm-legacy` speaks): one text prompt, no
//!   logprobs. The stream decoder turns cumulative lines into deltas; since nothing says why
//!   generation ended, the connection closing is read as a plain stop (`Finish::Stop`). The
//!   answer repeats the prompt, which the decoders strip only when given it
//!   (`Decoder::with_prompt`, `decode_response_for`): `Dialect::stream_decoder` has no request.

pub mod error;
mod request;
mod response;
mod stream;

pub use request::{decode_request, encode_request, field_name};
pub use response::{decode_response, decode_response_for, encode_response};
pub use stream::{Decoder, StreamEncoder};

/// The real server's default `max_tokens` (vLLM `SamplingParams`).
pub const DEFAULT_MAX_TOKENS: u32 = 16;
