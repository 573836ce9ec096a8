//! lingo's own HTTP/1.1: client requests and upstream answers read in arbitrary splits, and
//! each side's encoder read back by the other.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lingo::fuzzing::http1(data));
