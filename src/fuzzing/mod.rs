//! Fuzz target bodies, shared by the cargo-fuzz targets in `fuzz/` and the plain regression
//! test `tests/fuzz_regressions.rs`, so CI replays the corpora without a fuzzer.
//!
//! Each body takes arbitrary bytes, drives the codecs the way the proxy does, and panics only
//! when an invariant breaks: the decoders must never panic, overflow or loop on any input.
//! Not a stable API: it exists for the fuzzers.

mod http1;
mod reference;

use std::time::Instant;

use bytes::BytesMut;

use crate::dialect::{generate_dialect, openai::Flavor, Ctx, Dialect};
use crate::model::{Event, Prompt, Request, Tally};
use crate::stream::framing::{is_done_marker, Frame, FrameParser, Framing};
use crate::stream::pipeline::{self, rewrite_model, Output};

pub use http1::http1;

const FLAVORS: [Flavor; 3] = [Flavor::Vllm, Flavor::Llamacpp, Flavor::Standard];

/// The dialect a selector byte names.
fn dialect(b: u8) -> Dialect {
    Dialect::ALL[usize::from(b) % Dialect::ALL.len()]
}

/// Split off the first byte (0 for an empty input).
fn head(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((b, rest)) => (*b, rest),
        None => (0, data),
    }
}

/// A client request body. The first byte picks the route: one of the dialects, or
/// `POST /generate`, whose dialect is sniffed from the body. A decoded request is then
/// encoded for every upstream dialect and flavour, as the proxy would send it. The glance's
/// fast reader (routing's model, stream flags, lengths) and SGLang's request reader must
/// read the body as serde does wherever they answer.
pub fn request(data: &[u8]) {
    let (sel, body) = head(data);
    if let Ok(text) = std::str::from_utf8(body) {
        crate::proxy::generate::glance::agrees_with_serde(text);
        crate::dialect::sglang::request::agrees_with_serde(text);
    }
    let client = match usize::from(sel) % (Dialect::ALL.len() + 1) {
        i if i < Dialect::ALL.len() => Dialect::ALL[i],
        _ => match generate_dialect(body) {
            Ok(d) => d,
            Err(e) => return refuse(Dialect::Sglang, &e),
        },
    };
    let mut req = match client.decode_request(body) {
        Ok(r) => r,
        Err(e) => return refuse(client, &e),
    };
    req.model.get_or_insert_with(|| "m".into());
    let _ = Ctx::new(&req, "id".into(), "m".into());
    let chat = matches!(req.prompt, Prompt::Chat(_));
    for upstream in Dialect::ALL {
        for flavor in FLAVORS {
            encode_upstream(client, upstream.for_prompt(chat), flavor, req.clone());
        }
    }
}

/// Encode for one upstream, dropping refused implicit defaults as the proxy's retry loop does.
fn encode_upstream(client: Dialect, upstream: Dialect, flavor: Flavor, mut req: Request) {
    // Each retry forgets one implicit field, so the loop ends; the bound makes a bug loud.
    for _ in 0..16 {
        match upstream.encode_request_as(&req, flavor) {
            Ok(_) => return,
            Err(crate::error::ProxyError::Unsupported { field, .. })
                if req.sampling.forget_implicit(&field) => {}
            Err(e) => return refuse(client, &e),
        }
    }
    panic!("encode_request_as kept refusing implicit fields");
}

/// The client's error answer for a refused request.
fn refuse(client: Dialect, err: &crate::error::ProxyError) {
    let _ = client.error_status(err);
    let _ = client.error_body(err);
    let _ = client.field_name(err.param().unwrap_or(""));
}

/// A small, realistic client context from one byte (its fields come from a decoded request
/// in the proxy; here they vary so the encoders meet every shape).
fn ctx(b: u8) -> Ctx {
    Ctx {
        id: "id".into(),
        model: "m".into(),
        created: 0,
        started: Instant::now(),
        batched: b & 0x01 != 0,
        n: u32::from((b >> 1) & 0x03) + 1,
        prompts: usize::from((b >> 3) & 0x01) + 1,
        logprobs: (b & 0x10 != 0).then_some(2),
        logprob_text: b & 0x20 != 0,
        stream_usage: b & 0x40 != 0,
        details: b & 0x80 != 0,
        echo: Vec::new(),
        seed: None,
        prompt_lens: if b & 0x08 != 0 {
            vec![3, 5]
        } else {
            Vec::new()
        },
        max_tokens: (b & 0x04 != 0).then_some(4),
    }
}

/// An upstream stream body fed in arbitrary pieces. Layout: upstream dialect byte, client
/// dialect byte, context byte, split count `k` (mod 16), `k` piece lengths, then the body.
/// Invariants: the frames do not depend on where the body was split; the fast event reader,
/// each event after the one before, reads as serde does wherever it answers; decoding,
/// counting and re-encoding them for the client never panics; and the streaming pipeline,
/// in each of its outputs, sends the same events and counts wherever the body was split
/// (raw passthrough the same bytes: the upstream's, when the stream ends well).
pub fn stream(data: &[u8]) {
    let (up, data) = head(data);
    let (client, data) = head(data);
    let (flags, data) = head(data);
    let (k, data) = head(data);
    let k = usize::from(k % 16).min(data.len());
    let (lengths, body) = data.split_at(k);
    let upstream = dialect(up);
    let framing = upstream.framing();
    let whole = frames(framing, &[body]);
    let pieces = split(body, lengths);
    assert_eq!(
        whole,
        frames(framing, &pieces),
        "frames depend on the split"
    );
    check_frames(framing, &whole);
    let texts: Vec<&str> = whole
        .iter()
        .filter_map(|f| std::str::from_utf8(&f.data).ok())
        .collect();
    crate::dialect::openai::fast_readers_agree(&texts);
    crate::dialect::openai::stream_fast_paths_agree(&whole);
    decode_stream(upstream, dialect(client), ctx(flags), &whole);
    pipeline_splits_agree(upstream, dialect(client), || ctx(flags), &pieces);
}

/// The streaming pipeline fed the body whole and in `pieces`, with each output: raw,
/// re-framed (with and without an alias and the usage lingo asked for) and translated for
/// `client`. Each must end alike and send the client the same events (translated: what the
/// client's decoder reads of them, as encoders write times) wherever the body was split; a
/// raw stream that ends well, the upstream's own bytes (one that fails may differ in lines
/// that make no event).
fn pipeline_splits_agree(
    upstream: Dialect,
    client: Dialect,
    ctx: impl Fn() -> Ctx,
    pieces: &[&[u8]],
) {
    let body: Vec<u8> = pieces.concat();
    let outputs = || {
        let reframe = |alias: Option<&str>, strip_usage| Output::Reframe {
            alias: alias.map(str::to_string),
            strip_usage,
        };
        [
            Output::Raw,
            reframe(None, true),
            reframe(Some("alias"), false),
            Output::Encode(Box::new(client.stream_encoder(ctx()))),
        ]
    };
    for (whole_out, split_out) in outputs().into_iter().zip(outputs()) {
        let (raw, encoded) = match &whole_out {
            Output::Raw => (true, false),
            Output::Encode(_) => (false, true),
            Output::Reframe { .. } => (false, false),
        };
        let (whole, whole_end) = pipeline::drive(upstream, whole_out, &[&body]);
        let (split, split_end) = pipeline::drive(upstream, split_out, pieces);
        assert_eq!(whole_end, split_end, "the end depends on the split");
        if raw && whole_end.error.is_none() {
            assert_eq!(
                whole, body,
                "a raw stream that ended well is not the upstream's"
            );
            assert_eq!(
                split, body,
                "a raw stream that ended well is not the upstream's"
            );
        }
        let framing = match encoded {
            true => client.framing(),
            false => upstream.framing(),
        };
        let (whole, split) = (frames(framing, &[&whole]), frames(framing, &[&split]));
        if encoded {
            let same = client_reads(client, &whole) == client_reads(client, &split);
            assert!(same, "what the client reads depends on the split");
        } else {
            let named = |f: &[Frame]| {
                let named = f.iter().map(|f| (f.event.clone(), f.data.clone()));
                named.collect::<Vec<_>>()
            };
            assert_eq!(named(&whole), named(&split), "events depend on the split");
        }
    }
}

/// What a client of `dialect` reads of `frames`: their events, up to an event it cannot
/// read, and that event's error.
fn client_reads(dialect: Dialect, frames: &[Frame]) -> (Vec<Event>, Option<String>) {
    let mut decoder = dialect.stream_decoder();
    let mut events = Vec::new();
    for f in frames {
        if let Err(e) = decoder.frame(f, &mut events) {
            return (events, Some(e.to_string()));
        }
    }
    (events, None)
}

/// Cut `body` into pieces of the given lengths (zero-length pieces included), the rest last.
fn split<'a>(mut body: &'a [u8], lengths: &[u8]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::with_capacity(lengths.len() + 1);
    for &n in lengths {
        let (piece, rest) = body.split_at(usize::from(n).min(body.len()));
        pieces.push(piece);
        body = rest;
    }
    pieces.push(body);
    pieces
}

fn frames(framing: Framing, pieces: &[&[u8]]) -> Vec<Frame> {
    let mut parser = FrameParser::new(framing);
    let mut out = Vec::new();
    for piece in pieces {
        parser.feed(piece, &mut out);
    }
    parser.finish(&mut out);
    out
}

/// What every frame must look like whatever the input.
fn check_frames(framing: Framing, frames: &[Frame]) {
    for f in frames {
        if let Some(name) = &f.event {
            assert!(!name.contains(['\n', '\0']), "event name spans lines");
        }
        if framing == Framing::Ndjson {
            assert!(
                !f.data.contains(&b'\n') && !f.data.contains(&0),
                "line spans lines"
            );
            assert!(f.event.is_none(), "NDJSON has no event names");
        }
    }
}

/// Run frames through the upstream decoder, the tally and a client encoder the way the
/// streaming pipeline does: the first decode error ends the stream with the in-band error.
fn decode_stream(upstream: Dialect, client: Dialect, ctx: Ctx, frames: &[Frame]) {
    let mut dec = upstream.stream_decoder();
    let mut enc = client.stream_encoder(ctx);
    let mut tally = Tally::default();
    let mut out = BytesMut::new();
    let mut events: Vec<Event> = Vec::new();
    for f in frames {
        let _ = is_done_marker(&f.data);
        let _ = rewrite_model(&f.data, "alias");
        events.clear();
        if let Err(e) = dec.frame(f, &mut events) {
            enc.error(&e, &mut out);
            return finish(&tally, client, &out);
        }
        events.iter().for_each(|ev| {
            tally.observe(ev);
        });
        enc.events(&events, &mut out);
    }
    events.clear();
    dec.close(&mut events);
    events.iter().for_each(|ev| {
        tally.observe(ev);
    });
    enc.events(&events, &mut out);
    enc.end(&mut out);
    finish(&tally, client, &out);
}

/// The end of a stream: the request's totals, and the client's bytes parse as its framing.
fn finish(tally: &Tally, client: Dialect, out: &[u8]) {
    let _ = tally.totals();
    let _ = tally.choice_tokens(0);
    let _ = tally.choice_prompt(0);
    let _ = frames(client.framing(), &[out]);
}

/// A whole upstream response body. Layout: upstream dialect byte, client dialect byte,
/// context byte, then the body. Decodes it as the passthrough summary and the translating
/// route do, and re-encodes a decoded answer for the client; the fast readers of a whole
/// answer (passthrough's counts, the completion) read as serde does wherever they answer.
pub fn response(data: &[u8]) {
    let (up, data) = head(data);
    let (client, data) = head(data);
    let (flags, body) = head(data);
    let upstream = dialect(up);
    if let Ok(text) = std::str::from_utf8(body) {
        crate::dialect::openai::fast_readers_agree(&[text]);
    }
    let _ = upstream.decode_error(body);
    let Ok(mut resp) = upstream.decode_response(body) else {
        return;
    };
    let mut once = resp.clone();
    once.fill_usage(1);
    let ctx = ctx(flags);
    resp.fill_usage(ctx.n);
    let client = dialect(client);
    let _ = client.encode_response(&resp, &ctx);
    let _ = client.response_headers(&resp);
}
