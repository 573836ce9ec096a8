//! One label set's per-request series, resolved once and kept: `with_label_values` hashes the
//! labels and takes the vector's lock, and a request made a dozen such lookups. Each handle
//! is still made the first time it is used, as the lookup made it, so no series shows on
//! `/metrics` before it did.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus::{Histogram, IntCounter, IntGauge};

use super::{Labels, Outcome};

/// Label sets kept (each from closed sets; more than this many and the rest resolve their
/// handles per request, as before).
const MAX_SETS: usize = 1024;

/// The finish labels (`Finish::label`, or `none`) whose request counters are kept.
const FINISHES: [&str; 4] = ["none", "stop", "length", "abort"];

/// The series of one label set (dialect, upstream, model), each made at its first use.
#[derive(Default)]
pub struct Series {
    pub(super) labels: Labels,
    pub(super) in_flight: OnceLock<IntGauge>,
    /// `lingo_requests_total` by outcome and finish, for requests without a client key.
    requests: [[OnceLock<IntCounter>; FINISHES.len()]; Outcome::ALL.len()],
    pub(super) prompt_tokens: OnceLock<IntCounter>,
    pub(super) generation_tokens: OnceLock<IntCounter>,
    pub(super) estimated: OnceLock<IntCounter>,
    pub(super) ttft: OnceLock<Histogram>,
    pub(super) itl: OnceLock<Histogram>,
    pub(super) tpot: OnceLock<Histogram>,
    pub(super) e2e: OnceLock<Histogram>,
    pub(super) prompt_hist: OnceLock<Histogram>,
    pub(super) generation_hist: OnceLock<Histogram>,
    pub(super) upstream_headers: OnceLock<Histogram>,
    pub(super) overhead: OnceLock<Histogram>,
}

impl std::fmt::Debug for Series {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Series")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl Series {
    /// The request counter kept for this outcome and finish, when there is one (`key` is
    /// the client key's label: `none` without auth).
    pub(super) fn requests(
        &self,
        outcome: Outcome,
        finish: &str,
        key: &str,
    ) -> Option<&OnceLock<IntCounter>> {
        if key != "none" {
            return None;
        }
        let o = Outcome::ALL.iter().position(|o| *o == outcome)?;
        let f = FINISHES.iter().position(|f| *f == finish)?;
        Some(&self.requests[o][f])
    }
}

/// The label sets met so far and their series.
pub(super) struct SeriesCache {
    /// Unique in the process: a thread's memo (`MEMO`) answers only for the cache it came
    /// from, though another may later sit at the same address (tests make many).
    id: u64,
    sets: Mutex<HashMap<Labels, Arc<Series>, BuildHasherDefault<Fx>>>,
}

impl Default for SeriesCache {
    fn default() -> SeriesCache {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        SeriesCache {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            sets: Mutex::default(),
        }
    }
}

/// How many kept series each thread remembers: a request looks up two label sets (as it
/// opens, and once its endpoint is chosen), and one worker serves the same few again and
/// again.
const MEMO_LEN: usize = 2;

/// A remembered series, with the id of the cache it came from.
type Remembered = Option<(u64, Arc<Series>)>;

thread_local! {
    /// The kept series this thread was given last, newest first, with their cache's id. A
    /// hit is a few pointer comparisons, where the cache's lookup (its lock and a hash of
    /// three strings) cost about 280 instructions, twice a request. The series hold their
    /// labels, so the strings compared by pointer are alive and their addresses not reused.
    static MEMO: RefCell<[Remembered; MEMO_LEN]> =
        const { RefCell::new([None, None]) };
}

/// FxHash (rustc's own hasher), a word at a time: label values come from closed sets, not
/// from clients, so a keyed hash buys nothing, and SipHash cost a lookup 460 instructions.
#[derive(Default)]
struct Fx(u64);

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut word = [0; 8];
            word.copy_from_slice(w);
            self.add(u64::from_le_bytes(word));
        }
        for &b in words.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl SeriesCache {
    /// `labels`' series: the kept one, else a new one, kept while there is room.
    pub(super) fn get(&self, labels: &Labels) -> Arc<Series> {
        // `try_with`: a record may finish in a thread-local's destructor, after `MEMO`'s.
        MEMO.try_with(|memo| self.remembered(&mut memo.borrow_mut()[..], labels))
            .unwrap_or_else(|_| self.lookup(labels).0)
    }

    /// `get` through a thread's memo: the same strings by address first (label values are
    /// shared, so a worker's requests bring the same ones), then by content.
    fn remembered(&self, memo: &mut [Remembered], labels: &Labels) -> Arc<Series> {
        let ours = memo
            .iter()
            .flatten()
            .filter(|(id, _)| *id == self.id)
            .map(|(_, s)| s);
        let mut hit = ours.clone().find(|s| s.labels.identical(labels));
        if hit.is_none() {
            hit = ours.clone().find(|s| s.labels.same(labels));
        }
        if let Some(s) = hit {
            return s.clone();
        }
        let (s, kept) = self.lookup(labels);
        if kept {
            memo.rotate_right(1);
            memo[0] = Some((self.id, s.clone()));
        }
        s
    }

    /// The kept series, else a new one, kept while there is room; and whether it is kept.
    fn lookup(&self, labels: &Labels) -> (Arc<Series>, bool) {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = sets.get(labels) {
            return (s.clone(), true);
        }
        let s = Arc::new(Series {
            labels: labels.clone(),
            ..Series::default()
        });
        let kept = sets.len() < MAX_SETS;
        if kept {
            sets.insert(labels.clone(), s.clone());
        }
        (s, kept)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::{Metrics, OpenRecord, RequestRecord};
    use super::*;

    fn labels(model: &str) -> Labels {
        Labels {
            dialect: "openai_completions",
            upstream: "u".into(),
            model: model.into(),
        }
    }

    fn open(m: &Arc<Metrics>, model: &str) -> OpenRecord {
        OpenRecord::open(m.clone(), RequestRecord::new(labels(model), Instant::now()))
    }

    fn has(m: &Metrics, name: &str, model: &str) -> bool {
        let label = format!("model=\"{model}\"");
        m.render()
            .lines()
            .any(|l| l.starts_with(name) && l.contains(&label))
    }

    fn sets(m: &Metrics) -> usize {
        m.series.sets.lock().unwrap().len()
    }

    #[test]
    fn a_series_appears_at_its_first_use_and_is_resolved_once_per_label_set() {
        let m = Arc::new(Metrics::new());
        let rec = open(&m, "a");
        rec.finish();
        // Finished with no token and no estimate: neither series exists.
        assert!(has(&m, "lingo_requests_total", "a"));
        assert!(!has(&m, "lingo_time_to_first_token_seconds", "a"));
        assert!(!has(&m, "lingo_estimated_token_requests_total", "a"));
        let mut rec = open(&m, "a");
        m.observe_ttft(&rec, 0.5);
        rec.estimated = true;
        rec.finish();
        assert!(has(&m, "lingo_time_to_first_token_seconds_count", "a"));
        assert!(has(&m, "lingo_estimated_token_requests_total", "a"));
        let text = m.render();
        let ok = "model=\"a\",outcome=\"ok\",upstream=\"u\"} 2";
        assert!(text.contains(ok), "{text}");
        assert_eq!(sets(&m), 1);
        // A relabelled request counts under its new labels, whose series are kept apart.
        let mut rec = open(&m, "other");
        rec.relabel(labels("b"));
        rec.finish();
        assert_eq!(sets(&m), 3, "a, other and b");
        assert!(has(&m, "lingo_requests_total", "b"));
        assert!(!has(&m, "lingo_requests_total", "other"));
        assert!(m
            .render()
            .contains("lingo_requests_in_flight{upstream=\"u\"} 0"));
    }

    #[test]
    fn a_threads_memo_answers_only_for_its_own_registry() {
        let ok = |n: usize| format!("model=\"x\",outcome=\"ok\",upstream=\"u\"}} {n}");
        let (a, b) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
        for _ in 0..3 {
            open(&a, "x").finish();
        }
        open(&b, "x").finish();
        assert!(a.render().contains(&ok(3)));
        assert!(b.render().contains(&ok(1)));
        // A registry made after one is dropped (perhaps at its address) starts from nothing.
        drop(a);
        let c = Arc::new(Metrics::new());
        open(&c, "x").finish();
        assert!(c.render().contains(&ok(1)), "{}", c.render());
        // Three label sets in turn, more than the memo holds: each still counts as its own.
        for model in ["x", "y", "z", "x"] {
            open(&c, model).finish();
        }
        assert!(c.render().contains(&ok(3)));
    }

    #[test]
    fn label_sets_past_the_bound_are_counted_all_the_same() {
        let m = Arc::new(Metrics::new());
        for i in 0..MAX_SETS + 5 {
            open(&m, &format!("m{i}")).finish();
        }
        assert_eq!(sets(&m), MAX_SETS);
        open(&m, &format!("m{}", MAX_SETS + 4)).finish();
        let last = format!(
            "model=\"m{}\",outcome=\"ok\",upstream=\"u\"}} 2",
            MAX_SETS + 4
        );
        assert!(m.render().contains(&last));
    }
}
