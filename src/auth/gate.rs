//! The auth layer: every route but the open ones needs a known key, within its budgets.
//!
//! Default deny: generation, model listings, admin routes (`/flush_cache`,
//! `/get_server_info`) and unknown paths all need a key; only the probes and the scrape
//! (`/health`, `/ready`, `/metrics`) are open. The key is lingo's credential, not the
//! upstream's: once checked, `Authorization` and `x-api-key` are removed from the request, so
//! no handler can forward them, and the upstream sees only lingo's own upstream key (if any).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::{header, HeaderMap};

use super::Auth;
use crate::dialect::Dialect;
use crate::metrics::{Metrics, Refusal};
use crate::proxy::admission::refusal;

/// Routes served without a key: health probes and the Prometheus scrape.
const OPEN: &[&str] = &["/health", "/ready", "/live", "/metrics"];

#[derive(Clone)]
pub struct Gate {
    auth: Option<Arc<Auth>>,
    metrics: Arc<Metrics>,
}

impl Gate {
    /// The gate for this config. Keys that cannot be loaded here make a gate that refuses
    /// every guarded request (`serve` checks them first and refuses to start instead).
    pub fn new(config: &crate::config::AuthConfig, metrics: Arc<Metrics>) -> Gate {
        let auth = match Auth::from_config(config) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "client keys unavailable: refusing every request");
                Some(Auth::deny_all())
            }
        };
        Gate {
            auth: auth.map(Arc::new),
            metrics,
        }
    }

    /// Whether any key is asked for (without keys the gate is left out of the stack).
    pub fn guards(&self) -> bool {
        self.auth.is_some()
    }
}

/// The key a request presents: a bearer token, or Anthropic's `x-api-key`.
fn credential(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
}

pub async fn check(State(gate): State<Gate>, mut req: Request, next: Next) -> Response {
    let Some(auth) = &gate.auth else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    if OPEN.contains(&path) {
        return next.run(req).await;
    }
    match auth.admit(credential(req.headers())) {
        Ok(key) => {
            let h = req.headers_mut();
            h.remove(header::AUTHORIZATION);
            h.remove("x-api-key");
            super::scope(key, next.run(req)).await
        }
        Err(e) => {
            let why = match &e {
                crate::error::ProxyError::RateLimited { .. } => Refusal::RateLimited,
                _ => Refusal::Unauthorized,
            };
            tracing::debug!(path, reason = why.label(), "refused");
            gate.metrics.request_refused(why);
            refusal(Dialect::for_path(path), &e)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bearer_first_then_x_api_key() {
        let mut h = HeaderMap::new();
        assert_eq!(credential(&h), None);
        h.insert("x-api-key", "k2".parse().unwrap());
        assert_eq!(credential(&h), Some("k2"));
        h.insert(header::AUTHORIZATION, "bearer  k1".parse().unwrap());
        assert_eq!(credential(&h), Some("k1"));
        // Another scheme is not a key: fall back to x-api-key.
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(credential(&h), Some("k2"));
    }
}
