//! Same dialect on both sides: forward the bytes, observe tokens on the side.

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::super::{respond, AppState};
use super::glance::Lazy;
use super::{failed, Attempt};
use crate::dialect::Dialect;
use crate::error::{decode_json, ProxyError};
use crate::fleet::Endpoint;
use crate::metrics::{Outcome, Summary};
use crate::stream::pipeline::{pipeline, rewrite_model, Output, Upstream};
use crate::stream::timers::Timers;
use crate::upstream::{forward_headers, Kind};

/// The `model` to send upstream, when it must change: an alias becomes its target, and TGI's
/// Messages API takes anything but `"tgi"` for a LoRA adapter id, so its own model is `"tgi"`.
async fn upstream_model(
    st: &AppState,
    kind: Kind,
    dialect: Dialect,
    model: Option<&str>,
) -> Option<String> {
    let model = model?;
    let resolved = st.models.resolve(model);
    let tgi_base = kind == Kind::Tgi
        && dialect == Dialect::OpenaiChat
        && resolved != "tgi"
        && st.default_model().await.ok().as_deref() == Some(resolved);
    match (tgi_base, st.models.is_alias(model)) {
        (true, _) => Some("tgi".to_string()),
        (false, true) => Some(resolved.to_string()),
        (false, false) => None,
    }
}

/// One attempt on `ep`; with `retry`, a failure before any output comes back as `Err` (see
/// `super::failed`), a 5xx or 429 answer included.
#[allow(clippy::too_many_arguments)]
pub async fn handle(
    st: &AppState,
    ep: &Endpoint,
    kind: Kind,
    dialect: Dialect,
    headers: &HeaderMap,
    body: Bytes,
    glance: &Lazy<'_>,
    at: &respond::Arrival,
    retry: bool,
) -> Attempt {
    let peek = match glance.get() {
        Ok(p) => p,
        Err(e) => {
            let rec = respond::record(st, dialect, None, at);
            return Ok(respond::error(st, rec, dialect, e));
        }
    };
    let alias = peek.model.as_deref().filter(|m| st.models.is_alias(m));
    // Only for the metric label (borrowed: the record takes its own); discovering the
    // model once is worth it.
    let discovered = match &peek.model {
        Some(_) => None,
        None => st.default_model().await.ok(),
    };
    let label_model = peek.model.as_deref().or(discovered.as_deref());
    let stream = peek.streams(dialect) || at.stream;
    let mut rec = respond::record(st, dialect, label_model, at);
    rec.stream = stream;
    rec.prompt_tokens = peek.ids_len;
    rec.max_tokens = peek.max_tokens;
    rec.session_from_user(peek.user.as_deref());
    let strip_usage = peek.needs_usage(dialect);
    let send_model = upstream_model(st, kind, dialect, peek.model.as_deref()).await;
    let body = match (&send_model, strip_usage) {
        (None, false) => body,
        (None, true) if peek.stream_options.is_none() && is_object(&body) => {
            with_usage_option(&body)
        }
        (model, _) => match rewrite_request(&body, model.as_deref(), strip_usage) {
            Ok(b) => b,
            Err(e) => return Ok(respond::error(st, rec, dialect, &e)),
        },
    };
    let sent = Instant::now();
    let mut timers = Timers::start(&st.config.timeouts, at.started, &st.drain, stream);
    let fwd = forward_headers(headers);
    let path = dialect.request_path(stream);
    let wait = timers.headers();
    let resp = match timers
        .guard(ep.client.post_json_until(path, body, &fwd, wait))
        .await
    {
        Ok(r) => r,
        Err(e) => return failed(st, rec, dialect, e, at, retry),
    };
    ep.note_answer(resp.status, &resp.headers);
    let status = resp.status;
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        let e = ProxyError::UpstreamStatus {
            status: status.as_u16(),
            message: format!("the upstream answered {status}"),
        };
        if retry {
            // The answer is not read: its connection goes with it.
            return failed(st, rec, dialect, e, at, retry);
        }
    }
    rec.upstream_headers = Some(sent.elapsed());
    let content_type = resp.content_type.clone().unwrap_or_else(respond::json);
    let alias = alias.map(str::to_string);
    if stream && resp.status.is_success() {
        let output = match (alias, strip_usage) {
            (None, false) => Output::Raw,
            (alias, strip_usage) => Output::Reframe { alias, strip_usage },
        };
        let up = Upstream {
            body: resp.body,
            dialect,
            header_wait: sent.elapsed(),
            timers,
            max_event: st.config.limits.max_stream_event,
        };
        let s = pipeline(up, output);
        return Ok(respond::stream(st, rec, content_type, s));
    }
    let header_usage = dialect.usage_from_headers(&resp.headers);
    let bytes = match timers.guard(resp.bytes()).await {
        Ok(b) => b,
        Err(e) => return Ok(respond::error(st, rec, dialect, &e)),
    };
    let mut summary = summarize(dialect, status, &bytes, sent);
    if let (Some(u), true) = (header_usage, status.is_success()) {
        summary.prompt_tokens = u.prompt_tokens;
        summary.completion_tokens = u.completion_tokens;
    }
    let bytes = match &alias {
        Some(a) if status.is_success() => Bytes::from(rewrite_model(&bytes, a)),
        _ => bytes,
    };
    Ok(respond::full(st, rec, status, content_type, bytes, summary))
}

/// Token counts of a whole passthrough response, read from the upstream's own answer.
fn summarize(dialect: Dialect, status: StatusCode, bytes: &[u8], sent: Instant) -> Summary {
    let mut s = Summary {
        upstream_wait: sent.elapsed(),
        ..Summary::default()
    };
    if !status.is_success() {
        let outcome = match status.is_client_error() {
            true => Outcome::ClientError,
            false => Outcome::UpstreamError,
        };
        s.error = Some((outcome, "upstream_status"));
        return s;
    }
    if let Some(c) = dialect.response_counts(bytes) {
        s.prompt_tokens = c.prompt_tokens;
        s.completion_tokens = c.completion_tokens;
        s.finish = c.finish;
    }
    s
}

/// Ask for usage in a stream whose request has no `stream_options` (most OpenAI clients):
/// the key goes in front of the body's own, which leaves the rest byte for byte as the client
/// sent it and saves parsing and writing the whole request again.
fn with_usage_option(body: &[u8]) -> Bytes {
    let open = body.iter().position(|b| *b == b'{').unwrap_or(0);
    let rest = &body[open + 1..];
    let empty = rest.iter().all(|b| b.is_ascii_whitespace() || *b == b'}');
    let option: &[u8] = if empty {
        br#"{"stream_options":{"include_usage":true}"#
    } else {
        br#"{"stream_options":{"include_usage":true},"#
    };
    let mut out = Vec::with_capacity(body.len() + option.len());
    out.extend_from_slice(option);
    out.extend_from_slice(rest);
    Bytes::from(out)
}

/// Whether a body that parsed as a `Glance` is a JSON object (serde also reads structs from
/// arrays).
fn is_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Replace the request's `model` (an alias) with the upstream's name, and ask for usage in
/// the stream.
fn rewrite_request(body: &[u8], model: Option<&str>, usage: bool) -> Result<Bytes, ProxyError> {
    let mut v: Value = decode_json(body)?;
    if let Some(m) = model {
        v["model"] = Value::String(m.to_string());
    }
    if usage {
        match v.get_mut("stream_options").and_then(Value::as_object_mut) {
            Some(o) => {
                o.insert("include_usage".into(), Value::Bool(true));
            }
            None => v["stream_options"] = serde_json::json!({"include_usage": true}),
        }
    }
    serde_json::to_vec(&v)
        .map(Bytes::from)
        .map_err(|e| ProxyError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usage_option_goes_in_front_and_the_rest_is_untouched() {
        let body = br#" {"model": "m",  "stream": true}"#;
        assert!(is_object(body));
        let out = with_usage_option(body);
        assert_eq!(
            &out[..],
            br#"{"stream_options":{"include_usage":true},"model": "m",  "stream": true}"#
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        let empty: Value = serde_json::from_slice(&with_usage_option(b"{ }")).unwrap();
        assert_eq!(empty["stream_options"]["include_usage"], true);
        assert!(!is_object(b"[null, true]"));
    }
}
