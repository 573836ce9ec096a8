//! OpenAI-style request bodies (vLLM and SGLang OpenAI routes), validated into a job.
//!
//! Unknown fields are accepted and ignored, as vLLM (`extra="allow"`) and SGLang do; `seed` and
//! the sampling knobs are accepted that way too, since output is deterministic anyway.

use serde::Deserialize;

use crate::mock::error::ApiError;
use crate::mock::generate::Params;
use crate::mock::prompt::{ChatTurn, Prompt};

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum StopInput {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Default)]
pub(crate) struct StreamOptions {
    pub include_usage: Option<bool>,
    pub continuous_usage_stats: Option<bool>,
}

/// Fields completions and chat share.
#[derive(Deserialize)]
pub(crate) struct Common {
    pub model: Option<String>,
    pub n: Option<u32>,
    pub min_tokens: Option<u32>,
    pub stop: Option<StopInput>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub ignore_eos: Option<bool>,
    pub include_stop_str_in_output: Option<bool>,
    /// SGLang's name for keeping the stop string.
    pub no_stop_trim: Option<bool>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub return_token_ids: Option<bool>,
}

#[derive(Deserialize)]
pub(crate) struct CompletionRequest {
    #[serde(flatten)]
    pub common: Common,
    pub prompt: PromptInput,
    pub max_tokens: Option<u32>,
    pub logprobs: Option<u32>,
    pub echo: Option<bool>,
}

#[derive(Deserialize)]
pub(crate) struct ChatRequest {
    #[serde(flatten)]
    pub common: Common,
    pub messages: Vec<ChatMessage>,
    pub max_completion_tokens: Option<u32>,
    pub max_tokens: Option<u32>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
}

#[derive(Deserialize)]
pub(crate) struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
pub(crate) struct Part {
    #[serde(default)]
    pub text: Option<String>,
}

impl PromptInput {
    pub fn into_prompts(self) -> Result<Vec<Prompt>, ApiError> {
        let prompts: Vec<Prompt> = match self {
            PromptInput::Text(text) => vec![Prompt::from_text(text)],
            PromptInput::Texts(texts) => texts.into_iter().map(Prompt::from_text).collect(),
            PromptInput::Ids(ids) => vec![Prompt::from_ids(ids)],
            PromptInput::IdLists(lists) => lists.into_iter().map(Prompt::from_ids).collect(),
        };
        if prompts.is_empty() {
            return Err(ApiError::bad_request("Prompt cannot be empty"));
        }
        Ok(prompts)
    }
}

/// The chat template over the messages' text parts (images and the like count nothing).
pub(crate) fn chat_prompt(messages: &[ChatMessage]) -> Prompt {
    let turns: Vec<ChatTurn<'_>> = messages
        .iter()
        .map(|m| ChatTurn {
            role: &m.role,
            texts: match &m.content {
                None => Vec::new(),
                Some(Content::Text(text)) => vec![text.as_str()],
                Some(Content::Parts(parts)) => {
                    parts.iter().filter_map(|p| p.text.as_deref()).collect()
                }
            },
        })
        .collect();
    Prompt::from_chat(&turns)
}

impl Common {
    /// Stopping rules; `max_tokens` is filled in by the caller once prompt lengths are known.
    pub fn params(&self) -> Params {
        let stop = match &self.stop {
            None => Vec::new(),
            Some(StopInput::One(s)) => vec![s.clone()],
            Some(StopInput::Many(list)) => list.clone(),
        };
        Params {
            max_tokens: 0,
            min_tokens: self.min_tokens.unwrap_or(0),
            ignore_eos: self.ignore_eos.unwrap_or(false),
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            stop_token_ids: self.stop_token_ids.clone().unwrap_or_default(),
            keep_stop: self.include_stop_str_in_output.unwrap_or(false)
                || self.no_stop_trim.unwrap_or(false),
        }
    }
}
