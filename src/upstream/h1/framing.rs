//! How an HTTP/1.1 response body is delimited (RFC 9112 §6.3), decoded from the connection's
//! read buffer as bytes arrive: by length, chunked, or by the connection closing.

use bytes::{Buf, Bytes, BytesMut};

/// A chunk-size line (with any extensions) or a trailer line may take this many bytes.
const MAX_LINE: usize = 4096;
/// Trailer lines a body may end with, and their bytes: hyper's bounds (100 lines, the
/// server's count for header lines, and 16 KiB). Trailers are skipped, but not forever.
const TRAILERS: Chunked = Chunked::Trailers {
    lines: 100,
    bytes: 16 << 10,
};

/// What the buffer gave: data to hand on, nothing yet, or the body's end.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Data(Bytes),
    NeedMore,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `content-length`: this many bytes still to come.
    Length(u64),
    Chunked(Chunked),
    /// Neither: the body is whatever arrives until the server closes.
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunked {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes still to come.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last (zero-size) chunk: trailer lines until an empty one, and the room
    /// left for them (`TRAILERS`).
    Trailers {
        lines: u8,
        bytes: u16,
    },
    Done,
}

impl Framing {
    /// Take the next piece of body from `buf`. Data is handed on as soon as any is there,
    /// even mid-chunk: a stream's event is never held for the rest of its chunk.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, &'static str> {
        match self {
            Framing::Length(0) => Ok(Step::Done),
            Framing::Length(left) => {
                if buf.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let n = take_up_to(buf, left);
                Ok(Step::Data(n))
            }
            Framing::Chunked(c) => c.decode(buf),
            Framing::Close if buf.is_empty() => Ok(Step::NeedMore),
            Framing::Close => Ok(Step::Data(std::mem::take(buf).freeze())),
        }
    }

    /// What is known of the body still to come (a length left includes what is buffered).
    pub fn size_hint(&self) -> http_body::SizeHint {
        match *self {
            Framing::Length(n) => http_body::SizeHint::with_exact(n),
            _ => http_body::SizeHint::default(),
        }
    }

    /// Whether the connection closing now ends the body cleanly.
    pub fn ends_at_close(&self) -> bool {
        matches!(self, Framing::Close)
    }
}

/// Split off at most `*left` bytes and count them off.
fn take_up_to(buf: &mut BytesMut, left: &mut u64) -> Bytes {
    let n = usize::try_from(*left).map_or(buf.len(), |l| l.min(buf.len()));
    *left -= n as u64;
    front(buf, n)
}

/// The first `n` bytes of `buf`; the buffer itself, not a split of it, when that is all
/// it holds (a whole body, or an event that ends a read: no count of its sharers to touch).
pub(crate) fn front(buf: &mut BytesMut, n: usize) -> Bytes {
    match n == buf.len() {
        true => std::mem::take(buf).freeze(),
        false => buf.split_to(n).freeze(),
    }
}

impl Chunked {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, &'static str> {
        if *self == Chunked::Size {
            // A stream waiting for its next event polls here with nothing read.
            if buf.is_empty() {
                return Ok(Step::NeedMore);
            }
            if let Some(data) = whole_chunk(buf) {
                return Ok(Step::Data(data));
            }
        }
        loop {
            match self {
                Chunked::Size => {
                    let Some((len, taken)) = line(buf)? else {
                        return Ok(Step::NeedMore);
                    };
                    *self = match parse_size(&buf[..len])? {
                        0 => TRAILERS,
                        n => Chunked::Data(n),
                    };
                    buf.advance(taken);
                }
                Chunked::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    let data = take_up_to(buf, left);
                    if *left == 0 {
                        *self = Chunked::DataEnd;
                    }
                    return Ok(Step::Data(data));
                }
                Chunked::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err("a chunk's data is not followed by CRLF");
                    }
                    buf.advance(2);
                    *self = Chunked::Size;
                }
                Chunked::Trailers { lines, bytes } => {
                    let Some((len, taken)) = line(buf)? else {
                        return Ok(Step::NeedMore);
                    };
                    if len > 0 && !is_field_line(&buf[..len]) {
                        return Err("a trailer line is not a header field");
                    }
                    let room = (lines.checked_sub(1), bytes.checked_sub(taken as u16));
                    let (Some(left), Some(left_bytes)) = room else {
                        return Err("the trailers are too many or too long");
                    };
                    buf.advance(taken);
                    *self = match len {
                        0 => Chunked::Done,
                        _ => Chunked::Trailers {
                            lines: left,
                            bytes: left_bytes,
                        },
                    };
                }
                Chunked::Done => return Ok(Step::Done),
            }
        }
    }
}

/// A whole chunk at the start of `buf` in its plainest spelling (hex digits, CRLF, the data,
/// CRLF), taken in one step: a stream's event is one such chunk, most often alone in its
/// read. Gives its data and leaves `buf` at the next size line; anything else (extensions,
/// whitespace, a bare LF, a chunk still arriving, the last chunk) is left to the
/// step-by-step decoder, which words the errors.
fn whole_chunk(buf: &mut BytesMut) -> Option<Bytes> {
    // Within `parse_size`'s bound of 15 digits; the CRLF after them is checked below.
    let (n, digits) = hex_prefix(buf);
    if digits == 0 || digits > 15 || n == 0 {
        return None;
    }
    let start = digits + 2;
    let end = start.checked_add(usize::try_from(n).ok()?)?;
    if buf.len() < end + 2 || buf[digits..start] != *b"\r\n" || buf[end..end + 2] != *b"\r\n" {
        return None;
    }
    buf.advance(start);
    let len = end - start;
    // Alone in the buffer (the usual read of a stream): the buffer itself, no split.
    if buf.len() == len + 2 {
        buf.truncate(len);
        return Some(std::mem::take(buf).freeze());
    }
    let data = buf.split_to(len).freeze();
    buf.advance(2);
    Some(data)
}

/// The next line's length without its CRLF, and how much of `buf` it takes with its end:
/// read in place, so that a chunk's size line costs no split of the buffer. A line ends in
/// CRLF and holds no other CR: where one reader ends a line at a bare LF and another does
/// not, they end the body in different places (hyper refuses both).
fn line(buf: &[u8]) -> Result<Option<(usize, usize)>, &'static str> {
    let window = &buf[..buf.len().min(MAX_LINE + 1)];
    let Some(lf) = memchr::memchr(b'\n', window) else {
        if window.len() > MAX_LINE {
            return Err("a chunk-size or trailer line is longer than 4096 bytes");
        }
        return Ok(None);
    };
    match lf.checked_sub(1) {
        Some(cr) if window[cr] == b'\r' && memchr::memchr(b'\r', &window[..cr]).is_none() => {
            Ok(Some((cr, lf + 1)))
        }
        _ => Err("a chunk-size or trailer line does not end in CRLF alone"),
    }
}

/// The hex size at the start of a chunk-size line: then spaces or tabs, and an extension
/// after `;` (ignored), or nothing.
fn parse_size(line: &[u8]) -> Result<u64, &'static str> {
    let (n, digits) = hex_prefix(line);
    // 15 hex digits stay within u64 with room to spare; more is no body anyone sends.
    if digits == 0 || digits > 15 {
        return Err("a chunk size is missing or too long");
    }
    let after = line[digits..].iter().find(|b| **b != b' ' && **b != b'\t');
    match after {
        None | Some(b';') => Ok(n),
        Some(_) => Err("a chunk size is not hexadecimal"),
    }
}

/// A trailer line as a header field: a token, a colon, and a value without control bytes
/// but tabs. Trailers are skipped, but a line that is no field is refused, as hyper refuses
/// it: where one reader sees garbage, two readers could end a body in different places.
fn is_field_line(line: &[u8]) -> bool {
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let text = |b: &u8| *b == b'\t' || (*b >= b' ' && *b != 0x7f);
    match line.iter().position(|&b| b == b':') {
        Some(colon) => {
            colon > 0 && line[..colon].iter().all(token) && line[colon + 1..].iter().all(text)
        }
        None => false,
    }
}

/// The value of the hex digits `bytes` starts with (at most 16 read), and how many there are.
fn hex_prefix(bytes: &[u8]) -> (u64, usize) {
    let mut n = 0u64;
    let mut len = 0;
    for &b in bytes.iter().take(16) {
        let v = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => break,
        };
        n = n << 4 | u64::from(v);
        len += 1;
    }
    (n, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `wire` in pieces of `step` bytes, collecting data until the end.
    fn run(mut f: Framing, wire: &[u8], step: usize) -> Result<(Vec<u8>, bool), &'static str> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in wire.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            loop {
                match f.decode(&mut buf)? {
                    Step::Data(d) => out.extend_from_slice(&d),
                    Step::NeedMore => break,
                    Step::Done => return Ok((out, true)),
                }
            }
        }
        Ok((out, false))
    }

    const WIRE: &[u8] =
        b"6 \t\r\ndata: \r\n1a ;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-t: 1\t\xff\r\n\r\n";

    #[test]
    fn chunked_decodes_whole_and_byte_by_byte() {
        for step in [1, 2, 3, 7, WIRE.len()] {
            let (data, done) = run(Framing::Chunked(Chunked::Size), WIRE, step).unwrap();
            assert_eq!(data, b"data: abcdefghijklmnopqrstuvwxyz", "step {step}");
            assert!(done, "step {step}");
        }
    }

    #[test]
    fn whole_chunks_are_taken_in_one_step_and_leave_the_rest() {
        let mut f = Framing::Chunked(Chunked::Size);
        let mut buf = BytesMut::from(&b"5\r\nhello\r\nA\r\n0123456789\r\n3"[..]);
        assert_eq!(f.decode(&mut buf), Ok(Step::Data(Bytes::from("hello"))));
        assert_eq!(f, Framing::Chunked(Chunked::Size), "past the data's CRLF");
        assert_eq!(&buf[..], b"A\r\n0123456789\r\n3");
        assert_eq!(
            f.decode(&mut buf),
            Ok(Step::Data(Bytes::from("0123456789")))
        );
        assert_eq!(f.decode(&mut buf), Ok(Step::NeedMore));
        // Alone in its buffer: the buffer itself is the data.
        let mut buf = BytesMut::from(&b"2\r\nhi\r\n"[..]);
        let at = buf.as_ptr() as usize + 3;
        let Ok(Step::Data(d)) = f.decode(&mut buf) else {
            panic!("no data")
        };
        assert_eq!((&d[..], d.as_ptr() as usize), (&b"hi"[..], at));
        assert!(buf.is_empty());
        // Data not followed by CRLF is still refused, after the data.
        let mut buf = BytesMut::from(&b"2\r\nhiXY"[..]);
        assert_eq!(f.decode(&mut buf), Ok(Step::Data(Bytes::from("hi"))));
        assert!(f.decode(&mut buf).is_err());
    }

    #[test]
    fn chunked_hands_on_data_before_the_chunk_is_complete() {
        let (data, done) = run(Framing::Chunked(Chunked::Size), b"10\r\nhalf", 64).unwrap();
        assert_eq!((data.as_slice(), done), (&b"half"[..], false));
    }

    #[test]
    fn chunked_refuses_bad_framing() {
        for wire in [
            &b"zz\r\n"[..],
            b"3\r\nabcXY",
            b"\r\n",
            b"1234567890123456\r\n",
            // Bare LFs and CRs, and anything but an extension after the size.
            b"3\nabc\r\n0\r\n\r\n",
            b"3;x\nabc\r\n0\r\n\r\n",
            b"3;a\rb\r\nabc\r\n0\r\n\r\n",
            b"3 x\r\nabc\r\n0\r\n\r\n",
            b"3\r\nabc\r\n0\r\n\n",
            b"3\r\nabc\r\n0\r\nx: 1\n\r\n",
            // Trailer lines that are no header field.
            b"3\r\nabc\r\n0\r\nGET / HTTP/1.1\r\n\r\n",
            b"3\r\nabc\r\n0\r\n: v\r\n\r\n",
            b"3\r\nabc\r\n0\r\nx: a\x01b\r\n\r\n",
        ] {
            assert!(
                run(Framing::Chunked(Chunked::Size), wire, 64).is_err(),
                "{wire:?}"
            );
        }
        // Trailers are bounded in lines and in bytes.
        let trailers = |n: usize, value: usize| {
            let line = format!("x: {}\r\n", "v".repeat(value));
            format!("3\r\nabc\r\n0\r\n{}\r\n", line.repeat(n)).into_bytes()
        };
        assert!(run(Framing::Chunked(Chunked::Size), &trailers(99, 1), 64).is_ok());
        assert!(run(Framing::Chunked(Chunked::Size), &trailers(100, 1), 64).is_err());
        assert!(run(Framing::Chunked(Chunked::Size), &trailers(4, 4000), 64).is_ok());
        assert!(run(Framing::Chunked(Chunked::Size), &trailers(5, 4000), 64).is_err());
        let long = vec![b'1'; MAX_LINE + 2];
        assert!(run(Framing::Chunked(Chunked::Size), &long, 64).is_err());
    }

    #[test]
    fn length_stops_at_its_count_and_leaves_the_rest() {
        let mut f = Framing::Length(5);
        let mut buf = BytesMut::from(&b"helloHTTP/1.1"[..]);
        assert_eq!(
            f.decode(&mut buf),
            Ok(Step::Data(Bytes::from_static(b"hello")))
        );
        assert_eq!(f.decode(&mut buf), Ok(Step::Done));
        assert_eq!(&buf[..], b"HTTP/1.1");
    }

    #[test]
    fn close_delimited_takes_everything() {
        let (data, done) = run(Framing::Close, b"{\"a\":1}\n{\"b\":2}\n", 5).unwrap();
        assert_eq!(
            (data.as_slice(), done),
            (&b"{\"a\":1}\n{\"b\":2}\n"[..], false)
        );
        assert!(Framing::Close.ends_at_close());
    }
}
