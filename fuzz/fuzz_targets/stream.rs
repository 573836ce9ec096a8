//! Upstream stream decoders behind the SSE/NDJSON frame parser, fed in arbitrary splits.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lingo::fuzzing::stream(data));
