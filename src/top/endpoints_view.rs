//! The endpoints frame: one row per endpoint of every pool, then TTFT and ITL medians per
//! upstream group. Pure, like the models frame, and cut to the same width.

use std::fmt::Write;
use std::time::Duration;

use super::endpoints::{endpoints, EndpointRow};
use super::render::{fit_name, latency, rate, summary};
use super::snapshot::Snapshot;
use super::window::{label_values, Group, Window};

/// Numeric columns and their widths, gap included; cells are right-aligned.
const COLUMNS: [(&str, usize); 4] = [("req/s", 8), ("err/s", 8), ("in flight", 11), ("health", 8)];
const LATENCY_COLUMNS: [(&str, usize); 2] = [("TTFT p50", 10), ("ITL p50", 10)];
const POOL_MAX: usize = 16;
const NAME_MIN: usize = 8;

/// The summary line, the endpoints table and the per-group latency table. Health is `up`,
/// `down`, or `?` when lingo exports no health gauge for the endpoint.
pub fn render_endpoints(prev: &Snapshot, cur: &Snapshot, elapsed: Duration, width: u16) -> String {
    let secs = elapsed.as_secs_f64();
    let width = usize::from(width);
    let mut out = summary(cur, secs);
    out.push('\n');
    endpoint_table(&mut out, &endpoints(prev, cur), secs, width);
    out.push('\n');
    latency_table(&mut out, prev, cur, width);
    out.lines()
        .map(|l| l.chars().take(width).collect::<String>() + "\n")
        .collect()
}

fn endpoint_table(out: &mut String, rows: &[EndpointRow], secs: f64, width: usize) {
    let longest = |f: fn(&EndpointRow) -> &str, title: &str| {
        let names = rows.iter().map(|r| f(r).chars().count());
        names.chain([title.len()]).max().unwrap_or(0)
    };
    let pool_w = longest(|r| &r.pool, "pool").clamp(NAME_MIN, POOL_MAX);
    let used = pool_w + 2 + COLUMNS.iter().map(|c| c.1).sum::<usize>();
    let endpoint_w = longest(|r| &r.endpoint, "endpoint")
        .min(width.saturating_sub(used))
        .max(NAME_MIN);
    let line = |out: &mut String, pool: &str, endpoint: &str, cells: [String; 4]| {
        let _ = write!(
            out,
            "{} {}",
            fit_name(pool, pool_w),
            fit_name(endpoint, endpoint_w)
        );
        for ((_, w), cell) in COLUMNS.iter().zip(cells) {
            let _ = write!(out, "{cell:>w$}");
        }
        out.push('\n');
    };
    line(out, "pool", "endpoint", COLUMNS.map(|c| c.0.to_string()));
    if rows.is_empty() {
        out.push_str("  (no endpoints: is a pool configured?)\n");
    }
    for r in rows {
        let health = match r.healthy {
            Some(true) => "up",
            Some(false) => "down",
            None => "?",
        };
        let cells = [
            rate(r.requests, secs, 2),
            rate(r.errors, secs, 2),
            format!("{:.0}", r.in_flight),
            health.to_string(),
        ];
        line(out, &r.pool, &r.endpoint, cells);
    }
}

/// TTFT and ITL medians by `upstream` label: a pool's endpoints share their group's label.
fn latency_table(out: &mut String, prev: &Snapshot, cur: &Snapshot, width: usize) {
    let groups = label_values(cur, "upstream");
    let used = 1 + LATENCY_COLUMNS.iter().map(|c| c.1).sum::<usize>();
    let longest = groups.iter().map(|g| g.chars().count()).max().unwrap_or(0);
    let name_w = longest.min(width.saturating_sub(used)).max(NAME_MIN);
    let line = |out: &mut String, name: &str, cells: [String; 2]| {
        out.push_str(&fit_name(name, name_w));
        out.push(' ');
        for ((_, w), cell) in LATENCY_COLUMNS.iter().zip(cells) {
            let _ = write!(out, "{cell:>w$}");
        }
        out.push('\n');
    };
    line(out, "group", LATENCY_COLUMNS.map(|c| c.0.to_string()));
    if groups.is_empty() {
        out.push_str("  (none yet)\n");
    }
    for g in &groups {
        let w = Window::between(prev, cur, Group::Upstream(g));
        let cells = [latency(w.ttft_quantile(0.5)), latency(w.itl_quantile(0.5))];
        line(out, g, cells);
    }
}
