//! The canonical request: what to generate from, how to sample, and how to deliver it.

use serde_json::{Map, Value};

/// What the model continues: raw text, token ids, or chat messages.
///
/// Text and token prompts are lists so that one request can carry a batch; `Request::batched`
/// says whether the client sent a list (which decides the response shape), not the length.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(Vec<String>),
    Tokens(Vec<Vec<u32>>),
    Chat(Vec<Message>),
}

impl Prompt {
    /// How many prompts the request carries (a chat is one prompt).
    pub fn len(&self) -> usize {
        match self {
            Prompt::Text(t) => t.len(),
            Prompt::Tokens(t) => t.len(),
            Prompt::Chat(_) => 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// One chat message. `content` keeps the client's JSON (string or parts) so that a
/// chat-to-chat translation carries multimodal parts it does not need to understand.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Value,
}

/// Sampling parameters. `None` means "the client did not say"; the decoding dialect fills in
/// its own defaults where they matter (max tokens always), so encoders see explicit values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sampling {
    pub max_tokens: Option<u32>,
    pub min_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub n: u32,
    pub seed: Option<u64>,
    pub skip_special_tokens: Option<bool>,
    pub spaces_between_special_tokens: Option<bool>,
    /// Keep the matched stop string in the output.
    pub include_stop: bool,
    /// A JSON schema, as a JSON value (SGLang carries it as a string; decoders parse it).
    pub json_schema: Option<Value>,
    pub regex: Option<String>,
    pub ebnf: Option<String>,
    /// Regular expressions that stop generation (SGLang `stop_regex`).
    pub stop_regex: Vec<String>,
    pub logit_bias: Option<Map<String, Value>>,
    /// Fields the client's dialect filled in with its own server's default (llama.cpp's
    /// `min_p: 0.05`, ...): the client did not ask for them, so an upstream that cannot take
    /// one gets the request without it instead of a refusal.
    pub implicit: Vec<&'static str>,
}

impl Sampling {
    /// Drop `field` if the client's dialect, not the client, set it. Returns whether it did.
    pub fn forget_implicit(&mut self, field: &str) -> bool {
        let Some(i) = self.implicit.iter().position(|f| *f == field) else {
            return false;
        };
        self.implicit.swap_remove(i);
        match field {
            "temperature" => self.temperature = None,
            "top_p" => self.top_p = None,
            "top_k" => self.top_k = None,
            "min_p" => self.min_p = None,
            _ => return false,
        }
        true
    }
}

/// The canonical request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The model the client named (after alias resolution by the proxy).
    pub model: Option<String>,
    pub prompt: Prompt,
    /// Whether the client sent a list of prompts (the response is then a list too).
    pub batched: bool,
    pub sampling: Sampling,
    pub stream: bool,
    /// Number of top alternatives per position when logprobs are wanted; `None` = no logprobs.
    pub logprobs: Option<u32>,
    /// Client-supplied request id, when the dialect has one.
    pub request_id: Option<String>,
    /// Ask for token usage inside the stream (OpenAI `stream_options.include_usage`).
    pub stream_usage: bool,
    /// Fill token text into logprob entries (SGLang `return_text_in_logprobs`).
    pub logprob_text: bool,
    /// The client wants each prompt's text in front of its outputs (vLLM's legacy server
    /// always does this; TGI `return_full_text`). The client's encoder adds it from `Ctx`;
    /// upstreams are never asked.
    pub echo: bool,
    /// Return per-token details with the result (TGI `details`).
    pub details: bool,
    /// The last chat message is an assistant turn to continue rather than answer (Anthropic
    /// prefill; vLLM's `continue_final_message`).
    pub continue_final: bool,
    /// Fields the decoder did not interpret. Encoders of the same family may forward them.
    pub extra: Map<String, Value>,
}

impl Request {
    pub fn new(prompt: Prompt) -> Request {
        Request {
            model: None,
            prompt,
            batched: false,
            sampling: Sampling {
                n: 1,
                ..Sampling::default()
            },
            stream: false,
            logprobs: None,
            request_id: None,
            stream_usage: false,
            logprob_text: false,
            echo: false,
            details: false,
            continue_final: false,
            extra: Map::new(),
        }
    }

    /// Number of choices the response carries: prompts times samples.
    pub fn choice_count(&self) -> usize {
        self.prompt.len() * self.sampling.n.max(1) as usize
    }
}
