//! Hugging Face TGI's native `POST /generate` and `POST /generate_stream`.
//!
//! Quirks handled here:
//! - The route is the stream flag: `/generate_stream` streams, `/generate` does not (TGI's
//!   compat route `/` has a body `stream` flag, which the decoder reads too).
//! - No `model`: `parameters.adapter_id` names a LoRA adapter and becomes the canonical model;
//!   nothing names the model when lingo sends to TGI (TGI serves one).
//! - `temperature` must be > 0 and `top_p` < 1: greedy is `do_sample: false` with neither.
//!   `do_sample` defaults to false when `parameters` is given and to true when it is omitted;
//!   a temperature, `top_k` or `top_p` implies sampling.
//! - `max_new_tokens`: an absent value means "until the context is full" on TGI 3 (100
//!   before). lingo cannot bound that without the model's tokenizer, so a TGI client that
//!   omits it gets [`DEFAULT_MAX_NEW_TOKENS`] (100, TGI's own former default), sent upstream
//!   explicitly; an explicit `null` is refused.
//! - Prompt tokens are only in the `x-prompt-tokens` header (whole responses) or the stream's
//!   final `details.input_length` (only with `details: true`, which lingo always asks for).
//! - Streams: `data:{json}` without a space, one token per event, the EOS token arrives as an
//!   event with `special: true` (counted, but no text), no `[DONE]`: the connection closes after
//!   the event carrying `generated_text`.
//! - TGI keeps a matched stop sequence in the text. A TGI client therefore asks for it to be
//!   kept (`include_stop`); when TGI is the upstream lingo does not trim it for other clients.
//! - Errors: `{"error","error_type"}`, 422 for validation; `/generate_stream` answers 200 and
//!   sends every error in-band.
//! - When an upstream chunk carries several tokens, the client stream gets one event per token
//!   if the token ids are known (each with its own text when the logprobs give the texts, else
//!   the chunk's text rides on the first event and the others carry `""`); without ids, one
//!   event carries the chunk's text.

pub mod error;
pub mod request;
pub mod response;
pub mod stream;

/// `max_new_tokens` for a TGI client that gives none (see the module notes).
pub const DEFAULT_MAX_NEW_TOKENS: u32 = 100;
/// TGI's default `--max-stop-sequences`.
pub const MAX_STOP_SEQUENCES: usize = 4;
/// TGI's default `--max-top-n-tokens`.
pub const MAX_TOP_N_TOKENS: u32 = 5;
