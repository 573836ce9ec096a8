//! Readers of each client dialect's answers, whole or streamed: they check the shape the
//! dialect promises (panicking where it is broken) and return what the answer said.

use serde_json::{json, Value};

use super::sse_events;

/// What one answer said: text, completion tokens, finish reason (normalised; empty for a
/// dialect that never says, vLLM's legacy server).
#[derive(Debug, PartialEq)]
pub struct Seen {
    pub text: String,
    pub tokens: u64,
    pub finish: String,
}

pub fn sglang_read(body: &str, stream: bool) -> Seen {
    let last = if stream {
        let events = sse_events(body);
        assert_eq!(
            events.last(),
            Some(&json!("[DONE]")),
            "stream ends with [DONE]"
        );
        // Cumulative text: every chunk extends the previous one.
        let texts: Vec<&str> = events.iter().filter_map(|e| e["text"].as_str()).collect();
        for w in texts.windows(2) {
            assert!(w[1].starts_with(w[0]), "not cumulative: {w:?}");
        }
        events[events.len() - 2].clone()
    } else {
        serde_json::from_str(body).unwrap()
    };
    Seen {
        text: last["text"].as_str().unwrap().to_string(),
        tokens: last["meta_info"]["completion_tokens"].as_u64().unwrap(),
        finish: last["meta_info"]["finish_reason"]["type"]
            .as_str()
            .unwrap()
            .to_string(),
    }
}

pub fn openai_read(body: &str, stream: bool, content: fn(&Value) -> Option<&str>) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        return Seen {
            text: content(&v["choices"][0]).unwrap_or_default().to_string(),
            tokens: v["usage"]["completion_tokens"].as_u64().unwrap(),
            finish: v["choices"][0]["finish_reason"]
                .as_str()
                .unwrap()
                .to_string(),
        };
    }
    let events = sse_events(body);
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let mut seen = Seen {
        text: String::new(),
        tokens: 0,
        finish: String::new(),
    };
    for e in &events {
        if let Some(c) = e["choices"].get(0) {
            seen.text.push_str(content(c).unwrap_or_default());
            if let Some(f) = c["finish_reason"].as_str() {
                seen.finish = f.to_string();
            }
        }
        if let Some(n) = e["usage"]["completion_tokens"].as_u64() {
            // llama.cpp (passed through) puts usage and timings on its last completions chunk.
            assert!(
                e["choices"].as_array().unwrap().is_empty() || e.get("timings").is_some(),
                "usage comes in its own chunk"
            );
            seen.tokens = n;
        }
    }
    seen
}

/// TGI's answer: one object with `details`, or a stream of one token per event, no
/// terminator, the last event with `details`.
pub fn tgi_read(body: &str, stream: bool) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        // Without `details` the count is only in the `x-generated-tokens` header (0 here).
        return Seen {
            text: v["generated_text"].as_str().unwrap().to_string(),
            tokens: v["details"]["generated_tokens"].as_u64().unwrap_or(0),
            finish: v["details"]["finish_reason"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        };
    }
    assert!(
        body.starts_with("data:{"),
        "TGI events have no space: {body:.40}"
    );
    let events = sse_events(body);
    assert!(!events.contains(&json!("[DONE]")), "TGI sends no [DONE]");
    let text = events
        .iter()
        .filter(|e| e["token"]["special"] != json!(true))
        .map(|e| e["token"]["text"].as_str().unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["generated_text"], json!(text), "final generated_text");
    // One event per token; the end-of-sequence token's event (or, when the upstream ends
    // with a separate finish chunk, an empty final one) is special.
    let shown = events
        .iter()
        .filter(|e| e["token"]["special"] == json!(false))
        .count() as u64;
    let tokens = match last["details"]["generated_tokens"].as_u64() {
        Some(n) => {
            assert!(
                shown == n || shown + 1 == n,
                "{shown} token events for {n} tokens"
            );
            n
        }
        None => shown,
    };
    Seen {
        text,
        tokens,
        finish: last["details"]["finish_reason"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

pub fn tgi_compat_read(body: &str, stream: bool) -> Seen {
    if stream {
        return tgi_read(body, true);
    }
    let v: Value = serde_json::from_str(body).unwrap();
    let one = v.as_array().expect("an array").first().unwrap();
    tgi_read(&one.to_string(), false)
}

pub fn anthropic_finish(reason: &Value) -> String {
    match reason.as_str().unwrap() {
        "max_tokens" => "length".into(),
        "end_turn" | "stop_sequence" => "stop".into(),
        other => other.into(),
    }
}

/// Anthropic's named events, in order: `(event name, payload)`; the name must repeat the
/// payload's `type`.
pub fn named_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let name = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap();
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(
                v["type"],
                json!(name),
                "event name and type differ: {block}"
            );
            (name.to_string(), v)
        })
        .collect()
}

pub fn anthropic_read(body: &str, stream: bool) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["type"], "message");
        assert!(v["id"].as_str().unwrap().starts_with("msg_"), "{v}");
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
        return Seen {
            text: v["content"][0]["text"].as_str().unwrap_or_default().into(),
            tokens: v["usage"]["output_tokens"].as_u64().unwrap(),
            finish: anthropic_finish(&v["stop_reason"]),
        };
    }
    let events = named_events(body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..3],
        ["message_start", "content_block_start", "ping"],
        "{names:?}"
    );
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    // Upstreams that count per chunk (vLLM, SGLang) give the prompt count with the first
    // token, so `message_start` has it; the others only at the end, in `message_delta`.
    let start = &events[0].1["message"];
    let end = &events[events.len() - 2].1;
    assert!(
        start["usage"]["input_tokens"].as_u64().unwrap() > 0
            || end["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{start} {end}"
    );
    let text = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, v)| v["delta"]["text"].as_str().unwrap())
        .collect();
    let delta = &events[events.len() - 2].1;
    Seen {
        text,
        tokens: delta["usage"]["output_tokens"].as_u64().unwrap(),
        finish: anthropic_finish(&delta["delta"]["stop_reason"]),
    }
}

/// `{"text": [prompt + output]}`, whole or as cumulative lines. The dialect reports no token
/// counts: the mock's output tokens are words, so they are counted as words.
pub fn vllm_legacy_read(prompt: &str, body: &str, stream: bool) -> Seen {
    let full = if stream {
        let texts: Vec<String> = body
            .split('\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["text"][0].as_str().unwrap().to_string()
            })
            .collect();
        assert!(body.ends_with('\n'), "every line ends with a newline");
        for w in texts.windows(2) {
            assert!(w[1].starts_with(&w[0]), "not cumulative: {w:?}");
        }
        texts.last().unwrap().clone()
    } else {
        let v: Value = serde_json::from_str(body).unwrap();
        v["text"][0].as_str().unwrap().to_string()
    };
    let text = full.strip_prefix(prompt).expect("the prompt comes first");
    Seen {
        text: text.to_string(),
        tokens: text.split_whitespace().count() as u64,
        finish: String::new(),
    }
}

/// llama.cpp's `stop_type`, named as the other rows name their finish reasons.
pub fn stop_type(v: &Value) -> String {
    match v["stop_type"].as_str().unwrap() {
        "limit" => "length".into(),
        other => other.into(),
    }
}

pub fn llamacpp_read(body: &str, stream: bool) -> Seen {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["stop"], json!(true));
        return Seen {
            text: v["content"].as_str().unwrap().to_string(),
            tokens: v["tokens_predicted"].as_u64().unwrap(),
            finish: stop_type(&v),
        };
    }
    let events = sse_events(body);
    assert!(
        !events.contains(&json!("[DONE]")),
        "llama.cpp sends no [DONE]"
    );
    let (last, partial) = events.split_last().unwrap();
    assert_eq!(last["stop"], json!(true), "the stream ends with stop: true");
    assert_eq!(last["content"], json!(""));
    assert!(last["timings"]["predicted_n"].is_u64(), "timings: {last}");
    let mut text = String::new();
    for e in partial {
        assert_eq!(e["stop"], json!(false));
        text.push_str(e["content"].as_str().unwrap());
    }
    Seen {
        text,
        tokens: last["tokens_predicted"].as_u64().unwrap(),
        finish: stop_type(last),
    }
}

pub fn ollama_text(v: &Value) -> &str {
    v["response"]
        .as_str()
        .or(v["message"]["content"].as_str())
        .unwrap()
}

pub fn ollama_read(body: &str, stream: bool) -> Seen {
    let lines: Vec<Value> = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (last, partial) = lines.split_last().unwrap();
    assert_eq!(last["done"], json!(true), "the answer ends with done: true");
    assert!(last["total_duration"].as_u64().unwrap() > 0, "{last}");
    assert!(last["eval_duration"].is_u64(), "{last}");
    if !stream {
        assert!(partial.is_empty(), "one object when not streaming");
    }
    let mut text: String = partial.iter().map(ollama_text).collect();
    text.push_str(ollama_text(last));
    Seen {
        text,
        tokens: last["eval_count"].as_u64().unwrap(),
        finish: last["done_reason"].as_str().unwrap().to_string(),
    }
}
