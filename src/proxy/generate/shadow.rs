//! A mirrored request: the client's request sent again, in its own task, to the pool's
//! mirror (see `fleet::mirror`). It takes the path a client request would (the shadow
//! endpoint's kind picks passthrough or translation, in the client's dialect), is never
//! retried, and its answer is read to the end and thrown away: only its metrics, under the
//! mirror's group, are kept. Nothing here touches the client's request or response.

use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;

use super::super::{respond, AppState};
use super::glance::Lazy;
use crate::dialect::Dialect;
use crate::fleet::mirror::Decision;
use crate::fleet::{Key, Pool};

/// Mirror this request if `pool` has a mirror and the request is one of its fraction.
pub(super) fn start(
    st: &Arc<AppState>,
    pool: &Pool,
    dialect: Dialect,
    stream: bool,
    headers: &HeaderMap,
    body: &Bytes,
) {
    let Some(mirror) = &pool.mirror else {
        return;
    };
    let busy = st.admission.nearly_full() || st.drain.is_draining();
    let Decision::Send(slot) = mirror.decide(busy) else {
        return;
    };
    let (st, mirror) = (st.clone(), mirror.clone());
    let (headers, body) = (headers.clone(), body.clone());
    tokio::spawn(async move {
        // The slot is held until the shadow's answer has been read to its end.
        let _slot = slot;
        let mut at = respond::Arrival::new(&st, dialect, &headers);
        at.stream = stream;
        at.label_upstream(&mirror.group);
        let glance = Lazy::new(&body);
        let pool = &mirror.pool;
        st.fleet.first_use().await;
        let resp = super::attempts(
            &st,
            dialect,
            &at,
            &headers,
            &body,
            &glance,
            pool,
            &Key::None,
        );
        discard(resp.await).await;
    });
}

/// Read a response to its end (its metered body records the request as it does) and drop
/// every byte. The body's own timers bound how long this takes.
async fn discard(resp: Response) {
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            return;
        }
    }
}
