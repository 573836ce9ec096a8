//! The canonical stream: what one upstream frame means, independent of its framing.

use compact_str::CompactString;

use super::{Finish, TokenLogprob, Usage};

/// The most choices one stream may carry (prompts times `n`). Encoders and the tally keep
/// per-choice state indexed by the upstream's `index`, so an index from a hostile or broken
/// upstream (`4294967295`) must be refused before it sizes a vector (found by fuzzing).
pub const MAX_CHOICES: u32 = 16_384;

/// A chunk's token ids.
pub type Ids = smallvec::SmallVec<[u32; 4]>;

/// New output for one choice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chunk {
    pub index: u32,
    /// The new text only (decoders of cumulative streams compute the delta). Held inline
    /// up to 24 bytes (nearly every token's text): a stream decodes one chunk per token, and
    /// a `String` here was one malloc and free per event.
    pub text: CompactString,
    /// The new token ids, when the upstream sends them. Inline up to four (a stream sends
    /// one or a few an event, and a `Vec` here was a malloc and free per event).
    pub token_ids: Option<Ids>,
    /// How many tokens this chunk carries, when known (from ids or cumulative counts).
    pub tokens: Option<u32>,
    pub finish: Option<Finish>,
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// Cumulative counts for this choice, when the upstream reports them per chunk.
    pub usage: Option<Usage>,
}

/// One meaningful step of a stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The upstream named its response (id, model); carries no output.
    Start {
        id: String,
        model: String,
    },
    /// A chat stream's role-only opening: no output, and not the first token.
    Role {
        index: u32,
    },
    Chunk(Chunk),
    /// Totals for the whole request.
    Usage(Usage),
    /// The upstream failed after the stream had started.
    Error {
        message: String,
    },
    /// The upstream's end marker.
    Done,
}
