//! Ollama's native `POST /api/generate` and `POST /api/chat`, both directions.
//!
//! Quirks handled here (dialects.md section 5):
//! - `stream` defaults to **true**: a request without it gets an NDJSON stream
//!   (`application/x-ndjson`, one object per line, the last with `"done": true`).
//! - `model` is required. `options.num_predict` defaults to -1 ("until EOS or the context is
//!   full"); lingo must send an explicit limit and the codec cannot know the upstream's
//!   context, so -1, -2 (fill the context) or no value becomes [`DEFAULT_NUM_PREDICT`].
//! - `/api/generate` applies the model's template unless `raw: true`: a templated prompt (with
//!   its `system`) is a chat of one user turn, so it goes to chat endpoints; a raw prompt goes
//!   to completion endpoints.
//! - Sampling defaults come from the model's Modelfile (typically temperature 0.8, top_k 40,
//!   top_p 0.9); unset options stay unset, so another upstream uses *its* model defaults, the
//!   closest equivalent. Towards an Ollama upstream the reverse holds: a canonical request
//!   without temperature/top_p/top_k means OpenAI's neutral 1.0/1.0/off, which lingo states
//!   explicitly, as Ollama's own OpenAI layer does for temperature and top_p.
//! - `done_reason` is `stop` or `length` (`load`/`unload` for model management); it does not
//!   say whether EOS or a stop string ended the text.
//! - The final object carries `prompt_eval_count`/`eval_count` and durations in
//!   **nanoseconds**; counts of 0 are omitted (Go `omitempty`). Durations in lingo's answers
//!   are lingo's own measurements (see `response::metrics`).
//! - `keep_alive` and the load-time `options` (`num_ctx`, `num_gpu`, `num_thread`, ...) are
//!   scheduling and hardware hints for Ollama's model loader: accepted and ignored, since the
//!   upstream's own configuration applies. `think`, `images`, `tools`, `suffix`, `template`,
//!   `context` and `logprobs` cannot be carried and are refused by name.
//! - Errors are `{"error":"msg"}`; after a stream started, an NDJSON `{"error":...}` line and
//!   the connection closes.

pub mod error;
mod options;
pub mod request;
pub mod response;
pub mod stream;

/// lingo's limit for `num_predict: -1` (or absent): enough for a full answer, small enough to
/// fit the context of most served models. Send `options.num_predict` to choose another.
pub const DEFAULT_NUM_PREDICT: u32 = 1024;

/// The Ollama API level lingo answers `GET /api/version` with when the upstream is not Ollama
/// (the release whose sources dialects.md was read from).
pub const API_VERSION: &str = "0.12.0";

/// How Ollama spells a canonical field, for error messages.
pub fn field_name(canonical: &str, chat: bool) -> String {
    match canonical {
        "max_tokens" => "options.num_predict".into(),
        "repetition_penalty" => "options.repeat_penalty".into(),
        "temperature" | "top_p" | "top_k" | "min_p" | "stop" | "seed" | "presence_penalty"
        | "frequency_penalty" => format!("options.{canonical}"),
        "json_schema" => "format".into(),
        "prompt" | "messages" if chat => "messages".into(),
        "prompt" | "messages" => "prompt".into(),
        other => other.into(),
    }
}

/// Ollama's `created_at`: RFC 3339 with nanoseconds, in UTC.
pub fn created_at() -> String {
    humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string()
}
