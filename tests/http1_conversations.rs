//! lingo's own HTTP/1.1 server under a client that pipelines, cuts its bytes anywhere and
//! leaves when it likes. Property: any mix of requests (whole and streamed completions passed
//! through, SGLang's `/generate` translated, lingo's own GETs; bodies by length, chunked in
//! pieces, or behind `Expect: 100-continue`), pipelined on one connection and written in
//! pieces cut at any byte, is answered whole and in order, and lingo's token metric equals
//! what the upstream generated. A client that leaves at any byte leaves nothing in flight, no
//! more records than requests it sent, and a server that answers the next connection.
//!
//! The parsers are fuzzed apart from sockets (`fuzz/`, the `http1` target); this drives the
//! connection itself: reads that end anywhere, bodies read by the handler as they arrive,
//! the client-gone watch, and the next head found after each answer.

#![allow(clippy::unwrap_used)] // a panic in a test is a failed test

mod common;

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::OnceLock;
use std::time::Duration;

use common::cases::{self, chunked, fill, head_end, one_at_a_time, pieces};
use common::{sum, Mock};
use lingo::mock::MockKind;
use lingo::upstream::KindSetting;
use proptest::prelude::*;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf as Reader, OwnedWriteHalf as Writer};
use tokio::net::TcpStream;

/// What a case waits at most for its answers, and for lingo to settle after a leave.
const BOUND: Duration = Duration::from_secs(20);

/// How a request's body is sent.
#[derive(Debug, Clone)]
enum Sent {
    Length,
    /// Chunked, in pieces of these sizes (the rest in one last piece).
    Chunked(Vec<usize>),
    /// By length, behind `Expect: 100-continue` (sent without waiting for the 100, as
    /// clients may).
    Continue,
}

#[derive(Debug, Clone)]
enum Ask {
    /// `GET /health`, which lingo forwards to the upstream's.
    Health,
    /// `/v1/completions`, passed through.
    Completion {
        stream: bool,
        tokens: u32,
        sent: Sent,
    },
    /// SGLang's `/generate`, translated to the vLLM upstream's dialect.
    Generate {
        stream: bool,
        tokens: u32,
        sent: Sent,
    },
}

impl Ask {
    fn generates(&self) -> bool {
        !matches!(self, Ask::Health)
    }

    fn wire(&self) -> Vec<u8> {
        let (path, body, sent) = match self {
            Ask::Health => return b"GET /health HTTP/1.1\r\nHost: lingo\r\n\r\n".to_vec(),
            Ask::Completion {
                stream,
                tokens,
                sent,
            } => {
                let body = format!(
                    r#"{{"model":"mock-model","prompt":"a b c","max_tokens":{tokens},"stream":{stream}}}"#
                );
                ("/v1/completions", body, sent)
            }
            Ask::Generate {
                stream,
                tokens,
                sent,
            } => {
                let body = format!(
                    r#"{{"text":"a b c","sampling_params":{{"max_new_tokens":{tokens}}},"stream":{stream}}}"#
                );
                ("/generate", body, sent)
            }
        };
        let mut w =
            format!("POST {path} HTTP/1.1\r\nHost: lingo\r\nContent-Type: application/json\r\n");
        match sent {
            Sent::Length | Sent::Continue => {
                if matches!(sent, Sent::Continue) {
                    w.push_str("Expect: 100-continue\r\n");
                }
                w.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
            }
            Sent::Chunked(sizes) => {
                w.push_str("Transfer-Encoding: chunked\r\n\r\n");
                let mut w = w.into_bytes();
                chunked(&mut w, body.as_bytes(), sizes);
                return w;
            }
        }
        w.into_bytes()
    }

    /// Whether `body` (de-chunked) is this request's whole answer.
    fn answered_by(&self, body: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(body);
        match self {
            Ask::Health => Ok(()),
            Ask::Completion { stream: true, .. } | Ask::Generate { stream: true, .. } => {
                match text.ends_with("data: [DONE]\n\n") {
                    true => Ok(()),
                    false => Err(format!("a stream without its end: {text:?}")),
                }
            }
            Ask::Completion { stream: false, .. } => {
                let v: Value = serde_json::from_slice(body).map_err(|e| format!("{e}: {text}"))?;
                match v["choices"][0]["text"].as_str() {
                    Some(t) if !t.is_empty() => Ok(()),
                    _ => Err(format!("no completion text: {text}")),
                }
            }
            Ask::Generate { stream: false, .. } => {
                let v: Value = serde_json::from_slice(body).map_err(|e| format!("{e}: {text}"))?;
                match v["text"].as_str() {
                    Some(t) if !t.is_empty() => Ok(()),
                    _ => Err(format!("no generated text: {text}")),
                }
            }
        }
    }
}

fn sent() -> impl Strategy<Value = Sent> {
    prop_oneof![
        Just(Sent::Length),
        prop::collection::vec(1usize..40, 0..4).prop_map(Sent::Chunked),
        Just(Sent::Continue),
    ]
}

fn ask() -> impl Strategy<Value = Ask> {
    prop_oneof![
        1 => Just(Ask::Health),
        3 => (any::<bool>(), 1u32..6, sent())
            .prop_map(|(stream, tokens, sent)| Ask::Completion { stream, tokens, sent }),
        2 => (any::<bool>(), 1u32..6, sent())
            .prop_map(|(stream, tokens, sent)| Ask::Generate { stream, tokens, sent }),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    asks: Vec<Ask>,
    /// Where the client's bytes are cut into writes, as fractions of their length.
    cuts: Vec<prop::sample::Index>,
    /// Leave (drop the connection) after this fraction of the bytes, or stay to the end.
    leave: Option<prop::sample::Index>,
}

fn case(leaving: bool) -> impl Strategy<Value = Case> {
    let leave = match leaving {
        true => any::<prop::sample::Index>().prop_map(Some).boxed(),
        false => Just(None).boxed(),
    };
    (
        prop::collection::vec(ask(), 1..6),
        prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        leave,
    )
        .prop_map(|(asks, cuts, leave)| Case { asks, cuts, leave })
}

/// One mock and one lingo, on a runtime that outlives each case.
struct Servers {
    rt: tokio::runtime::Runtime,
    mock: Mock,
    addr: SocketAddr,
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let rt = cases::runtime();
        let (mock, addr) = rt.block_on(async {
            let mock = common::mock(MockKind::Vllm).await;
            let config = common::config_for(&mock.url(), KindSetting::Vllm);
            let addr = common::serving(config).await;
            (mock, addr)
        });
        Servers { rt, mock, addr }
    })
}

/// One response off `s`, 1xx heads skipped: its status and its body, de-chunked. `None` if
/// the connection ended first.
async fn response(s: &mut Reader, buf: &mut Vec<u8>) -> Option<(u16, Vec<u8>)> {
    loop {
        let end = head_end(s, buf).await?;
        let head = String::from_utf8(buf.drain(..end).collect())
            .unwrap()
            .to_ascii_lowercase();
        let status: u16 = head[9..12].parse().unwrap();
        if status < 200 {
            continue;
        }
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map(|n| n.trim().parse::<usize>().unwrap());
        let body = match length {
            Some(n) => {
                while buf.len() < n {
                    fill(s, buf).await?;
                }
                buf.drain(..n).collect()
            }
            None => dechunk(s, buf).await?,
        };
        return Some((status, body));
    }
}

async fn dechunk(s: &mut Reader, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            fill(s, buf).await?;
        };
        let size = usize::from_str_radix(std::str::from_utf8(&buf[..line]).unwrap(), 16).unwrap();
        while buf.len() < line + 2 + size + 2 {
            fill(s, buf).await?;
        }
        body.extend_from_slice(&buf[line + 2..line + 2 + size]);
        buf.drain(..line + 2 + size + 2);
        if size == 0 {
            return Some(body);
        }
    }
}

/// lingo's metrics: requests recorded, tokens counted, requests in flight.
async fn metrics(addr: SocketAddr) -> (f64, f64, f64) {
    let text = common::scrape(&format!("http://{addr}")).await;
    (
        sum(&text, "lingo_requests_total", &[]),
        sum(&text, "lingo_generation_tokens_total", &[]),
        sum(&text, "lingo_requests_in_flight", &[]),
    )
}

/// Write `pieces`, yielding between them so each tends to arrive in a read of its own.
async fn write(w: &mut Writer, pieces: &[&[u8]]) {
    for p in pieces {
        w.write_all(p).await.unwrap();
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
    }
}

/// Read the answers to `asks` off `r`, checking each.
async fn answers(r: &mut Reader, buf: &mut Vec<u8>, asks: &[Ask]) -> Result<(), String> {
    for (i, ask) in asks.iter().enumerate() {
        let Some((status, body)) = response(r, buf).await else {
            return Err(format!("closed after {i} answers"));
        };
        if status != 200 {
            return Err(format!(
                "answer {i}: {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        ask.answered_by(&body)
            .map_err(|e| format!("answer {i}: {e}"))?;
    }
    Ok(())
}

/// lingo's metrics once nothing is in flight (a leaving client's requests end as lingo
/// notices); fails the case if that takes longer than the bound.
async fn settled(addr: SocketAddr) -> Result<(f64, f64), TestCaseError> {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let (requests, tokens, in_flight) = metrics(addr).await;
        if in_flight == 0.0 {
            return Ok((requests, tokens));
        }
        prop_assert!(
            tokio::time::Instant::now() < deadline,
            "{in_flight} still in flight"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Send `pieces` and read the answers to `asks` at once, within the bound.
async fn exchange(
    r: &mut Reader,
    w: &mut Writer,
    buf: &mut Vec<u8>,
    pieces: &[&[u8]],
    asks: &[Ask],
) -> Result<(), TestCaseError> {
    let (_, read) = tokio::time::timeout(BOUND, async {
        tokio::join!(write(w, pieces), answers(r, buf, asks))
    })
    .await
    .map_err(|_| TestCaseError::fail("answers in time"))?;
    read.map_err(TestCaseError::fail)
}

async fn connect(addr: SocketAddr) -> (Reader, Writer) {
    let s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.into_split()
}

async fn check(case: &Case, mock: &Mock, addr: SocketAddr) -> Result<(), TestCaseError> {
    let before = settled(addr).await?;
    let generated_before = mock.state.stats().completion_tokens;
    let recorded = match case.leave {
        None => stay(case, addr).await?,
        Some(leave) => leave_at(case, leave, addr).await?,
    };
    // Not wedged: after a client left, a new connection is answered. Asked before the
    // counts are read, which gives lingo a whole exchange to have read what the leaving
    // client sent (its records are counted now, not in the next case's window).
    let answered_after = match case.leave {
        None => 0,
        Some(_) => {
            let ask = Ask::Completion {
                stream: false,
                tokens: 1,
                sent: Sent::Length,
            };
            let (mut r, mut w) = connect(addr).await;
            let wire = ask.wire();
            exchange(&mut r, &mut w, &mut Vec::new(), &[&wire], &[ask]).await?;
            1
        }
    };
    let (requests, tokens) = settled(addr).await?;
    let records = (requests - before.0) as usize - answered_after;
    prop_assert!(
        recorded.contains(&records),
        "{records} records, {recorded:?} expected"
    );
    let generated = mock.state.stats().completion_tokens - generated_before;
    let counted = (tokens - before.1) as u64;
    match case.leave {
        None => prop_assert_eq!(counted, generated, "lingo's token count"),
        // A stream cut short counts what reached lingo, which the upstream may have
        // generated more than.
        Some(_) => prop_assert!(counted <= generated, "{counted} counted of {generated}"),
    }
    Ok(())
}

/// The whole conversation, every answer read; how many records it must leave.
async fn stay(case: &Case, addr: SocketAddr) -> Result<RangeInclusive<usize>, TestCaseError> {
    let wire: Vec<u8> = case.asks.iter().flat_map(Ask::wire).collect();
    let all = pieces(&wire, &case.cuts);
    let (mut r, mut w) = connect(addr).await;
    let mut buf = Vec::new();
    exchange(&mut r, &mut w, &mut buf, &all, &case.asks).await?;
    prop_assert!(buf.is_empty(), "bytes after the last answer: {:?}", buf);
    let generating = case.asks.iter().filter(|a| a.generates()).count();
    Ok(generating..=generating)
}

/// The conversation sent up to the leave point, the answers to some of the requests sent
/// whole read, and the connection dropped; how many records it may leave: at least one per
/// answer read, at most one per request whose head was sent (a body cut short counts once).
async fn leave_at(
    case: &Case,
    leave: prop::sample::Index,
    addr: SocketAddr,
) -> Result<RangeInclusive<usize>, TestCaseError> {
    let wire: Vec<u8> = case.asks.iter().flat_map(Ask::wire).collect();
    let at = leave.index(wire.len() + 1);
    let upto = pieces(&wire[..at], &case.cuts);
    let mut sent_whole = 0;
    let mut heads = 0;
    let mut from = 0;
    for a in &case.asks {
        let len = a.wire().len();
        sent_whole += usize::from(from + len <= at);
        heads += usize::from(a.generates() && from + head_len(a) <= at);
        from += len;
    }
    let reading = case
        .cuts
        .first()
        .map_or(sent_whole, |c| c.index(sent_whole + 1));
    let read = &case.asks[..reading];
    let (mut r, mut w) = connect(addr).await;
    exchange(&mut r, &mut w, &mut Vec::new(), &upto, read).await?;
    let answered = read.iter().filter(|a| a.generates()).count();
    Ok(answered..=heads)
}

/// The length of a request's head, to its blank line.
fn head_len(a: &Ask) -> usize {
    let w = a.wire();
    w.windows(4).position(|x| x == b"\r\n\r\n").unwrap() + 4
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn pipelined_requests_cut_anywhere_are_answered_whole_and_in_order(c in case(false)) {
        let _one = one_at_a_time();
        let s = servers();
        s.rt.block_on(check(&c, &s.mock, s.addr))?;
    }

    #[test]
    fn a_client_leaving_at_any_byte_leaves_nothing_behind(c in case(true)) {
        let _one = one_at_a_time();
        let s = servers();
        s.rt.block_on(check(&c, &s.mock, s.addr))?;
    }
}
