//! Server-sent events: the `data:` framing every imitated stream uses, and the encoder seam
//! between the driver (when) and a dialect (what).

use serde::Serialize;

use super::generate::Seq;

/// Encodes a dialect's stream events; the driver decides when each is sent.
pub(crate) trait Encoder: Send + 'static {
    /// Events sent just before the first tokens (chat's role chunks).
    fn open(&mut self, _seqs: &[Seq], _out: &mut Vec<u8>) {}
    /// The event for tokens `from..to` of sequence `i` (`to == len` means it is the last one).
    fn tokens(&mut self, seqs: &[Seq], i: usize, from: usize, to: usize, out: &mut Vec<u8>);
    /// Usage events and the terminator, after every sequence finished.
    fn close(&mut self, seqs: &[Seq], out: &mut Vec<u8>);
    /// The in-band error event and the terminator.
    fn error(&mut self, message: &str, out: &mut Vec<u8>);
    /// An event whose payload is not valid JSON (the `malformed-chunk` fault).
    fn malformed(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: {\"choices\": [\n\n");
    }
}

/// Appends one `data: {json}\n\n` event.
pub(crate) fn sse_event<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    out.extend_from_slice(b"data: ");
    if let Err(err) = serde_json::to_writer(&mut *out, value) {
        tracing::error!(%err, "mock: cannot encode a stream event");
    }
    out.extend_from_slice(b"\n\n");
}

/// Appends one `data:{json}\n\n` event, without the space, as TGI (axum's SSE) writes them.
pub(crate) fn sse_data<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    out.extend_from_slice(b"data:");
    if let Err(err) = serde_json::to_writer(&mut *out, value) {
        tracing::error!(%err, "mock: cannot encode a stream event");
    }
    out.extend_from_slice(b"\n\n");
}

pub(crate) fn sse_done(out: &mut Vec<u8>) {
    out.extend_from_slice(b"data: [DONE]\n\n");
}
