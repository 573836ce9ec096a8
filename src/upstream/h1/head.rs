//! Request heads written and response heads read, for HTTP/1.1 to an upstream.

use std::io::Write;

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

use super::framing::{Chunked, Framing};

/// A response head larger than this is refused (hyper's default limit is about 400 KiB; a
/// server's is a few hundred bytes).
pub const MAX_HEAD: usize = 64 << 10;
/// Why a head past `MAX_HEAD` is refused.
pub const TOO_LARGE: &str = "the upstream's response head is larger than 64 KiB";
/// Header lines a response head may have.
pub const MAX_HEADERS: usize = 128;

/// The answer headers lingo reads besides the framing ones (read in place) and
/// `content-type` (kept apart): `Retry-After` for the endpoint's health, TGI's counts. Only
/// these go in `Head::headers`. No answer passes an upstream's headers on, and a map of every
/// header a server sends cost two allocations, a hash per name and their drop at every
/// request (by callgrind, 0.8k of a whole non-streaming passthrough's 51.6k instructions).
const READ: [HeaderName; 3] = [
    http::header::RETRY_AFTER,
    HeaderName::from_static("x-prompt-tokens"),
    HeaderName::from_static("x-generated-tokens"),
];

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    /// The headers named in `READ`, as sent.
    pub headers: HeaderMap,
    pub framing: Framing,
    /// The connection may carry another request after this body.
    pub reusable: bool,
    /// Bytes the head took in the buffer.
    pub len: usize,
}

/// What the framing is decided from, as the head's lines give it.
#[derive(Default)]
struct Framers<'a> {
    /// The last `transfer-encoding` line (its last coding is the one that frames).
    coding: Option<&'a [u8]>,
    /// The first `content-length`, and whether a later one differs from it.
    length: Option<&'a [u8]>,
    lengths_differ: bool,
    close: bool,
}

/// Parse a response head at the start of `buf`: `Ok(None)` until it is all there. A head
/// past `MAX_HEAD` is refused whether it came in one read or in many.
pub fn parse(buf: &[u8], head_request: bool) -> Result<Option<Head>, String> {
    // Uninitialised slots: zeroing all of them at every parse costs more than the parse.
    let mut slots = [std::mem::MaybeUninit::uninit(); MAX_HEADERS];
    let mut r = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut r, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(None),
        Ok(_) => return Err(TOO_LARGE.into()),
        Err(e) => return Err(format!("the upstream's response head is malformed ({e})")),
    };
    let code = r.code.unwrap_or(0);
    let status = StatusCode::from_u16(code)
        .map_err(|_| format!("the upstream answered with status {code}"))?;
    let http10 = r.version != Some(1);
    let mut f = Framers {
        close: http10,
        ..Framers::default()
    };
    let (mut content_type, mut headers) = (None, HeaderMap::new());
    for h in r.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            match f.length {
                None => f.length = Some(h.value),
                Some(first) => f.lengths_differ |= parse_length(first) != parse_length(h.value),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            f.coding = Some(h.value);
        } else if name.eq_ignore_ascii_case("connection") {
            f.close |= has_token(h.value, "close");
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = content_type.or_else(|| value(h.value));
        } else if let Some(read) = READ.iter().find(|n| name.eq_ignore_ascii_case(n.as_str())) {
            if let Some(v) = value(h.value) {
                headers.append(read.clone(), v);
            }
        }
    }
    // lingo never asks to switch protocols: a 101 is a server out of step.
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err("the upstream switched protocols unasked (101)".into());
    }
    let framing = framing(status, &f, head_request, http10)?;
    Ok(Some(Head {
        status,
        reusable: !f.close && !matches!(framing, Framing::Close),
        content_type,
        headers,
        framing,
        len,
    }))
}

/// A header value; the usual content types without a copy.
fn value(v: &[u8]) -> Option<HeaderValue> {
    const COMMON: [&str; 3] = [
        "application/json",
        "text/event-stream",
        "application/x-ndjson",
    ];
    match COMMON.iter().find(|c| c.as_bytes() == v) {
        Some(c) => Some(HeaderValue::from_static(c)),
        None => HeaderValue::from_bytes(v).ok(),
    }
}

/// How the body is delimited (RFC 9112 §6.3).
fn framing(
    status: StatusCode,
    f: &Framers<'_>,
    head_request: bool,
    http10: bool,
) -> Result<Framing, String> {
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if head_request || bodiless {
        return Ok(Framing::Length(0));
    }
    if let Some(te) = f.coding {
        // HTTP/1.0 has no transfer codings: such a body's end is anyone's guess (RFC 9112
        // §6.1 calls its framing faulty; hyper refuses it too).
        if http10 {
            return Err("the upstream sent transfer-encoding in an HTTP/1.0 answer".into());
        }
        let last = te.rsplit(|&b| b == b',').next().unwrap_or(b"");
        return Ok(if trim(last).eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked(Chunked::Size)
        } else {
            Framing::Close
        });
    }
    let Some(first) = f.length else {
        return Ok(Framing::Close);
    };
    let n = parse_length(first).ok_or("the upstream sent an invalid content-length")?;
    if f.lengths_differ {
        return Err("the upstream sent conflicting content-lengths".into());
    }
    Ok(Framing::Length(n))
}

/// A `content-length` value: digits only (no sign), surrounding whitespace allowed, `None`
/// past `u64`.
pub(crate) fn parse_length(v: &[u8]) -> Option<u64> {
    let v = trim(v);
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

pub(crate) fn has_token(v: &[u8], token: &str) -> bool {
    v.split(|&b| b == b',')
        .any(|t| trim(t).eq_ignore_ascii_case(token.as_bytes()))
}

/// Write a request head for a body of `body_len` bytes; the path is `prefix` then `path`.
pub fn encode(
    out: &mut Vec<u8>,
    method: &Method,
    (prefix, path): (&str, &str),
    host: &str,
    headers: &[(&HeaderName, &HeaderValue)],
    body_len: usize,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (k, v) in headers {
        out.extend_from_slice(k.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if body_len > 0 || method == Method::POST {
        // Writing to a Vec cannot fail.
        let _ = write!(out, "content-length: {body_len}\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(wire: &str) -> Head {
        parse(wire.as_bytes(), false).unwrap().unwrap()
    }

    #[test]
    fn framing_follows_the_headers() {
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n");
        assert_eq!((h.framing, h.reusable), (Framing::Length(12), true));
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked(Chunked::Size));
        let h = head("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n");
        assert_eq!((h.framing, h.reusable), (Framing::Close, false));
        let h = head("HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(0));
    }

    #[test]
    fn close_and_http10_are_not_reused() {
        let h =
            head("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\ncontent-length: 0\r\n\r\n");
        assert!(!h.reusable);
        assert!(!head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").reusable);
    }

    #[test]
    fn the_headers_lingo_reads_come_through_whole_and_the_rest_are_left() {
        let wire = "HTTP/1.1 503 Busy\r\nX-Prompt-Tokens: 7\r\nretry-after:\r\n\
                    x-prompt-tokens:  8 \r\nserver: s\r\nContent-Type: text/event-stream\r\n\
                    content-type: text/plain\r\ncontent-length: 0\r\n\r\nnext bytes";
        let h = head(wire);
        let p: Vec<_> = h.headers.get_all("x-prompt-tokens").iter().collect();
        assert_eq!(p, ["7", "8"]);
        assert_eq!(h.headers["retry-after"], "");
        assert!(!h.headers.contains_key("server"));
        assert_eq!(h.headers.len(), 3);
        // The first content type, as sent (a common one or not).
        assert_eq!(h.content_type.unwrap(), "text/event-stream");
        assert_eq!(h.len, wire.len() - "next bytes".len());
        let h = head("HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\n\r\n");
        assert_eq!(h.content_type.unwrap(), "application/json; charset=utf-8");
    }

    #[test]
    fn partial_and_malformed_heads() {
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-le", false)
            .unwrap()
            .is_none());
        assert!(parse(b"garbage\r\n\r\n", false).is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 1x\r\n\r\n", false).is_err());
        let two = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n";
        assert!(parse(two, false).is_err());
        for bad in ["", " ", "+1", "-1", "1 2", "0x1", "18446744073709551616"] {
            assert_eq!(parse_length(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_length(b" 18446744073709551615 "), Some(u64::MAX));
        assert_eq!(parse_length(b"007"), Some(7));
        let same = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(
            parse(same, false).unwrap().unwrap().framing,
            Framing::Length(2)
        );
        // Codings across lines are one list: the last one frames.
        let te =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n";
        assert_eq!(parse(te, false).unwrap().unwrap().framing, Framing::Close);
        // No transfer codings in HTTP/1.0, and no switching protocols lingo did not ask for.
        let te10 = b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(parse(te10, false).is_err());
        assert!(parse(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", false).is_err());
    }

    #[test]
    fn a_head_past_the_limit_is_refused_in_one_read_as_in_many() {
        let line = format!("x-pad: {}\r\n", "a".repeat(1000));
        let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
        while big.len() <= MAX_HEAD {
            big.extend_from_slice(line.as_bytes());
        }
        let partial = big.clone();
        big.extend_from_slice(b"\r\n");
        assert_eq!(parse(&big, false).unwrap_err(), TOO_LARGE);
        assert_eq!(parse(&partial, false).unwrap_err(), TOO_LARGE);
        assert!(parse(&partial[..MAX_HEAD - 1], false).unwrap().is_none());
    }

    #[test]
    fn encode_writes_one_request() {
        let mut out = Vec::new();
        let (k, v) = (
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer k"),
        );
        encode(
            &mut out,
            &Method::POST,
            ("/v1", "/x"),
            "h:1",
            &[(&k, &v)],
            2,
        );
        let want = "POST /v1/x HTTP/1.1\r\nhost: h:1\r\nauthorization: Bearer k\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
