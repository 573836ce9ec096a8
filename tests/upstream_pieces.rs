//! lingo's own HTTP/1.1 upstream client under a server that frames its answers every way
//! HTTP/1.1 allows and writes them in pieces cut at any byte. Property: a run of requests
//! through one lingo, each answered (whole or streamed; by length, chunked in any sizes, or
//! until the close; on a kept connection, or closed after with or without saying so), comes
//! to an OpenAI client byte for byte (but for the usage event lingo asked for on its own
//! behalf, which a client that did not ask never sees) and to an SGLang client translated,
//! its text and count whole; one record each, with the upstream's token count. An answer
//! the server cuts short at any byte is a clear error in the client's dialect (a 502, or
//! once a stream began, the events read whole, an error event and `[DONE]`), never a clean
//! end; and each request reaches the upstream once (a kept connection the server closed is
//! not sent the next request twice).
//!
//! The parsers are fuzzed apart from sockets (`fuzz/`, the `http1` target); this drives the
//! pool and the connection: reads that end anywhere, a connection handed back or not, and a
//! closed one noticed.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use common::cases::{self, chunked, fill, head_end, one_at_a_time, pieces};
use common::sum;
use lingo::upstream::KindSetting;
use proptest::prelude::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// What a request waits at most for its answer.
const BOUND: Duration = Duration::from_secs(20);

/// How the upstream frames a body.
#[derive(Debug, Clone)]
enum Framing {
    Length,
    /// Chunked, in chunks of these sizes (the rest in one last chunk).
    Chunked(Vec<usize>),
    /// Neither: the body ends when the server closes.
    Close,
}

/// What the upstream does with its connection after the answer.
#[derive(Debug, Clone)]
enum After {
    Keep,
    /// Closes, having said `connection: close`.
    CloseSaying,
    /// Closes without a word: lingo finds out when it next uses the connection, or sooner.
    CloseSilently,
    /// Writes only this much of the answer (at least one byte, never all), then closes.
    Cut(prop::sample::Index),
}

#[derive(Debug, Clone)]
struct Answer {
    /// Asked for by an SGLang client's `/generate`, translated (else passed through).
    translated: bool,
    stream: bool,
    /// The client asks for the usage event (else lingo asks for it, reads it and leaves it
    /// out: a re-framed stream, not a raw one).
    asks_usage: bool,
    tokens: u32,
    framing: Framing,
    after: After,
    /// Where the answer's bytes are cut into writes.
    cuts: Vec<prop::sample::Index>,
}

impl Answer {
    /// The upstream's body: its JSON, or its stream's events, each with whether it is the
    /// usage event.
    fn parts(&self) -> Vec<(String, bool)> {
        let id = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"});
        let usage = json!({"prompt_tokens": 3, "completion_tokens": self.tokens,
                           "total_tokens": 3 + self.tokens});
        let choice = |text: String, finish: Option<&str>| json!([{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]);
        let with = |extra: &[(&str, Value)]| {
            let mut v = id.clone();
            for (k, x) in extra {
                v[*k] = x.clone();
            }
            v.to_string()
        };
        if !self.stream {
            let text: String = (0..self.tokens).map(|i| format!(" w{i}")).collect();
            let choices = choice(text, Some("length"));
            return vec![(with(&[("choices", choices), ("usage", usage)]), false)];
        }
        let mut out = Vec::new();
        for i in 0..self.tokens {
            let finish = (i + 1 == self.tokens).then_some("length");
            let e = with(&[("choices", choice(format!(" w{i}"), finish))]);
            out.push((format!("data: {e}\n\n"), false));
        }
        let e = with(&[("choices", json!([])), ("usage", usage)]);
        out.push((format!("data: {e}\n\n"), true));
        out.push(("data: [DONE]\n\n".to_string(), false));
        out
    }

    fn body(&self) -> Vec<u8> {
        self.parts()
            .into_iter()
            .map(|(p, _)| p)
            .collect::<String>()
            .into_bytes()
    }

    /// What the client should get, byte for byte: the upstream's body, less the usage event
    /// lingo asked for on its own behalf.
    fn client_body(&self) -> Vec<u8> {
        let asked = !self.stream || self.asks_usage;
        let parts = self.parts().into_iter();
        let kept = parts.filter(|(_, usage)| asked || !usage);
        kept.map(|(p, _)| p).collect::<String>().into_bytes()
    }

    /// The whole answer on the wire, and where its head ends.
    fn wire(&self) -> (Vec<u8>, usize) {
        let body = self.body();
        let kind = match self.stream {
            true => "text/event-stream",
            false => "application/json",
        };
        let mut head = format!("HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\n");
        let closes =
            matches!(self.framing, Framing::Close) || matches!(self.after, After::CloseSaying);
        if closes {
            head.push_str("connection: close\r\n");
        }
        let mut wire = match &self.framing {
            Framing::Length => {
                head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
                let mut w = head.into_bytes();
                w.extend_from_slice(&body);
                w
            }
            Framing::Close => {
                head.push_str("\r\n");
                let mut w = head.into_bytes();
                w.extend_from_slice(&body);
                w
            }
            Framing::Chunked(sizes) => {
                head.push_str("transfer-encoding: chunked\r\n\r\n");
                let mut w = head.into_bytes();
                chunked(&mut w, &body, sizes);
                w
            }
        };
        let head_len = wire.windows(4).position(|x| x == b"\r\n\r\n").unwrap() + 4;
        if let After::Cut(at) = &self.after {
            wire.truncate(1 + at.index(wire.len() - 1));
        }
        (wire, head_len)
    }

    fn closes(&self) -> bool {
        !matches!(self.after, After::Keep) || matches!(self.framing, Framing::Close)
    }

    fn cut(&self) -> bool {
        matches!(self.after, After::Cut(_))
    }
}

fn answer() -> impl Strategy<Value = Answer> {
    let framing = prop_oneof![
        2 => Just(Framing::Length),
        3 => prop::collection::vec(1usize..200, 0..6).prop_map(Framing::Chunked),
        1 => Just(Framing::Close),
    ];
    let after = prop_oneof![
        3 => Just(After::Keep),
        1 => Just(After::CloseSaying),
        1 => Just(After::CloseSilently),
        2 => any::<prop::sample::Index>().prop_map(After::Cut),
    ];
    (
        (any::<bool>(), any::<bool>(), any::<bool>()),
        1u32..6,
        framing,
        after,
        prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    )
        .prop_map(
            |((translated, stream, asks_usage), tokens, framing, after, cuts)| {
                // A body that ends at the close cannot be told from one cut short: that is
                // HTTP/1.1's, not lingo's, so those answers are not cut.
                let after = match (&framing, after) {
                    (Framing::Close, After::Cut(_)) => After::CloseSaying,
                    (_, a) => a,
                };
                Answer {
                    translated,
                    stream,
                    asks_usage,
                    tokens,
                    framing,
                    after,
                    cuts,
                }
            },
        )
}

/// A raw upstream that answers each POST with the next planned answer, counting them.
struct Upstream {
    url: String,
    plan: Arc<Mutex<VecDeque<Answer>>>,
    posts: Arc<AtomicUsize>,
}

async fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let plan = Arc::new(Mutex::new(VecDeque::new()));
    let posts = Arc::new(AtomicUsize::new(0));
    let (p, n) = (plan.clone(), posts.clone());
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, p.clone(), n.clone()));
        }
    });
    Upstream { url, plan, posts }
}

async fn serve(mut s: TcpStream, plan: Arc<Mutex<VecDeque<Answer>>>, posts: Arc<AtomicUsize>) {
    s.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    while let Some(post) = read_request(&mut s, &mut buf).await {
        if !post {
            let nothing = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
            if s.write_all(nothing).await.is_err() {
                return;
            }
            continue;
        }
        posts.fetch_add(1, Ordering::SeqCst);
        let next = plan
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        let Some(a) = next else {
            return; // more requests than planned: the case fails on the count
        };
        let (wire, _) = a.wire();
        for p in pieces(&wire, &a.cuts) {
            if s.write_all(p).await.is_err() {
                return;
            }
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        }
        if a.closes() {
            return;
        }
    }
}

/// Read one request (head, and a body by its length) off `s`; whether it was a POST.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<bool> {
    let end = head_end(s, buf).await?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < end + len {
        fill(s, buf).await?;
    }
    buf.drain(..end + len);
    Some(head.starts_with("post "))
}

/// One upstream and one lingo, on a runtime that outlives each case.
struct Servers {
    rt: tokio::runtime::Runtime,
    up: Upstream,
    base: String,
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let rt = cases::runtime();
        let (up, base) = rt.block_on(async {
            let up = upstream().await;
            let mut config = common::config_for(&up.url, KindSetting::Vllm);
            // The wire is under test, not health: cut answers are failures, and three in a
            // row would take the only endpoint out; the engine-load poll is only refused.
            config.health.unhealthy_after = u32::MAX;
            config.load.enabled = false;
            // SGLang's `/generate` names no model; the fake lists none.
            config.upstream.model = Some("m".into());
            let base = common::lingo(config).await;
            (up, base)
        });
        Servers { rt, up, base }
    })
}

/// lingo's metrics: requests recorded and tokens counted.
async fn metrics(base: &str) -> (f64, f64) {
    let text = common::scrape(base).await;
    (
        sum(&text, "lingo_requests_total", &[]),
        sum(&text, "lingo_generation_tokens_total", &[]),
    )
}

/// The client's request for `a`.
fn request(a: &Answer) -> Value {
    let mut r =
        json!({"model": "m", "prompt": "a b c", "max_tokens": a.tokens, "stream": a.stream});
    if a.stream && a.asks_usage {
        r["stream_options"] = json!({"include_usage": true});
    }
    r
}

/// One answer as the client sees it; an `Err` says what is wrong with it.
async fn check_one(base: &str, a: &Answer) -> Result<(), String> {
    match a.translated {
        true => check_translated(base, a).await,
        false => check_passed(base, a).await,
    }
}

/// Through SGLang's `/generate`: the upstream's text and count in SGLang's answer, or, cut
/// short, an error in SGLang's shape (in the stream once it began).
async fn check_translated(base: &str, a: &Answer) -> Result<(), String> {
    let ask = json!({"text": "a b c", "sampling_params": {"max_new_tokens": a.tokens},
                     "stream": a.stream});
    let r = common::post_json(&format!("{base}/generate"), &ask).await;
    let status = r.status().as_u16();
    let text = r.text().await.map_err(|e| format!("the body broke: {e}"))?;
    let full: String = (0..a.tokens).map(|i| format!(" w{i}")).collect();
    if !a.cut() {
        if status != 200 {
            return Err(format!("{status} {text}"));
        }
        // The reader checks the dialect's shape (and panics, failing the case, where broken).
        let seen = common::readers::sglang_read(&text, a.stream);
        if seen.text != full || seen.tokens != u64::from(a.tokens) {
            return Err(format!("{seen:?}, not {full:?} in {} tokens", a.tokens));
        }
        return Ok(());
    }
    if status != 200 || !a.stream {
        return whole_error(status, text.as_bytes());
    }
    let events = common::sse_events(&text);
    let n = events.len();
    let ends =
        n >= 2 && events[n - 1] == json!("[DONE]") && events[n - 2]["error"]["message"].is_string();
    let texts = events[..n.saturating_sub(2)]
        .iter()
        .map(|e| e["text"].as_str());
    if !ends
        || !texts
            .clone()
            .all(|t| t.is_some_and(|t| full.starts_with(t)))
    {
        return Err(format!(
            "not the stream's start, its error and [DONE]: {text:?}"
        ));
    }
    Ok(())
}

/// A whole answer that failed: a 502 with an error in OpenAI's (and SGLang's) shape.
fn whole_error(status: u16, body: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(body);
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("{status} {e}: {text}"))?;
    match status == 502 && v["error"]["message"].is_string() {
        true => Ok(()),
        false => Err(format!("{status} {text}")),
    }
}

/// Passed through: the upstream's bytes, or, cut short, its whole events, an error event and
/// `[DONE]`.
async fn check_passed(base: &str, a: &Answer) -> Result<(), String> {
    let r = common::post_json(&format!("{base}/v1/completions"), &request(a)).await;
    let status = r.status().as_u16();
    let body = r
        .bytes()
        .await
        .map_err(|e| format!("the body broke: {e}"))?;
    let text = String::from_utf8_lossy(&body);
    let (wire, head_len) = a.wire();
    let want = a.client_body();
    if !a.cut() {
        if status != 200 || body[..] != want[..] {
            return Err(format!(
                "{status} {text:?}, not {:?}",
                String::from_utf8_lossy(&want)
            ));
        }
        return Ok(());
    }
    if !a.stream || wire.len() < head_len {
        // Nothing sent yet.
        return whole_error(status, &body);
    }
    // A stream cut short: the events read whole, passed through, then an error and [DONE].
    let end = b"data: [DONE]\n\n";
    let Some(before_done) = body.strip_suffix(end) else {
        return Err(format!("no [DONE] at the end: {text:?}"));
    };
    let Some(error_at) = before_done
        .windows(6)
        .rposition(|w| w == b"data: ")
        .filter(|i| *i == 0 || before_done[..*i].ends_with(b"\n\n"))
    else {
        return Err(format!("no error event: {text:?}"));
    };
    let error: Value = serde_json::from_slice(before_done[error_at + 6..].trim_ascii_end())
        .map_err(|e| format!("{e}: {text:?}"))?;
    if error["error"]["message"].as_str().is_none() {
        return Err(format!("the last event is no error: {text:?}"));
    }
    let relayed = &before_done[..error_at];
    if status != 200 || !want.starts_with(relayed) {
        return Err(format!("{status}: {text:?} is not a prefix of the stream"));
    }
    Ok(())
}

async fn check(answers: &[Answer], s: &Servers) -> Result<(), TestCaseError> {
    let (requests_before, tokens_before) = metrics(&s.base).await;
    let posts_before = s.up.posts.load(Ordering::SeqCst);
    {
        // A failed case may have left some of its plan.
        let mut plan = s.up.plan.lock().unwrap_or_else(PoisonError::into_inner);
        plan.clear();
        plan.extend(answers.iter().cloned());
    }
    for (i, a) in answers.iter().enumerate() {
        let one = tokio::time::timeout(BOUND, check_one(&s.base, a)).await;
        let one = one.map_err(|_| TestCaseError::fail(format!("answer {i} in time")))?;
        one.map_err(|e| TestCaseError::fail(format!("answer {i}: {e}")))?;
    }
    let left =
        s.up.plan
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
    let posts = s.up.posts.load(Ordering::SeqCst) - posts_before;
    prop_assert_eq!(
        (posts, left),
        (answers.len(), 0),
        "requests that reached the upstream"
    );
    let (requests, tokens) = metrics(&s.base).await;
    prop_assert_eq!(requests - requests_before, answers.len() as f64, "records");
    let whole: u32 = answers.iter().filter(|a| !a.cut()).map(|a| a.tokens).sum();
    let all: u32 = answers.iter().map(|a| a.tokens).sum();
    let counted = (tokens - tokens_before) as u32;
    prop_assert!(
        (whole..=all).contains(&counted),
        "{counted} tokens counted, {whole} to {all} expected"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn answers_framed_and_cut_anywhere_pass_through_whole_or_fail_clearly(
        answers in prop::collection::vec(answer(), 1..6)
    ) {
        let _one = one_at_a_time();
        let s = servers();
        s.rt.block_on(check(&answers, s))?;
    }
}
