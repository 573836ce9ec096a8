//! A token bucket that may go into debt: per-key requests and tokens per minute.
//!
//! Tokens are charged after the fact (as the meter counts them), so one request may spend more
//! than is left; the bucket then goes below zero and refuses further requests until it has
//! refilled above zero. Requests are charged before they run and need one whole unit.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Bucket {
    capacity: f64,
    /// Units per second.
    rate: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket of `per_minute` units, refilling at `per_minute` a minute.
    pub fn per_minute(per_minute: u64, now: Instant) -> Bucket {
        let capacity = per_minute as f64;
        Bucket {
            capacity,
            rate: capacity / 60.0,
            level: capacity,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + dt * self.rate).min(self.capacity);
        self.at = now;
    }

    /// Seconds until the level reaches `need`, rounded up (at least 1: `Retry-After` is whole
    /// seconds and 0 would invite an immediate retry).
    fn wait_for(&self, need: f64) -> u64 {
        // Less a nanosecond, so float noise (1 / (2 / 60) is 30.000000000000004) does not
        // add a whole second.
        let secs = ((need - self.level) / self.rate - 1e-9).ceil();
        if secs.is_finite() && secs >= 1.0 {
            Duration::from_secs_f64(secs).as_secs()
        } else {
            1
        }
    }

    /// Take one unit, or say how long until one is there.
    pub fn take_one(&mut self, now: Instant) -> Result<(), u64> {
        self.refill(now);
        if self.level >= 1.0 {
            self.level -= 1.0;
            Ok(())
        } else {
            Err(self.wait_for(1.0))
        }
    }

    /// Whether the bucket is out of debt, or how long until it is.
    pub fn check_positive(&mut self, now: Instant) -> Result<(), u64> {
        self.refill(now);
        if self.level > 0.0 {
            Ok(())
        } else {
            Err(self.wait_for(0.0))
        }
    }

    /// Spend `n` units, going into debt if need be.
    pub fn charge(&mut self, n: u64, now: Instant) {
        self.refill(now);
        self.level -= n as f64;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn requests_run_out_and_say_when_to_come_back() {
        let t = Instant::now();
        let mut b = Bucket::per_minute(2, t);
        assert!(b.take_one(t).is_ok());
        assert!(b.take_one(t).is_ok());
        // One unit comes back every 30 s.
        assert_eq!(b.take_one(t), Err(30));
        let later = t + Duration::from_secs(30);
        assert!(b.take_one(later).is_ok());
    }

    #[test]
    fn debt_refuses_until_repaid() {
        let t = Instant::now();
        let mut b = Bucket::per_minute(60, t);
        assert!(b.check_positive(t).is_ok());
        b.charge(90, t);
        // 30 in debt at one a second.
        assert_eq!(b.check_positive(t), Err(30));
        assert!(b.check_positive(t + Duration::from_secs(29)).is_err());
        assert!(b.check_positive(t + Duration::from_secs(31)).is_ok());
        // Refill never exceeds the capacity.
        b.refill(t + Duration::from_secs(3600));
        assert_eq!(b.level, 60.0);
    }
}
