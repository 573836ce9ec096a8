//! Response heads written to a client, and how the body after them is delimited.

use std::cell::RefCell;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{response::Parts, StatusCode, Version};
use http_body::SizeHint;

use crate::upstream::h1::parse_length;

/// How the body after a head is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// No body is written (HEAD, 1xx, 204, 304), whatever the response holds.
    Bodiless,
    Length(u64),
    Chunked,
    /// An HTTP/1.0 client, length unknown: the body ends when the connection closes.
    UntilClose,
}

/// What the request said that shapes the answer's head.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    pub version: Version,
    pub head_method: bool,
    /// The connection may carry another request (the client's wish, and lingo's).
    pub keep_alive: bool,
}

/// Write the head of `parts` into `buf`; gives the body's framing and whether the connection
/// stays open after it. The body's `length` (`length()`, found by the caller) is written as
/// lingo read it; `transfer-encoding` and `connection` are lingo's to decide.
pub fn encode(buf: &mut Vec<u8>, parts: &Parts, length: Option<u64>, ask: Ask) -> (Out, bool) {
    let status = parts.status;
    buf.extend_from_slice(b"HTTP/1.1 ");
    buf.extend_from_slice(status.as_str().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    buf.extend_from_slice(b"\r\n");
    let mut dated = false;
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
            continue;
        }
        dated |= name == DATE;
        line(buf, name.as_str().as_bytes(), value.as_bytes());
    }
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let out = if bodiless {
        Out::Bodiless
    } else if let Some(n) = length {
        buf.extend_from_slice(b"content-length: ");
        crate::dialect::digits::push_uint(buf, n);
        buf.extend_from_slice(b"\r\n");
        if ask.head_method {
            Out::Bodiless
        } else {
            Out::Length(n)
        }
    } else if ask.head_method {
        Out::Bodiless
    } else if ask.version == Version::HTTP_11 {
        buf.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Out::Chunked
    } else {
        Out::UntilClose
    };
    let keep = ask.keep_alive && out != Out::UntilClose;
    if !keep {
        buf.extend_from_slice(b"connection: close\r\n");
    } else if ask.version == Version::HTTP_10 {
        buf.extend_from_slice(b"connection: keep-alive\r\n");
    }
    if !dated {
        date(buf);
    }
    buf.extend_from_slice(b"\r\n");
    (out, keep)
}

/// The body's length: the service's `content-length` (a passthrough may know it before its
/// body), else the body's exact size hint.
pub fn length(parts: &Parts, hint: &SizeHint) -> Option<u64> {
    match parts.headers.get(CONTENT_LENGTH) {
        Some(v) => parse_length(v.as_bytes()),
        None => hint.exact(),
    }
}

/// A head lingo answers by itself, with no body, before it closes the connection.
pub fn refusal(buf: &mut Vec<u8>, status: StatusCode) {
    let reason = status.canonical_reason().unwrap_or("");
    write!(buf, "HTTP/1.1 {} {reason}\r\n", status.as_str()).expect("a Vec takes every write");
    buf.extend_from_slice(b"content-length: 0\r\nconnection: close\r\n");
    date(buf);
    buf.extend_from_slice(b"\r\n");
}

/// A chunk's size line (the data and its CRLF follow).
pub fn chunk_size(buf: &mut Vec<u8>, n: usize) {
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        buf.push(b"0123456789abcdef"[(n >> (i * 4)) & 0xf]);
    }
    buf.extend_from_slice(b"\r\n");
}

/// The last chunk, with no trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

fn line(buf: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    buf.extend_from_slice(name);
    buf.extend_from_slice(b": ");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

thread_local! {
    /// The `date` header's value, made again only when the second changes.
    static DATE_NOW: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

fn date(buf: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE_NOW.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *at = secs;
            *text = httpdate::fmt_http_date(now);
        }
        line(buf, b"date", text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(status: u16, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Response::builder().status(status);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    const KEEP: Ask = Ask {
        version: Version::HTTP_11,
        head_method: false,
        keep_alive: true,
    };

    fn head(p: &Parts, hint: SizeHint, ask: Ask) -> (String, Out, bool) {
        let mut buf = Vec::new();
        let (out, keep) = encode(&mut buf, p, length(p, &hint), ask);
        (String::from_utf8(buf).unwrap(), out, keep)
    }

    #[test]
    fn a_known_length_is_written_and_an_unknown_one_is_chunked() {
        let p = parts(200, &[("content-type", "application/json")]);
        let (text, out, keep) = head(&p, SizeHint::with_exact(5), KEEP);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"));
        assert!(text.contains("\r\ncontent-length: 5\r\n") && text.contains("\r\ndate: "));
        assert!(text.ends_with("\r\n\r\n") && !text.contains("connection"));
        assert_eq!((out, keep), (Out::Length(5), true));
        let (text, out, _) = head(&p, SizeHint::default(), KEEP);
        assert!(text.contains("\r\ntransfer-encoding: chunked\r\n"));
        assert_eq!(out, Out::Chunked);
    }

    #[test]
    fn the_services_framing_headers_are_replaced_but_its_length_kept() {
        let p = parts(
            200,
            &[
                ("transfer-encoding", "chunked"),
                ("connection", "x"),
                ("content-length", "7"),
            ],
        );
        let (text, out, _) = head(&p, SizeHint::default(), KEEP);
        assert_eq!(out, Out::Length(7));
        assert_eq!(text.matches("content-length: 7").count(), 1);
        assert!(!text.contains("transfer-encoding") && !text.contains("connection"));
    }

    #[test]
    fn head_bodiless_and_http_1_0_answers() {
        let p = parts(200, &[]);
        let head_ask = Ask {
            head_method: true,
            ..KEEP
        };
        let (text, out, _) = head(&p, SizeHint::with_exact(9), head_ask);
        assert_eq!(out, Out::Bodiless);
        assert!(text.contains("content-length: 9"));
        let (text, out, _) = head(&parts(204, &[]), SizeHint::default(), KEEP);
        assert_eq!(out, Out::Bodiless);
        assert!(!text.contains("content-length") && !text.contains("transfer-encoding"));
        let old = Ask {
            version: Version::HTTP_10,
            ..KEEP
        };
        let (text, out, keep) = head(&p, SizeHint::default(), old);
        assert_eq!((out, keep), (Out::UntilClose, false));
        assert!(text.contains("connection: close"));
        let (text, _, keep) = head(&p, SizeHint::with_exact(0), old);
        assert!(keep && text.contains("connection: keep-alive"));
        let closing = Ask {
            keep_alive: false,
            ..KEEP
        };
        let (text, _, keep) = head(&p, SizeHint::with_exact(0), closing);
        assert!(!keep && text.contains("connection: close"));
    }

    #[test]
    fn a_date_of_the_services_own_is_the_only_one() {
        let p = parts(200, &[("date", "Thu, 01 Jan 1970 00:00:00 GMT")]);
        let (text, _, _) = head(&p, SizeHint::with_exact(0), KEEP);
        assert_eq!(text.matches("date: ").count(), 1, "{text}");
        assert!(text.contains("date: Thu, 01 Jan 1970"), "{text}");
    }

    #[test]
    fn chunk_sizes_are_bare_hex() {
        for n in [0usize, 1, 15, 16, 255, 4096, 0xabcdef, usize::MAX] {
            let mut buf = Vec::new();
            chunk_size(&mut buf, n);
            assert_eq!(buf, format!("{n:x}\r\n").into_bytes());
        }
    }

    #[test]
    fn a_refusal_says_close() {
        let mut buf = Vec::new();
        refusal(&mut buf, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let text = String::from_utf8(buf).unwrap();
        assert!(text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(text.contains("content-length: 0\r\nconnection: close\r\n"));
    }
}
