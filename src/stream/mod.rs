//! Streams: framing of upstream bytes, and the translating and observing pipelines.

pub mod framing;
pub mod pipeline;
pub mod timers;
