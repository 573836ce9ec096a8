//! Client authentication (`[auth]`): named keys, per-key request and token budgets, and the
//! start-up check that an upstream key is never offered to unauthenticated clients.
//!
//! `gate.rs` is the layer that asks for a key; what it learns travels with the request as a
//! [`ClientKey`] (its name labels the request's record; its budget is charged as the meter
//! counts tokens).

mod bucket;
pub mod gate;
mod keys;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use keys::{sha256, Keys, KeysError};

use bucket::Bucket;

use crate::config::{AuthConfig, Config};
use crate::error::ProxyError;

/// Why `[auth]` could not be loaded; the message names the key and never a key's text.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("auth.keys_file: cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("auth.keys_env: the environment variable {0} is not set")]
    Unset(String),
    #[error("auth: {0}")]
    Keys(#[from] KeysError),
}

/// One key's budgets, shared by all its requests.
#[derive(Debug)]
struct Budget {
    requests: Option<Mutex<Bucket>>,
    tokens: Option<Mutex<Bucket>>,
}

fn lock(b: &Mutex<Bucket>) -> std::sync::MutexGuard<'_, Bucket> {
    // A panic while holding a bucket leaves a valid bucket: keep using it.
    b.lock().unwrap_or_else(|e| e.into_inner())
}

/// The authenticated client of one request: its key's name and budget (never the key).
#[derive(Debug, Clone)]
pub struct ClientKey {
    name: Arc<str>,
    budget: Arc<Budget>,
    /// Tokens of this request already charged to the budget.
    charged: u64,
}

impl ClientKey {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The request has now counted `total` tokens (prompt plus generated): charge what is new.
    pub fn charge_up_to(&mut self, total: u64) {
        let new = total.saturating_sub(self.charged);
        if new == 0 {
            return;
        }
        self.charged = total;
        if let Some(b) = &self.budget.tokens {
            lock(b).charge(new, Instant::now());
        }
    }
}

/// The loaded keys and each key's budgets.
pub struct Auth {
    keys: Keys,
    budgets: HashMap<Arc<str>, Arc<Budget>>,
}

impl Auth {
    /// `None` when `[auth]` sets no key source (everyone is served).
    pub fn from_config(c: &AuthConfig) -> Result<Option<Auth>, AuthError> {
        if !c.enabled() {
            return Ok(None);
        }
        let mut keys: Option<Keys> = None;
        if let Some(path) = &c.keys_file {
            let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
                path: path.clone(),
                source,
            })?;
            keys = Some(Keys::parse(&text, path)?);
        }
        if let Some(var) = &c.keys_env {
            let text = std::env::var(var).map_err(|_| AuthError::Unset(var.clone()))?;
            let name = format!("${var}");
            let more = Keys::parse(&text, &name)?;
            match &mut keys {
                Some(k) => k.extend(more, &name)?,
                None => keys = Some(more),
            }
        }
        Ok(keys.map(|k| Auth::new(k, c)))
    }

    pub fn new(keys: Keys, c: &AuthConfig) -> Auth {
        let now = Instant::now();
        let bucket = |n: Option<u64>| n.map(|n| Mutex::new(Bucket::per_minute(n, now)));
        let budgets = keys
            .names()
            .map(|name| {
                let b = Budget {
                    requests: bucket(c.requests_per_minute.map(u64::from)),
                    tokens: bucket(c.tokens_per_minute),
                };
                (name.clone(), Arc::new(b))
            })
            .collect();
        Auth { keys, budgets }
    }

    /// How many keys are loaded.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// An `Auth` that knows no key: what a router gets when its configured keys cannot be
    /// loaded (`serve` refuses to start instead), so a broken key file fails closed.
    pub fn deny_all() -> Auth {
        Auth {
            keys: Keys::default(),
            budgets: HashMap::new(),
        }
    }

    /// Admit a request presenting `presented`, or say why not (401, or 429 when a budget is
    /// spent). A token budget in debt refuses before a request unit is taken.
    pub fn admit(&self, presented: Option<&str>) -> Result<ClientKey, ProxyError> {
        let Some(presented) = presented else {
            return Err(ProxyError::Unauthorized(
                "no API key: send Authorization: Bearer <key>".into(),
            ));
        };
        let name = self
            .keys
            .find(presented)
            .ok_or_else(|| ProxyError::Unauthorized("invalid API key".into()))?;
        let budget = self
            .budgets
            .get(&name)
            .cloned()
            .ok_or_else(|| ProxyError::Internal("a key without a budget".into()))?;
        let now = Instant::now();
        if let Some(b) = &budget.tokens {
            lock(b)
                .check_positive(now)
                .map_err(|retry_after| ProxyError::RateLimited {
                    what: "tokens per minute",
                    retry_after,
                })?;
        }
        if let Some(b) = &budget.requests {
            lock(b)
                .take_one(now)
                .map_err(|retry_after| ProxyError::RateLimited {
                    what: "requests per minute",
                    retry_after,
                })?;
        }
        Ok(ClientKey {
            name,
            budget,
            charged: 0,
        })
    }
}

tokio::task_local! {
    static CLIENT: ClientKey;
}

/// The authenticated client of the request being handled, if auth is on.
///
/// The gate runs the rest of the request inside a task-local scope rather than threading the
/// key through every handler's arguments: the handlers build their records from what they are
/// given, and this keeps them unaware of auth. The scope covers the handler, not the response
/// body: the record takes its copy when it is opened.
pub fn current() -> Option<ClientKey> {
    CLIENT.try_with(Clone::clone).ok()
}

/// Run `f` as the request of `key`.
pub(crate) async fn scope<F: std::future::Future>(key: ClientKey, f: F) -> F::Output {
    CLIENT.scope(key, f).await
}

/// Refuse a configuration that would let anyone spend the upstream's key: one set, no client
/// auth, and a listen address others can reach, unless `auth.allow_unauthenticated`.
pub fn check_exposure(c: &Config) -> Result<(), String> {
    if c.auth.enabled() || c.auth.allow_unauthenticated || c.listen.ip().is_loopback() {
        return Ok(());
    }
    if !matches!(c.upstream.api_key(), Ok(Some(_))) {
        return Ok(());
    }
    Err(format!(
        "refusing to start: an upstream API key is set and {} is not a loopback address, so \
         anyone who reaches lingo could spend it; set client keys (--auth-keys-file or \
         --auth-keys-env), listen on a loopback address, or pass --allow-unauthenticated",
        c.listen
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn auth(rpm: Option<u32>, tpm: Option<u64>) -> Auth {
        let c = AuthConfig {
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
            ..AuthConfig::default()
        };
        Auth::new(Keys::parse("a:ka\nb:kb\n", "t").unwrap(), &c)
    }

    #[test]
    fn keys_admit_by_name_and_refuse_otherwise() {
        let a = auth(None, None);
        assert_eq!(a.admit(Some("kb")).unwrap().name(), "b");
        assert!(matches!(a.admit(None), Err(ProxyError::Unauthorized(_))));
        let err = a.admit(Some("kc")).unwrap_err();
        assert!(matches!(err, ProxyError::Unauthorized(_)));
        assert!(!err.to_string().contains("kc"));
        assert!(Auth::deny_all().admit(Some("ka")).is_err());
    }

    #[test]
    fn budgets_are_per_key() {
        let a = auth(Some(1), Some(10));
        a.admit(Some("ka")).unwrap();
        let err = a.admit(Some("ka")).unwrap_err();
        assert!(matches!(
            err,
            ProxyError::RateLimited {
                what: "requests per minute",
                ..
            }
        ));
        // The other key has its own budgets; its tokens, charged as counted, go into debt
        // and refuse it (before a request unit is taken).
        let mut b = a.admit(Some("kb")).unwrap();
        b.charge_up_to(4);
        b.charge_up_to(12);
        b.charge_up_to(12);
        let err = a.admit(Some("kb")).unwrap_err();
        assert!(matches!(
            err,
            ProxyError::RateLimited {
                what: "tokens per minute",
                ..
            }
        ));
        // 2 in debt at 10 a minute: 12 s (give or take rounding).
        let wait = err.retry_after().unwrap();
        assert!((12..=13).contains(&wait), "{wait}");
    }

    #[test]
    fn an_upstream_key_on_an_open_address_needs_auth_or_consent() {
        let var = "LINGO_TEST_AUTH_EXPOSURE_KEY";
        std::env::set_var(var, "sk-up");
        let mut c = Config::default();
        c.upstream.api_key_env = Some(var.into());
        assert!(check_exposure(&c).is_ok(), "loopback is fine");
        c.listen = "0.0.0.0:0".parse().unwrap();
        let msg = check_exposure(&c).unwrap_err();
        assert!(msg.contains("--allow-unauthenticated") && !msg.contains("sk-up"));
        c.auth.allow_unauthenticated = true;
        assert!(check_exposure(&c).is_ok());
        c.auth.allow_unauthenticated = false;
        c.auth.keys_env = Some("X".into());
        assert!(check_exposure(&c).is_ok());
    }
}
