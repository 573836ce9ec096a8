//! SGLang's auxiliary endpoints: model and server info, cache flush (dialects.md 1.6).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::mock::state::MockState;

/// The SGLang release the mock claims to be.
pub(crate) const VERSION: &str = "0.5.4";

/// `GET /get_model_info` and `/model_info`; SGLang's own warm-up polls this until it is 200.
pub(crate) async fn model_info(State(state): State<Arc<MockState>>) -> Json<Value> {
    let model = &state.model();
    Json(json!({
        "model_path": model,
        "tokenizer_path": model,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": "default",
        "has_image_understanding": false,
        "has_audio_understanding": false,
    }))
}

/// `GET /get_server_info` and `/server_info`: a few server args, scheduler state and version.
/// Streaming is cumulative, which translators detect from the two stream-mode keys.
pub(crate) async fn server_info(State(state): State<Arc<MockState>>) -> Json<Value> {
    let cfg = &state.config;
    Json(json!({
        "model_path": state.model(),
        "tokenizer_path": state.model(),
        "served_model_name": state.model(),
        "context_length": cfg.max_model_len,
        "stream_interval": cfg.tokens_per_chunk.max(1),
        "incremental_streaming_output": false,
        "stream_output": false,
        "skip_tokenizer_init": false,
        "tp_size": 1,
        "dp_size": 1,
        "random_seed": cfg.eos_seed,
        "internal_states": [{"last_gen_throughput": 0.0}],
        "version": VERSION,
    }))
}

/// `GET`/`POST /flush_cache`.
pub(crate) async fn flush_cache(State(state): State<Arc<MockState>>) -> &'static str {
    state.cache_flushed();
    "Cache flushed.\n"
}
