//! Whole-response decoders: every dialect's `decode_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lingo::fuzzing::response(data));
