//! Request heads written and response heads read, for HTTP/1.1 to an upstream.

use std::io::Write;

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

use super::framing::{Chunked, Framing};

/// A response head larger than this is refused (hyper's default limit is about 400 KiB; a
/// server's is a few hundred bytes).
pub const MAX_HEAD: usize = 64 << 10;
/// Header lines a response head may have.
const MAX_HEADERS: usize = 128;

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub framing: Framing,
    /// The connection may carry another request after this body.
    pub reusable: bool,
    /// Bytes the head took in the buffer.
    pub len: usize,
}

/// Parse a response head at the start of `buf`: `Ok(None)` until it is all there.
pub fn parse(buf: &[u8], head_request: bool) -> Result<Option<Head>, String> {
    // Uninitialised slots: zeroing all of them at every parse costs more than the parse.
    let mut slots = [std::mem::MaybeUninit::uninit(); MAX_HEADERS];
    let mut r = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut r, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("the upstream's response head is malformed ({e})")),
    };
    let code = r.code.unwrap_or(0);
    let status = StatusCode::from_u16(code)
        .map_err(|_| format!("the upstream answered with status {code}"))?;
    let mut headers = HeaderMap::with_capacity(r.headers.len());
    let mut close = r.version != Some(1);
    // One copy of the head, which every value is a slice of, rather than one per value
    // (and no slice of the read buffer, which a stream lets go while it waits).
    let block = bytes::Bytes::copy_from_slice(&buf[..len]);
    let base = buf.as_ptr() as usize;
    for h in r.headers.iter() {
        let value = match (h.value.as_ptr() as usize).checked_sub(base) {
            Some(at) if at + h.value.len() <= len => block.slice(at..at + h.value.len()),
            _ => bytes::Bytes::copy_from_slice(h.value), // not in the head (an empty value)
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_maybe_shared(value),
        ) else {
            continue;
        };
        if name == http::header::CONNECTION && has_token(h.value, "close") {
            close = true;
        }
        headers.append(name, value);
    }
    let framing = framing(status, &headers, head_request)?;
    Ok(Some(Head {
        status,
        reusable: !close && !matches!(framing, Framing::Close),
        headers,
        framing,
        len,
    }))
}

/// How the body is delimited (RFC 9112 §6.3).
fn framing(status: StatusCode, h: &HeaderMap, head_request: bool) -> Result<Framing, String> {
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if head_request || bodiless {
        return Ok(Framing::Length(0));
    }
    if let Some(te) = h.get(http::header::TRANSFER_ENCODING) {
        let last = te.as_bytes().rsplit(|&b| b == b',').next().unwrap_or(b"");
        return Ok(if trim(last).eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked(Chunked::Size)
        } else {
            Framing::Close
        });
    }
    let mut lengths = h.get_all(http::header::CONTENT_LENGTH).iter();
    let Some(first) = lengths.next() else {
        return Ok(Framing::Close);
    };
    let n = parse_length(first.as_bytes())
        .ok_or("the upstream sent an invalid content-length".to_string())?;
    if lengths.any(|v| parse_length(v.as_bytes()) != Some(n)) {
        return Err("the upstream sent conflicting content-lengths".into());
    }
    Ok(Framing::Length(n))
}

pub(crate) fn parse_length(v: &[u8]) -> Option<u64> {
    let v = trim(v);
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
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
    fn header_values_come_through_whole_empty_and_repeated() {
        let wire = "HTTP/1.1 200 OK\r\nx-a: one\r\nx-empty:\r\nx-a:  two \r\n\
                    content-length: 0\r\n\r\nnext bytes";
        let h = head(wire);
        let a: Vec<_> = h.headers.get_all("x-a").iter().collect();
        assert_eq!(a, ["one", "two"]);
        assert_eq!(h.headers["x-empty"], "");
        assert_eq!(h.len, wire.len() - "next bytes".len());
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
