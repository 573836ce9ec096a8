//! Timing one streamed answer from its canonical events, by lingo's metric definitions:
//! TTFT at the first chunk carrying a generated token (a chat role-only opening does not
//! count), E2E at the last chunk carrying content or the finish reason, ITL token-weighted
//! (a chunk of k tokens after a gap g adds k gaps of g/k), tokens from the server's counts.

use std::time::{Duration, Instant};

use super::conversation::MAX_ANSWER;
use super::report::{ErrorKind, RequestResult};
use crate::model::{Event, Finish, Tally};

/// Accumulates the measurements of one request while its events arrive.
#[derive(Debug)]
pub struct Meter {
    t0: Instant,
    first: Option<Instant>,
    /// Arrival of the last chunk that carried tokens: the start of the next ITL gap.
    last_token: Option<Instant>,
    /// Arrival of the last chunk that carried content or a finish reason: the end of E2E.
    last_content: Option<Instant>,
    itl: Vec<f64>,
    tally: Tally,
    finished: bool,
    error: Option<(ErrorKind, String)>,
    /// The answer's text so far, when it is kept (multi-turn), at most `MAX_ANSWER` bytes.
    answer: Option<String>,
    /// How long the body's bytes waited in the socket before the driver read them, summed
    /// over `reads` (only where the kernel stamps them).
    lag: Duration,
    reads: u32,
    /// The lag of the last stamped read: how long the answer's end waited for the driver.
    last_lag: Option<Duration>,
}

impl Meter {
    /// Start measuring a request sent at `t0`; `expected_tokens` sizes the ITL buffer once.
    pub fn new(t0: Instant, expected_tokens: u32) -> Meter {
        Meter {
            t0,
            first: None,
            last_token: None,
            last_content: None,
            itl: Vec::with_capacity(expected_tokens as usize),
            tally: Tally::default(),
            finished: false,
            error: None,
            answer: None,
            lag: Duration::ZERO,
            reads: 0,
            last_lag: None,
        }
    }

    /// One read found bytes that had arrived `lag` earlier.
    pub fn lagged(&mut self, lag: Duration) {
        self.lag += lag;
        self.reads += 1;
        self.last_lag = Some(lag);
    }

    /// How long the last stamped read had waited: after the final one, the time the driver
    /// still took to see the end of an answer the server had finished sending.
    pub fn end_lag(&self) -> Option<Duration> {
        self.last_lag
    }

    /// The mean of `lagged`, if any read was stamped.
    pub fn read_lag(&self) -> Option<Duration> {
        (self.reads > 0).then(|| self.lag / self.reads)
    }

    /// Keep the answer's text (for a conversation's next turn).
    pub fn keep_answer(mut self) -> Meter {
        self.answer = Some(String::new());
        self
    }

    /// Account for one event that arrived at `at`.
    pub fn event(&mut self, ev: &Event, at: Instant) {
        let new = self.tally.observe(ev);
        match ev {
            Event::Chunk(c) => {
                if let Some(a) = &mut self.answer {
                    if a.len() + c.text.len() <= MAX_ANSWER {
                        a.push_str(&c.text);
                    }
                }
                let content = new > 0 || !c.text.is_empty();
                if content {
                    match (self.first, self.last_token) {
                        (None, _) => self.first = Some(at),
                        (Some(_), Some(prev)) if new > 0 => {
                            let per = at.duration_since(prev).as_secs_f64() / f64::from(new);
                            self.itl.extend(std::iter::repeat_n(per, new as usize));
                        }
                        _ => {}
                    }
                    if new > 0 || self.last_token.is_none() {
                        self.last_token = Some(at);
                    }
                }
                if content || c.finish.is_some() {
                    self.last_content = Some(at);
                }
                match &c.finish {
                    Some(Finish::Abort(msg)) => {
                        self.fail(ErrorKind::Abort, format!("aborted by the server: {msg}"))
                    }
                    Some(_) => self.finished = true,
                    None => {}
                }
            }
            Event::Error { message } => {
                self.fail(ErrorKind::InBand, format!("in-band error: {message}"))
            }
            Event::Start { .. } | Event::Role { .. } | Event::Usage(_) | Event::Done => {}
        }
    }

    fn fail(&mut self, kind: ErrorKind, message: String) {
        if self.error.is_none() {
            self.error = Some((kind, message));
        }
    }

    /// Whether reading can stop: the stream failed in-band.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The stream ended (cleanly or not) at `end`: the request's result.
    pub fn finish(mut self, end: Instant) -> RequestResult {
        if self.error.is_none() && !self.finished {
            self.fail(
                ErrorKind::Truncated,
                "the stream ended without a finish reason".into(),
            );
        }
        let (usage, estimated) = self.tally.totals();
        let ok = self.error.is_none();
        let e2e = match (ok, self.last_content) {
            (true, Some(t)) => t.duration_since(self.t0),
            _ => end.duration_since(self.t0),
        };
        let read_lag = self.read_lag();
        let end_lag = self.last_lag;
        let (kind, error) = self.error.unzip();
        RequestResult {
            read_lag,
            end_lag,
            ok,
            error,
            kind,
            ttft: self.first.map(|t| t.duration_since(self.t0)),
            e2e,
            output_tokens: usage.completion_tokens,
            prompt_tokens: usage.prompt_tokens,
            estimated,
            itl: self.itl,
            answer: self.answer,
            ..RequestResult::default()
        }
    }
}

/// A request that failed before or outside the stream.
pub fn failed(kind: ErrorKind, error: String, e2e: Duration) -> RequestResult {
    RequestResult {
        ok: false,
        error: Some(error),
        kind: Some(kind),
        e2e,
        ..RequestResult::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Chunk, Usage};

    fn chunk(text: &str, tokens: Option<u32>, finish: Option<Finish>) -> Event {
        Event::Chunk(Chunk {
            text: text.into(),
            tokens,
            finish,
            ..Chunk::default()
        })
    }

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn role_chunk_is_not_the_first_token_and_itl_is_token_weighted() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, 8);
        m.event(&Event::Role { index: 0 }, ms(t0, 5));
        m.event(&chunk("a", Some(1), None), ms(t0, 10));
        m.event(&chunk("bcd", Some(3), None), ms(t0, 40));
        m.event(&chunk("", None, Some(Finish::Length)), ms(t0, 45));
        let usage = Usage {
            prompt_tokens: 9,
            completion_tokens: 4,
            cached_tokens: None,
        };
        m.event(&Event::Usage(usage), ms(t0, 50));
        m.event(&Event::Done, ms(t0, 55));
        let r = m.finish(ms(t0, 60));
        assert!(r.ok, "{:?}", r.error);
        assert_eq!(r.ttft, Some(Duration::from_millis(10)));
        assert_eq!(r.e2e, Duration::from_millis(45));
        assert_eq!(
            (r.output_tokens, r.prompt_tokens, r.estimated),
            (4, 9, false)
        );
        assert_eq!(r.itl.len(), 3);
        assert!(
            r.itl.iter().all(|g| (g - 0.010).abs() < 1e-9),
            "{:?}",
            r.itl
        );
    }

    #[test]
    fn uncounted_chunks_are_an_estimate() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, 2);
        m.event(&chunk("a", None, None), ms(t0, 1));
        m.event(&chunk("b", None, Some(Finish::Length)), ms(t0, 2));
        let r = m.finish(ms(t0, 3));
        assert!(r.ok);
        assert_eq!((r.output_tokens, r.estimated), (2, true));
    }

    #[test]
    fn missing_finish_and_in_band_errors_fail() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, 2);
        m.event(&chunk("a", Some(1), None), ms(t0, 1));
        let r = m.finish(ms(t0, 2));
        assert!(!r.ok);
        assert_eq!(r.kind, Some(ErrorKind::Truncated));
        assert_eq!(r.e2e, Duration::from_millis(2));

        let mut m = Meter::new(t0, 2);
        m.event(
            &Event::Error {
                message: "boom".into(),
            },
            ms(t0, 1),
        );
        assert!(m.failed());
        let r = m.finish(ms(t0, 1));
        assert_eq!(r.kind, Some(ErrorKind::InBand));
        assert!(r.error.unwrap().contains("boom"));

        let mut m = Meter::new(t0, 2);
        m.event(
            &chunk("", None, Some(Finish::Abort("oom".into()))),
            ms(t0, 1),
        );
        assert!(!m.finish(ms(t0, 1)).ok);
    }
}
