//! Fleets: many upstream endpoints behind one lingo (issue 10).

pub mod discovery;
