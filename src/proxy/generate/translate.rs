//! Different dialects: decode the client's request, encode it for the upstream, and
//! translate the answer (whole or streamed) back.

use std::time::Instant;

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

use super::super::{respond, AppState};
use super::is_model_not_found;
use super::{failed, Attempt};
use crate::dialect::{ctx, Ctx, Dialect};
use crate::error::ProxyError;
use crate::fleet::Endpoint;
use crate::metrics::{OpenRecord, Summary};
use crate::model::Request;
use crate::stream::pipeline::{pipeline, Output, Upstream};
use crate::stream::timers::{HeaderWait, Timers};
use crate::upstream::{forward_headers, Kind, UpstreamResponse};

/// One attempt on `ep` (client and target dialects in `way`); with `retry`, a failure before
/// any output comes back as `Err` (see `super::failed`).
#[allow(clippy::too_many_arguments)]
pub async fn handle(
    st: &AppState,
    ep: &Endpoint,
    kind: Kind,
    (client, target): (Dialect, Dialect),
    headers: &HeaderMap,
    body: Bytes,
    at: &respond::Arrival,
    retry: bool,
) -> Attempt {
    let mut req = match client.decode_request(&body) {
        Ok(r) => r,
        Err(e) => {
            let rec = respond::record(st, client, None, at);
            return Ok(respond::error(st, rec, client, &e));
        }
    };
    // TGI's `/generate_stream` streams by route.
    req.stream |= at.stream;
    // Ollama's /api/generate is chat-shaped unless `raw`: the body decides the endpoint.
    let target = target.for_prompt(matches!(req.prompt, crate::model::Prompt::Chat(_)));
    let (resolved, from_discovery) = match resolve_model(st, &req).await {
        Ok(m) => m,
        Err(e) => {
            let rec = respond::record(st, client, None, at);
            return Ok(respond::error(st, rec, client, &e));
        }
    };
    let shown = req.model.clone().unwrap_or_else(|| resolved.clone());
    let mut rec = respond::record(st, client, Some(&shown), at);
    rec.stream = req.stream;
    req.model = Some(resolved);
    let ctx = Ctx::new(&req, response_id(client, &req), shown);
    rec.prompt_tokens = ctx.prompt_tokens();
    rec.max_tokens = req.sampling.max_tokens.map(u64::from);
    rec.session_from_user(req.extra.get("user").and_then(|u| u.as_str()));
    let fwd = forward_headers(headers);
    let sent = Instant::now();
    let mut timers = Timers::start(&st.config.timeouts, at.started, &st.drain, req.stream);
    let way = Way {
        client,
        target,
        kind,
        ep,
    };
    let wait = timers.headers();
    let resp = match timers
        .guard(send(st, way, &mut req, &fwd, from_discovery, wait))
        .await
    {
        Ok(r) => r,
        Err(e) => return failed(st, rec, client, e, at, retry),
    };
    rec.upstream_headers = Some(sent.elapsed());
    if req.stream {
        let enc = client.stream_encoder(ctx);
        let up = Upstream {
            body: resp.body,
            dialect: target,
            header_wait: sent.elapsed(),
            timers,
            max_event: st.config.limits.max_stream_event,
        };
        let s = pipeline(up, Output::Encode(Box::new(enc)));
        let ct = HeaderValue::from_static(client.stream_content_type());
        return Ok(respond::stream(st, rec, ct, s));
    }
    Ok(whole(st, rec, way, resp, &ctx, sent, timers).await)
}

/// The upstream model name, and whether it came from the upstream's own list.
async fn resolve_model(st: &AppState, req: &Request) -> Result<(String, bool), ProxyError> {
    match &req.model {
        Some(m) => Ok((st.models.resolve(m).to_string(), false)),
        None => Ok((st.default_model().await?, st.default_is_discovered())),
    }
}

fn response_id(client: Dialect, req: &Request) -> String {
    if let Some(id) = &req.request_id {
        return id.clone();
    }
    let hex = ctx::random_id();
    match client {
        Dialect::Sglang | Dialect::Tgi => hex,
        Dialect::OpenaiCompletions => format!("cmpl-{hex}"),
        Dialect::OpenaiChat => format!("chatcmpl-{hex}"),
        Dialect::Anthropic => format!("msg_{hex}"),
        Dialect::VllmLegacy => hex,
        // llama.cpp's native answers and Ollama's carry no id.
        Dialect::Llamacpp | Dialect::OllamaGenerate | Dialect::OllamaChat => hex,
    }
}

/// Which dialects a translation joins, to which kind of upstream.
#[derive(Clone, Copy)]
struct Way<'a> {
    client: Dialect,
    target: Dialect,
    kind: Kind,
    ep: &'a Endpoint,
}

/// Encode and send; on "model not found" for a discovered default, refresh the model list
/// and try once more with the new default.
async fn send(
    st: &AppState,
    Way {
        client,
        target,
        kind,
        ep,
    }: Way<'_>,
    req: &mut Request,
    fwd: &[(http::HeaderName, HeaderValue)],
    from_discovery: bool,
    wait: HeaderWait,
) -> Result<UpstreamResponse, ProxyError> {
    let mut retried = false;
    loop {
        let body = match target.encode_request_as(req, kind.flavor()) {
            Ok(b) => b,
            Err(ProxyError::Unsupported { field, .. }) if req.sampling.forget_implicit(&field) => {
                continue;
            }
            Err(e) => return Err(rename(client, e)),
        };
        let path = target.request_path(req.stream);
        let resp = ep
            .client
            .post_json_until(path, Bytes::from(body), fwd, wait)
            .await?;
        if resp.status.is_success() {
            return Ok(resp);
        }
        ep.note_answer(resp.status, &resp.headers);
        let status = resp.status.as_u16();
        let message = target.decode_error(&resp.bytes().await?);
        if from_discovery && !retried && is_model_not_found(status, &message) {
            retried = true;
            st.refresh_models(true).await;
            req.model = Some(st.default_model().await?);
            continue;
        }
        return Err(ProxyError::UpstreamStatus { status, message });
    }
}

/// Name a refused field the way the client spelled it.
fn rename(client: Dialect, e: ProxyError) -> ProxyError {
    match e {
        ProxyError::Unsupported { field, reason } => ProxyError::Unsupported {
            field: client.field_name(&field),
            reason,
        },
        other => other,
    }
}

async fn whole(
    st: &AppState,
    rec: OpenRecord,
    Way { client, target, .. }: Way<'_>,
    resp: UpstreamResponse,
    ctx: &Ctx,
    sent: Instant,
    mut timers: Timers,
) -> Response {
    let header_usage = target.usage_from_headers(&resp.headers);
    let decoded = match timers.guard(resp.bytes()).await {
        Ok(bytes) => target.decode_response(&bytes),
        Err(e) => Err(e),
    };
    let mut out = match decoded {
        Ok(r) => r,
        Err(e) => return respond::error(st, rec, client, &e),
    };
    if header_usage.is_some() {
        out.usage = header_usage;
    }
    out.fill_usage(ctx.n);
    let usage = out.usage.unwrap_or_default();
    let summary = Summary {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        finish: out
            .choices
            .first()
            .and_then(|c| c.finish.as_ref())
            .map(|f| f.label()),
        upstream_wait: sent.elapsed(),
        ..Summary::default()
    };
    let bytes = Bytes::from(client.encode_response(&out, ctx));
    let mut resp = respond::full(
        st,
        rec,
        http::StatusCode::OK,
        respond::json(),
        bytes,
        summary,
    );
    resp.headers_mut().extend(client.response_headers(&out));
    resp
}
