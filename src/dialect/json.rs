//! JSON from bytes, with the UTF-8 check done once per document.
//!
//! `serde_json::from_slice` checks every string (keys included) for UTF-8 on its own; a
//! stream event has a dozen of them, and a profile of a streaming passthrough put a tenth of
//! lingo's instructions in those checks. Checking the whole document once (fast on ASCII)
//! and reading it as a `str` gives the same answers, errors included.

use serde::Deserialize;

/// `serde_json::from_slice`, with one UTF-8 check for the whole document.
pub fn from_bytes<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        // Not UTF-8: let serde_json say where, as it would have.
        Err(_) => serde_json::from_slice(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_answers_as_from_slice() {
        let cases: [&[u8]; 5] = [
            br#"{"a":"x\u00e9","b":[1,2]}"#,
            "{\"a\":\"é\"}".as_bytes(),
            b"{\"a\":\"\xff\"}",
            b"{\"a\":",
            b"[1,2,3]",
        ];
        for c in cases {
            let want = serde_json::from_slice::<serde_json::Value>(c).map_err(|e| e.to_string());
            let got = from_bytes::<serde_json::Value>(c).map_err(|e| e.to_string());
            assert_eq!(got, want, "{c:?}");
        }
    }
}
