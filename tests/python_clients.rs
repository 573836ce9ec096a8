//! Real clients against lingo: the official `openai`, `anthropic` and `ollama` Python SDKs and
//! TGI's `text-generation` client,
//! and a stdlib script written the way SGLang users write theirs, against lingo in front of
//! the mocks.
//! Without Python or the SDK the test is skipped, except under CI (`CI` set), where
//! `.ci/run` installs them and a skip would hide a failure.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::process::Command;

use common::*;
use lingo::mock::MockKind;
use lingo::upstream::KindSetting;

fn script(name: &str) -> String {
    format!("{}/tests/python/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Run a script off the runtime's threads; `None` means skipped.
async fn run(args: Vec<String>) -> Option<std::process::Output> {
    let out = tokio::task::spawn_blocking(move || Command::new("python3").args(&args).output())
        .await
        .unwrap();
    match out {
        Ok(o) if o.status.code() == Some(3) && std::env::var_os("CI").is_none() => {
            eprintln!("skipped: {}", String::from_utf8_lossy(&o.stdout));
            None
        }
        Ok(o) => Some(o),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: python3 not runnable: {e}");
            None
        }
        Err(e) => panic!("python3 not runnable under CI: {e}"),
    }
}

fn assert_ok(out: std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "script failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.starts_with("ok:"), "{stdout}");
}

#[tokio::test]
async fn sglang_style_script_against_vllm() {
    let mock = mock(MockKind::Vllm).await;
    let base = lingo(config_for(&mock.url(), KindSetting::Auto)).await;
    let args = vec![
        script("sglang_style_client.py"),
        "--base".into(),
        base,
        "--output-len".into(),
        "24".into(),
    ];
    if let Some(out) = run(args).await {
        assert_ok(out);
        let stats = mock.state.stats();
        assert_eq!(stats.completion_tokens, 8 * 24 + 2 * 4, "{stats:?}");
    }
}

/// Run an SDK script against lingo in front of each mock kind. `strict` says whether that
/// kind rejects unknown model names (so the script also checks the not-found error).
async fn sdk_against(name: &str, kinds: &[MockKind], strict: fn(MockKind) -> bool, extra: &[&str]) {
    for &kind in kinds {
        let mock = mock(kind).await;
        let base = lingo(config_for(&mock.url(), kind_setting(kind))).await;
        let mut args = vec![
            script(name),
            "--base".into(),
            base,
            "--model".into(),
            "mock-model".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        if strict(kind) {
            args.push("--strict-model".into());
        }
        if let Some(out) = run(args).await {
            assert_ok(out);
        }
    }
}

#[tokio::test]
async fn openai_sdk_against_lingo() {
    // The mock's tokenizer counts words: "one two three" is 3 prompt tokens.
    let kinds = [MockKind::Vllm, MockKind::Sglang];
    sdk_against(
        "openai_sdk_client.py",
        &kinds,
        |k| k == MockKind::Vllm,
        &["--prompt-tokens", "3"],
    )
    .await;
}

#[tokio::test]
async fn anthropic_sdk_against_lingo() {
    let kinds = [MockKind::Vllm, MockKind::Sglang];
    sdk_against(
        "anthropic_sdk_client.py",
        &kinds,
        |k| k == MockKind::Vllm,
        &[],
    )
    .await;
}

#[tokio::test]
async fn tgi_client_against_lingo() {
    // Translated (vLLM, SGLang's native /generate) and passed through (TGI).
    let kinds = [MockKind::Vllm, MockKind::Sglang, MockKind::Tgi];
    for kind in kinds {
        let mock = mock(kind).await;
        let base = lingo(config_for(&mock.url(), kind_setting(kind))).await;
        let args = vec![script("tgi_sdk_client.py"), "--base".into(), base];
        if let Some(out) = run(args).await {
            assert_ok(out);
        }
    }
}

#[tokio::test]
async fn ollama_sdk_against_lingo() {
    // Translated (vLLM, llama.cpp) and passed through (Ollama).
    let kinds = [MockKind::Vllm, MockKind::Llamacpp, MockKind::Ollama];
    sdk_against(
        "ollama_sdk_client.py",
        &kinds,
        |k| k != MockKind::Llamacpp,
        &[],
    )
    .await;
}
