//! The fleet demo's report, from one scrape of lingo's `/metrics`: per group (the `upstream`
//! label) requests and latency percentiles from histogram buckets, and per endpoint requests.
//! The process started with the demo, so a whole scrape is the window: no previous scrape.

use std::fmt::Write;

use lingo::top::{quantile, Series, Snapshot};

// lingo's metric names (`metrics/names.rs` is crate-private); tests/demo.rs reads this
// report from a real lingo, so a renamed metric fails a test rather than printing dashes.
const REQUESTS: &str = "lingo_requests_total";
const TTFT: &str = "lingo_time_to_first_token_seconds_bucket";
const ITL: &str = "lingo_inter_token_latency_seconds_bucket";
const E2E: &str = "lingo_e2e_request_latency_seconds_bucket";
const ENDPOINT_REQUESTS: &str = "lingo_endpoint_requests_total";

/// One endpoint of the demo's pool: its `host:port` (the `endpoint` label) and its group.
pub struct Endpoint {
    pub addr: String,
    pub group: String,
}

/// The table: one row per group, then one per endpoint.
pub fn render(snap: &Snapshot, groups: &[&str], endpoints: &[Endpoint], pool: &str) -> String {
    let mut out = format!(
        "{:<12}{:>9}{:>11}{:>11}{:>10}{:>10}\n",
        "group", "requests", "TTFT p50", "TTFT p90", "ITL p50", "e2e p50"
    );
    for g in groups {
        let in_group = |s: &Series| s.label("upstream") == Some(g);
        let q = |name, p| ms(quantile(p, &buckets(snap, name, in_group)));
        let _ = writeln!(
            out,
            "{:<12}{:>9}{:>11}{:>11}{:>10}{:>10}",
            g,
            sum(snap, REQUESTS, in_group),
            q(TTFT, 0.5),
            q(TTFT, 0.9),
            q(ITL, 0.5),
            q(E2E, 0.5),
        );
    }
    out.push('\n');
    let _ = writeln!(out, "{:<22}{:<12}{:>9}", "endpoint", "group", "requests");
    for e in endpoints {
        let this = |s: &Series| {
            s.label("pool") == Some(pool) && s.label("endpoint") == Some(e.addr.as_str())
        };
        let n = sum(snap, ENDPOINT_REQUESTS, this);
        let _ = writeln!(out, "{:<22}{:<12}{:>9}", e.addr, e.group, n);
    }
    out
}

/// The sum of every series of `name` that `keep` accepts (counters: whole numbers).
fn sum(snap: &Snapshot, name: &str, keep: impl Fn(&Series) -> bool) -> u64 {
    let total: f64 = snap
        .iter()
        .filter(|(s, v)| s.name == name && keep(s) && !v.is_nan())
        .map(|(_, v)| v)
        .sum();
    total.round() as u64
}

/// Cumulative `(le, count)` buckets of `name` over the series `keep` accepts, summed by `le`.
fn buckets(snap: &Snapshot, name: &str, keep: impl Fn(&Series) -> bool) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (s, v) in snap.iter().filter(|(s, _)| s.name == name && keep(s)) {
        let Some(le) = s.label("le").and_then(parse_le) else {
            continue;
        };
        match out.binary_search_by(|(b, _)| b.total_cmp(&le)) {
            Ok(i) => out[i].1 += v,
            Err(i) => out.insert(i, (le, v)),
        }
    }
    out
}

fn parse_le(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        _ => s.parse().ok(),
    }
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{:.1}ms", v * 1000.0),
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
lingo_requests_total{dialect="sglang",outcome="ok",upstream="a"} 3
lingo_requests_total{dialect="sglang",outcome="timeout",upstream="a"} 1
lingo_requests_total{dialect="sglang",outcome="ok",upstream="b"} 2
lingo_time_to_first_token_seconds_bucket{dialect="sglang",upstream="a",le="0.01"} 0
lingo_time_to_first_token_seconds_bucket{dialect="sglang",upstream="a",le="0.1"} 4
lingo_time_to_first_token_seconds_bucket{dialect="sglang",upstream="a",le="+Inf"} 4
lingo_endpoint_requests_total{endpoint="127.0.0.1:1",outcome="ok",pool="p"} 3
lingo_endpoint_requests_total{endpoint="127.0.0.1:1",outcome="error",pool="p"} 1
lingo_endpoint_requests_total{endpoint="127.0.0.1:2",outcome="ok",pool="p"} 2
"#;

    #[test]
    fn rows_per_group_and_endpoint() {
        let snap = Snapshot::parse(TEXT).unwrap();
        let eps = [("127.0.0.1:1", "a"), ("127.0.0.1:2", "b")].map(|(addr, group)| Endpoint {
            addr: addr.into(),
            group: group.into(),
        });
        let out = render(&snap, &["a", "b"], &eps, "p");
        let rows: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        // Group a: 4 requests, TTFT p50 halfway through (0.01, 0.1]; no ITL or e2e buckets.
        assert_eq!(rows[1], ["a", "4", "55.0ms", "91.0ms", "-", "-"]);
        assert_eq!(rows[2], ["b", "2", "-", "-", "-", "-"]);
        assert_eq!(rows[5], ["127.0.0.1:1", "a", "4"]);
        assert_eq!(rows[6], ["127.0.0.1:2", "b", "2"]);
    }
}
