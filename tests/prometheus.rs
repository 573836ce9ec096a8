//! lingo's Grafana dashboard against a real Prometheus that scrapes a real lingo.
//!
//! Grafana itself cannot run here (Debian's registry has no Grafana package), so the test does
//! what Grafana would do: it runs every query of `config/grafana/lingo-dashboard.json` through
//! Prometheus' HTTP API after Prometheus has scraped lingo under known traffic, and checks that
//! each answers with numbers. It also checks that the totals Prometheus saw equal what the
//! bench counted on the client side, exactly.
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`). Without it the test is skipped
//! with a message, except when `CI` is set: there it fails.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::ops::AddAssign;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use lingo::bench::{BenchConfig, LevelReport};
use lingo::config::{EndpointConfig, MirrorConfig, Policy, PoolConfig};
use lingo::dialect::Dialect;
use lingo::mock::{FaultMode, MockConfig, MockKind};
use lingo::upstream::KindSetting;
use serde_json::{json, Value};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/grafana/lingo-dashboard.json"
);
const SCRAPE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/prometheus.yml");
/// The longest wait for Prometheus to start, or to scrape.
const PATIENCE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

// ---- Prometheus ------------------------------------------------------------------------

/// A Prometheus server in its own temporary directory, killed and cleaned up on drop.
struct Prometheus {
    child: tokio::process::Child,
    dir: PathBuf,
    base: String,
    http: reqwest::Client,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary, or `None` (after saying why) when the test should be skipped.
fn prometheus_binary() -> Option<&'static Path> {
    let path = Path::new(PROMETHEUS);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{PROMETHEUS} is missing and CI is set: install it with `apt-get install -y prometheus`"
    );
    // Written to the stderr handle rather than with eprintln!, which the test harness
    // captures: a skip should be seen.
    let _ = writeln!(
        std::io::stderr(),
        "tests/prometheus.rs skipped: {PROMETHEUS} not found (apt-get install -y prometheus); \
         under CI this fails"
    );
    None
}

/// The shipped `config/prometheus.yml`, pointed at `target` and scraping every second.
fn scrape_config(target: SocketAddr) -> String {
    let shipped = std::fs::read_to_string(SCRAPE_CONFIG).unwrap();
    for expected in [
        "\"127.0.0.1:30000\"",
        "scrape_interval: 5s",
        "job_name: lingo",
    ] {
        assert!(
            shipped.contains(expected),
            "{SCRAPE_CONFIG} lacks {expected}"
        );
    }
    shipped
        .replace("127.0.0.1:30000", &target.to_string())
        .replace("interval: 5s", "interval: 1s")
}

impl Prometheus {
    async fn start(binary: &Path, target: SocketAddr) -> Prometheus {
        // Prometheus binds its own socket and cannot be handed a listener, so its port is found
        // by binding 127.0.0.1:0 and closing the socket just before it starts. Should another
        // process take the port in between, Prometheus exits and `wait_ready` shows its log.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("lingo-prometheus-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, scrape_config(target)).unwrap();
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = tokio::process::Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let mut p = Prometheus {
            child,
            dir,
            base: format!("http://127.0.0.1:{port}"),
            http,
        };
        p.wait_ready().await;
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("prometheus exited ({status}):\n{}", self.log());
            }
            let ready = self.http.get(format!("{}/-/ready", self.base)).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready:\n{}",
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// `data` of a successful API answer; panics with Prometheus' error otherwise.
    async fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let url = format!("{}/api/v1/{path}", self.base);
        let body: Value = self
            .http
            .get(&url)
            .query(params)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["status"], "success", "{path} {params:?}: {body}");
        body["data"].clone()
    }

    /// The result of an instant query, evaluated now.
    async fn query(&self, promql: &str) -> Vec<Value> {
        let data = self.api("query", &[("query", promql)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The single value of a query that yields one series.
    async fn scalar(&self, promql: &str) -> f64 {
        let result = self.query(promql).await;
        assert_eq!(result.len(), 1, "{promql}: {result:?}");
        sample_value(&result[0]).unwrap()
    }

    /// Wait until Prometheus holds `n` successful scrapes of lingo that started after
    /// `after` (Unix seconds), so it has seen everything lingo recorded before then.
    async fn wait_for_scrapes(&self, after: f64, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let series = self.query("up{job=\"lingo\"}[1m]").await;
            let samples: Vec<(f64, String)> = series
                .iter()
                .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
                .filter_map(|v| Some((v[0].as_f64()?, v[1].as_str()?.to_string())))
                .filter(|(t, _)| *t > after)
                .collect();
            if samples.iter().any(|(_, up)| up != "1") {
                let targets = self.api("targets", &[]).await;
                panic!("prometheus failed to scrape lingo: {targets}");
            }
            if samples.len() >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus scraped lingo {} time(s) in {PATIENCE:?}, {n} needed",
                samples.len()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

fn sample_value(sample: &Value) -> Option<f64> {
    sample["value"][1].as_str()?.parse().ok()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

// ---- the dashboard ---------------------------------------------------------------------

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap()
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// A query of the dashboard.
struct Query {
    panel: String,
    expr: String,
    /// The labels its legend names (`{{model}}`): each series of the answer must carry them.
    legend_labels: Vec<String>,
}

/// Every query, in panel order.
fn queries(dashboard: &Value) -> Vec<Query> {
    panels(dashboard)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| Query {
                    panel: title.clone(),
                    expr: t["expr"].as_str().unwrap().to_string(),
                    legend_labels: legend_labels(t["legendFormat"].as_str().unwrap_or_default()),
                })
        })
        .collect()
}

fn legend_labels(format: &str) -> Vec<String> {
    format
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}"))
        .map(|(label, _)| label.trim().to_string())
        .collect()
}

/// Substitute Grafana's variables the way Grafana would with "All" selected.
fn as_grafana_would(expr: &str) -> String {
    let e = expr
        .replace("$__rate_interval", "1m")
        .replace("$model", ".*")
        .replace("$dialect", ".*");
    assert!(!e.contains('$'), "unknown variable left in {e}");
    e
}

/// `label_values(selector, label)` of a query variable.
fn label_values_args(definition: &str) -> (String, String) {
    let inner = definition
        .strip_prefix("label_values(")
        .and_then(|d| d.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not label_values(..): {definition}"));
    let (selector, label) = inner.rsplit_once(',').unwrap();
    (selector.trim().to_string(), label.trim().to_string())
}

#[test]
fn dashboard_is_well_formed() {
    let d = dashboard();
    assert_eq!(d["schemaVersion"], 39);
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).unwrap();
    assert_eq!(var("DS_PROMETHEUS")["type"], "datasource");
    assert_eq!(var("DS_PROMETHEUS")["query"], "prometheus");
    for name in ["model", "dialect"] {
        let v = var(name);
        assert_eq!(
            (&v["type"], &v["multi"], &v["includeAll"]),
            (&json!("query"), &json!(true), &json!(true)),
            "{name}"
        );
        assert!(v["definition"]
            .as_str()
            .unwrap()
            .starts_with("label_values("));
    }
    let mut ids = std::collections::HashSet::new();
    for p in panels(&d) {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id {}",
            p["id"]
        );
        if p["type"] == "row" {
            continue;
        }
        let ds = json!({"type": "prometheus", "uid": "${DS_PROMETHEUS}"});
        assert_eq!(p["datasource"], ds, "{}", p["title"]);
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"], ds, "{}", p["title"]);
        }
    }
    for Query { panel, expr, .. } in queries(&d) {
        // A multi-value variable expands to a regex (`a|b`), which only `=~` matches.
        for var in ["$model", "$dialect"] {
            let uses = expr.matches(var).count();
            let regex_uses = expr.matches(&format!("=~\"{var}\"")).count();
            assert_eq!(uses, regex_uses, "{panel}: {var} outside =~ in {expr}");
        }
        as_grafana_would(&expr);
    }
}

// ---- traffic ---------------------------------------------------------------------------

/// What the clients counted.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Counted {
    output_tokens: u64,
    ok_requests: u64,
    estimated_requests: u64,
    errors: u64,
}

impl AddAssign for Counted {
    fn add_assign(&mut self, o: Counted) {
        self.output_tokens += o.output_tokens;
        self.ok_requests += o.ok_requests;
        self.estimated_requests += o.estimated_requests;
        self.errors += o.errors;
    }
}

/// A sweep in each dialect through lingo, all of it expected to succeed.
async fn bench_traffic(base: &str) -> Counted {
    let mut counted = Counted::default();
    for (dialect, n) in [
        (Dialect::Sglang, 8),
        (Dialect::OpenaiCompletions, 4),
        (Dialect::OpenaiChat, 4),
    ] {
        let config = BenchConfig {
            url: base.to_string(),
            dialect,
            concurrency: vec![1, 4],
            requests_per_level: n,
            input_len: 32,
            output_len: 16,
            // No warmup, so every request is in the reports and the token total is exact.
            warmup: 0,
            timeout: Duration::from_secs(30),
            ..BenchConfig::default()
        };
        let levels: Vec<LevelReport> = lingo::bench::run(&config).await.unwrap();
        for l in &levels {
            assert_eq!(l.fail(), 0, "{dialect:?}: {:?}", l.errors());
            counted.output_tokens += l.total_tokens();
            counted.ok_requests += l.ok() as u64;
            counted.estimated_requests += l.estimated() as u64;
        }
    }
    counted
}

/// Traffic the bench does not make: a stream whose client asks for no usage (lingo asks the
/// upstream for it on the client's behalf, so the count is still exact), and a request lingo
/// refuses.
async fn side_traffic(base: &str) -> Counted {
    let http = client();
    let body = json!({"model": "mock-model", "prompt": "count these", "max_tokens": 8,
                      "ignore_eos": true, "stream": true});
    let resp = http
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let events = sse_events(&resp.text().await.unwrap());
    let chunks = events
        .iter()
        .filter(|e| {
            e["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count() as u64;
    assert_eq!(chunks, 8, "{events:?}");

    let refused = http
        .post(format!("{base}/generate"))
        .json(&json!({"sampling_params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    Counted {
        output_tokens: chunks,
        ok_requests: 1,
        estimated_requests: 0,
        errors: 1,
    }
}

// ---- the test --------------------------------------------------------------------------

#[tokio::test]
async fn dashboard_queries_answer_from_a_real_prometheus() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let mock_config = MockConfig {
        kind: MockKind::Vllm,
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(1),
        ..MockConfig::default()
    };
    let mock = mock_with(mock_config.clone()).await;
    // A second endpoint that resets its first three generation requests: round robin sends
    // it every other one, each is failed over to `mock` (the client sees nothing), and three
    // failures in a row eject it, so the fleet row's failover and ejection panels have data.
    let flaky = mock_with(mock_config).await;
    flaky.state.arm_fault(Some(FaultMode::Reset), 3);
    let mut config = config_for(&mock.url(), KindSetting::Vllm);
    let endpoints = [&mock, &flaky]
        .map(|m| EndpointConfig::new(&m.url(), KindSetting::Vllm))
        .to_vec();
    config.pools.insert(
        "lingo".into(),
        PoolConfig {
            policy: Policy::RoundRobin,
            endpoints,
            // Configured but chosen for none of this test's requests: its series exist from
            // the start (so the mirror panel answers) and no shadow request adds to the
            // counts checked below.
            mirror: Some(MirrorConfig {
                fraction: 1e-9,
                group: "shadow".into(),
                endpoints: vec![EndpointConfig::new(&mock.url(), KindSetting::Vllm)],
                max_in_flight: 1,
            }),
            ..PoolConfig::default()
        },
    );
    config.validate().unwrap();
    let base = lingo(config).await;
    let target: SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let prometheus = Prometheus::start(binary, target).await;
    prometheus.wait_for_scrapes(unix_now(), 1).await;

    // Two rounds with scrapes in between: every series exists in Prometheus before the second
    // round adds to it, so rates over the last minute are positive and quantiles are numbers.
    let mut counted = Counted::default();
    for _ in 0..2 {
        counted += bench_traffic(&base).await;
        counted += side_traffic(&base).await;
        prometheus.wait_for_scrapes(unix_now(), 2).await;
    }

    // (a) Every query of the dashboard answers, with numbers and the labels its legend shows.
    let d = dashboard();
    let mut failures = Vec::new();
    for q in queries(&d) {
        let result = prometheus.query(&as_grafana_would(&q.expr)).await;
        // The mock always reports counts, so nothing here is ever estimated: that panel
        // alone may be empty (its query is still checked for being valid PromQL below).
        if result.is_empty() && q.expr.contains("lingo_estimated_token_requests_total") {
            continue;
        }
        if result.is_empty() {
            failures.push(format!("{}: no data from {}", q.panel, q.expr));
        }
        for s in &result {
            let finite = sample_value(s).is_some_and(f64::is_finite);
            let labelled = q.legend_labels.iter().all(|l| s["metric"].get(l).is_some());
            if !finite || !labelled {
                failures.push(format!("{}: {s} from {}", q.panel, q.expr));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The variables' values, as Grafana's label_values() would fetch them.
    let mut values = std::collections::BTreeMap::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] != "query" {
            continue;
        }
        let (selector, label) = label_values_args(v["definition"].as_str().unwrap());
        let selector = as_grafana_would(&selector);
        let data = prometheus
            .api(&format!("label/{label}/values"), &[("match[]", &selector)])
            .await;
        values.insert(v["name"].as_str().unwrap().to_string(), data);
    }
    // Model labels come from a closed set: the upstream's model, or `other` (the refused
    // request named none).
    assert!(
        values["model"] == json!(["mock-model"])
            || values["model"] == json!(["mock-model", "other"]),
        "model values: {}",
        values["model"]
    );
    assert_eq!(
        values["dialect"],
        json!(["openai-chat", "openai-completions", "sglang"])
    );

    // Every metric lingo exports has a place on the dashboard.
    let exposition = scrape(&base).await;
    let all_exprs: String = queries(&d).into_iter().map(|q| q.expr + "\n").collect();
    for family in exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
    {
        assert!(all_exprs.contains(family), "no panel shows {family}");
    }

    // (b) What Prometheus saw equals what the clients counted.
    let seen = Counted {
        output_tokens: prometheus
            .scalar("sum(lingo_generation_tokens_total)")
            .await as u64,
        ok_requests: prometheus
            .scalar("sum(lingo_requests_total{outcome=\"ok\"})")
            .await as u64,
        estimated_requests: prometheus
            .scalar("sum(lingo_estimated_token_requests_total) or vector(0)")
            .await as u64,
        errors: prometheus.scalar("sum(lingo_errors_total)").await as u64,
    };
    assert_eq!(seen, counted);
    // The three resets were failed over, each once, and took the flaky endpoint out.
    let retried = prometheus.scalar("sum(lingo_endpoint_retries_total)").await;
    assert_eq!(retried, 3.0);
    let ejected = prometheus
        .scalar("sum(lingo_endpoint_ejections_total)")
        .await;
    assert!(ejected >= 1.0, "{ejected}");
    prometheus.stop().await;
}

// ---- vLLM's own dashboard -----------------------------------------------------------------

/// (panel, query) from the fixture copied out of vLLM's dashboard.
fn vllm_dashboard_queries() -> Vec<(String, String)> {
    let text = include_str!("fixtures/vllm-dashboard-queries.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (panel, expr) = l.split_once(" | ").unwrap();
            (panel.to_string(), expr.to_string())
        })
        .collect()
}

/// vLLM's own Grafana dashboard, every query, answered through lingo alone: lingo in front
/// of two mocks that export vLLM's engine gauges and histograms (a queue, a prefix cache).
#[tokio::test]
async fn vllm_dashboard_queries_answer_through_lingo_alone() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let mock_config = MockConfig {
        kind: MockKind::Vllm,
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(1),
        cache_tokens: 4096,
        prefill_per_token: Duration::from_micros(20),
        max_running: Some(2),
        ..MockConfig::default()
    };
    let a = mock_with(mock_config.clone()).await;
    let b = mock_with(mock_config).await;
    let mut config = config_for(&a.url(), KindSetting::Vllm);
    config.pools.insert(
        "vllm".into(),
        PoolConfig {
            policy: Policy::LeastOutstanding,
            endpoints: [&a, &b]
                .map(|m| EndpointConfig::new(&m.url(), KindSetting::Vllm))
                .to_vec(),
            ..PoolConfig::default()
        },
    );
    config.metrics.compat = Some(lingo::config::MetricsCompat::Vllm);
    config.load.interval = Duration::from_millis(100);
    config.validate().unwrap();
    // Through `serve`, as `lingo serve` runs: its warm-up reads the model lists and starts
    // the probes and load polls before the first request.
    let target = common::serving(config).await;
    let base = format!("http://{target}");
    let prometheus = Prometheus::start(binary, target).await;
    prometheus.wait_for_scrapes(unix_now(), 1).await;

    // The model picker's values exist before any request.
    let picker = prometheus
        .api(
            "label/model_name/values",
            &[("match[]", "{__name__=~\"vllm:.+\"}")],
        )
        .await;
    assert_eq!(picker, json!(["mock-model"]), "{picker}");

    for _ in 0..2 {
        bench_traffic(&base).await;
        prometheus.wait_for_scrapes(unix_now(), 2).await;
    }
    let mut failures = Vec::new();
    for (panel, expr) in vllm_dashboard_queries() {
        let q = expr
            .replace("$model_name", "mock-model")
            .replace("$__rate_interval", "1m");
        let result = prometheus.query(&q).await;
        if result.is_empty() {
            failures.push(format!("{panel}: no data from {q}"));
        }
        for s in &result {
            if !sample_value(s).is_some_and(f64::is_finite) {
                failures.push(format!("{panel}: {s} from {q}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    prometheus.stop().await;
}
