//! The mock server over real sockets: exact counts, wire shapes per kind, stream controls.

// Helpers are test code too (clippy.toml allows unwrap in tests, but only sees #[test] fns).
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lingo::mock::{router, FailMode, MockConfig, MockKind, MockState};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// Every test runs under this bound, so a hung stream fails instead of stalling the suite.
async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(Duration::from_secs(20), test)
        .await
        .expect("test timed out");
}

struct Mock {
    base: String,
    state: Arc<MockState>,
    client: reqwest::Client,
}

async fn spawn(config: MockConfig) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = MockState::new(config);
    let app = router(Arc::clone(&state));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Mock {
        base: format!("http://{addr}"),
        state,
        client: reqwest::Client::new(),
    }
}

async fn vllm() -> Mock {
    spawn(MockConfig::default()).await
}

async fn sglang() -> Mock {
    spawn(MockConfig {
        kind: MockKind::Sglang,
        ..MockConfig::default()
    })
    .await
}

impl Mock {
    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// POST and return status and JSON body.
    async fn call(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = self.post(path, body).await;
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    async fn ok(&self, path: &str, body: Value) -> Value {
        let (status, value) = self.call(path, body).await;
        assert_eq!(status, 200, "{value}");
        value
    }

    async fn stream(&self, path: &str, body: Value) -> Sse {
        let resp = self.post(path, body).await;
        assert_eq!(resp.status().as_u16(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Sse {
            resp,
            buf: Vec::new(),
        }
    }
}

/// Reads `data:` events off a response as they arrive.
struct Sse {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

#[derive(Debug, PartialEq)]
enum Event {
    Json(Value),
    Done,
}

impl Event {
    fn json(&self) -> &Value {
        match self {
            Event::Json(v) => v,
            Event::Done => panic!("expected a JSON event, got [DONE]"),
        }
    }
}

impl Sse {
    /// The next event; `Ok(None)` at a clean end, `Err` if the connection broke.
    async fn try_next(&mut self) -> Result<Option<Event>, reqwest::Error> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buf.drain(..at + 2).collect();
                let line = std::str::from_utf8(&raw).unwrap().trim_end();
                let data = line.strip_prefix("data: ").expect("event without `data: `");
                return Ok(Some(match data {
                    "[DONE]" => Event::Done,
                    json => Event::Json(serde_json::from_str(json).unwrap()),
                }));
            }
            match self.resp.chunk().await? {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => {
                    assert!(self.buf.is_empty(), "trailing bytes");
                    return Ok(None);
                }
            }
        }
    }

    async fn next(&mut self) -> Option<Event> {
        self.try_next().await.unwrap()
    }

    /// All remaining events; the last must be `[DONE]`, which is not returned.
    async fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(event) = self.next().await {
            match event {
                Event::Json(v) => out.push(v),
                Event::Done => {
                    assert_eq!(self.next().await, None, "events after [DONE]");
                    return out;
                }
            }
        }
        panic!("stream ended without [DONE]");
    }
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

fn keys(v: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

// ---------------------------------------------------------------- counts and generation

#[tokio::test]
async fn usage_counts_prompt_words_and_max_tokens_exactly() {
    bounded(async {
        let mock = vllm().await;
        let body = json!({"prompt": "a b c  d\ne", "max_tokens": 40, "ignore_eos": true});
        let r = mock.ok("/v1/completions", body).await;
        assert_eq!(
            r["usage"],
            json!({"prompt_tokens": 5, "completion_tokens": 40,
            "total_tokens": 45, "prompt_tokens_details": null})
        );
        let choice = &r["choices"][0];
        assert_eq!(choice["finish_reason"], "length");
        assert_eq!(choice["stop_reason"], Value::Null);
        assert_eq!(words(choice["text"].as_str().unwrap()), 40);
        let stats = mock.state.stats();
        assert_eq!(
            (stats.requests, stats.completed, stats.in_flight),
            (1, 1, 0)
        );
        assert_eq!((stats.prompt_tokens, stats.completion_tokens), (5, 40));
    })
    .await;
}

#[tokio::test]
async fn completions_default_to_16_tokens() {
    bounded(async {
        let mock = vllm().await;
        let r = mock.ok("/v1/completions", json!({"prompt": "hello"})).await;
        assert_eq!(r["usage"]["completion_tokens"], 16);
        assert_eq!(r["model"], "mock-model");
        assert_eq!(r["object"], "text_completion");
        assert!(r["id"].as_str().unwrap().starts_with("cmpl-"));
    })
    .await;
}

#[tokio::test]
async fn eos_position_is_stable_and_in_range() {
    bounded(async {
        let mock = vllm().await;
        let mut lengths = Vec::new();
        for p in ["one", "two words", "the red fox ran", "x y z"] {
            let body = json!({"prompt": p, "max_tokens": 1000});
            let a = mock.ok("/v1/completions", body.clone()).await;
            let b = mock.ok("/v1/completions", body).await;
            assert_eq!(a["choices"], b["choices"], "output must be deterministic");
            let n = a["usage"]["completion_tokens"].as_u64().unwrap();
            assert!((16..=255).contains(&n), "EOS at {n}");
            let choice = &a["choices"][0];
            assert_eq!(choice["finish_reason"], "stop");
            assert_eq!(choice["stop_reason"], Value::Null);
            // The EOS token counts but has no text.
            assert_eq!(words(choice["text"].as_str().unwrap()) as u64, n - 1);
            lengths.push(n);
        }
        lengths.dedup();
        assert!(
            lengths.len() > 1,
            "EOS positions should vary with the prompt"
        );

        let reseeded = spawn(MockConfig {
            eos_seed: 7,
            ..MockConfig::default()
        })
        .await;
        let mut moved = false;
        for p in ["one", "two words", "the red fox ran", "x y z"] {
            let body = json!({"prompt": p, "max_tokens": 1000});
            let a = mock.ok("/v1/completions", body.clone()).await;
            let b = reseeded.ok("/v1/completions", body).await;
            moved |= a["usage"] != b["usage"];
        }
        assert!(moved, "eos_seed should move EOS positions");
    })
    .await;
}

#[tokio::test]
async fn min_tokens_pushes_eos_later() {
    bounded(async {
        let mock = vllm().await;
        let body = json!({"prompt": "p", "max_tokens": 400, "min_tokens": 300});
        let r = mock.ok("/v1/completions", body).await;
        assert_eq!(r["usage"]["completion_tokens"], 301);
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
    })
    .await;
}

/// Token count at which `stop` first completes in `text` (made of " word" tokens).
fn tokens_to_stop(text: &str, stop: &str) -> (usize, usize) {
    let at = text.find(stop).unwrap();
    let (mut end, mut tokens) = (0, 0);
    for word in text.split(' ').skip(1) {
        end += 1 + word.len();
        tokens += 1;
        if end >= at + stop.len() {
            break;
        }
    }
    (at, tokens)
}

#[tokio::test]
async fn stop_strings_are_trimmed_unless_asked_to_keep() {
    bounded(async {
        let mock = vllm().await;
        let base = json!({"prompt": "stop test", "max_tokens": 30, "ignore_eos": true});
        let full = mock.ok("/v1/completions", base.clone()).await;
        let full = full["choices"][0]["text"].as_str().unwrap().to_owned();
        let stop = format!(" {}", full.split(' ').nth(8).unwrap());
        let (at, tokens) = tokens_to_stop(&full, &stop);

        let mut body = base.clone();
        body["stop"] = json!([stop, "never-generated"]);
        let r = mock.ok("/v1/completions", body.clone()).await;
        let choice = &r["choices"][0];
        assert_eq!(choice["text"], &full[..at]);
        assert_eq!(choice["finish_reason"], "stop");
        assert_eq!(choice["stop_reason"], stop.as_str());
        assert_eq!(r["usage"]["completion_tokens"], tokens);

        body["include_stop_str_in_output"] = json!(true);
        let kept = mock.ok("/v1/completions", body).await;
        assert_eq!(kept["choices"][0]["text"], &full[..at + stop.len()]);
    })
    .await;
}

#[tokio::test]
async fn stop_token_ids_end_the_choice() {
    bounded(async {
        let mock = vllm().await;
        let base = json!({"prompt": "ids", "max_tokens": 20, "ignore_eos": true,
            "return_token_ids": true});
        let full = mock.ok("/v1/completions", base.clone()).await;
        let ids: Vec<u64> =
            serde_json::from_value(full["choices"][0]["token_ids"].clone()).unwrap();
        assert_eq!(ids.len(), 20);
        let target = ids[6];
        let first = ids.iter().position(|id| *id == target).unwrap();
        let mut body = base;
        body["stop_token_ids"] = json!([target]);
        let r = mock.ok("/v1/completions", body).await;
        assert_eq!(r["choices"][0]["stop_reason"], target);
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
        assert_eq!(r["usage"]["completion_tokens"], first + 1);
        // The stop token's text is left out, like vLLM without include_stop_str_in_output.
        assert_eq!(words(r["choices"][0]["text"].as_str().unwrap()), first);
    })
    .await;
}

#[tokio::test]
async fn n_and_batch_choices_are_prompt_major() {
    bounded(async {
        let mock = vllm().await;
        let body = json!({"prompt": ["a b", "c d e"], "n": 2, "max_tokens": 5, "ignore_eos": true});
        let r = mock.ok("/v1/completions", body).await;
        let choices = r["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 4);
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(c["index"], i);
        }
        assert_ne!(
            choices[0]["text"], choices[1]["text"],
            "samples must differ"
        );
        assert_ne!(
            choices[0]["text"], choices[2]["text"],
            "prompts must differ"
        );
        // Prompt tokens count once per prompt, completions per choice.
        assert_eq!(r["usage"]["prompt_tokens"], 5);
        assert_eq!(r["usage"]["completion_tokens"], 20);

        let ids = json!({"prompt": [[1000, 1001], [1002]], "max_tokens": 3});
        let r = mock.ok("/v1/completions", ids).await;
        assert_eq!(r["choices"].as_array().unwrap().len(), 2);
        assert_eq!(r["usage"]["prompt_tokens"], 3);
    })
    .await;
}

#[tokio::test]
async fn text_and_token_prompts_generate_alike() {
    bounded(async {
        let mock = vllm().await;
        let tok = mock.ok("/tokenize", json!({"prompt": "the red fox"})).await;
        assert_eq!(tok["count"], 3);
        assert_eq!(tok["max_model_len"], 32768);
        assert_eq!(tok["token_strs"], Value::Null);
        let ids = tok["tokens"].clone();
        let detok = mock.ok("/detokenize", json!({"tokens": ids})).await;
        assert_eq!(detok, json!({"prompt": " the red fox"}));
        let a = mock
            .ok("/v1/completions", json!({"prompt": "the red fox"}))
            .await;
        let b = mock.ok("/v1/completions", json!({"prompt": ids})).await;
        assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    })
    .await;
}

// ---------------------------------------------------------------- vLLM streams

#[tokio::test]
async fn completion_stream_matches_the_plain_response() {
    bounded(async {
        let mock = vllm().await;
        let body = json!({"prompt": "stream me", "max_tokens": 300, "n": 2});
        let plain = mock.ok("/v1/completions", body.clone()).await;
        let mut stream_body = body;
        stream_body["stream"] = json!(true);
        let chunks = mock
            .stream("/v1/completions", stream_body)
            .await
            .rest()
            .await;
        let mut texts = [String::new(), String::new()];
        let mut finished = [0, 0];
        for chunk in &chunks {
            // `usage: null` on every chunk, as vLLM's exclude_unset=False serialisation has it.
            assert_eq!(
                keys(chunk),
                ["choices", "created", "id", "model", "object", "usage"]
            );
            assert!(chunk["usage"].is_null());
            assert_eq!(chunk["object"], "text_completion");
            assert_eq!(chunk["id"], chunks[0]["id"]);
            let choice = &chunk["choices"][0];
            assert_eq!(
                keys(choice),
                ["finish_reason", "index", "logprobs", "stop_reason", "text"]
            );
            let i = choice["index"].as_u64().unwrap() as usize;
            assert_eq!(finished[i], 0, "chunk after the finishing one");
            texts[i].push_str(choice["text"].as_str().unwrap());
            if !choice["finish_reason"].is_null() {
                finished[i] += 1;
                assert_eq!(
                    choice["finish_reason"],
                    plain["choices"][i]["finish_reason"]
                );
            }
        }
        assert_eq!(finished, [1, 1]);
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(text, plain["choices"][i]["text"].as_str().unwrap());
        }
    })
    .await;
}

#[tokio::test]
async fn include_usage_adds_a_final_usage_chunk() {
    bounded(async {
        let mock = vllm().await;
        let body = json!({"prompt": "u v w", "max_tokens": 7, "ignore_eos": true, "stream": true,
            "stream_options": {"include_usage": true}});
        let chunks = mock.stream("/v1/completions", body).await.rest().await;
        let (last, content) = chunks.split_last().unwrap();
        assert_eq!(content.len(), 7);
        for chunk in content {
            assert_eq!(chunk["usage"], Value::Null);
            assert!(chunk.as_object().unwrap().contains_key("usage"));
        }
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["prompt_tokens"], 3);
        assert_eq!(last["usage"]["completion_tokens"], 7);
        assert_eq!(last["usage"]["total_tokens"], 10);
        let stats = mock.state.stats();
        assert_eq!(
            (
                stats.completed,
                stats.prompt_tokens,
                stats.completion_tokens
            ),
            (1, 3, 7)
        );
    })
    .await;
}

#[tokio::test]
async fn continuous_usage_stats_count_per_choice() {
    bounded(async {
        let mock = vllm().await;
        let body = json!({"prompt": "u v", "max_tokens": 6, "ignore_eos": true, "stream": true,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
        let chunks = mock.stream("/v1/completions", body).await.rest().await;
        for (i, chunk) in chunks[..6].iter().enumerate() {
            assert_eq!(chunk["usage"]["completion_tokens"], i + 1);
            assert_eq!(chunk["usage"]["prompt_tokens"], 2);
        }
        assert_eq!(chunks[6]["usage"]["completion_tokens"], 6);
    })
    .await;
}

#[tokio::test]
async fn tokens_per_chunk_groups_tokens() {
    bounded(async {
        let mock = spawn(MockConfig {
            tokens_per_chunk: 4,
            ..MockConfig::default()
        })
        .await;
        let body = json!({"prompt": "g", "max_tokens": 10, "ignore_eos": true, "stream": true,
            "return_token_ids": true});
        let chunks = mock.stream("/v1/completions", body).await.rest().await;
        let sizes: Vec<usize> = chunks
            .iter()
            .map(|c| c["choices"][0]["token_ids"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [4, 4, 2]);
        assert_eq!(
            chunks[0]["choices"][0]["prompt_token_ids"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(chunks[1]["choices"][0].get("prompt_token_ids").is_none());
    })
    .await;
}

#[tokio::test]
async fn chat_streams_role_then_content() {
    bounded(async {
        let mock = vllm().await;
        let messages = json!([{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi there you"}]}]);
        let body = json!({"messages": messages, "max_tokens": 5, "ignore_eos": true});
        let plain = mock.ok("/v1/chat/completions", body.clone()).await;
        assert_eq!(plain["object"], "chat.completion");
        assert_eq!(plain["usage"]["prompt_tokens"], 2 + 3 + 2 * 3);
        assert_eq!(plain["choices"][0]["message"]["role"], "assistant");
        let mut body = body;
        body["stream"] = json!(true);
        let chunks = mock.stream("/v1/chat/completions", body).await.rest().await;
        assert_eq!(chunks[0]["object"], "chat.completion.chunk");
        assert_eq!(
            chunks[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        let text: String = chunks[1..]
            .iter()
            .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(
            text,
            plain["choices"][0]["message"]["content"].as_str().unwrap()
        );
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert!(chunks[1]["choices"][0].get("stop_reason").is_none());
        assert!(last["choices"][0].get("stop_reason").is_some());
    })
    .await;
}

#[tokio::test]
async fn chat_without_max_tokens_runs_to_the_context() {
    bounded(async {
        let mock = spawn(MockConfig {
            max_model_len: 64,
            ..MockConfig::default()
        })
        .await;
        let body = json!({"messages": [{"role": "user", "content": "a b c d e"}],
            "ignore_eos": true});
        let r = mock.ok("/v1/chat/completions", body).await;
        assert_eq!(r["usage"]["prompt_tokens"], 8);
        assert_eq!(r["usage"]["completion_tokens"], 64 - 8);
        assert_eq!(r["choices"][0]["finish_reason"], "length");
    })
    .await;
}

#[tokio::test]
async fn logprobs_echo_and_token_ids() {
    bounded(async {
        let mock = vllm().await;
        let body = json!({"prompt": "lp", "max_tokens": 4, "ignore_eos": true, "logprobs": 2,
            "echo": true, "return_token_ids": true});
        let r = mock.ok("/v1/completions", body.clone()).await;
        let choice = &r["choices"][0];
        assert!(choice["text"].as_str().unwrap().starts_with("lp "));
        let lp = &choice["logprobs"];
        assert_eq!(lp["tokens"].as_array().unwrap().len(), 4);
        assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2);
        assert_eq!(lp["text_offset"][0], 2);
        assert_eq!(choice["token_ids"].as_array().unwrap().len(), 4);
        assert_eq!(choice["prompt_token_ids"].as_array().unwrap().len(), 1);
        assert_eq!(
            mock.ok("/v1/completions", body).await["choices"],
            r["choices"]
        );

        let chat = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
            "logprobs": true, "top_logprobs": 3});
        let r = mock.ok("/v1/chat/completions", chat).await;
        let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
        assert_eq!(content.len(), 3);
        assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 3);
        assert_eq!(content[0]["top_logprobs"][0]["token"], content[0]["token"]);
    })
    .await;
}

// ---------------------------------------------------------------- SGLang native

#[tokio::test]
async fn sglang_generate_single_batch_and_n_shapes() {
    bounded(async {
        let mock = sglang().await;
        let sp = json!({"max_new_tokens": 6, "ignore_eos": true});
        let one = mock
            .ok("/generate", json!({"text": "a b c", "sampling_params": sp}))
            .await;
        assert_eq!(keys(&one), ["meta_info", "output_ids", "text"]);
        let meta = &one["meta_info"];
        assert_eq!(
            meta["finish_reason"],
            json!({"type": "length", "length": 6})
        );
        assert_eq!(
            (
                meta["prompt_tokens"].clone(),
                meta["completion_tokens"].clone()
            ),
            (json!(3), json!(6))
        );
        assert_eq!(meta["cached_tokens"], 0);
        assert!(meta["e2e_latency"].is_f64());
        assert_eq!(meta["id"].as_str().unwrap().len(), 32);
        assert_eq!(one["output_ids"].as_array().unwrap().len(), 6);
        assert_eq!(words(one["text"].as_str().unwrap()), 6);

        let batch = mock
            .ok(
                "/generate",
                json!({"text": ["a b c"], "sampling_params": sp,
            "rid": "r"}),
            )
            .await;
        let batch = batch.as_array().unwrap();
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0]["text"], one["text"]);
        assert_eq!(batch[0]["meta_info"]["id"], "r_0");

        let sp_n = json!({"max_new_tokens": 4, "ignore_eos": true, "n": 2});
        let many = mock
            .ok(
                "/generate",
                json!({"input_ids": [[1000, 1001], [1002]],
            "sampling_params": sp_n}),
            )
            .await;
        let many = many.as_array().unwrap();
        assert_eq!(many.len(), 4);
        let prompts: Vec<u64> = many
            .iter()
            .map(|o| o["meta_info"]["prompt_tokens"].as_u64().unwrap())
            .collect();
        assert_eq!(prompts, [2, 2, 1, 1]);
        assert_ne!(many[0]["text"], many[1]["text"]);
        let stats = mock.state.stats();
        assert_eq!(
            (stats.prompt_tokens, stats.completion_tokens),
            (3 + 3 + 6, 6 + 6 + 16)
        );
    })
    .await;
}

#[tokio::test]
async fn sglang_finish_reasons() {
    bounded(async {
        let mock = sglang().await;
        let eos = mock
            .ok(
                "/generate",
                json!({"text": "q", "sampling_params": {"max_new_tokens": 1000}}),
            )
            .await;
        assert_eq!(
            eos["meta_info"]["finish_reason"],
            json!({"type": "stop", "matched": 2})
        );
        let n = eos["meta_info"]["completion_tokens"].as_u64().unwrap();
        assert!((16..=255).contains(&n));
        assert_eq!(eos["output_ids"].as_array().unwrap().last().unwrap(), 2);

        let default = mock
            .ok(
                "/generate",
                json!({"text": "q", "sampling_params": {"ignore_eos": true}}),
            )
            .await;
        assert_eq!(default["meta_info"]["completion_tokens"], 128);

        let text = eos["text"].as_str().unwrap();
        let stop = format!(" {}", text.split(' ').nth(3).unwrap());
        let (at, tokens) = tokens_to_stop(text, &stop);
        let r = mock
            .ok(
                "/generate",
                json!({"text": "q", "sampling_params": {"max_new_tokens": 1000,
            "stop": stop}}),
            )
            .await;
        assert_eq!(
            r["meta_info"]["finish_reason"],
            json!({"type": "stop", "matched": stop})
        );
        assert_eq!(r["text"], &text[..at]);
        assert_eq!(r["meta_info"]["completion_tokens"], tokens);
    })
    .await;
}

#[tokio::test]
async fn sglang_stream_is_cumulative() {
    bounded(async {
        let mock = sglang().await;
        let body = json!({"text": "c", "stream": true, "sampling_params": {"max_new_tokens": 8,
            "ignore_eos": true}});
        let chunks = mock.stream("/generate", body).await.rest().await;
        assert_eq!(chunks.len(), 8);
        let mut previous = String::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let text = chunk["text"].as_str().unwrap();
            assert!(text.starts_with(&previous) && text.len() > previous.len());
            previous = text.to_owned();
            assert_eq!(chunk["output_ids"].as_array().unwrap().len(), i + 1);
            assert_eq!(chunk["meta_info"]["completion_tokens"], i + 1);
            assert!(chunk.get("index").is_none());
            let finish = &chunk["meta_info"]["finish_reason"];
            assert_eq!(finish.is_null(), i < 7);
        }

        let body = json!({"text": ["a", "b"], "stream": true, "sampling_params": {"max_new_tokens": 3,
            "ignore_eos": true, "n": 2}});
        let chunks = mock.stream("/generate", body).await.rest().await;
        assert_eq!(chunks.len(), 12);
        let mut seen = [0u64; 4];
        for chunk in &chunks {
            let index = chunk["index"].as_u64().unwrap() as usize;
            seen[index] += 1;
            assert_eq!(chunk["meta_info"]["completion_tokens"], seen[index]);
        }
        assert_eq!(seen, [3; 4]);
    })
    .await;
}

#[tokio::test]
async fn sglang_logprobs_in_meta_info() {
    bounded(async {
        let mock = sglang().await;
        let body = json!({"text": "l m", "return_logprob": true, "top_logprobs_num": 2,
            "return_text_in_logprobs": true, "sampling_params": {"max_new_tokens": 3, "ignore_eos": true}});
        let r = mock.ok("/generate", body).await;
        let meta = &r["meta_info"];
        let out = meta["output_token_logprobs"].as_array().unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0][1], r["output_ids"][0]);
        assert!(out[0][0].as_f64().unwrap() <= 0.0);
        assert!(out[0][2].is_string());
        assert_eq!(meta["output_top_logprobs"][0].as_array().unwrap().len(), 2);
        assert_eq!(meta["input_token_logprobs"], json!([]));
    })
    .await;
}

#[tokio::test]
async fn sglang_aux_endpoints() {
    bounded(async {
        let mock = sglang().await;
        let get = |path: &str| mock.client.get(format!("{}{path}", mock.base)).send();
        let info = get("/get_model_info")
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(info["model_path"], "mock-model");
        assert_eq!(info["is_generation"], true);
        let server = get("/server_info")
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(server["incremental_streaming_output"], false);
        assert_eq!(server["internal_states"].as_array().unwrap().len(), 1);
        let models = get("/v1/models")
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(models["data"][0]["owned_by"], "sglang");
        assert_eq!(models["data"][0]["max_model_len"], 32768);
        let flushed = mock
            .client
            .post(format!("{}/flush_cache", mock.base))
            .send()
            .await
            .unwrap();
        assert_eq!(flushed.text().await.unwrap(), "Cache flushed.\n");
        assert_eq!(get("/health_generate").await.unwrap().status(), 200);
        let tok = mock
            .ok("/v1/tokenize", json!({"prompt": "the red fox"}))
            .await;
        assert_eq!(keys(&tok), ["count", "max_model_len", "tokens"]);
        let detok = mock
            .ok("/v1/detokenize", json!({"tokens": tok["tokens"]}))
            .await;
        assert_eq!(detok, json!({"text": " the red fox"}));
    })
    .await;
}

#[tokio::test]
async fn sglang_openai_routes_use_matched_stop_and_flat_errors() {
    bounded(async {
        let mock = sglang().await;
        let r = mock
            .ok(
                "/v1/completions",
                json!({"model": "anything", "prompt": "s",
            "max_tokens": 1000}),
            )
            .await;
        assert_eq!(r["model"], "anything");
        let choice = &r["choices"][0];
        assert_eq!(choice["matched_stop"], 2);
        assert!(choice.get("stop_reason").is_none());
        assert_eq!(r["usage"]["reasoning_tokens"], 0);
        let (status, err) = mock
            .call(
                "/v1/completions",
                json!({"prompt": "s", "max_tokens": 40000}),
            )
            .await;
        assert_eq!(status, 400);
        assert_eq!(keys(&err), ["code", "message", "object", "param", "type"]);
        assert_eq!(err["object"], "error");
        assert_eq!(err["code"], 400);
    })
    .await;
}

#[tokio::test]
async fn sglang_error_shapes() {
    bounded(async {
        let mock = sglang().await;
        let bad_key = json!({"text": "x", "sampling_params": {"max_tokens": 5}});
        let (status, err) = mock.call("/generate", bad_key.clone()).await;
        assert_eq!(status, 400);
        assert_eq!(keys(&err), ["error"]);
        assert_eq!(keys(&err["error"]), ["message"]);

        let mut streamed = bad_key;
        streamed["stream"] = json!(true);
        let mut sse = mock.stream("/generate", streamed).await;
        let event = sse.next().await.unwrap();
        assert_eq!(keys(&event.json()["error"]), ["message"]);
        assert_eq!(sse.next().await, Some(Event::Done));

        let (status, err) = mock.call("/generate", json!({"text": 5})).await;
        assert_eq!(status, 400);
        assert_eq!(
            (err["object"].clone(), err["type"].clone()),
            (json!("error"), json!("Bad Request"))
        );

        let too_long = json!({"text": "x", "sampling_params": {"max_new_tokens": 40000}});
        let (status, err) = mock.call("/generate", too_long).await;
        assert_eq!(status, 400);
        assert!(err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum context length"));
        assert_eq!(mock.state.stats().failed, 4);
    })
    .await;
}

// ---------------------------------------------------------------- vLLM errors

#[tokio::test]
async fn vllm_error_shapes() {
    bounded(async {
        let mock = vllm().await;
        let (status, err) = mock
            .call("/v1/completions", json!({"model": "other", "prompt": "x"}))
            .await;
        assert_eq!(status, 404);
        assert_eq!(
            err,
            json!({"error": {"message": "The model `other` does not exist.",
            "type": "NotFoundError", "param": null, "code": 404}})
        );
        let cases = [
            json!({"prompt": "x", "stream_options": {"include_usage": true}}),
            json!({"prompt": "x", "max_tokens": 32768}),
            json!({"prompt": 5}),
            json!({"prompt": "x", "max_tokens": "many"}),
            json!({"prompt": "x", "max_tokens": 0}),
        ];
        for body in cases {
            let (status, err) = mock.call("/v1/completions", body.clone()).await;
            assert_eq!(status, 400, "{body}");
            assert_eq!(err["error"]["type"], "BadRequestError", "{body}");
            assert_eq!(err["error"]["code"], 400);
        }
        let resp = mock
            .client
            .post(format!("{}/v1/chat/completions", mock.base))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let models = mock
            .client
            .get(format!("{}/v1/models", mock.base))
            .send()
            .await
            .unwrap();
        let models: Value = models.json().await.unwrap();
        assert_eq!(models["data"][0]["owned_by"], "vllm");
        let stats = mock.state.stats();
        assert_eq!((stats.requests, stats.failed, stats.in_flight), (7, 7, 0));
    })
    .await;
}

// ---------------------------------------------------------------- controls

/// Reads completion chunks until `tokens` tokens have arrived (one token per chunk).
async fn read_tokens(sse: &mut Sse, tokens: usize) {
    for _ in 0..tokens {
        let event = sse.next().await.unwrap();
        assert!(event.json()["choices"][0]["text"].is_string());
    }
}

#[tokio::test]
async fn hold_pauses_every_stream_until_release() {
    bounded(async {
        let mock = vllm().await;
        mock.state.hold_after(3);
        let body = json!({"prompt": "h", "max_tokens": 10, "ignore_eos": true, "stream": true});
        let mut sse = mock.stream("/v1/completions", body).await;
        read_tokens(&mut sse, 3).await;
        // Only "has not arrived yet": the stream is parked, so nothing can come.
        let next = tokio::time::timeout(Duration::from_millis(300), sse.next()).await;
        assert!(next.is_err(), "stream advanced past the hold");
        assert_eq!(mock.state.stats().in_flight, 1);
        mock.state.release();
        let rest = sse.rest().await;
        assert_eq!(rest.len(), 7);
        assert_eq!(mock.state.stats().completed, 1);
    })
    .await;
}

#[tokio::test]
async fn hold_and_release_over_http() {
    bounded(async {
        let mock = sglang().await;
        mock.ok("/mock/hold", json!({"after_tokens": 2})).await;
        let body = json!({"text": "h", "stream": true, "sampling_params": {"max_new_tokens": 5,
            "ignore_eos": true}});
        let mut sse = mock.stream("/generate", body).await;
        for _ in 0..2 {
            sse.next().await.unwrap();
        }
        let next = tokio::time::timeout(Duration::from_millis(300), sse.next()).await;
        assert!(next.is_err(), "stream advanced past the hold");
        mock.ok("/mock/release", json!({})).await;
        assert_eq!(sse.rest().await.len(), 3);
        let stats: Value = mock
            .client
            .get(format!("{}/mock/stats", mock.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(stats["completed"], 1);
        assert_eq!(stats["completion_tokens"], 5);
    })
    .await;
}

#[tokio::test]
async fn dropping_a_stream_counts_as_aborted() {
    bounded(async {
        let mock = vllm().await;
        mock.state.hold_after(2);
        let body = json!({"prompt": "d", "max_tokens": 50, "ignore_eos": true, "stream": true});
        let mut sse = mock.stream("/v1/completions", body).await;
        read_tokens(&mut sse, 2).await;
        drop(sse);
        mock.state.wait_for(|s| s.aborted == 1).await;
        let stats = mock.state.stats();
        assert_eq!(
            (stats.in_flight, stats.completed, stats.completion_tokens),
            (0, 0, 0)
        );
        mock.state.release();
    })
    .await;
}

#[tokio::test]
async fn dropping_a_slow_plain_request_counts_as_aborted() {
    bounded(async {
        let mock = spawn(MockConfig {
            ttft: Duration::from_secs(30),
            ..MockConfig::default()
        })
        .await;
        let request = mock.post("/v1/completions", json!({"prompt": "slow"}));
        let _ = tokio::time::timeout(Duration::from_millis(200), request).await;
        mock.state.wait_for(|s| s.aborted == 1).await;
        assert_eq!(mock.state.stats().in_flight, 0);
    })
    .await;
}

#[tokio::test]
async fn fail_every_kth_request_answers_500() {
    bounded(async {
        let mock = spawn(MockConfig {
            fail_every: Some(3),
            ..MockConfig::default()
        })
        .await;
        let mut statuses = Vec::new();
        for _ in 0..6 {
            let (status, body) = mock.call("/v1/completions", json!({"prompt": "f"})).await;
            if status == 500 {
                assert_eq!(body["error"]["type"], "InternalServerError");
                assert_eq!(body["error"]["code"], 500);
            }
            statuses.push(status);
        }
        assert_eq!(statuses, [200, 200, 500, 200, 200, 500]);
        let stats = mock.state.stats();
        assert_eq!((stats.requests, stats.completed, stats.failed), (6, 4, 2));

        let sg = spawn(MockConfig {
            kind: MockKind::Sglang,
            fail_every: Some(1),
            ..MockConfig::default()
        })
        .await;
        let (status, body) = sg.call("/generate", json!({"text": "f"})).await;
        assert_eq!(status, 500);
        assert_eq!(keys(&body["error"]), ["message"]);
    })
    .await;
}

#[tokio::test]
async fn fail_next_stream_sends_the_servers_error_event() {
    bounded(async {
        let mock = vllm().await;
        mock.state.fail_next_stream(2, FailMode::ErrorEvent);
        let body = json!({"prompt": "e", "max_tokens": 10, "ignore_eos": true, "stream": true});
        let mut sse = mock.stream("/v1/completions", body.clone()).await;
        read_tokens(&mut sse, 2).await;
        let error = sse.next().await.unwrap();
        assert_eq!(keys(&error.json()["error"]), ["code", "message", "type"]);
        assert_eq!(error.json()["error"]["type"], "InternalServerError");
        assert_eq!(sse.next().await, Some(Event::Done));
        assert_eq!(sse.next().await, None);
        // Only the next stream fails.
        assert_eq!(
            mock.stream("/v1/completions", body)
                .await
                .rest()
                .await
                .len(),
            10
        );
        let stats = mock.state.stats();
        assert_eq!((stats.failed, stats.completed), (1, 1));

        let sg = sglang().await;
        sg.ok(
            "/mock/fail_next_stream",
            json!({"after_tokens": 1, "mode": "error_event"}),
        )
        .await;
        let body = json!({"text": "e", "stream": true});
        let mut sse = sg.stream("/generate", body).await;
        sse.next().await.unwrap();
        let error = sse.next().await.unwrap();
        assert_eq!(keys(&error.json()["error"]), ["message"]);
        assert_eq!(sse.next().await, Some(Event::Done));
    })
    .await;
}

#[tokio::test]
async fn fail_next_stream_abort_cuts_the_connection() {
    bounded(async {
        let mock = vllm().await;
        mock.ok(
            "/mock/fail_next_stream",
            json!({"after_tokens": 3, "mode": "abort"}),
        )
        .await;
        let body = json!({"prompt": "a", "max_tokens": 10, "ignore_eos": true, "stream": true});
        let mut sse = mock.stream("/v1/completions", body).await;
        read_tokens(&mut sse, 3).await;
        assert!(
            sse.try_next().await.is_err(),
            "the body must end in an error, not [DONE]"
        );
        let stats = mock.state.stats();
        assert_eq!((stats.failed, stats.aborted, stats.in_flight), (1, 0, 0));
    })
    .await;
}

#[tokio::test]
async fn delays_shape_first_token_and_total_time() {
    bounded(async {
        let config = MockConfig {
            ttft: Duration::from_millis(80),
            itl: Duration::from_millis(10),
            ..MockConfig::default()
        };
        let mock = spawn(config).await;
        let body = json!({"prompt": "t", "max_tokens": 6, "ignore_eos": true, "stream": true});
        let start = std::time::Instant::now();
        let mut sse = mock.stream("/v1/completions", body.clone()).await;
        sse.next().await.unwrap();
        let first = start.elapsed();
        assert!(
            first >= Duration::from_millis(80),
            "first token after {first:?}"
        );
        sse.rest().await;
        assert!(start.elapsed() >= Duration::from_millis(80 + 5 * 10));

        let mut plain = body;
        plain["stream"] = json!(false);
        let start = std::time::Instant::now();
        mock.ok("/v1/completions", plain).await;
        assert!(start.elapsed() >= Duration::from_millis(80 + 5 * 10));
    })
    .await;
}
