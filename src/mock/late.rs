//! How late the mock's first tokens leave: the write of a stream's first token against the
//! time it was due (arrival plus TTFT plus prefill and queueing).
//!
//! Why: a load driver's TTFT is checked against the mock's known TTFT, and on a machine the
//! driver shares with the mock, the mock's own lateness (its timer fired on time, but its task
//! waited for a core, then the write) is in that difference too. `/mock/stats` reports it, so a
//! check can tell the driver's error from the mock's; `?late_last=N` over the last N streams
//! only (a measured level after its warmup). The write is the connection's first after the
//! token was due: exact for HTTP/1.1, one stream at a time per connection (as load drivers and
//! lingo's own client use the mock); on a connection carrying several streams at once
//! (HTTP/2) it may be another stream's.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// The most recent first tokens kept (4 bytes each: bounded whatever the traffic).
const KEPT: usize = 8192;

/// The lateness of the most recent first tokens, in microseconds, oldest first.
#[derive(Default)]
pub(crate) struct Lateness(Mutex<VecDeque<u32>>);

/// Their summary, in microseconds (nearest-rank quantiles).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Late {
    /// First tokens summarised (whose write was seen).
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl Lateness {
    pub(crate) fn record(&self, late: Duration) {
        let us = u32::try_from(late.as_micros()).unwrap_or(u32::MAX);
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(us);
    }

    /// Over the last `last` first tokens (all that are kept when `None`).
    pub(crate) fn summary(&self, last: Option<usize>) -> Late {
        let mut us: Vec<u32> = {
            let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let skip = kept.len().saturating_sub(last.unwrap_or(KEPT));
            kept.iter().skip(skip).copied().collect()
        };
        us.sort_unstable();
        let rank = |q: f64| {
            let i = ((q * us.len() as f64).ceil() as usize).clamp(1, us.len()) - 1;
            u64::from(us[i])
        };
        match us.last() {
            None => Late::default(),
            Some(max) => Late {
                count: us.len() as u64,
                p50_us: rank(0.5),
                p99_us: rank(0.99),
                max_us: u64::from(*max),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_all_kept_or_of_the_last_ones() {
        let l = Lateness::default();
        assert_eq!(l.summary(None), Late::default());
        for us in (0..98).map(|_| 5).chain([300, 20_000]) {
            l.record(Duration::from_micros(us));
        }
        let s = l.summary(None);
        assert_eq!(
            (s.count, s.p50_us, s.p99_us, s.max_us),
            (100, 5, 300, 20_000)
        );
        let s = l.summary(Some(2));
        assert_eq!((s.count, s.p50_us, s.max_us), (2, 300, 20_000));
        // Bounded: the oldest go first.
        for _ in 0..KEPT {
            l.record(Duration::from_micros(1));
        }
        assert_eq!(
            l.summary(None),
            Late {
                count: KEPT as u64,
                p50_us: 1,
                p99_us: 1,
                max_us: 1
            }
        );
        l.record(Duration::from_secs(u64::MAX));
        assert_eq!(l.summary(Some(1)).max_us, u64::from(u32::MAX));
    }
}
