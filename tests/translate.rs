//! Data-driven translation fixtures: one JSON file per case under `tests/fixtures/<client
//! dialect>/`. Each names the client and upstream dialects and holds any of: the client's
//! request and the upstream request lingo must produce (or the error it must give); an
//! upstream response (with `upstream_headers`) and the client response (with
//! `response_headers`); upstream stream events and the client's stream events.
//! `route_stream` marks a request whose route asks for the stream (TGI's `/generate_stream`).
//! Adding a case is adding a file; leave an expected part `null` and run with
//! `UPDATE_FIXTURES=1` to have it written from lingo's output, then review the diff.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

use std::path::Path;

use bytes::BytesMut;
use lingo::dialect::{Ctx, Dialect};
use lingo::stream::framing::{Frame, FrameParser};
use serde_json::Value;

/// Fields that change from run to run (lingo's own clock: latencies, llama.cpp `timings`,
/// Ollama's `created_at` and durations).
const VOLATILE: &[&str] = &[
    "e2e_latency",
    "created",
    "created_at",
    "timings",
    "total_duration",
    "load_duration",
    "prompt_eval_duration",
    "eval_duration",
];

fn strip(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in VOLATILE {
                m.remove(*k);
            }
            m.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

fn dialect(case: &Value, key: &str) -> Dialect {
    let name = case[key]
        .as_str()
        .unwrap_or_else(|| panic!("fixture needs `{key}`"));
    Dialect::parse(name).unwrap_or_else(|| panic!("unknown dialect {name}"))
}

fn ctx_for(case: &Value, req: &lingo::model::Request) -> Ctx {
    let id = case.get("id").and_then(Value::as_str).unwrap_or("test-id");
    let model = case.get("model").and_then(Value::as_str).unwrap_or("m");
    Ctx::new(req, id.to_string(), model.to_string())
}

/// Compare one expected part of a case. An expected `null` is a part still to be written:
/// with `UPDATE_FIXTURES=1` it is filled with what lingo produced (review the diff), never
/// overwritten once written.
fn expect(path: &Path, key: &str, got: &Value, expected: &Value) {
    if expected.is_null() && std::env::var_os("UPDATE_FIXTURES").is_some() {
        let mut case: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        case[key] = got.clone();
        let text = serde_json::to_string_pretty(&case).unwrap() + "\n";
        std::fs::write(path, text).unwrap();
        return;
    }
    assert_eq!(got, expected, "{key}");
}

fn check(path: &Path) {
    let case: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let client = dialect(&case, "client");
    let upstream = dialect(&case, "upstream");
    let body = serde_json::to_vec(&case["request"]).unwrap();
    let decoded = client.decode_request(&body);
    if let Some(err) = case.get("error") {
        let e = decoded
            .and_then(|mut r| {
                r.model = Some("m".into());
                upstream.encode_request(&r).map(|_| r)
            })
            .expect_err("expected an error");
        let shown = client.field_name(e.param().unwrap_or(""));
        assert_eq!(
            client.error_status(&e).as_u16(),
            err["status"].as_u64().unwrap() as u16,
            "{e}"
        );
        let needle = err["names"].as_str().unwrap();
        assert!(
            e.to_string().contains(needle) || shown.contains(needle),
            "error `{e}` does not name `{needle}`"
        );
        return;
    }
    let mut req = decoded.unwrap_or_else(|e| panic!("decode: {e}"));
    // The route asks for the stream (TGI's `/generate_stream`).
    if case.get("route_stream") == Some(&Value::Bool(true)) {
        req.stream = true;
    }
    req.model = Some(
        case.get("model")
            .and_then(Value::as_str)
            .unwrap_or("m")
            .into(),
    );
    if let Some(expected) = case.get("upstream_request") {
        let got: Value = serde_json::from_slice(&upstream.encode_request(&req).unwrap()).unwrap();
        expect(path, "upstream_request", &got, expected);
    }
    if let Some(up) = case.get("upstream_response") {
        let mut resp = upstream
            .decode_response(&serde_json::to_vec(up).unwrap())
            .unwrap();
        if let Some(h) = case.get("upstream_headers").and_then(Value::as_object) {
            let mut headers = http::HeaderMap::new();
            for (k, v) in h {
                let name = http::HeaderName::from_bytes(k.as_bytes()).unwrap();
                headers.insert(name, v.as_str().unwrap().parse().unwrap());
            }
            if let Some(u) = upstream.usage_from_headers(&headers) {
                resp.usage = Some(u);
            }
        }
        resp.fill_usage(req.sampling.n);
        let ctx = ctx_for(&case, &req);
        let mut got: Value = serde_json::from_slice(&client.encode_response(&resp, &ctx)).unwrap();
        strip(&mut got);
        expect(path, "response", &got, &case["response"]);
        if let Some(expected) = case.get("response_headers") {
            let got: serde_json::Map<String, Value> = client
                .response_headers(&resp)
                .into_iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.to_str().unwrap().into())))
                .collect();
            expect(path, "response_headers", &Value::Object(got), expected);
        }
    }
    if let Some(events) = case.get("upstream_stream") {
        let got = run_stream(client, upstream, &req, &case, events);
        expect(path, "stream", &Value::Array(got), &case["stream"]);
    }
}

/// Feed upstream events through the decoder and the client encoder; return the client's
/// events as JSON (`"[DONE]"` stays a string).
fn run_stream(
    client: Dialect,
    upstream: Dialect,
    req: &lingo::model::Request,
    case: &Value,
    events: &Value,
) -> Vec<Value> {
    let mut dec = upstream.stream_decoder();
    let mut enc = client.stream_encoder(ctx_for(case, req));
    let mut out = BytesMut::new();
    for e in events.as_array().unwrap() {
        let data = match e {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let frame = Frame {
            event: None,
            data: data.into(),
        };
        let mut evs = Vec::new();
        dec.frame(&frame, &mut evs).unwrap();
        enc.events(&evs, &mut out);
    }
    let mut evs = Vec::new();
    dec.close(&mut evs);
    enc.events(&evs, &mut out);
    enc.end(&mut out);
    let mut parser = FrameParser::new(client.framing());
    let mut frames = Vec::new();
    parser.feed(&out, &mut frames);
    parser.finish(&mut frames);
    frames
        .iter()
        .map(|f| {
            let mut v = serde_json::from_slice(&f.data)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&f.data).into()));
            // Named SSE events (Anthropic) repeat their name as the payload's `type`.
            if let Some(name) = &f.event {
                assert_eq!(v["type"].as_str(), Some(name.as_str()), "event name");
            }
            strip(&mut v);
            v
        })
        .collect()
}

#[test]
fn fixtures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut paths = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        // One folder per client dialect; others (bench reports) are not translation cases.
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if Dialect::parse(&name).is_none() {
            continue;
        }
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    let failed: Vec<String> = paths
        .iter()
        .filter(|p| std::panic::catch_unwind(|| check(p)).is_err())
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "failing fixtures (messages above): {failed:#?}"
    );
    assert!(
        paths.len() >= 10,
        "expected at least 10 fixtures, found {}",
        paths.len()
    );
}
