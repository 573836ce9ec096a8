//! The canonical vocabulary every dialect decodes into and encodes from.
//!
//! Nothing here knows about any wire format: a dialect module turns its JSON into these types
//! and back. Adding a dialect never touches this module unless the concept itself is new.

mod event;
mod request;
mod response;
mod tally;

pub use event::{Chunk, Event, Ids, MAX_CHOICES};
pub use request::{Message, Prompt, Request, Role, Sampling};
pub use response::{Choice, Finish, Response, TokenLogprob, Usage};
pub use tally::{ChunkCounts, Tally};
