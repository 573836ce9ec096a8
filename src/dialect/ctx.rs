//! What an encoder needs to know about the client's request to shape its answer.

use std::time::Instant;

use crate::model::{Prompt, Request};

/// Facts about the client request that survive translation and shape the client's response.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The id lingo reports to the client (its own, or the client's `rid`).
    pub id: String,
    /// The model name the client used (an alias stays an alias).
    pub model: String,
    /// Unix seconds, for OpenAI's `created`.
    pub created: u64,
    pub started: Instant,
    pub batched: bool,
    pub n: u32,
    pub prompts: usize,
    pub logprobs: Option<u32>,
    /// SGLang `return_text_in_logprobs`.
    pub logprob_text: bool,
    /// The client asked for usage in the stream.
    pub stream_usage: bool,
    /// TGI `details`: per-token details and the finish reason with the result.
    pub details: bool,
    /// Each prompt's text, when the client wants it in front of the outputs (`Request::echo`;
    /// TGI `return_full_text` uses the first).
    pub echo: Vec<String>,
    /// The seed the client asked for (TGI reports it back).
    pub seed: Option<u64>,
    /// Each prompt's length, when the client sent token ids (so lingo knows it before the
    /// upstream says); empty otherwise.
    pub prompt_lens: Vec<u64>,
}

impl Ctx {
    pub fn new(req: &Request, id: String, model: String) -> Ctx {
        Ctx {
            id,
            model,
            created: unix_now(),
            started: Instant::now(),
            batched: req.batched,
            n: req.sampling.n.max(1),
            prompts: req.prompt.len(),
            logprobs: req.logprobs,
            logprob_text: req.logprob_text,
            stream_usage: req.stream_usage,
            details: req.details,
            echo: match (&req.prompt, req.echo) {
                (Prompt::Text(texts), true) => texts.clone(),
                _ => Vec::new(),
            },
            seed: req.sampling.seed,
            prompt_lens: match &req.prompt {
                Prompt::Tokens(ids) => ids.iter().map(|p| p.len() as u64).collect(),
                _ => Vec::new(),
            },
        }
    }

    /// The request's prompt tokens, when known from the request itself (each prompt once,
    /// however many samples it gets).
    pub fn prompt_tokens(&self) -> Option<u64> {
        (!self.prompt_lens.is_empty()).then(|| self.prompt_lens.iter().sum())
    }

    /// The prompt length behind choice `index` (choices run prompt by prompt, `n` each), when
    /// known from the request.
    pub fn choice_prompt(&self, index: u32) -> Option<u64> {
        let prompt = index / self.n.max(1);
        self.prompt_lens.get(prompt as usize).copied()
    }

    /// Whether the client expects a list of results rather than one.
    pub fn is_multi(&self) -> bool {
        self.batched || self.n > 1
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh random hex id (32 chars), as SGLang's `uuid4().hex`.
pub fn random_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
