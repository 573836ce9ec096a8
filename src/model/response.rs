//! The canonical non-streaming response.

/// Why generation of one choice ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// End-of-sequence token (its id when the upstream says).
    Eos(Option<u32>),
    /// A stop string matched.
    StopString(String),
    /// A stop token id matched.
    StopToken(u32),
    /// A stop without detail (the upstream did not say which kind).
    Stop,
    /// Max tokens (or context) reached.
    Length,
    /// Aborted by the server, with its message.
    Abort(String),
}

impl Finish {
    /// A closed label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Finish::Eos(_) | Finish::StopString(_) | Finish::StopToken(_) | Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort(_) => "abort",
        }
    }
}

/// Log probability of one sampled token, with its top alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: Option<String>,
    pub token_id: Option<u32>,
    pub logprob: f64,
    pub top: Vec<(Option<String>, Option<u32>, f64)>,
}

/// Token counts as the upstream reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: Option<u64>,
}

impl Usage {
    // Counts come from the upstream: saturate rather than overflow on absurd ones.
    pub fn total(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        if let Some(c) = other.cached_tokens {
            self.cached_tokens = Some(self.cached_tokens.unwrap_or(0).saturating_add(c));
        }
    }
}

/// One generated sequence.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Choice {
    /// Position in prompt-major order: prompt_index * n + sample.
    pub index: u32,
    pub text: String,
    pub token_ids: Option<Vec<u32>>,
    pub finish: Option<Finish>,
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// Per-choice counts, when the upstream reports them per choice.
    pub usage: Option<Usage>,
}

/// The canonical response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Response {
    pub id: String,
    pub model: String,
    pub choices: Vec<Choice>,
    /// Totals over all choices.
    pub usage: Option<Usage>,
}

impl Response {
    /// Derive request totals from per-choice counts when the upstream gave none; with `n`
    /// samples per prompt the prompt is counted once, as OpenAI's usage does.
    pub fn fill_usage(&mut self, n: u32) {
        if self.usage.is_some() {
            return;
        }
        let n = n.max(1);
        let mut total = Usage::default();
        for c in &self.choices {
            let Some(u) = c.usage else { continue };
            // Each prompt's counts once (its first choice), every choice's output.
            let prompt = match c.index % n {
                0 => u,
                _ => Usage::default(),
            };
            total.add(&Usage {
                completion_tokens: u.completion_tokens,
                ..prompt
            });
        }
        self.usage = Some(total);
    }
}
