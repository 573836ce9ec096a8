//! Push parsers for the two stream framings the servers use: SSE and newline-delimited JSON.
//!
//! They are push parsers (bytes in, frames out) rather than stream adapters because the proxy
//! must forward each upstream chunk untouched in passthrough while parsing the same bytes on
//! the side; a pull adapter would own the stream and force a copy.

use bytes::{Buf, Bytes, BytesMut};

/// What a whole SSE event's line begins with (`FrameParser::whole_event`).
pub const SSE_DATA: &[u8] = b"data: ";

/// How a stream separates its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `data: {json}\n\n` events, optional `event:` lines, `:` comments.
    Sse,
    /// One JSON document per line (also accepts NUL separators, as vLLM <= 0.6.3 sent).
    Ndjson,
}

/// One complete event: its SSE `event:` name, if any, and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub event: Option<String>,
    pub data: Bytes,
}

/// One event grew past the parser's limit (`limits.max_stream_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTooLarge {
    pub limit: usize,
}

/// The `data:` lines of the SSE event being read.
#[derive(Debug)]
enum Data {
    None,
    /// One line, as a slice of the input (most events: no copy).
    One(Bytes),
    /// Several, joined by newlines.
    Many(Vec<u8>),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::None => 0,
            Data::One(b) => b.len(),
            Data::Many(v) => v.len(),
        }
    }
}

/// Accumulates bytes and yields complete frames. Lines that arrive whole are sliced out of
/// the input rather than copied; only an unfinished line is kept in `buf`.
#[derive(Debug)]
pub struct FrameParser {
    framing: Framing,
    buf: BytesMut,
    event: Option<String>,
    data: Data,
    /// The most bytes one event may hold here, unfinished line included.
    limit: usize,
    /// A line or an event went past `limit`.
    over: bool,
}

impl FrameParser {
    pub fn new(framing: Framing) -> FrameParser {
        FrameParser {
            framing,
            buf: BytesMut::new(),
            event: None,
            data: Data::None,
            limit: usize::MAX,
            over: false,
        }
    }

    /// Hold at most `limit` bytes for one event: past it `try_feed` fails rather than
    /// buffering an upstream's endless line.
    pub fn with_limit(mut self, limit: usize) -> FrameParser {
        self.limit = limit;
        self
    }

    /// Feed bytes; push every frame they complete onto `out` (for parsers without a limit,
    /// which cannot fail).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Frame>) {
        let _ = self.try_feed(bytes, out);
    }

    /// Feed bytes; push every frame they complete onto `out`. Fails once one event holds
    /// more than the limit; the parser is then empty and the stream should end.
    pub fn try_feed(&mut self, bytes: &[u8], out: &mut Vec<Frame>) -> Result<(), EventTooLarge> {
        self.try_feed_bytes(Bytes::copy_from_slice(bytes), out)
    }

    /// `try_feed` for bytes already shared: lines that arrive whole are not copied.
    pub fn try_feed_bytes(
        &mut self,
        bytes: Bytes,
        out: &mut Vec<Frame>,
    ) -> Result<(), EventTooLarge> {
        if self.buf.is_empty() {
            return self.lines(bytes, out);
        }
        self.buf.extend_from_slice(&bytes);
        let input = self.buf.split().freeze();
        self.lines(input, out)
    }

    fn lines(&mut self, mut input: Bytes, out: &mut Vec<Frame>) -> Result<(), EventTooLarge> {
        loop {
            if let Some(end) = self.whole_event(&input) {
                out.push(Frame {
                    event: None,
                    data: input.slice(SSE_DATA.len()..end),
                });
                input.advance(end + 2);
                continue;
            }
            let Some(pos) = memchr::memchr2(b'\n', 0, &input) else {
                break;
            };
            let mut line = input.split_to(pos + 1);
            line.truncate(pos);
            if line.last() == Some(&b'\r') {
                line.truncate(pos - 1);
            }
            self.line(line, out);
            // The rest of the input may hold whole lines still: only the event counts here.
            self.check(self.data.len())?;
        }
        self.buf.extend_from_slice(&input);
        self.check(self.pending())
    }

    /// Where the payload ends when `input` starts with a whole `data: payload\n\n` event
    /// and none is being read: nearly every event of every server, framed with one slice
    /// instead of line by line. Anything else (CRLF, other fields, an event past the limit)
    /// goes line by line. The payload is `input[SSE_DATA.len()..end]`; the event takes
    /// `end + 2` bytes, and after it the parser is between events still (a caller may take
    /// whole events itself and feed the parser the rest).
    pub fn whole_event(&self, input: &[u8]) -> Option<usize> {
        let between = matches!(self.data, Data::None) && self.event.is_none();
        if self.framing != Framing::Sse || !between {
            return None;
        }
        let payload = input.strip_prefix(SSE_DATA)?;
        let len = memchr::memchr2(b'\n', 0, payload)?;
        let ends = payload[len] == b'\n' && payload.get(len + 1) == Some(&b'\n');
        let plain = !payload[..len].ends_with(b"\r") && len <= self.limit;
        (ends && plain).then_some(SSE_DATA.len() + len)
    }

    /// The most bytes one event may hold here.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Between events: nothing of one is held (no line, no data, no `event:` name). An empty
    /// `data:` line is data still: the event it begins is dispatched at its blank line.
    pub fn between_events(&self) -> bool {
        self.buf.is_empty() && matches!(self.data, Data::None) && self.event.is_none()
    }

    /// The bytes of the event being read: its data so far and its unfinished line.
    pub fn pending(&self) -> usize {
        self.buf.len() + self.data.len()
    }

    fn check(&mut self, held: usize) -> Result<(), EventTooLarge> {
        if !self.over && held <= self.limit {
            return Ok(());
        }
        self.over = false;
        self.buf = BytesMut::new();
        self.data = Data::None;
        self.event = None;
        Err(EventTooLarge { limit: self.limit })
    }

    /// The stream ended: flush a frame that lacked its final separator.
    pub fn finish(&mut self, out: &mut Vec<Frame>) {
        if !self.buf.is_empty() {
            let rest = self.buf.split().freeze();
            self.line(rest, out);
        }
        if self.framing == Framing::Sse {
            self.dispatch(out);
        }
    }

    fn line(&mut self, line: Bytes, out: &mut Vec<Frame>) {
        match self.framing {
            Framing::Ndjson => {
                if line.len() > self.limit {
                    self.over = true;
                } else if !line.iter().all(u8::is_ascii_whitespace) {
                    out.push(Frame {
                        event: None,
                        data: line,
                    });
                }
            }
            Framing::Sse => self.sse_line(line, out),
        }
    }

    fn sse_line(&mut self, mut line: Bytes, out: &mut Vec<Frame>) {
        if line.is_empty() {
            return self.dispatch(out);
        }
        if line[0] == b':' {
            return; // comment / keep-alive
        }
        let colon = line.iter().position(|&b| b == b':');
        let (name, value) = match colon {
            Some(i) => {
                let name = line.split_to(i);
                line.advance(1);
                if line.first() == Some(&b' ') {
                    line.advance(1);
                }
                (name, line)
            }
            None => (line, Bytes::new()),
        };
        match &name[..] {
            b"data" => {
                let joined = !matches!(self.data, Data::None);
                if self.data.len() + usize::from(joined) + value.len() > self.limit {
                    self.over = true;
                    return;
                }
                self.data = match std::mem::replace(&mut self.data, Data::None) {
                    Data::None => Data::One(value),
                    Data::One(first) => {
                        let mut v = Vec::with_capacity(first.len() + 1 + value.len());
                        v.extend_from_slice(&first);
                        v.push(b'\n');
                        v.extend_from_slice(&value);
                        Data::Many(v)
                    }
                    Data::Many(mut v) => {
                        v.push(b'\n');
                        v.extend_from_slice(&value);
                        Data::Many(v)
                    }
                };
            }
            b"event" => self.event = Some(String::from_utf8_lossy(&value).into_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<Frame>) {
        let data = match std::mem::replace(&mut self.data, Data::None) {
            Data::None => None,
            Data::One(b) => Some(b),
            Data::Many(v) => Some(Bytes::from(v)),
        };
        if let Some(data) = data {
            out.push(Frame {
                event: self.event.take(),
                data,
            });
        }
        self.event = None;
    }
}

/// Whether an SSE payload is the OpenAI-style end marker.
pub fn is_done_marker(data: &[u8]) -> bool {
    data.trim_ascii() == b"[DONE]"
}

/// Write one SSE `data:` event.
pub fn write_sse(out: &mut BytesMut, data: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
}

/// Write one named SSE event: `event: <name>\ndata: <data>\n\n` (Anthropic, OpenAI Responses).
pub fn write_sse_event(out: &mut BytesMut, event: &str, data: &[u8]) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\n");
    write_sse(out, data);
}

/// Write an upstream's SSE event again: its name, if it had one, and a `data:` line for
/// each line of its data (the parser joined them with `\n`; written as one line, the
/// client would read the second as a field of its own and the data as the first alone).
pub fn write_sse_frame(out: &mut BytesMut, event: Option<&str>, data: &[u8]) {
    if let Some(name) = event {
        sse_line(out, b"event: ", name.as_bytes());
    }
    if memchr::memchr(b'\n', data).is_none() && data.last() != Some(&b'\r') {
        return write_sse(out, data);
    }
    for line in data.split(|b| *b == b'\n') {
        sse_line(out, b"data: ", line);
    }
    out.extend_from_slice(b"\n");
}

/// One field line.
fn sse_line(out: &mut BytesMut, field: &[u8], value: &[u8]) {
    out.extend_from_slice(field);
    end_line(out, value);
}

/// Write one newline-delimited JSON document.
pub fn write_ndjson(out: &mut BytesMut, data: &[u8]) {
    end_line(out, data);
}

/// `value` and its line's end. A reader takes one CR off a line's end: a value that ends in
/// one keeps it so.
fn end_line(out: &mut BytesMut, value: &[u8]) {
    out.extend_from_slice(value);
    match value.last() {
        Some(b'\r') => out.extend_from_slice(b"\r\n"),
        _ => out.extend_from_slice(b"\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(framing: Framing, pieces: &[&str]) -> Vec<String> {
        let mut p = FrameParser::new(framing);
        let mut out = Vec::new();
        for piece in pieces {
            p.feed(piece.as_bytes(), &mut out);
        }
        p.finish(&mut out);
        out.iter()
            .map(|f| String::from_utf8(f.data.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn sse_split_anywhere() {
        let text = "data: {\"a\":1}\n\n:keep-alive\n\ndata:{\"b\":2}\r\n\r\ndata: [DONE]\n\n";
        for cut in 0..text.len() {
            let got = frames(Framing::Sse, &[&text[..cut], &text[cut..]]);
            assert_eq!(
                got,
                vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn sse_event_names_and_multiline() {
        let mut p = FrameParser::new(Framing::Sse);
        let mut out = Vec::new();
        p.feed(b"event: message_stop\ndata: a\ndata: b\n\n", &mut out);
        assert_eq!(out[0].event.as_deref(), Some("message_stop"));
        assert_eq!(&out[0].data[..], b"a\nb");
    }

    #[test]
    fn named_events_round_trip() {
        let mut out = BytesMut::new();
        write_sse_event(&mut out, "ping", b"{\"type\":\"ping\"}");
        assert_eq!(&out[..], b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
        let mut p = FrameParser::new(Framing::Sse);
        let mut frames = Vec::new();
        p.feed(&out, &mut frames);
        assert_eq!(frames[0].event.as_deref(), Some("ping"));
    }

    fn bounded(framing: Framing, limit: usize, pieces: &[&[u8]]) -> (Vec<Frame>, bool) {
        let mut p = FrameParser::new(framing).with_limit(limit);
        let mut out = Vec::new();
        let mut failed = false;
        for piece in pieces {
            failed |= p.try_feed(piece, &mut out).is_err();
            assert!(p.pending() <= limit, "holds {} > {limit}", p.pending());
        }
        (out, failed)
    }

    #[test]
    fn events_within_the_limit_pass_and_larger_ones_fail_without_buffering() {
        let (ok, failed) = bounded(Framing::Sse, 8, &[b"data: 12345678\n\n"]);
        assert!(!failed);
        assert_eq!(&ok[0].data[..], b"12345678");
        // An endless line, in small pieces: refused once it passes the limit.
        let (_, failed) = bounded(Framing::Sse, 8, &[b"data: 1234", b"5678", b"9"]);
        assert!(failed);
        // Many data lines that add up past the limit.
        let (out, failed) = bounded(Framing::Sse, 8, &[b"data: 1234\ndata: 5678\n"]);
        assert!(failed && out.is_empty());
        let (_, failed) = bounded(
            Framing::Ndjson,
            8,
            &[b"{\"a\":1}\n", b"{\"aaaaaaaaa\":1}\n"],
        );
        assert!(failed);
        let (out, failed) = bounded(Framing::Ndjson, 8, &[b"{\"a\":1}\n{\"b\":2}\n"]);
        assert!(!failed && out.len() == 2);
    }

    #[test]
    fn ndjson_lines_and_nul() {
        let got = frames(Framing::Ndjson, &["{\"a\":1}\n{\"b\"", ":2}\0\n{\"c\":3}"]);
        assert_eq!(got, vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
    }

    #[test]
    fn whole_events_frame_as_they_do_line_by_line() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        // Bounded: 3,000 random streams, each fed whole and in random pieces, against the
        // same fed a byte at a time (which never holds a whole event: line by line).
        const LINES: &[&str] = &[
            "data: {\"a\":1}",
            "data: ",
            "data:x",
            "data:  two spaces",
            "event: e",
            ": ping",
            "",
            "",
            "data: [DONE]",
            "id: 3",
            "data: cr\r",
        ];
        const ENDS: &[&str] = &["\n", "\n", "\n", "\r\n", "\0"];
        let mut rng = StdRng::seed_from_u64(9);
        let feed = |pieces: &[&[u8]]| {
            let mut p = FrameParser::new(Framing::Sse);
            let mut out = Vec::new();
            pieces.iter().for_each(|b| p.feed(b, &mut out));
            p.finish(&mut out);
            out
        };
        for _ in 0..3_000 {
            let mut text = String::new();
            for _ in 0..rng.random_range(1..16) {
                text += LINES[rng.random_range(0..LINES.len())];
                text += ENDS[rng.random_range(0..ENDS.len())];
            }
            let bytes = text.as_bytes();
            let by_byte = feed(&bytes.chunks(1).collect::<Vec<_>>());
            assert_eq!(feed(&[bytes]), by_byte, "{text:?}");
            let cut = rng.random_range(0..=bytes.len());
            assert_eq!(feed(&[&bytes[..cut], &bytes[cut..]]), by_byte, "{text:?}");
        }
    }

    /// Every frame `bytes` holds, name and data, read whole.
    fn parsed(framing: Framing, bytes: &[u8]) -> Vec<(Option<String>, Vec<u8>)> {
        let mut p = FrameParser::new(framing);
        let mut out = Vec::new();
        p.feed(bytes, &mut out);
        p.finish(&mut out);
        out.into_iter()
            .map(|f| (f.event, f.data.to_vec()))
            .collect()
    }

    #[test]
    fn an_empty_data_line_begins_an_event() {
        let mut p = FrameParser::new(Framing::Sse);
        let mut out = Vec::new();
        p.feed(b"data:\n", &mut out);
        assert!(!p.between_events());
        p.feed(b"\n", &mut out);
        assert!(p.between_events());
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn frames_written_again_read_as_they_came() {
        let sse = [
            &b"event: error\ndata: {}\n\n"[..],
            b"event: e\r\r\ndata: {}\n\n",
            b"data: a\ndata: b\n\n",
            b"data: a\r\r\ndata: b\r\r\n\n",
            b"data: x\r\r\n\n",
            b"data:\n\n",
        ];
        for bytes in sse {
            let frames = parsed(Framing::Sse, bytes);
            let mut out = BytesMut::new();
            for (event, data) in &frames {
                write_sse_frame(&mut out, event.as_deref(), data);
            }
            assert_eq!(parsed(Framing::Sse, &out), frames, "{bytes:?} -> {out:?}");
        }
        let frames = parsed(Framing::Ndjson, b"{}\r\r\n{\"a\":1}\n");
        let mut out = BytesMut::new();
        frames.iter().for_each(|(_, d)| write_ndjson(&mut out, d));
        assert_eq!(parsed(Framing::Ndjson, &out), frames);
    }
}
