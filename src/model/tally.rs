//! Token accounting over a stream: the upstream's counts where it gives them, else a count.

use super::{Chunk, Event, Usage};

/// What the tally and the stream's finish read of a chunk: the chunk's own, or a
/// passthrough event's read for them alone (`StreamDecoder::counts`), with no chunk built.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkCounts {
    pub index: u32,
    pub tokens: Option<u32>,
    pub usage: Option<Usage>,
    /// The chunk has text (an empty one may still be a token: see `Tally::observe_chunk`).
    pub has_text: bool,
    /// The finish's label (`Finish::label`).
    pub finish: Option<&'static str>,
}

impl ChunkCounts {
    pub fn of(c: &Chunk) -> ChunkCounts {
        ChunkCounts {
            index: c.index,
            tokens: c.tokens,
            usage: c.usage,
            has_text: !c.text.is_empty(),
            finish: c.finish.as_ref().map(|f| f.label()),
        }
    }
}

/// Accumulates what a stream says about tokens, per choice and in total.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    totals: Option<Usage>,
    per_choice: Vec<ChoiceTally>,
    /// Some chunk's token count had to be guessed (one per non-empty text chunk).
    estimated: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct ChoiceTally {
    usage: Option<Usage>,
    counted: u64,
}

impl Tally {
    /// Account for one event; returns how many new output tokens it carried.
    pub fn observe(&mut self, ev: &Event) -> u32 {
        match ev {
            Event::Usage(u) => {
                self.totals = Some(*u);
                0
            }
            Event::Chunk(c) => self.observe_chunk(&ChunkCounts::of(c)),
            _ => 0,
        }
    }

    /// Account for one chunk by its counts; returns how many new output tokens it carried.
    pub fn observe_chunk(&mut self, c: &ChunkCounts) -> u32 {
        // The guess is decided before the choice's slot is borrowed, so the slot is found
        // once (twice, it was about 40 instructions a chunk, one a streamed token).
        let guess = u64::from(c.has_text || c.finish.is_none());
        self.estimated |= c.tokens.is_none() && c.usage.is_none() && guess > 0;
        let slot = self.slot(c.index);
        let new = match (c.tokens, c.usage) {
            (Some(n), _) => u64::from(n),
            // A cumulative count: whatever it adds to what is known so far (which
            // may have been guessed chunk by chunk; the count corrects it).
            (None, Some(u)) => u.completion_tokens.saturating_sub(slot.counted),
            // No count: one token a chunk, the guess servers' streams bear out,
            // with or without text (vLLM sends a token whose bytes are not yet a
            // whole character, and reasoning or tool-call deltas, as an empty text).
            // Only an empty chunk that carries the finish is none: llama.cpp sends
            // the finish apart from the last token.
            (None, None) => guess,
        };
        slot.counted = slot.counted.saturating_add(new);
        if let Some(u) = c.usage {
            slot.counted = slot.counted.max(u.completion_tokens);
            slot.usage = Some(u);
        }
        u32::try_from(new).unwrap_or(u32::MAX)
    }

    #[inline]
    fn slot(&mut self, index: u32) -> &mut ChoiceTally {
        let i = index as usize;
        if self.per_choice.len() <= i {
            self.grow(i + 1);
        }
        &mut self.per_choice[i]
    }

    /// Room for `n` choices: once a stream, per choice, so out of `slot`'s way.
    #[cold]
    fn grow(&mut self, n: usize) {
        self.per_choice.resize(n, ChoiceTally::default());
    }

    /// Output tokens of one choice so far.
    pub fn choice_tokens(&self, index: u32) -> u64 {
        self.per_choice
            .get(index as usize)
            .map(|c| {
                c.usage
                    .or(self.sole_totals())
                    .map_or(c.counted, |u| u.completion_tokens.max(c.counted))
            })
            .unwrap_or(0)
    }

    /// The request's totals when they are one choice's (an upstream that reports usage only
    /// for the whole request, at the end).
    fn sole_totals(&self) -> Option<Usage> {
        self.totals.filter(|_| self.per_choice.len() == 1)
    }

    /// Prompt tokens of one choice, when the upstream said.
    pub fn choice_prompt(&self, index: u32) -> Option<u64> {
        self.per_choice
            .get(index as usize)
            .and_then(|c| c.usage)
            .map(|u| u.prompt_tokens)
            .or(self.totals.map(|u| u.prompt_tokens))
    }

    pub fn choice_cached(&self, index: u32) -> Option<u64> {
        self.per_choice
            .get(index as usize)
            .and_then(|c| c.usage.or(self.sole_totals()))
            .and_then(|u| u.cached_tokens)
    }

    /// Totals for the request and whether they were estimated rather than reported.
    pub fn totals(&self) -> (Usage, bool) {
        if let Some(u) = self.totals {
            return (u, false);
        }
        let mut sum = Usage::default();
        let mut all_reported = !self.per_choice.is_empty();
        for c in &self.per_choice {
            match c.usage {
                Some(u) => sum.add(&u),
                None => {
                    all_reported = false;
                    sum.completion_tokens = sum.completion_tokens.saturating_add(c.counted);
                }
            }
        }
        (sum, !all_reported && self.estimated)
    }

    /// What is known before the end: the prompt tokens the upstream has reported so far (if
    /// any), and whether the output count so far is a guess.
    pub fn so_far(&self) -> (Option<u64>, bool) {
        let (usage, estimated) = self.totals();
        (
            self.has_reported_usage().then_some(usage.prompt_tokens),
            estimated,
        )
    }

    /// Whether any usage was reported (so prompt tokens are known).
    pub fn has_reported_usage(&self) -> bool {
        self.totals.is_some() || self.per_choice.iter().any(|c| c.usage.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Chunk;

    fn chunk(index: u32, text: &str, tokens: Option<u32>, usage: Option<(u64, u64)>) -> Event {
        Event::Chunk(Chunk {
            index,
            text: text.into(),
            tokens,
            usage: usage.map(|(p, c)| Usage {
                prompt_tokens: p,
                completion_tokens: c,
                cached_tokens: None,
            }),
            ..Chunk::default()
        })
    }

    #[test]
    fn cumulative_usage_gives_deltas() {
        let mut t = Tally::default();
        assert_eq!(t.observe(&chunk(0, "a", None, Some((5, 2)))), 2);
        assert_eq!(t.observe(&chunk(0, "b", None, Some((5, 5)))), 3);
        assert_eq!(t.choice_tokens(0), 5);
        assert_eq!(
            t.totals(),
            (
                Usage {
                    prompt_tokens: 5,
                    completion_tokens: 5,
                    cached_tokens: None
                },
                false
            )
        );
    }

    #[test]
    fn counts_only_at_the_end_replace_the_guesses() {
        // llama.cpp completions and Ollama streams: text chunks without counts, then the
        // final chunk with the cumulative count.
        let mut t = Tally::default();
        assert_eq!(t.observe(&chunk(0, "a", None, None)), 1);
        assert_eq!(t.observe(&chunk(0, "b", None, None)), 1);
        assert_eq!(t.observe(&chunk(0, "", None, Some((4, 5)))), 3);
        assert_eq!(t.choice_tokens(0), 5);
        assert_eq!(
            t.totals(),
            (
                Usage {
                    prompt_tokens: 4,
                    completion_tokens: 5,
                    cached_tokens: None
                },
                false
            )
        );
    }

    #[test]
    fn no_counts_means_estimate() {
        let mut t = Tally::default();
        t.observe(&chunk(0, "a", None, None));
        t.observe(&chunk(1, "b", None, None));
        let (u, estimated) = t.totals();
        assert_eq!(u.completion_tokens, 2);
        assert!(estimated);
    }

    #[test]
    fn an_empty_chunk_is_a_token_unless_it_only_carries_the_finish() {
        // vLLM: a token whose bytes end inside a character comes as an empty text; its
        // ITL observation would otherwise be merged into the next token's.
        let mut t = Tally::default();
        assert_eq!(t.observe(&chunk(0, "a", None, None)), 1);
        assert_eq!(t.observe(&chunk(0, "", None, None)), 1);
        // llama.cpp: the finish in a chunk of its own, after the last token.
        let mut last = chunk(0, "", None, None);
        if let Event::Chunk(c) = &mut last {
            c.finish = Some(crate::model::Finish::Length);
        }
        assert_eq!(t.observe(&last), 0);
        assert_eq!(t.choice_tokens(0), 2);
    }

    #[test]
    fn a_late_count_corrects_chunk_guesses() {
        // llama.cpp: no per-chunk counts, then usage on the last chunk.
        let mut t = Tally::default();
        for _ in 0..5 {
            assert_eq!(t.observe(&chunk(0, "x", None, None)), 1);
        }
        assert_eq!(t.observe(&chunk(0, "", None, Some((6, 5)))), 0);
        assert_eq!(t.choice_tokens(0), 5);
        assert_eq!(
            t.totals(),
            (
                Usage {
                    prompt_tokens: 6,
                    completion_tokens: 5,
                    cached_tokens: None
                },
                false
            )
        );
        // A count above the guesses adds the difference.
        let mut t = Tally::default();
        t.observe(&chunk(0, "xy", None, None));
        assert_eq!(t.observe(&chunk(0, "", None, Some((1, 4)))), 3);
    }

    #[test]
    fn explicit_totals_win() {
        let mut t = Tally::default();
        t.observe(&chunk(0, "a", Some(3), None));
        t.observe(&Event::Usage(Usage {
            prompt_tokens: 9,
            completion_tokens: 4,
            cached_tokens: Some(1),
        }));
        assert_eq!(t.totals().0.completion_tokens, 4);
        // One choice: the request's totals are its own (a stop token the stream never
        // showed is still counted).
        assert_eq!(t.choice_tokens(0), 4);
        assert_eq!(t.choice_cached(0), Some(1));
    }
}
