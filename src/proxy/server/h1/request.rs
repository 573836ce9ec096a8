//! Request heads read from a client (RFC 9112 §2-§6), with the body's framing and whether
//! the connection stays open after the answer.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version};

use crate::upstream::h1::framing::{Chunked, Framing};
use crate::upstream::h1::{has_token, parse_length, trim};

/// A request head larger than this is refused with 431 (nginx's default allows 32 KiB of
/// header lines; hyper's about 400 KiB, which is a lot to hold per connection).
pub const MAX_HEAD: usize = 64 << 10;
/// Header lines a request head may have (hyper's default, as before).
const MAX_HEADERS: usize = 100;
/// The largest head copied into the connection's buffer for heads (`copy_head`).
const HEADS_KEPT: usize = 4 << 10;

/// A parsed request head.
#[derive(Debug)]
pub struct Head {
    pub request: Request<()>,
    pub framing: Framing,
    /// The client keeps the connection for another request after this one.
    pub keep_alive: bool,
    /// The client waits for `100 Continue` before it sends the body.
    pub expect_continue: bool,
    /// Bytes the head took in the buffer.
    pub len: usize,
}

/// A head lingo answers itself and then closes: the request cannot be read reliably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub why: &'static str,
}

const fn bad(why: &'static str) -> Refusal {
    Refusal {
        status: StatusCode::BAD_REQUEST,
        why,
    }
}

pub const TOO_LARGE: Refusal = Refusal {
    status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    why: "the request head is too large",
};

/// Parse a request head at the start of `buf`: `Ok(None)` until it is all there. The head's
/// target and header values are slices of one copy of it, cut from `heads` (`copy_head`).
pub fn parse(buf: &[u8], heads: &mut BytesMut) -> Result<Option<Head>, Refusal> {
    // Uninitialised slots: zeroing 100 of them at every parse (a read may bring part of a
    // head) cost more than the parse.
    let mut slots = [std::mem::MaybeUninit::uninit(); MAX_HEADERS];
    let mut r = httparse::Request::new(&mut []);
    let len = match r.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(TOO_LARGE),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(TOO_LARGE),
        Err(_) => return Err(bad("the request head is malformed")),
    };
    if len > MAX_HEAD {
        return Err(TOO_LARGE);
    }
    let version = match r.version {
        Some(1) => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    let method = Method::from_bytes(r.method.unwrap_or_default().as_bytes())
        .map_err(|_| bad("the request method is invalid"))?;
    let block = copy_head(heads, &buf[..len]);
    let uri = Uri::from_maybe_shared(within(&block, buf, r.path.unwrap_or_default().as_bytes()))
        .map_err(|_| bad("the request target is invalid"))?;
    let headers = headers(&block, buf, r.headers)?;
    let framing = framing(&headers, version)?;
    let connection = |token| {
        headers
            .get_all(http::header::CONNECTION)
            .iter()
            .any(|v| has_token(v.as_bytes(), token))
    };
    let keep_alive = match version {
        Version::HTTP_11 => !connection("close"),
        _ => connection("keep-alive") && !connection("close"),
    };
    let expect_continue = version == Version::HTTP_11
        && headers
            .get(http::header::EXPECT)
            .is_some_and(|v| trim(v.as_bytes()).eq_ignore_ascii_case(b"100-continue"));
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(Some(Head {
        request,
        framing,
        keep_alive,
        expect_continue,
        len,
    }))
}

/// A copy of the head, cut from `heads`: the connection's own buffer for them, not its read
/// buffer, which the connection lets go while a stream is served. A head's values are
/// dropped when its handler is done, and the next head then reuses the same memory: no
/// allocation per request (a copy of its own was two, the second at its first slice).
fn copy_head(heads: &mut BytesMut, head: &[u8]) -> Bytes {
    // The buffer stays with the connection: a head past a few KiB is copied on its own
    // rather than grow it for the connection's life.
    if head.len() > HEADS_KEPT {
        return Bytes::copy_from_slice(head);
    }
    crate::blocks::cut_from(heads, head)
}

/// `part` of `buf` as the same bytes of `block`, its copy; a part not in the head (an
/// empty value) is copied on its own.
fn within(block: &Bytes, buf: &[u8], part: &[u8]) -> Bytes {
    match (part.as_ptr() as usize).checked_sub(buf.as_ptr() as usize) {
        Some(at) if at + part.len() <= block.len() => block.slice(at..at + part.len()),
        _ => Bytes::copy_from_slice(part),
    }
}

/// The header lines, each value a slice of the head's copy.
fn headers(
    block: &Bytes,
    buf: &[u8],
    lines: &[httparse::Header<'_>],
) -> Result<HeaderMap, Refusal> {
    // Room for the one header lingo adds (`x-request-id`, when the client sent none): an
    // exact fit grew, rehashing the map, at that insert.
    let mut map = HeaderMap::with_capacity(lines.len() + 1);
    for h in lines {
        let value = within(block, buf, h.value);
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| bad("a header name is invalid"))?;
        let value =
            HeaderValue::from_maybe_shared(value).map_err(|_| bad("a header value is invalid"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// How the body is delimited (RFC 9112 §6.3). Anything that could be read two ways (a
/// transfer coding and a length, lengths that differ) is refused: a proxy that reads a body
/// differently from the server behind it is how requests are smuggled.
fn framing(h: &HeaderMap, version: Version) -> Result<Framing, Refusal> {
    let mut codings = h.get_all(http::header::TRANSFER_ENCODING).iter().peekable();
    if codings.peek().is_some() {
        if version != Version::HTTP_11 {
            return Err(bad("transfer-encoding in an HTTP/1.0 request"));
        }
        if h.contains_key(http::header::CONTENT_LENGTH) {
            return Err(bad("both transfer-encoding and content-length"));
        }
        let all: Vec<&[u8]> = codings
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .map(trim)
            .collect();
        if all.len() != 1 || !all[0].eq_ignore_ascii_case(b"chunked") {
            return Err(Refusal {
                status: StatusCode::NOT_IMPLEMENTED,
                why: "a transfer coding other than chunked",
            });
        }
        return Ok(Framing::Chunked(Chunked::Size));
    }
    let mut lengths = h.get_all(http::header::CONTENT_LENGTH).iter();
    let Some(first) = lengths.next() else {
        return Ok(Framing::Length(0));
    };
    let n = parse_length(first.as_bytes()).ok_or(bad("the content-length is invalid"))?;
    if lengths.any(|v| parse_length(v.as_bytes()) != Some(n)) {
        return Err(bad("conflicting content-lengths"));
    }
    Ok(Framing::Length(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(wire: &str) -> Head {
        parse(wire.as_bytes(), &mut BytesMut::new())
            .unwrap()
            .expect("complete")
    }

    fn refused(wire: &str) -> StatusCode {
        parse(wire.as_bytes(), &mut BytesMut::new())
            .unwrap_err()
            .status
    }

    #[test]
    fn a_head_is_read_whole_with_its_framing_and_keep_alive() {
        let wire = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nX-A: 1\r\nx-a: \r\n\r\n{\"prompt\":1}";
        let h = head(wire);
        assert_eq!(h.request.method(), Method::POST);
        assert_eq!(h.request.uri().path(), "/v1/completions");
        assert_eq!(h.request.uri().query(), Some("x=1"));
        assert_eq!(h.framing, Framing::Length(12));
        assert!(h.keep_alive && !h.expect_continue);
        let a: Vec<_> = h.request.headers().get_all("x-a").iter().collect();
        assert_eq!(a, ["1", ""]);
        assert_eq!(h.len, wire.len() - 12, "the body is not part of the head");
        assert!(
            parse(b"GET / HTTP/1.1\r\nHost: a\r\n", &mut BytesMut::new())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_head_reuses_the_last_ones_copy_once_it_is_dropped_and_never_overwrites_a_kept_one() {
        let host = |h: &Head| h.request.headers()["host"].as_bytes().as_ptr();
        let mut heads = BytesMut::new();
        let first = parse(b"GET /a HTTP/1.1\r\nHost: one\r\n\r\n", &mut heads)
            .unwrap()
            .unwrap();
        let at = host(&first);
        drop(first);
        let second = parse(b"GET /b HTTP/1.1\r\nHost: two\r\n\r\n", &mut heads)
            .unwrap()
            .unwrap();
        assert_eq!(host(&second), at, "the same memory, reused");
        // Kept (as a stream's handler might): the next head goes elsewhere.
        let third = parse(b"GET /c HTTP/1.1\r\nHost: six\r\n\r\n", &mut heads)
            .unwrap()
            .unwrap();
        assert_eq!(second.request.headers()["host"], "two");
        assert_eq!(second.request.uri().path(), "/b");
        assert_eq!(third.request.headers()["host"], "six");
        assert_eq!(third.request.uri().path(), "/c");
    }

    #[test]
    fn a_large_head_is_copied_on_its_own_not_into_the_buffer_the_connection_keeps() {
        let mut heads = BytesMut::new();
        let big = "v".repeat(2 * HEADS_KEPT);
        let wire = format!("GET / HTTP/1.1\r\nX-Big: {big}\r\n\r\n");
        let h = parse(wire.as_bytes(), &mut heads).unwrap().unwrap();
        assert_eq!(h.request.headers()["x-big"], big.as_str());
        assert!(heads.capacity() < HEADS_KEPT, "{}", heads.capacity());
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_header() {
        assert!(!head("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(head("POST / HTTP/1.1\r\nExpect: 100-Continue\r\n\r\n").expect_continue);
        let chunked = head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(chunked.framing, Framing::Chunked(Chunked::Size));
    }

    #[test]
    fn a_body_that_could_be_read_two_ways_is_refused() {
        use StatusCode as S;
        let both = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(refused(both), S::BAD_REQUEST);
        let two = "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n";
        assert_eq!(refused(two), S::BAD_REQUEST);
        assert_eq!(
            refused("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
            S::BAD_REQUEST
        );
        let gzip = "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(refused(gzip), S::NOT_IMPLEMENTED);
        let old = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(refused(old), S::BAD_REQUEST);
        // The same length twice is one length.
        let same = head("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(same.framing, Framing::Length(3));
    }

    #[test]
    fn malformed_and_oversized_heads_are_refused() {
        assert_eq!(
            refused("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(refused("G\0T / HTTP/1.1\r\n\r\n"), StatusCode::BAD_REQUEST);
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("x-{i}: 1\r\n"))
            .collect();
        let wire = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(refused(&wire), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let long = format!("GET / HTTP/1.1\r\nx-long: {}", "a".repeat(MAX_HEAD));
        assert_eq!(refused(&long), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }
}
