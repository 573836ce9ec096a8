//! lingo: an LLM-serving compatibility proxy, load driver and simulated inference server.

pub mod auth;
pub mod bench;
mod blocks;
pub mod config;
pub mod dialect;
pub mod error;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod gathered;
pub mod metrics;
pub mod mock;
pub mod model;
pub mod netstamp;
pub mod proxy;
pub mod shard;
pub mod stream;
pub mod top;
pub mod upstream;
