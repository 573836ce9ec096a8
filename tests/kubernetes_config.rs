//! The fleet config shipped in `deploy/kubernetes/configmap.yaml` is a valid lingo config:
//! every key known, `validate()` passes, and it makes the pool the manifests describe.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

use lingo::config::Config;

/// The `lingo.toml: |` block of the ConfigMap, dedented.
fn embedded_toml(yaml: &str) -> String {
    let mut lines = yaml
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("lingo.toml: |"));
    lines.next().expect("the ConfigMap has a lingo.toml key");
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .collect();
    body.iter()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_configmap_is_a_valid_fleet_config() {
    let yaml = std::fs::read_to_string("deploy/kubernetes/configmap.yaml").unwrap();
    let text = embedded_toml(&yaml);
    let config: Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    config.validate().unwrap();
    let pool = &config.pools["qwen"];
    assert_eq!(pool.models, ["Qwen/Qwen3-8B"]);
    assert!(pool.endpoints[0].url.starts_with("dns://"));
    assert_eq!(config.listen.port(), 30000);
    assert_eq!(config.metrics.listen.map(|a| a.port()), Some(9090));
}
