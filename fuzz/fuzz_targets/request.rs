//! Client request decoders: every dialect's `decode_request` and `/generate` body sniffing.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lingo::fuzzing::request(data));
