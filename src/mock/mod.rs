//! The simulated inference server (`lingo mock`).
