//! `lingo bench` reports: the JSON document round trip, `lingo bench compare` on fixture
//! reports, and the binary's flags end to end (JSON, CSV, `--max-fail` exit status).

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use lingo::bench::json::{RunDoc, SCHEMA_VERSION};
use lingo::bench::{run, BenchConfig, Rate, Slo, Summary};
use lingo::dialect::Dialect;
use lingo::mock::{MockConfig, MockKind};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/bench")
        .join(name)
}

/// A fresh directory for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lingo-bench-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_json_report_reads_back_equal() {
    let mock = common::mock_with(MockConfig {
        fail_every: Some(4),
        ttft: Duration::from_millis(2),
        ..MockConfig::default()
    })
    .await;
    let config = BenchConfig {
        url: mock.url(),
        dialect: Dialect::OpenaiChat,
        concurrency: vec![2],
        request_rate: vec![Rate::PerSecond(500.0), Rate::Infinite],
        input_len: 12,
        output_len: 6,
        output_range: 0.5,
        requests_per_level: 6,
        percentiles: vec![50.0, 99.9],
        slo: Slo::parse("ttft=1s,e2e=5s").unwrap(),
        ..BenchConfig::default()
    };
    let levels = run(&config).await.unwrap();
    let summaries: Vec<Summary> = levels
        .iter()
        .map(|l| Summary::of(l, &config.percentiles, &config.slo))
        .collect();
    let doc = RunDoc::of(&config, &levels, &summaries);
    let path = scratch("roundtrip").join("run.json");
    doc.write(&path).unwrap();
    let back = RunDoc::read(&path).unwrap();
    assert_eq!(back, doc);

    // What the schema promises, read as plain JSON.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["schema_version"], SCHEMA_VERSION);
    assert_eq!(
        v["config"]["request_rate"],
        serde_json::json!([500.0, "inf"])
    );
    let levels = v["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3);
    assert_eq!(levels[2]["load"]["rate"], "inf");
    let first = &levels[0];
    assert_eq!(first["label"], "c=2");
    assert!(first["ttft"]["p99.9"].is_f64(), "{first}");
    assert!(first["self_check"]["send_lag_p99"].is_f64());
    assert_eq!(first["requests"].as_array().unwrap().len(), 6);
    let failed: u64 = levels.iter().map(|l| l["fail"].as_u64().unwrap()).sum();
    assert!(failed > 0);
    let kinds: u64 = levels
        .iter()
        .filter_map(|l| l["failures"]["http_500"].as_u64())
        .sum();
    assert_eq!(kinds, failed);
    let req = &first["requests"][0];
    for key in [
        "scheduled_s",
        "sent_s",
        "lag_s",
        "e2e_s",
        "output_len",
        "ok",
    ] {
        assert!(!req[key].is_null(), "{key}: {req}");
    }
    // The schema-0 names scripts read stay.
    assert!(first["agg_tok_s"].is_f64() && first["ttft_p50"].is_f64());
}

#[test]
fn the_fixture_reports_still_parse() {
    for name in ["run-a.json", "run-b.json"] {
        let doc = RunDoc::read(&fixture(name)).unwrap();
        assert_eq!(doc.levels.len(), 2, "{name}");
    }
}

fn lingo_bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_lingo"))
}

#[test]
fn compare_prints_the_ratios_per_level() {
    let out = lingo_bin()
        .args(["bench", "compare"])
        .arg(fixture("run-a.json"))
        .arg(fixture("run-b.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let row = |metric: &str, nth: usize| -> String {
        text.lines()
            .filter(|l| l.contains(&format!("| {metric} ")))
            .nth(nth)
            .unwrap_or_else(|| panic!("{metric} in\n{text}"))
            .to_string()
    };
    // B has 1.25x A's request rate and half its TTFT at c=1, 0.8x and twice at c=4.
    assert!(row("req/s", 0).ends_with("1.250"), "{text}");
    assert!(row("TTFT mean ms", 0).ends_with("0.500"), "{text}");
    assert!(row("req/s", 1).ends_with("0.800"), "{text}");
    assert!(row("TTFT mean ms", 1).ends_with("2.000"), "{text}");
    assert!(text.contains("      c=1 | req/s"), "{text}");
    assert!(text.contains("      c=4 | req/s"), "{text}");
    assert!(
        text.contains("    10.00 |        12.50 |   1.250"),
        "{text}"
    );

    let missing = lingo_bin()
        .args(["bench", "compare", "/nonexistent/a.json"])
        .arg(fixture("run-b.json"))
        .output()
        .unwrap();
    assert!(!missing.status.success());
}

async fn bench_bin(args: &[&str], dir: &Path) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lingo"));
    cmd.arg("bench")
        .args(args)
        .current_dir(dir)
        .env("LINGO_LOG", "error");
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the bench ends")
        .unwrap()
}

#[tokio::test]
async fn the_binary_writes_json_and_csv_and_fails_past_max_fail() {
    let mock = common::mock_with(MockConfig {
        kind: MockKind::Sglang,
        fail_every: Some(3),
        ..MockConfig::default()
    })
    .await;
    let dir = scratch("binary");
    let url = mock.url();
    let common_args = [
        "--url",
        &url,
        "--concurrency",
        "2",
        "--request-rate",
        "inf",
        "--requests-per-level",
        "6",
        "--warmup",
        "0",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--json",
        "out.json",
        "--csv",
        "out.csv",
        "--percentiles",
        "50,99",
        "--detail",
    ];
    // 12 requests, every third fails: 4 failures.
    let mut args = common_args.to_vec();
    args.extend(["--max-fail", "3"]);
    let out = bench_bin(&args, &dir).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 of 12 requests failed"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rate=inf"), "{stdout}");
    assert!(stdout.contains("| TTFT   |"), "{stdout}");
    // The reports are written before the verdict.
    let doc = RunDoc::read(&dir.join("out.json")).unwrap();
    assert_eq!(doc.levels.len(), 2);
    let csv = std::fs::read_to_string(dir.join("out.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("level,target,url,total,ok,fail,"));
    assert!(lines[0].contains("ttft_p99"));
    assert!(lines[1].starts_with("c=2,A,"), "{csv}");

    let mut args = common_args.to_vec();
    args.extend(["--max-fail", "40%"]);
    let out = bench_bin(&args, &dir).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
