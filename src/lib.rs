//! lingo: an LLM-serving compatibility proxy, load driver and simulated inference server.

pub mod error;
pub mod mock;
pub mod dialect;
pub mod model;
pub mod stream;
