//! lingo's own HTTP/1.1 server connection over raw sockets: pipelined requests answered in
//! order, bodies that arrive after their head or chunked, `Expect: 100-continue`, HTTP/1.0,
//! and heads lingo refuses (malformed, oversized, ambiguous framing) with a status and a
//! close.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use lingo::mock::MockKind;
use lingo::upstream::KindSetting;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a test waits at most for an answer.
const BOUND: Duration = Duration::from_secs(20);

const BODY: &str = r#"{"model":"mock-model","prompt":"a b","max_tokens":2}"#;

async fn lingo() -> (common::Mock, SocketAddr) {
    let mock = common::mock(MockKind::Vllm).await;
    let config = common::config_for(&mock.url(), KindSetting::Vllm);
    let addr = common::serving(config).await;
    (mock, addr)
}

fn post(body: &str) -> String {
    format!(
        "POST /v1/completions HTTP/1.1\r\nHost: lingo\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One response read off `s`: its head (lowercased) and its body, de-chunked.
async fn response(s: &mut TcpStream, buf: &mut Vec<u8>) -> (String, Vec<u8>) {
    tokio::time::timeout(BOUND, read_response(s, buf))
        .await
        .expect("an answer in time")
}

async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> (String, Vec<u8>) {
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        fill(s, buf).await;
    };
    let head = String::from_utf8(buf.drain(..end).collect())
        .unwrap()
        .to_ascii_lowercase();
    let mut body = Vec::new();
    if head.contains("transfer-encoding: chunked") {
        loop {
            let line = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                fill(s, buf).await;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line]).unwrap(), 16).unwrap();
            while buf.len() < line + 2 + size + 2 {
                fill(s, buf).await;
            }
            body.extend_from_slice(&buf[line + 2..line + 2 + size]);
            buf.drain(..line + 2 + size + 2);
            if size == 0 {
                break;
            }
        }
    } else if let Some(n) = header(&head, "content-length") {
        let n: usize = n.parse().unwrap();
        while buf.len() < n {
            fill(s, buf).await;
        }
        body = buf.drain(..n).collect();
    }
    (head, body)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim)
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 4096];
    let n = s.read(&mut chunk).await.unwrap();
    assert!(
        n > 0,
        "closed mid-response: {:?}",
        String::from_utf8_lossy(buf)
    );
    buf.extend_from_slice(&chunk[..n]);
}

/// Whether lingo closes `s` (reading nothing more) within the bound.
async fn closes(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.is_ok()
}

/// A completion answered in full: 200 and a text.
fn completed(head: &str, body: &[u8]) {
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!completion_text(body).is_empty());
}

fn completion_text(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_whole_answer_goes_with_its_length_not_in_chunks() {
    let (_mock, addr) = lingo().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(post(BODY).as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let (head, body) = response(&mut s, &mut buf).await;
    completed(&head, &body);
    assert!(!head.contains("transfer-encoding"), "{head}");
    let length: usize = header(&head, "content-length").unwrap().parse().unwrap();
    assert_eq!(length, body.len());
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let (_mock, addr) = lingo().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let wire = format!(
        "{}GET /health HTTP/1.1\r\nHost: lingo\r\n\r\n{}",
        post(BODY),
        post(BODY)
    );
    s.write_all(wire.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let (first, body) = response(&mut s, &mut buf).await;
    assert!(first.starts_with("http/1.1 200 ok\r\n"), "{first}");
    assert!(!completion_text(&body).is_empty());
    let (second, body) = response(&mut s, &mut buf).await;
    assert!(second.starts_with("http/1.1 200"), "{second}");
    assert!(body.is_empty(), "health has no body");
    let (third, body) = response(&mut s, &mut buf).await;
    assert!(third.starts_with("http/1.1 200"), "{third}");
    assert!(!completion_text(&body).is_empty());
    assert!(header(&third, "date").is_some(), "{third}");
    assert!(header(&third, "connection").is_none(), "{third}");
}

#[tokio::test]
async fn a_body_after_its_head_or_chunked_is_read_whole() {
    let (_mock, addr) = lingo().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let wire = post(BODY);
    let (head, body) = wire.split_at(wire.len() - BODY.len());
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body.as_bytes()[..10]).await.unwrap();
    tokio::task::yield_now().await;
    s.write_all(&body.as_bytes()[10..]).await.unwrap();
    let mut buf = Vec::new();
    let (h, b) = response(&mut s, &mut buf).await;
    completed(&h, &b);

    // The same body in two chunks, on the same connection.
    let (a, b) = BODY.split_at(7);
    let chunked = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: lingo\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x};ext=1\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    s.write_all(chunked.as_bytes()).await.unwrap();
    let (h, b) = response(&mut s, &mut buf).await;
    completed(&h, &b);
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let (_mock, addr) = lingo().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: lingo\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let (interim, _) = response(&mut s, &mut buf).await;
    assert_eq!(interim, "http/1.1 100 continue\r\n\r\n");
    s.write_all(BODY.as_bytes()).await.unwrap();
    let (h, b) = response(&mut s, &mut buf).await;
    completed(&h, &b);
}

#[tokio::test]
async fn http_1_0_is_closed_after_its_answer_unless_it_asks_to_keep_alive() {
    let (_mock, addr) = lingo().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /health HTTP/1.0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let (kept, _) = response(&mut s, &mut buf).await;
    assert_eq!(header(&kept, "connection"), Some("keep-alive"), "{kept}");
    let (last, _) = response(&mut s, &mut buf).await;
    assert_eq!(header(&last, "connection"), Some("close"), "{last}");
    assert!(closes(&mut s, &mut buf).await && buf.is_empty());
}

/// Send `wire` on a fresh connection: the status lingo answered with, and that it closed.
async fn refused(addr: SocketAddr, wire: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(wire).await.unwrap();
    let mut buf = Vec::new();
    assert!(closes(&mut s, &mut buf).await, "closed after a refusal");
    let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    assert!(text.contains("connection: close"), "{text}");
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn heads_lingo_cannot_read_safely_are_refused_and_closed() {
    let (_mock, addr) = lingo().await;
    let both = b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n";
    assert_eq!(refused(addr, both).await, 400);
    let lengths =
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabc";
    assert_eq!(refused(addr, lengths).await, 400);
    assert_eq!(
        refused(addr, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n").await,
        400
    );
    let gzip = b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_eq!(refused(addr, gzip).await, 501);
    let mut huge = b"GET /health HTTP/1.1\r\nx-big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 70 << 10));
    assert_eq!(refused(addr, &huge).await, 431);
    // And lingo still serves.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(post(BODY).as_bytes()).await.unwrap();
    let (h, _) = response(&mut s, &mut Vec::new()).await;
    assert!(h.starts_with("http/1.1 200"), "{h}");
}

#[tokio::test]
async fn a_chunked_body_framed_loosely_is_refused_and_closed() {
    let (_mock, addr) = lingo().await;
    // hyper refuses each of these: a bare LF ending a size line or the trailers, junk after
    // a size, a trailer line that is no header field. Two readers could end such a body in
    // different places, so lingo refuses them too.
    for framing in [
        format!("{:x}\n{BODY}\r\n0\r\n\r\n", BODY.len()),
        format!("{:x}\r\n{BODY}\r\n0\r\n\n", BODY.len()),
        format!("{:x} x\r\n{BODY}\r\n0\r\n\r\n", BODY.len()),
        format!("{:x}\r\n{BODY}\r\n0\r\nGET / HTTP/1.1\r\n\r\n", BODY.len()),
    ] {
        let wire = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: lingo\r\nTransfer-Encoding: chunked\r\n\r\n{framing}"
        );
        assert_eq!(refused(addr, wire.as_bytes()).await, 400, "{framing:?}");
    }
}

#[tokio::test]
async fn a_body_the_handler_left_unread_closes_the_connection() {
    let (_mock, addr) = lingo().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // An unknown route answers at once; its body never comes, so the connection cannot be
    // read for a next request and must say so.
    s.write_all(b"POST /no/such/route HTTP/1.1\r\nHost: lingo\r\nContent-Length: 100\r\n\r\nabc")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let (h, _) = response(&mut s, &mut buf).await;
    assert!(h.starts_with("http/1.1 404"), "{h}");
    assert_eq!(header(&h, "connection"), Some("close"), "{h}");
    assert!(closes(&mut s, &mut buf).await);
}

#[tokio::test]
async fn a_413_reaches_a_client_still_sending_its_body() {
    let mock = common::mock(MockKind::Vllm).await;
    let mut config = common::config_for(&mock.url(), KindSetting::Vllm);
    config.limits.max_request_body = 1024;
    let addr = common::serving(config).await;
    let total = 4 << 20;
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    // The client goes on sending the rest of its body while lingo answers: lingo must not
    // close with those bytes unread (a reset that can overtake its answer).
    let send = tokio::spawn(async move {
        let head = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: lingo\r\nContent-Length: {total}\r\n\r\n"
        );
        w.write_all(head.as_bytes()).await.unwrap();
        let piece = vec![b' '; 64 << 10];
        let mut sent = 0;
        while sent < total {
            if w.write_all(&piece).await.is_err() {
                break;
            }
            sent += piece.len();
        }
    });
    let mut got = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            match r.read(&mut chunk).await {
                Ok(0) => return Ok(()),
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(e),
            }
        }
    };
    let outcome = tokio::time::timeout(BOUND, read)
        .await
        .expect("closed in time");
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(text.starts_with("HTTP/1.1 413"), "{outcome:?}: {text:?}");
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let len: usize = header(&head.to_ascii_lowercase(), "content-length")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(body.len(), len, "the whole error body arrived");
    // And then a clean end (lingo's FIN), not a reset.
    assert!(outcome.is_ok(), "{outcome:?}");
    send.abort();
}

/// A write that waits for a slow client lets the connection's task be polled meanwhile, and a
/// wake-up the upstream body gives then is spent on that poll: once the write is done the body
/// must be asked again, not trusted to wake the task later. Here the upstream sends one large
/// event and holds; lingo takes all of it, finds the body has nothing more, and writes the
/// event into sockets too small for it; the rest of the stream arrives while that write
/// waits, and only then does the client read on. The idle timeout (120 s) is far beyond
/// `BOUND`, so no timer can rescue a stall.
#[tokio::test]
async fn a_stream_goes_on_after_a_write_that_waited_for_the_client() {
    // Tokens per event: an event of about 13 KB, small enough for lingo to gather (copy),
    // about twice what both sockets hold at their smallest.
    const CHUNK: u32 = 2500;
    let mock = common::mock_with(lingo::mock::MockConfig {
        tokens_per_chunk: CHUNK,
        ..Default::default()
    })
    .await;
    mock.state.hold_after(CHUNK);
    let config = common::config_for(&mock.url(), KindSetting::Vllm);
    // Accepted sockets inherit their listener's send buffer, and a fixed one does not grow.
    let listener = tokio::net::TcpSocket::new_v4().unwrap();
    listener.set_send_buffer_size(1024).unwrap();
    listener.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = listener.listen(64).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lingo::proxy::serve(
        listener,
        config,
        std::future::pending(),
    ));
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let body = format!(
        r#"{{"model":"mock-model","prompt":"a b","max_tokens":{},"ignore_eos":true,"stream":true,"stream_options":{{"include_usage":true}}}}"#,
        2 * CHUNK
    );
    s.write_all(post(&body).as_bytes()).await.unwrap();
    // Bytes of the first event have come: lingo has all of it and is writing it.
    let mut buf = Vec::new();
    while buf.len() < 1024 {
        tokio::time::timeout(BOUND, fill(&mut s, &mut buf))
            .await
            .expect("the first event's start");
    }
    mock.state.release();
    tokio::time::timeout(BOUND, mock.state.wait_for(|st| st.completed == 1))
        .await
        .expect("the upstream sent the rest");
    let read = async {
        while !buf.ends_with(b"0\r\n\r\n") {
            fill(&mut s, &mut buf).await;
        }
    };
    tokio::time::timeout(BOUND, read)
        .await
        .expect("the whole stream in time, not stalled");
    let (head, body) = response(&mut s, &mut buf).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let events = common::sse_events(&String::from_utf8(body).unwrap());
    let usage = events.iter().rev().find(|e| !e["usage"].is_null()).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 2 * CHUNK);
    assert_eq!(events.last().unwrap(), "[DONE]");
}
