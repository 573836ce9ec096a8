//! llama.cpp's native `POST /completion` (alias `/completions`), both directions.
//!
//! Quirks handled here (dialects.md section 4, checked against a real llama-server):
//! - `n_predict` defaults to -1, "until EOS or the context is full". lingo must send every
//!   upstream an explicit limit and the codec cannot know the upstream's context, so -1 (or no
//!   `n_predict`) becomes [`DEFAULT_N_PREDICT`]; other negative values are refused.
//! - `stop` is a JSON array only (llama.cpp silently ignores a bare string; lingo refuses it so
//!   the client learns its stop was not applied).
//! - Sampling defaults differ from OpenAI's: a request without them gets llama-server's own
//!   defaults made explicit (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05), so another
//!   upstream samples the way the client's llama-server would have. `temperature <= 0` is
//!   greedy; `top_k <= 0` is "off" (canonical -1).
//! - `tokens_evaluated` is the whole prompt; `timings.cache_n` the part served from the prompt
//!   cache (`tokens_cached` counts prompt *and* output held in the slot, so it is not usage).
//! - The stream ends with a `"stop": true` event carrying counts and timings, and no `[DONE]`:
//!   the connection closes. Partial events carry `tokens` (ids) and running
//!   `tokens_predicted`.
//! - Older builds used booleans `stopped_eos`/`stopped_word`/`stopped_limit` instead of
//!   `stop_type`; both are read.
//! - Errors are `{"error":{"code":<status>,"message","type"}}`; mid-stream the same object in a
//!   `data:` event, then the connection closes.
//! - `model` is ignored (llama-server serves one model and echoes its alias); lingo fills the
//!   upstream's default model.

pub mod error;
pub mod request;
pub mod response;
pub mod stream;

/// lingo's limit for `n_predict: -1` (or absent): enough for a full answer, small enough to fit
/// the context of most served models. Send `n_predict` to choose another.
pub const DEFAULT_N_PREDICT: u32 = 1024;

/// llama-server's sampling defaults (`GET /props` → `default_generation_settings.params`).
pub const DEFAULT_TEMPERATURE: f64 = 0.8;
pub const DEFAULT_TOP_K: i64 = 40;
pub const DEFAULT_TOP_P: f64 = 0.95;
pub const DEFAULT_MIN_P: f64 = 0.05;
