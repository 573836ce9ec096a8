//! Fault modes: their names, the per-mode counters and which fault (if any) a request gets.
//!
//! Triggers, first match wins: the `x-mock-fault: <mode>` header; the word `lingo-fault:<mode>`
//! anywhere in the request body (in practice a prompt or a message); a `POST /mock/fault` armed
//! for the next N generation requests; `--fault <mode>` with `--fault-rate`. The body is
//! searched as bytes rather than parsed, so every dialect's prompt field works the same way.

use std::str::FromStr;
use std::time::Duration;

use http::HeaderMap;
use serde::{Deserialize, Serialize};

use super::state::MockState;

/// How an injected fault breaks a generation request (see the module docs of `mock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultMode {
    /// No response at all; the connection is held until the client closes it.
    HangBeforeHeaders,
    /// Status and headers, then no body byte until the client closes.
    HangAfterHeaders,
    /// Three tokens' events (half a whole answer), then silence.
    StallMidStream,
    /// Three tokens' events (half a whole answer), then the connection is cut.
    CloseMidStream,
    /// Two tokens, one event that is not JSON, then the rest of the stream.
    MalformedChunk,
    /// The connection is closed (reset where the listener allows) before any response byte.
    Reset,
    /// A 400 in the kind's error shape, `error_bytes` long.
    HugeError,
    /// `slow` between tokens.
    SlowTokens,
}

impl FaultMode {
    pub const ALL: [FaultMode; 8] = [
        FaultMode::HangBeforeHeaders,
        FaultMode::HangAfterHeaders,
        FaultMode::StallMidStream,
        FaultMode::CloseMidStream,
        FaultMode::MalformedChunk,
        FaultMode::Reset,
        FaultMode::HugeError,
        FaultMode::SlowTokens,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultMode::HangBeforeHeaders => "hang-before-headers",
            FaultMode::HangAfterHeaders => "hang-after-headers",
            FaultMode::StallMidStream => "stall-mid-stream",
            FaultMode::CloseMidStream => "close-mid-stream",
            FaultMode::MalformedChunk => "malformed-chunk",
            FaultMode::Reset => "reset",
            FaultMode::HugeError => "huge-error",
            FaultMode::SlowTokens => "slow-tokens",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for FaultMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FaultMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = FaultMode::ALL.iter().map(|m| m.as_str()).collect();
                format!(
                    "unknown fault mode `{s}` (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// Faults injected so far, per mode (the `faults` field of `/mock/stats`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", default)]
pub struct FaultCounts {
    pub hang_before_headers: u64,
    pub hang_after_headers: u64,
    pub stall_mid_stream: u64,
    pub close_mid_stream: u64,
    pub malformed_chunk: u64,
    pub reset: u64,
    pub huge_error: u64,
    pub slow_tokens: u64,
}

impl FaultCounts {
    pub(crate) fn from_slice(c: [u64; 8]) -> FaultCounts {
        FaultCounts {
            hang_before_headers: c[0],
            hang_after_headers: c[1],
            stall_mid_stream: c[2],
            close_mid_stream: c[3],
            malformed_chunk: c[4],
            reset: c[5],
            huge_error: c[6],
            slow_tokens: c[7],
        }
    }

    /// Faults of `mode` injected so far.
    pub fn get(&self, mode: FaultMode) -> u64 {
        let c = [
            self.hang_before_headers,
            self.hang_after_headers,
            self.stall_mid_stream,
            self.close_mid_stream,
            self.malformed_chunk,
            self.reset,
            self.huge_error,
            self.slow_tokens,
        ];
        c[mode.index()]
    }

    /// Faults of every mode.
    pub fn total(&self) -> u64 {
        FaultMode::ALL.iter().map(|m| self.get(*m)).sum()
    }
}

/// One request's fault, with its parameters resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fault {
    pub mode: FaultMode,
    /// Body size of `huge-error`.
    pub error_bytes: u64,
    /// Delay between tokens of `slow-tokens`.
    pub slow: Duration,
}

/// The word that triggers a fault from inside a prompt.
const WORD: &[u8] = b"lingo-fault:";

/// The fault a generation request gets, or the message of the 400 a bad trigger earns.
pub(crate) fn choose(
    state: &MockState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<Fault>, String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let mode = match header("x-mock-fault") {
        Some(name) => Some(name.trim().parse()?),
        None => match word(body) {
            Some(name) => Some(name.parse()?),
            None => state.take_armed_fault().or_else(|| state.scheduled_fault()),
        },
    };
    let Some(mode) = mode else {
        return Ok(None);
    };
    let cfg = &state.config;
    let error_bytes = match header("x-mock-fault-bytes") {
        Some(v) => v
            .trim()
            .parse()
            .map_err(|e| format!("x-mock-fault-bytes: {e}"))?,
        None => cfg.fault_error_bytes,
    };
    let slow = match header("x-mock-fault-ms") {
        Some(v) => Duration::from_millis(
            v.trim()
                .parse()
                .map_err(|e| format!("x-mock-fault-ms: {e}"))?,
        ),
        None => cfg.fault_slow,
    };
    Ok(Some(Fault {
        mode,
        error_bytes,
        slow,
    }))
}

/// The mode name after the first `lingo-fault:` in `body`.
fn word(body: &[u8]) -> Option<&str> {
    let at = body.windows(WORD.len()).position(|w| w == WORD)? + WORD.len();
    let rest = &body[at..];
    let len = rest
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-'))
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..len]).ok()
}

/// Whether request `ordinal` (1-based) gets the whole-mock fault at `rate`: spreads
/// `rate * n` faults evenly over the first `n` requests, so runs repeat exactly.
pub(crate) fn scheduled(ordinal: u64, rate: f64) -> bool {
    let rate = rate.clamp(0.0, 1.0);
    let due = |k: u64| (k as f64 * rate).floor();
    due(ordinal) > due(ordinal.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_is_found_in_json_and_ends_at_punctuation() {
        let body = br#"{"prompt":"hi lingo-fault:stall-mid-stream there"}"#;
        assert_eq!(word(body), Some("stall-mid-stream"));
        assert_eq!(word(br#"{"prompt":"lingo-fault:reset"}"#), Some("reset"));
        assert_eq!(word(b"no fault here"), None);
    }

    #[test]
    fn names_round_trip() {
        for m in FaultMode::ALL {
            assert_eq!(m.as_str().parse::<FaultMode>(), Ok(m));
            let json = serde_json::to_string(&m).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
        }
        assert!("nope".parse::<FaultMode>().is_err());
    }

    #[test]
    fn rate_spreads_faults_evenly() {
        let hits = |rate| (1..=100).filter(|k| scheduled(*k, rate)).count();
        assert_eq!(hits(1.0), 100);
        assert_eq!(hits(0.0), 0);
        assert_eq!(hits(0.25), 25);
        assert!(scheduled(4, 0.25) && !scheduled(3, 0.25));
    }

    #[test]
    fn counts_index_by_mode() {
        let c = FaultCounts::from_slice([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(c.get(FaultMode::Reset), 6);
        assert_eq!(c.get(FaultMode::SlowTokens), 8);
        assert_eq!(c.total(), 36);
    }
}
