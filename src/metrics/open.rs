//! A request's record while it is open: the guard that makes "exactly one record per request"
//! a property of ownership rather than of every code path remembering.
//!
//! Opening counts the request in flight; `finish` records it once; dropping it unfinished
//! (the handler future dropped because the client left, the response body dropped mid-stream,
//! a path that forgot) records it as `cancelled` and partial, with whatever counts were known.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Instant;

use super::{Labels, Metrics, Outcome, RequestRecord};

/// Told how the request ended, once, when its record is: an endpoint's in-flight count and
/// outcome ride on this, so they end with the response body too.
pub type OnEnd = Box<dyn FnOnce(Outcome) + Send>;

pub struct OpenRecord {
    /// Boxed: a record is a few hundred bytes and moves through the handler, the arrival's
    /// slot and the metered body by value; boxed, each move is a pointer, where each was a
    /// `memcpy` (ten a request, a sixth of a non-streaming request's copying).
    record: Box<RequestRecord>,
    metrics: Arc<Metrics>,
    done: bool,
    on_end: Option<OnEnd>,
}

impl OpenRecord {
    /// Open a record: from now on the request is in flight until this ends, one way or another.
    pub fn open(metrics: Arc<Metrics>, record: RequestRecord) -> OpenRecord {
        let mut record = Box::new(record);
        record.series = metrics.request_started(&record.labels);
        OpenRecord {
            record,
            metrics,
            done: false,
            on_end: None,
        }
    }

    /// Run `f` with the outcome when the record ends (finished or dropped). A second hook
    /// replaces the first, which runs at once as cancelled (its attempt was abandoned).
    pub fn on_end(&mut self, f: OnEnd) {
        if let Some(old) = self.on_end.replace(f) {
            old(Outcome::Cancelled);
        }
    }

    /// Take the end hook back without running it (its attempt is being ended apart).
    pub fn take_on_end(&mut self) -> Option<OnEnd> {
        self.on_end.take()
    }

    /// Give the request its final labels once the model is known; what was counted under the
    /// old ones (in flight, running) moves to the new.
    pub fn relabel(&mut self, labels: Labels) {
        self.record.series = self.metrics.request_relabelled(&self.record, &labels);
        self.record.labels = labels;
    }

    /// Record the request as it stands, once.
    pub fn finish(mut self) {
        self.done = true;
        self.record.ended.get_or_insert_with(Instant::now);
        self.metrics.request_finished(&self.record);
        if let Some(f) = self.on_end.take() {
            f(self.record.outcome);
        }
    }
}

impl Deref for OpenRecord {
    type Target = RequestRecord;
    fn deref(&self) -> &RequestRecord {
        &self.record
    }
}

impl DerefMut for OpenRecord {
    fn deref_mut(&mut self) -> &mut RequestRecord {
        &mut self.record
    }
}

impl Drop for OpenRecord {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let r = &mut self.record;
        r.outcome = Outcome::Cancelled;
        r.error_kind = None;
        r.partial = true;
        r.ended = Some(Instant::now());
        // What was counted before the client left was spent all the same.
        r.charge_key();
        self.metrics.request_finished(r);
        if let Some(f) = self.on_end.take() {
            f(Outcome::Cancelled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(model: &str) -> Labels {
        Labels {
            dialect: "sglang",
            upstream: "u".into(),
            model: model.into(),
        }
    }

    fn requests(m: &Metrics, outcome: &str) -> f64 {
        let line = format!("outcome=\"{outcome}\"");
        m.render()
            .lines()
            .filter(|l| l.starts_with("lingo_requests_total{") && l.contains(&line))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }

    fn in_flight(m: &Metrics) -> f64 {
        m.render()
            .lines()
            .filter(|l| l.starts_with("lingo_requests_in_flight{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }

    #[test]
    fn finished_records_once_and_dropped_records_cancelled() {
        let m = Arc::new(Metrics::new().with_vllm_compat());
        let rec = OpenRecord::open(
            m.clone(),
            RequestRecord::new(labels("other"), Instant::now()),
        );
        assert_eq!(in_flight(&m), 1.0);
        rec.finish();
        assert_eq!((requests(&m, "ok"), in_flight(&m)), (1.0, 0.0));

        let mut rec = OpenRecord::open(
            m.clone(),
            RequestRecord::new(labels("other"), Instant::now()),
        );
        rec.relabel(labels("m1"));
        rec.prompt_tokens = Some(7);
        drop(rec);
        assert_eq!((requests(&m, "cancelled"), in_flight(&m)), (1.0, 0.0));
        let text = m.render();
        assert!(
            text.contains(
                "lingo_prompt_tokens_total{dialect=\"sglang\",model=\"m1\",upstream=\"u\"} 7"
            ),
            "{text}"
        );
        // The vLLM running gauge moved with the label and came back to 0 under both.
        assert!(
            text.contains("vllm:num_requests_running{model_name=\"m1\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("vllm:num_requests_running{model_name=\"other\"} 0"),
            "{text}"
        );
    }
}
