//! lingo's own HTTP/1.1 on bytes it does not control: a client's requests read by the
//! server (`proxy::server::h1`), an upstream's answer read by the client (`upstream::h1`),
//! each read whole and in the pieces the input chooses, as the connections read them; and
//! each side's encoder read back by the other side's parser.

use bytes::{Buf, BytesMut};
use http::{HeaderName, HeaderValue, Method, StatusCode, Version};

use crate::proxy::server::h1::{request, response};
use crate::upstream::h1::framing::{Framing, Step};
use crate::upstream::h1::head;

use super::reference;

/// Requests read from one connection at most (a pipelining client's).
const MAX_REQUESTS: usize = 8;

/// Layout: selector byte, split count `k` (mod 16), `k` piece lengths, then the bytes. The
/// selector (mod 4) picks a client's bytes to the server (0), an upstream's answer to a
/// request (1) or to a HEAD request (2), or the round trips (3), whose flags are its other
/// bits. Invariants: nothing panics; what is read does not depend on where the reads split
/// the bytes (but for which refusal a head too large gets); a body never yields an empty
/// piece; what either side writes, the other reads back as written.
pub fn http1(data: &[u8]) {
    let (sel, data) = super::head(data);
    let (k, data) = super::head(data);
    let k = usize::from(k % 16).min(data.len());
    let (lengths, wire) = data.split_at(k);
    let pieces = super::split(wire, lengths);
    match sel % 4 {
        0 => {
            let whole = requests(&[wire]);
            same_requests(&whole, &requests(&pieces));
            requests_agree(&whole.0, &reference::requests(&pieces));
        }
        1 | 2 => {
            let head_request = sel % 4 == 2;
            let whole = answer(&[wire], head_request);
            same_answer(&whole, &answer(&pieces, head_request));
            answer_agrees(&whole, reference::answer(&pieces, head_request));
        }
        _ => {
            response_round_trip(sel >> 2, &pieces);
            request_round_trip(sel >> 2, wire);
        }
    }
}

/// How a body's reading ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// By its framing (or by the close its framing ends at).
    Done,
    /// The input ended first.
    Closed,
    Malformed(&'static str),
}

/// A request head as the handler sees it.
#[derive(Debug, PartialEq, Eq)]
struct RequestHead {
    method: Method,
    target: String,
    version: Version,
    headers: Vec<(HeaderName, HeaderValue)>,
    framing: Framing,
    keep_alive: bool,
    expect_continue: bool,
    len: usize,
}

/// One request on a connection: served (its head and body), or refused.
#[derive(Debug)]
enum Exchange {
    Served(RequestHead, Vec<u8>, End),
    Refused(request::Refusal),
}

/// The requests on a connection, read as `Conn` reads them: a head parsed at every read
/// until it is whole, then its body by its framing, then the next while the client keeps
/// the connection; and the bytes left unread.
fn requests(pieces: &[&[u8]]) -> (Vec<Exchange>, Vec<u8>) {
    let mut input = pieces.iter().copied();
    let (mut buf, mut heads) = (BytesMut::new(), BytesMut::new());
    let mut out = Vec::new();
    while out.len() < MAX_REQUESTS {
        let parsed = loop {
            if !buf.is_empty() {
                match request::parse(&buf, &mut heads) {
                    Ok(None) => {}
                    done => break done,
                }
            }
            match input.next() {
                Some(p) => buf.extend_from_slice(p),
                None => break Ok(None),
            }
        };
        let head = match parsed {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(refusal) => {
                out.push(Exchange::Refused(refusal));
                break;
            }
        };
        buf.advance(head.len);
        let summary = RequestHead {
            method: head.request.method().clone(),
            target: head.request.uri().to_string(),
            version: head.request.version(),
            headers: lines(head.request.headers()),
            framing: head.framing,
            keep_alive: head.keep_alive,
            expect_continue: head.expect_continue,
            len: head.len,
        };
        let (body, end) = read_body(head.framing, &mut buf, &mut input);
        let more = end == End::Done && head.keep_alive;
        out.push(Exchange::Served(summary, body, end));
        if !more {
            break;
        }
    }
    (out, rest(buf, input))
}

/// Whole and split reads of a connection agree: the same requests, heads, bodies and ends,
/// the same bytes left. A head past `MAX_HEAD` may be refused as too large by one and as
/// malformed by the other: a read that ends within it finds it too large before the
/// parser reaches the byte that makes it malformed.
fn same_requests(whole: &(Vec<Exchange>, Vec<u8>), split: &(Vec<Exchange>, Vec<u8>)) {
    assert_eq!(
        whole.0.len(),
        split.0.len(),
        "requests read in pieces: {whole:?} {split:?}"
    );
    for (a, b) in whole.0.iter().zip(&split.0) {
        match (a, b) {
            (Exchange::Served(h, body, end), Exchange::Served(h2, body2, end2)) => {
                assert_eq!(
                    (h, body, end),
                    (h2, body2, end2),
                    "a request read in pieces"
                );
            }
            (Exchange::Refused(r), Exchange::Refused(r2)) => {
                let large = [r.status, r2.status].contains(&request::TOO_LARGE.status);
                assert!(
                    r == r2 || large,
                    "refused in pieces as {r2:?}, whole as {r:?}"
                );
                return;
            }
            _ => panic!("served one way and refused the other: {a:?} {b:?}"),
        }
    }
    assert_eq!(whole.1, split.1, "the bytes left after the requests");
}

/// Every request lingo's server read to its end, hyper's read the same way: its head's
/// method, target and header lines, and its body. (lingo may refuse what hyper reads.)
fn requests_agree(lingo: &[Exchange], hyper: &[reference::Heard]) {
    for (i, exchange) in lingo.iter().enumerate() {
        let Exchange::Served(head, body, End::Done) = exchange else {
            break;
        };
        let Some(heard) = hyper.get(i) else {
            panic!("lingo read request {i} and hyper did not: {head:?} (hyper: {hyper:?})");
        };
        let lingo_read = (
            &head.method,
            &head.target,
            fields(&head.headers),
            Some(body),
        );
        let hyper_read = (
            &heard.method,
            &heard.target,
            fields(&heard.headers),
            heard.body.as_ref(),
        );
        assert_eq!(
            lingo_read, hyper_read,
            "request {i}: lingo's reading, then hyper's"
        );
    }
}

/// A header map's lines, in order, to compare.
pub(super) fn lines(map: &http::HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Header lines but `content-length`: hyper keeps one of several equal ones, lingo all
/// (the body, compared too, says the length was read alike).
fn fields(lines: &[(HeaderName, HeaderValue)]) -> Vec<&(HeaderName, HeaderValue)> {
    let framing = |(name, _): &&(HeaderName, HeaderValue)| name != http::header::CONTENT_LENGTH;
    lines.iter().filter(framing).collect()
}

/// An answer lingo's client read to its end, hyper's read the same: status and body.
fn answer_agrees(lingo: &Answer, hyper: Option<reference::Got>) {
    let Answer::Read(head, body, End::Done, _) = lingo else {
        return;
    };
    let Some((status, hyper_body)) = hyper else {
        panic!("lingo read an answer and hyper did not: {head:?}");
    };
    let lingo_read = (head.status, Some(body));
    assert_eq!(
        lingo_read,
        (status, hyper_body.as_ref()),
        "lingo's reading, then hyper's"
    );
}

/// A response head as the upstream client keeps it.
#[derive(Debug, PartialEq, Eq)]
struct ResponseHead {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    headers: Vec<(HeaderName, HeaderValue)>,
    framing: Framing,
    reusable: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// The final head (informational ones skipped), the body, its end, the bytes left.
    Read(ResponseHead, Vec<u8>, End, Vec<u8>),
    Refused(String),
    /// The input ended before a whole final head.
    Closed,
}

/// Whole and split reads of an answer agree, but for which refusal a head past
/// `MAX_HEAD` gets (as for requests: `same_requests`).
fn same_answer(whole: &Answer, split: &Answer) {
    if let (Answer::Refused(a), Answer::Refused(b)) = (whole, split) {
        if a == head::TOO_LARGE || b == head::TOO_LARGE {
            return;
        }
    }
    assert_eq!(whole, split, "an answer read in pieces");
}

/// An upstream's answer, read as `upstream::h1` reads it.
fn answer(pieces: &[&[u8]], head_request: bool) -> Answer {
    let mut input = pieces.iter().copied();
    let mut buf = BytesMut::new();
    let head = loop {
        if !buf.is_empty() {
            match head::parse(&buf, head_request) {
                Err(e) => return Answer::Refused(e),
                Ok(Some(h)) if h.status.is_informational() => {
                    buf.advance(h.len);
                    continue;
                }
                Ok(Some(h)) => break h,
                Ok(None) => {}
            }
        }
        match input.next() {
            Some(p) => buf.extend_from_slice(p),
            None => return Answer::Closed,
        }
    };
    buf.advance(head.len);
    let summary = ResponseHead {
        status: head.status,
        content_type: head.content_type,
        headers: lines(&head.headers),
        framing: head.framing,
        reusable: head.reusable,
    };
    let (body, end) = read_body(head.framing, &mut buf, &mut input);
    Answer::Read(summary, body, end, rest(buf, input))
}

/// A body read as `poll_piece` reads it: from the buffer while it holds some, then the next
/// piece. Every step hands on data, asks for more, or ends: none loops.
fn read_body<'a>(
    mut framing: Framing,
    buf: &mut BytesMut,
    input: &mut impl Iterator<Item = &'a [u8]>,
) -> (Vec<u8>, End) {
    let mut body = Vec::new();
    loop {
        match framing.decode(buf) {
            Err(e) => return (body, End::Malformed(e)),
            Ok(Step::Data(d)) => {
                assert!(!d.is_empty(), "an empty piece of body");
                body.extend_from_slice(&d);
            }
            Ok(Step::Done) => return (body, End::Done),
            Ok(Step::NeedMore) => match input.next() {
                Some(p) => buf.extend_from_slice(p),
                None if framing.ends_at_close() => return (body, End::Done),
                None => return (body, End::Closed),
            },
        }
    }
}

fn rest<'a>(buf: BytesMut, input: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut left = buf.to_vec();
    input.for_each(|p| left.extend_from_slice(p));
    left
}

/// The server's answer (its head by `response::encode`, its body framed as `Conn` frames
/// it) read back by the upstream client: the same status, body and reuse.
fn response_round_trip(flags: u8, frames: &[&[u8]]) {
    let status = StatusCode::from_u16(200 + u16::from(flags) * 13 % 800).expect("200-999");
    let ask = response::Ask {
        version: if flags & 1 == 0 {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        },
        head_method: flags & 2 != 0,
        keep_alive: flags & 4 != 0,
    };
    let body: Vec<u8> = frames.concat();
    let length = (flags & 8 != 0).then_some(body.len() as u64);
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = status;
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    let mut wire = Vec::new();
    let (out, keep) = response::encode(&mut wire, &parts, length, ask);
    let sent: &[u8] = match out {
        response::Out::Bodiless => &[],
        _ => &body,
    };
    for frame in frames
        .iter()
        .filter(|f| !f.is_empty() && out != response::Out::Bodiless)
    {
        if out == response::Out::Chunked {
            response::chunk_size(&mut wire, frame.len());
            wire.extend_from_slice(frame);
            wire.extend_from_slice(b"\r\n");
        } else {
            wire.extend_from_slice(frame);
        }
    }
    if out == response::Out::Chunked {
        wire.extend_from_slice(response::LAST_CHUNK);
    }
    let Answer::Read(head, got, end, left) = answer(&[&wire], ask.head_method) else {
        panic!(
            "lingo's own answer not read back: {:?}",
            String::from_utf8_lossy(&wire)
        );
    };
    assert_eq!(head.status, status);
    assert_eq!(
        head.content_type.as_ref().map(HeaderValue::as_bytes),
        Some(&b"text/event-stream"[..])
    );
    assert_eq!(
        (got.as_slice(), end, left.as_slice()),
        (sent, End::Done, &[][..]),
        "{out:?}"
    );
    assert_eq!(head.reusable, keep, "reuse after {out:?}");
    let hyper = reference::answer(&[&wire], ask.head_method);
    assert_eq!(
        hyper,
        Some((status, Some(sent.to_vec()))),
        "hyper's reading of {out:?}"
    );
}

/// The upstream client's request head (`head::encode`) and body read back by the server:
/// the same method, target, headers and body, and the connection kept.
fn request_round_trip(flags: u8, body: &[u8]) {
    const METHODS: [Method; 4] = [Method::POST, Method::GET, Method::PUT, Method::DELETE];
    let method = METHODS[usize::from(flags % 4)].clone();
    // A target as an endpoint's URL and a route make one: a prefix and a path, both plain.
    let plain = |b: &u8| b"abcdefghijklmnopqrstuvwxyz0123456789-._~/"[usize::from(*b) % 41];
    let path: String = std::iter::once('/')
        .chain(body.iter().take(40).map(|b| char::from(plain(b))))
        .collect();
    let prefix = ["", "/v1", "/api/x"][usize::from(flags >> 2) % 3];
    let auth = HeaderValue::from_static("Bearer k");
    let id = HeaderValue::from_str(&path).expect("plain bytes");
    let (auth_name, id_name) = (
        http::header::AUTHORIZATION,
        HeaderName::from_static("x-request-id"),
    );
    let headers = [(&auth_name, &auth), (&id_name, &id)];
    let mut wire = Vec::new();
    head::encode(
        &mut wire,
        &method,
        (prefix, &path),
        "127.0.0.1:8000",
        &headers,
        body.len(),
    );
    wire.extend_from_slice(body);
    let (read, left) = requests(&[&wire]);
    let [Exchange::Served(head, got, end)] = read.as_slice() else {
        panic!("lingo's own request not read back: {read:?}");
    };
    assert_eq!(
        (&head.method, head.target.as_str()),
        (&method, format!("{prefix}{path}").as_str())
    );
    let value = |name: &HeaderName| head.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    assert_eq!(value(&auth_name), Some(&auth));
    assert_eq!(value(&id_name), Some(&id));
    assert_eq!(
        value(&http::header::HOST).map(HeaderValue::as_bytes),
        Some(&b"127.0.0.1:8000"[..])
    );
    assert_eq!(
        (got.as_slice(), end, left.as_slice()),
        (body, &End::Done, &[][..])
    );
    assert!(head.keep_alive, "an upstream request keeps its connection");
    requests_agree(&read, &reference::requests(&[&wire]));
}
