//! Probing the upstream at start: which kind it is and which models it serves.

use serde::Deserialize;

use super::{Client, Kind};

#[derive(Debug, Clone, Deserialize)]
pub struct ModelCard {
    pub id: String,
    #[serde(default)]
    pub owned_by: Option<String>,
    #[serde(default)]
    pub max_model_len: Option<u64>,
}

impl ModelCard {
    /// A card known only by its name (a configured model no endpoint has listed yet).
    pub fn named(id: &str) -> ModelCard {
        ModelCard {
            id: id.to_string(),
            owned_by: None,
            max_model_len: None,
        }
    }
}

/// The fields of TGI's `/info` that tell it apart.
#[derive(Debug, Deserialize)]
struct TgiInfo {
    model_id: String,
    max_total_tokens: u64,
}

/// TGI's model, if the upstream answers `/info` as TGI does.
async fn tgi_info(client: &Client) -> Option<ModelCard> {
    let resp = client.get("/info").await.ok()?;
    if !resp.status.is_success() {
        return None;
    }
    let body = resp.bytes().await.ok()?;
    let info: TgiInfo = serde_json::from_slice(&body).ok()?;
    (info.max_total_tokens > 0).then_some(ModelCard {
        id: info.model_id,
        owned_by: None,
        max_model_len: Some(info.max_total_tokens),
    })
}

#[derive(Debug, Deserialize)]
struct ModelList {
    data: Vec<ModelCard>,
}

/// The upstream's `/v1/models` (TGI releases without it: its `/info`), or `None` when it
/// answers neither.
pub async fn list_models(client: &Client) -> Option<Vec<ModelCard>> {
    match openai_models(client).await {
        Some(list) => Some(list),
        None => tgi_info(client).await.map(|card| vec![card]),
    }
}

async fn openai_models(client: &Client) -> Option<Vec<ModelCard>> {
    let resp = client.get("/v1/models").await.ok()?;
    if !resp.status.is_success() {
        return None;
    }
    let body = resp.bytes().await.ok()?;
    serde_json::from_slice::<ModelList>(&body)
        .ok()
        .map(|l| l.data)
}

/// Whether `GET path` answers 200 with a JSON object holding one of `keys`.
async fn answers_with(client: &Client, path: &str, keys: &[&str]) -> bool {
    let Ok(resp) = client.get(path).await else {
        return false;
    };
    if !resp.status.is_success() {
        return false;
    }
    let Ok(body) = resp.bytes().await else {
        return false;
    };
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .is_some_and(|v| keys.iter().any(|k| v.get(k).is_some()))
}

/// Probe the upstream: SGLang answers `/get_model_info`; TGI answers `/info` with its
/// `model_id` and router limits; llama.cpp `/props` (with its generation settings or model
/// path); Ollama `/api/version`; vLLM lists models `owned_by: vllm`. Anything else that lists
/// models is a plain OpenAI-compatible server, sent only standard fields. `None` if nothing
/// answered.
pub async fn detect_kind(client: &Client) -> Option<(Kind, String)> {
    if let Ok(resp) = client.get("/get_model_info").await {
        if resp.status.is_success() {
            return Some((Kind::Sglang, "GET /get_model_info answered".into()));
        }
    }
    if let Some(card) = tgi_info(client).await {
        let why = format!("GET /info answered for TGI model {:?}", card.id);
        return Some((Kind::Tgi, why));
    }
    let props = ["default_generation_settings", "model_path"];
    if answers_with(client, "/props", &props).await {
        return Some((Kind::Llamacpp, "GET /props answered".into()));
    }
    if answers_with(client, "/api/version", &["version"]).await {
        return Some((Kind::Ollama, "GET /api/version answered".into()));
    }
    let models = openai_models(client).await?;
    let owner = models
        .first()
        .and_then(|m| m.owned_by.clone())
        .unwrap_or_default();
    let why = format!("GET /v1/models says owned_by {owner:?}");
    Some(match owner.as_str() {
        "sglang" => (Kind::Sglang, why),
        "llamacpp" => (Kind::Llamacpp, why),
        "vllm" => (Kind::Vllm, why),
        _ => (Kind::Openai, why),
    })
}
