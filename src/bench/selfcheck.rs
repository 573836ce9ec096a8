//! Did the driver keep up? Per level: the achieved against the scheduled request rate, how
//! late requests left against their schedule (send lag), and the driver's own CPU use.
//!
//! The rule: a level is driver-bound when its send-lag p99 exceeds `LAG_LIMIT` (10 ms), or the
//! driver's own share of the requests' time exceeds `SHARE_LIMIT` (10 %), or the driver's
//! process used more than `CPU_LIMIT` (90 %) of the cores its runtime runs on, or the
//! machine's cores were all busy (`MACHINE_BUSY`) while the driver took at least
//! `MACHINE_SHARE` (a third) of them. Each means the driver, not the server, may have set the
//! pace, so the level's figures understate what the server can do. The CPU is the whole
//! process's: run against a server in another process (as `lingo bench` does) for it to be
//! the driver's alone; the machine's rule applies only where the process says it is
//! (`sole_driver`).
//!
//! The machine's rule is for a server on the driver's own machine: with every core busy, what
//! the driver spends the server does not get, so a driver below its own limits can still be
//! what holds the server back (an instant mock at 512 streams on two cores: the driver at 80%
//! of one core, its share of the requests' time 3%, and the mock short of the rest).
//!
//! The share needs the kernel's receive stamps (plain `http://` targets): per request, the
//! driver's time is its send lag plus how long the answer's last bytes waited in the socket
//! before the driver read them, and the server's is from the send to those bytes' arrival.
//! It is what catches a driver that cannot keep up with a fast server on a shared machine,
//! where its CPU stays under the limit because the server takes the rest: the server
//! finishes each answer early and the driver is still reading it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::config::{Load, Rate};
use super::report::{LevelReport, RequestResult};
use super::stats::quantile_sorted;

/// Send-lag p99 above this marks a level as driver-bound.
pub const LAG_LIMIT: Duration = Duration::from_millis(10);
/// CPU use above this fraction of the runtime's cores marks a level as driver-bound.
pub const CPU_LIMIT: f64 = 0.9;
/// The driver's share of the requests' time above this marks a level as driver-bound.
pub const SHARE_LIMIT: f64 = 0.1;

/// The machine's busy fraction at or above which it counts as saturated.
pub const MACHINE_BUSY: f64 = 0.95;
/// The share of a saturated machine's cores the driver may use before it counts as taking
/// them from a server on the same machine.
pub const MACHINE_SHARE: f64 = 1.0 / 3.0;

static SOLE_DRIVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process is a load driver and nothing else (`lingo bench`): its CPU is the driver's,
/// and the machine's rule applies. Tests that run a server in the driver's process leave it
/// off.
pub fn sole_driver() {
    SOLE_DRIVER.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The whole machine's CPU over a level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// The fraction of all cores' time that was not idle.
    pub busy: f64,
    pub cores: usize,
}

/// The machine's CPU ticks so far (all cores), from `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ticks {
    busy: u64,
    total: u64,
    cores: usize,
}

/// The machine's ticks now, when this process is the sole driver.
pub fn machine_ticks() -> Option<Ticks> {
    if !SOLE_DRIVER.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_proc_stat(stat: &str) -> Option<Ticks> {
    let mut lines = stat.lines();
    let all = lines.next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = all
        .split_ascii_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    let cores = lines
        .take_while(|l| l.starts_with("cpu"))
        .filter(|l| l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some(Ticks {
        busy: total - idle,
        total,
        cores,
    })
}

impl Machine {
    pub fn between(a: Ticks, b: Ticks) -> Option<Machine> {
        let total = b.total.checked_sub(a.total).filter(|t| *t > 0)?;
        let busy = b.busy.saturating_sub(a.busy);
        Some(Machine {
            busy: busy as f64 / total as f64,
            cores: b.cores.max(1),
        })
    }
}

/// USER_HZ: the unit of `/proc/self/stat` times, 100 on every Linux architecture in use.
const TICKS_PER_SECOND: f64 = 100.0;

/// The process's user + system CPU time so far, from `/proc/self/stat` (Linux only).
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / TICKS_PER_SECOND,
    ))
}

/// The driver's own figures for one level. Rates in requests per second, times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfCheck {
    /// The level's nominal rate (open loop).
    pub target_rate: Option<Rate>,
    /// The rate of the drawn schedule: (n - 1) / span of the scheduled times.
    pub scheduled_rate: Option<f64>,
    /// The rate requests actually left at: (n - 1) / span of the send times.
    pub achieved_rate: Option<f64>,
    /// Requests in flight on average (sum of send-to-end times / wall; Little's law).
    pub mean_in_flight: f64,
    pub send_lag_p50: Option<f64>,
    pub send_lag_p99: Option<f64>,
    pub send_lag_max: Option<f64>,
    /// Over requests, the mean time their bytes waited in the socket before the driver read
    /// them (kernel stamps only): the driver's lateness, which the latencies leave out.
    #[serde(default)]
    pub read_lag_p50: Option<f64>,
    #[serde(default)]
    pub read_lag_p99: Option<f64>,
    /// The driver's share of the requests' time: (send lag + end lag) over that plus the
    /// server's time from send to the answer's last byte (kernel stamps only).
    #[serde(default)]
    pub driver_share: Option<f64>,
    /// Driver CPU over the level's wall time: 1.0 is one core busy.
    pub cpu: Option<f64>,
    /// Worker threads of the driver's runtime.
    pub cores: usize,
    /// The machine's busy fraction over the level, where measured (`sole_driver`).
    #[serde(default)]
    pub machine_busy: Option<f64>,
    /// Whether the driver may have set the pace, and why.
    pub driver_bound: bool,
    pub reasons: Vec<String>,
}

impl SelfCheck {
    pub fn of(level: &LevelReport) -> SelfCheck {
        let rs = &level.results;
        let span = |f: &dyn Fn(usize) -> Duration| {
            let (lo, hi) = (0..rs.len())
                .map(f)
                .fold((Duration::MAX, Duration::ZERO), |(lo, hi), d| {
                    (lo.min(d), hi.max(d))
                });
            let s = hi.saturating_sub(lo).as_secs_f64();
            (rs.len() > 1 && s > 0.0).then(|| (rs.len() - 1) as f64 / s)
        };
        let (target_rate, scheduled_rate) = match level.load {
            Load::Concurrency { .. } => (None, None),
            Load::Rate { rate, .. } => (Some(rate), span(&|i| rs[i].scheduled)),
            Load::Replay { .. } => (None, span(&|i| rs[i].scheduled)),
        };
        let mut lags: Vec<f64> = rs.iter().map(|r| r.lag.as_secs_f64()).collect();
        lags.sort_by(f64::total_cmp);
        let busy: f64 = rs
            .iter()
            .map(|r| (r.scheduled + r.e2e).saturating_sub(r.sent).as_secs_f64())
            .sum();
        let wall = level.wall.as_secs_f64();
        let cpu = level
            .cpu
            .filter(|_| wall > 0.0)
            .map(|c| c.as_secs_f64() / wall);
        let mut read_lags: Vec<f64> = rs
            .iter()
            .filter_map(|r| r.read_lag.map(|l| l.as_secs_f64()))
            .collect();
        read_lags.sort_by(f64::total_cmp);
        let mut check = SelfCheck {
            target_rate,
            scheduled_rate,
            achieved_rate: span(&|i| rs[i].sent),
            mean_in_flight: if wall > 0.0 { busy / wall } else { 0.0 },
            send_lag_p50: quantile_sorted(&lags, 0.5),
            send_lag_p99: quantile_sorted(&lags, 0.99),
            send_lag_max: lags.last().copied(),
            read_lag_p50: quantile_sorted(&read_lags, 0.5),
            read_lag_p99: quantile_sorted(&read_lags, 0.99),
            driver_share: driver_share(rs),
            cpu,
            cores: level.cores,
            machine_busy: level.machine.map(|m| m.busy),
            driver_bound: false,
            reasons: Vec::new(),
        };
        if let Some(p99) = check.send_lag_p99.filter(|l| *l > LAG_LIMIT.as_secs_f64()) {
            check.reasons.push(format!(
                "send lag p99 {:.1} ms > {} ms",
                p99 * 1e3,
                LAG_LIMIT.as_millis()
            ));
        }
        if let Some(share) = check.driver_share.filter(|s| *s > SHARE_LIMIT) {
            check.reasons.push(format!(
                "the driver took {:.0}% of the requests' time (> {:.0}%): sending late and \
                 reading answers the server had already sent",
                share * 100.0,
                SHARE_LIMIT * 100.0
            ));
        }
        let limit = CPU_LIMIT * level.cores.max(1) as f64;
        if let Some(c) = cpu.filter(|c| *c > limit) {
            check.reasons.push(format!(
                "driver CPU {:.0}% > {:.0}% ({} cores)",
                c * 100.0,
                limit * 100.0,
                level.cores
            ));
        }
        if let (Some(m), Some(c)) = (level.machine, cpu) {
            if m.busy >= MACHINE_BUSY && c >= MACHINE_SHARE * m.cores as f64 {
                check.reasons.push(format!(
                    "the machine's {} cores were {:.0}% busy and the driver used {:.0}% of them: \
                     a server on this machine ran on what the driver left",
                    m.cores,
                    m.busy * 100.0,
                    100.0 * c / m.cores as f64
                ));
            }
        }
        check.driver_bound = !check.reasons.is_empty();
        check
    }
}

/// Σ driver time / Σ (driver + server time) over the requests whose end was stamped: the
/// driver's is its send lag, the hand-over to the wire and the end lag; the server's from the
/// first byte written to the arrival of the last.
fn driver_share(rs: &[RequestResult]) -> Option<f64> {
    let (mut driver, mut total) = (0.0, 0.0);
    for r in rs {
        let Some(end) = r.end_lag else { continue };
        let server = (r.scheduled + r.e2e)
            .saturating_sub(r.sent + r.to_wire)
            .as_secs_f64();
        let own = (r.lag + r.to_wire + end).as_secs_f64();
        driver += own;
        total += own + server;
    }
    (total > 0.0).then(|| driver / total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::{level, ok};

    #[test]
    fn reads_this_process_cpu() {
        let a = process_cpu().unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(process_cpu().unwrap() >= a);
    }

    #[test]
    fn lag_and_cpu_mark_a_driver_bound_level() {
        let mut rs: Vec<_> = (0..100).map(|_| ok(5, 10, 50)).collect();
        for (i, r) in rs.iter_mut().enumerate() {
            r.scheduled = Duration::from_millis(10 * i as u64);
            r.sent = r.scheduled + Duration::from_millis(1);
            r.lag = Duration::from_millis(1);
        }
        let mut l = level(rs);
        l.load = Load::Rate {
            rate: Rate::PerSecond(100.0),
            max_concurrency: None,
        };
        l.cpu = Some(Duration::from_millis(500));
        let c = SelfCheck::of(&l);
        assert!(!c.driver_bound, "{:?}", c.reasons);
        assert!((c.scheduled_rate.unwrap() - 100.0).abs() < 1e-6);
        assert!((c.achieved_rate.unwrap() - 100.0).abs() < 1e-6);
        assert_eq!(c.send_lag_p99, Some(0.001));
        // 100 requests of 49 ms (sent 1 ms late) over 2 s.
        assert!((c.mean_in_flight - 2.45).abs() < 1e-9);
        assert_eq!(c.cpu, Some(0.25));

        assert_eq!(c.driver_share, None, "no stamps, no share");

        l.results[99].lag = Duration::from_millis(50);
        l.results[98].lag = Duration::from_millis(50);
        l.cpu = Some(Duration::from_secs(4));
        let c = SelfCheck::of(&l);
        assert!(c.driver_bound);
        assert_eq!(c.reasons.len(), 2, "{:?}", c.reasons);
    }

    #[test]
    fn a_saturated_machine_with_a_busy_driver_is_driver_bound() {
        let rs: Vec<_> = (0..10).map(|_| ok(5, 10, 50)).collect();
        let mut l = level(rs);
        // 0.8 of a core over 2 s: under the process's own limit (0.9 of 2 worker cores).
        l.cpu = Some(Duration::from_millis(1600));
        let with = |busy: f64, cores: usize| {
            let mut l = l.clone();
            l.machine = Some(Machine { busy, cores });
            SelfCheck::of(&l)
        };
        let c = with(0.99, 2);
        assert!(c.driver_bound, "{c:?}");
        assert!(
            c.reasons[0].contains("2 cores were 99% busy"),
            "{:?}",
            c.reasons
        );
        assert_eq!(c.machine_busy, Some(0.99));
        // Cores to spare, or a driver that took little of a busy machine: the server's pace.
        assert!(!with(0.90, 2).driver_bound);
        assert!(!with(0.99, 4).driver_bound);
        assert!(
            !SelfCheck::of(&l).driver_bound,
            "not measured: no verdict from it"
        );
    }

    #[test]
    fn proc_stat_gives_busy_and_total_ticks_and_the_cores() {
        let stat = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n\
                    cpu1 50 3 25 400 10 2 1 5 0 0\nintr 1 2 3\n";
        let ticks = |busy, total| Ticks {
            busy,
            total,
            cores: 2,
        };
        let a = ticks(170, 990);
        assert_eq!(parse_proc_stat(stat), Some(a));
        let m = Machine::between(a, ticks(170 + 95, 990 + 100)).unwrap();
        assert!((m.busy - 0.95).abs() < 1e-9 && m.cores == 2);
        assert_eq!(Machine::between(a, a), None, "no time passed");
        assert_eq!(parse_proc_stat("intr 1\n"), None);
    }

    /// A closed loop at c=512 against a fast server: each answer arrived (by the kernel's
    /// stamps) 2 ms after its send, but the driver read its end 30 ms later; against a paced
    /// server the same driver lags 3 ms behind answers that take 680 ms.
    #[test]
    fn the_driver_share_tells_a_fast_server_from_a_paced_one() {
        let closed = |e2e_ms: u64, end_lag_ms: u64| {
            let rs: Vec<_> = (0..512)
                .map(|_| RequestResult {
                    end_lag: Some(Duration::from_millis(end_lag_ms)),
                    read_lag: Some(Duration::from_millis(end_lag_ms / 2)),
                    lag: Duration::from_micros(100),
                    ..ok(256, 1, e2e_ms)
                })
                .collect();
            let mut l = level(rs);
            l.load = Load::Concurrency { concurrency: 512 };
            l.cpu = Some(Duration::from_secs(1));
            SelfCheck::of(&l)
        };
        let fast = closed(2, 30);
        assert!(fast.driver_bound, "{fast:?}");
        assert!(fast.driver_share.unwrap() > 0.9);
        assert_eq!(fast.reasons.len(), 1, "{:?}", fast.reasons);
        assert!(fast.reasons[0].contains("the driver took"));
        assert_eq!(fast.read_lag_p50, Some(0.015));

        let paced = closed(680, 3);
        assert!(!paced.driver_bound, "{paced:?}");
        assert!(paced.driver_share.unwrap() < 0.01);
    }
}
