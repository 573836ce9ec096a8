//! `lingo demo --fleet` as the built binary: its report has a row per group and per endpoint,
//! the counts add up to the requests sent, and `least_outstanding` sent the slow vLLM fewer
//! requests than the fast one (its requests stay in flight three times longer).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::process::Command;

const GROUPS: [&str; 3] = ["sglang", "vllm-fast", "vllm-slow"];

/// Lines whose first word `first` accepts and whose second is not `mock` (the demo's start-up
/// lines name each group's mock), as their words.
fn rows(out: &str, first: impl Fn(&str) -> bool) -> Vec<Vec<&str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.first().is_some_and(|f| first(f)) && w.get(1) != Some(&"mock"))
        .collect()
}

#[tokio::test]
async fn fleet_demo_reports_every_group_and_favours_the_fast() {
    let run = Command::new(env!("CARGO_BIN_EXE_lingo"))
        .args(["demo", "--fleet", "--requests-per-level", "64"])
        .kill_on_drop(true)
        .output();
    let run = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the fleet demo finishes")
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{out}\n{err}");

    // The sweep's requests (warmup included), as the demo counted them.
    let sent: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("From lingo's /metrics, "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sent count in:\n{out}"));
    assert_eq!(sent, 1 + 3 * 64, "{out}");

    // Group rows: group, requests, TTFT p50, TTFT p90, ITL p50, e2e p50 (all measured).
    let groups = rows(&out, |f| GROUPS.contains(&f));
    assert_eq!(groups.len(), 3, "{out}");
    let by_group: BTreeMap<&str, u64> = groups
        .iter()
        .map(|r| {
            assert_eq!(r.len(), 6, "{out}");
            assert!(r[2..].iter().all(|q| q.ends_with("ms")), "{out}");
            (r[0], r[1].parse().unwrap())
        })
        .collect();
    assert!(by_group.values().all(|&n| n > 0), "{out}");
    assert_eq!(by_group.values().sum::<u64>(), sent, "{out}");

    // Endpoint rows: address, group, requests; one endpoint per group, the same counts.
    let endpoints = rows(&out, |f| f.starts_with("127.0.0.1:"));
    assert_eq!(endpoints.len(), 3, "{out}");
    for r in &endpoints {
        assert_eq!(by_group[r[1]], r[2].parse::<u64>().unwrap(), "{out}");
    }

    // least_outstanding: the slow endpoint holds its requests longer, so it is picked less.
    assert!(
        by_group["vllm-slow"] < by_group["vllm-fast"],
        "slow got as many as fast:\n{out}"
    );
    // The slow group's latency shows: its TTFT p50 is above the fast one's.
    let ttft = |g: &str| -> f64 {
        let r = groups.iter().find(|r| r[0] == g).unwrap();
        r[2].trim_end_matches("ms").parse().unwrap()
    };
    assert!(ttft("vllm-slow") > ttft("vllm-fast"), "{out}");
}
