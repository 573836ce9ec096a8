//! The fuzz corpora as a plain test, so CI needs no fuzzer: every file under
//! `fuzz/corpus/<target>/` (seeds) and `fuzz/regressions/<target>/` (inputs that once crashed
//! a target) goes through the same `lingo::fuzzing` body the cargo-fuzz target runs, and so
//! do seeds derived afresh from `tests/fixtures`. `FUZZ_WRITE_SEEDS=1` writes those derived
//! seeds into `fuzz/corpus/` (`scripts/fuzz.sh` does it before fuzzing).

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

use std::path::{Path, PathBuf};

use lingo::dialect::Dialect;
use lingo::stream::framing::{write_ndjson, write_sse, write_sse_event, Framing};
use serde_json::Value;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 4] = [
    ("request", lingo::fuzzing::request),
    ("stream", lingo::fuzzing::stream),
    ("response", lingo::fuzzing::response),
    ("http1", lingo::fuzzing::http1),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn index(d: Dialect) -> u8 {
    Dialect::ALL.iter().position(|x| *x == d).unwrap() as u8
}

fn dialect(case: &Value, key: &str) -> Option<Dialect> {
    case.get(key)
        .and_then(Value::as_str)
        .and_then(Dialect::parse)
}

/// The translation fixtures, by name.
fn fixtures() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(root().join("tests/fixtures")).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() || Dialect::parse(&name(&dir)).is_none() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            let case = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            out.push((format!("{}-{}", name(&dir), stem(&f)), case));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Seed inputs for each target, in its input layout (see `lingo::fuzzing`).
fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, case) in fixtures() {
        let client = dialect(&case, "client");
        let upstream = dialect(&case, "upstream");
        if let (Some(c), Some(req)) = (client, case.get("request")) {
            let body = serde_json::to_vec(req).unwrap();
            out.push(("request", name.clone(), [&[index(c)], &body[..]].concat()));
            if c.path() == "/generate" {
                let sniffed = [&[Dialect::ALL.len() as u8], &body[..]].concat();
                out.push(("request", format!("{name}-generate"), sniffed));
            }
        }
        let (Some(c), Some(u)) = (client, upstream) else {
            continue;
        };
        if let Some(resp) = case.get("upstream_response") {
            let body = serde_json::to_vec(resp).unwrap();
            let input = [&[index(u), index(c), 0][..], &body[..]].concat();
            out.push(("response", name.clone(), input));
        }
        if let Some(events) = case.get("upstream_stream") {
            let body = stream_body(u, events);
            let whole = [&[index(u), index(c), 0, 0][..], &body[..]].concat();
            out.push(("stream", name.clone(), whole));
            // The same body in pieces that cut lines, CRLFs and the event prefix.
            let split = [&[index(u), index(c), 0x56, 4, 3, 1, 17, 0][..], &body[..]].concat();
            out.push(("stream", format!("{name}-split"), split));
        }
    }
    out.extend(http1_seeds());
    out
}

/// Connections' bytes for the `http1` target (selector, split count, piece lengths, bytes):
/// pipelined requests with each framing, a refused one, answers with each framing, and the
/// round trips with several flag sets; whole and in pieces that cut heads, size lines and
/// CRLFs.
fn http1_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let requests = concat!(
        "POST /generate HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\n\r\nhello",
        "POST /v1/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n",
        "expect: 100-continue\r\n\r\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nx: y\r\n\r\n",
        "GET /health HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nconnection: close\r\n\r\n",
    );
    let refused = "POST / HTTP/1.1\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\nx";
    let chunked = concat!(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n",
        "transfer-encoding: chunked\r\nx-generated-tokens: 3\r\n\r\n",
        "e\r\ndata: {\"a\":1}\n\n\r\n3;x=y\r\nabc\r\n0\r\ntrailer: 1\r\n\r\n",
    );
    let length = "HTTP/1.1 400 Bad Request\r\ncontent-length: 7\r\nretry-after: 2\r\n\r\n{\"e\":1}";
    let close = "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{\"text\":\"hi\"}";
    let split: &[u8] = &[5, 3, 1, 17, 2, 40];
    let mut out = Vec::new();
    for (name, sel, wire) in [
        ("requests", 0u8, requests),
        ("refused", 0, refused),
        ("chunked", 1, chunked),
        ("length", 1, length),
        ("close", 1, close),
        ("head", 2, length),
        ("round-trip", 3, "some body bytes"),
        ("round-trip-10", 3 | 0x1c, "some body bytes"),
        ("round-trip-head", 3 | 0x08, ""),
    ] {
        out.push((
            "http1",
            name.to_string(),
            [&[sel, 0][..], wire.as_bytes()].concat(),
        ));
        let pieces = [&[sel][..], split, wire.as_bytes()].concat();
        out.push(("http1", format!("{name}-split"), pieces));
    }
    out
}

/// An upstream stream's bytes in its framing; Anthropic's events carry their names.
fn stream_body(upstream: Dialect, events: &Value) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    for e in events.as_array().unwrap() {
        let data = match e {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match (upstream.framing(), e.get("type").and_then(Value::as_str)) {
            (Framing::Ndjson, _) => write_ndjson(&mut out, data.as_bytes()),
            (Framing::Sse, Some(t)) if upstream == Dialect::Anthropic => {
                write_sse_event(&mut out, t, data.as_bytes())
            }
            (Framing::Sse, _) => write_sse(&mut out, data.as_bytes()),
        }
    }
    out.to_vec()
}

/// Every file of a corpus directory (none if it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn target(name: &str) -> Target {
    TARGETS.iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn fixture_seeds_pass_every_target() {
    let seeds = seeds();
    for (t, _, input) in &seeds {
        target(t)(input);
    }
    for (t, _) in TARGETS {
        assert!(
            seeds.iter().any(|(n, _, _)| *n == t),
            "no seed for the {t} target"
        );
    }
    if std::env::var_os("FUZZ_WRITE_SEEDS").is_some() {
        for (t, name, input) in &seeds {
            let dir = root().join("fuzz/corpus").join(t);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("seed-{name}")), input).unwrap();
        }
    }
}

#[test]
fn corpora_and_crash_inputs_pass() {
    let mut seen = 0;
    for (t, run) in TARGETS {
        for kind in ["corpus", "regressions"] {
            for f in files(&root().join("fuzz").join(kind).join(t)) {
                let input = std::fs::read(&f).unwrap();
                // A panic names the file: run it alone with `cargo fuzz run <target> <file>`.
                eprintln!("{}", f.display());
                run(&input);
                seen += 1;
            }
        }
    }
    assert!(seen > 0, "no corpus under fuzz/");
}

/// Inputs too small or odd for the fixtures to reach: empty, a lone selector, every split.
#[test]
fn degenerate_inputs_pass() {
    for (_, run) in TARGETS {
        run(b"");
        for b in 0..=u8::MAX {
            run(&[b]);
            run(&[b, b, b, b]);
            run(&[
                b, b, 0, 15, 0, 0, 0, b'd', b'a', b't', b'a', b':', b'\r', b'\n', b'\n',
            ]);
        }
    }
}
