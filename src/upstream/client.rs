//! The pooled HTTP client to the upstream, with its timeouts mapped to typed errors: lingo's
//! own HTTP/1.1 client (`h1`) for `http://` upstreams, hyper-util's for `https://`.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::body::UpstreamBody;
use super::h1;
use crate::config::{Limits, Timeouts};
use crate::error::{ProxyError, Timer};
use crate::gathered::Gathered;
use crate::stream::timers::HeaderWait;

/// The upstream's answer: status, content type, and the still-unread body.
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub content_type: Option<http::HeaderValue>,
    /// At least the headers lingo reads from an answer (over HTTP/1.1 only those:
    /// `h1::head::READ`); none is passed on to the client.
    pub headers: HeaderMap,
    pub body: UpstreamBody,
    bounds: BodyBounds,
}

/// What reading a whole upstream body may take: bytes, and time between chunks.
#[derive(Debug, Clone, Copy)]
struct BodyBounds {
    /// `limits.max_upstream_body`: a larger answer fails.
    whole: usize,
    /// `limits.max_upstream_error_body`: the rest of a larger error is not read.
    error: usize,
    /// `timeouts.stream_idle`.
    idle: Duration,
}

impl UpstreamResponse {
    /// Read the whole body (non-streaming answers and error bodies), within the limits: an
    /// answer larger than `limits.max_upstream_body` fails (502); an error body is cut at
    /// `limits.max_upstream_error_body`, noting the cut, and the rest is never read (the
    /// connection is dropped with it). A gap longer than `timeouts.stream_idle` fails too.
    pub async fn bytes(self) -> Result<Bytes, ProxyError> {
        let b = self.bounds;
        let error = !self.status.is_success();
        let limit = if error { b.error } else { b.whole };
        let mut body = self.body;
        let mut out = Gathered::default();
        loop {
            let frame = match tokio::time::timeout(b.idle, body.frame()).await {
                Err(_) => return Err(ProxyError::Timeout(Timer::StreamIdle)),
                Ok(None) => return Ok(out.freeze()),
                Ok(Some(f)) => f.map_err(|e| {
                    tracing::warn!(error = %e, "upstream body broke off");
                    ProxyError::UpstreamClosed
                })?,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if out.len() + data.len() <= limit {
                out.push(data);
                continue;
            }
            if !error {
                return Err(ProxyError::UpstreamProtocol(format!(
                    "the answer is larger than limits.max_upstream_body ({limit} bytes)"
                )));
            }
            let room = limit - out.len();
            out.push(data.slice(..room));
            out.push(Bytes::from(format!(" ... [cut at {limit} bytes]")));
            return Ok(out.freeze());
        }
    }
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// How requests reach the upstream.
#[derive(Clone)]
enum Transport {
    /// `http://`: lingo's own HTTP/1.1 client, read by the request's own task.
    H1 {
        pool: h1::Pool,
        /// The `host` header: the URL's host and port, without credentials.
        host: String,
        /// The URL's path, put before every request's path.
        prefix: String,
    },
    /// `https://` (and anything `h1` cannot parse, which then fails by name): hyper-util's
    /// pooled client over rustls.
    Hyper(Box<hyper_util::client::legacy::Client<Connector, Full<Bytes>>>),
}

/// One upstream base URL (`http://` or `https://`) behind a pooled, keep-alive client.
#[derive(Clone)]
pub struct Client {
    /// The base URL as configured, credentials included: only ever sent, never shown.
    target: String,
    /// `base` with any password masked: what logs, errors and `/get_server_info` show.
    shown: String,
    /// The configured `upstream.name`: how client-facing errors name this upstream.
    name: String,
    transport: Transport,
    header_timeout: Duration,
    bounds: BodyBounds,
    /// `Authorization` for every request, replacing the client's (`upstream.api_key_env`).
    auth: Option<HeaderValue>,
}

impl Client {
    pub fn new(base: &str, t: &Timeouts) -> Client {
        let base = base.trim_end_matches('/').to_string();
        let transport = h1_transport(&base, t).unwrap_or_else(|| hyper_transport(t));
        Client {
            shown: redact_url(&base),
            name: "upstream".into(),
            target: base,
            transport,
            header_timeout: t.response_headers,
            bounds: BodyBounds {
                whole: Limits::default().max_upstream_body,
                error: Limits::default().max_upstream_error_body,
                idle: t.stream_idle,
            },
            auth: None,
        }
    }

    /// Read whole bodies within these limits (`max_upstream_body`, `max_upstream_error_body`).
    pub fn with_limits(mut self, l: &Limits) -> Client {
        self.bounds.whole = l.max_upstream_body;
        self.bounds.error = l.max_upstream_error_body;
        self
    }

    /// Send `Authorization: Bearer <key>` on every request.
    pub fn with_api_key(mut self, key: &str) -> Result<Client, ProxyError> {
        let mut v = HeaderValue::try_from(format!("Bearer {key}"))
            .map_err(|_| ProxyError::Internal("the API key is not a valid header value".into()))?;
        v.set_sensitive(true);
        self.auth = Some(v);
        Ok(self)
    }

    /// Name this upstream in client-facing errors (`upstream.name`).
    pub fn named(mut self, name: &str) -> Client {
        self.name = name.to_string();
        self
    }

    /// The base URL as it may be shown: credentials masked (`redact_url`).
    pub fn base(&self) -> &str {
        &self.shown
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub async fn get(&self, path: &str) -> Result<UpstreamResponse, ProxyError> {
        self.send(Method::GET, path, Bytes::new(), &[]).await
    }

    pub async fn post_json(
        &self,
        path: &str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
    ) -> Result<UpstreamResponse, ProxyError> {
        self.send(Method::POST, path, body, headers).await
    }

    /// `post_json`, waiting for the headers until `wait.deadline` (a generation's own
    /// timers: `first_token` for streams when it is sooner).
    pub async fn post_json_until(
        &self,
        path: &str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
        wait: HeaderWait,
    ) -> Result<UpstreamResponse, ProxyError> {
        self.send_until(Method::POST, path, body, headers, wait)
            .await
    }

    /// Send and wait for the response headers, at most `header_timeout`.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
    ) -> Result<UpstreamResponse, ProxyError> {
        let wait = HeaderWait {
            deadline: tokio::time::Instant::now() + self.header_timeout,
            timer: Timer::ResponseHeaders,
        };
        self.send_until(method, path, body, headers, wait).await
    }

    async fn send_until(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
        wait: HeaderWait,
    ) -> Result<UpstreamResponse, ProxyError> {
        match &self.transport {
            Transport::H1 { pool, host, prefix } => {
                let to = (pool, host.as_str(), prefix.as_str());
                self.send_h1(to, &method, path, &body, headers, wait).await
            }
            // Boxed: `https://` only, and its future, inline, would make every request's
            // future larger by a KiB (see `proxy::front::boxed`).
            Transport::Hyper(inner) => {
                Box::pin(self.send_hyper(inner, method, path, body, headers, wait)).await
            }
        }
    }

    /// The headers a request carries: the client's forwarded ones, with lingo's own
    /// `Authorization` in place of the client's when `upstream.api_key_env` is set.
    fn outgoing<'a>(
        &'a self,
        headers: &'a [(HeaderName, HeaderValue)],
        json: bool,
    ) -> impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)> {
        static JSON: HeaderValue = HeaderValue::from_static("application/json");
        let forwarded = headers
            .iter()
            .filter(|(k, _)| self.auth.is_none() || k != header::AUTHORIZATION)
            .map(|(k, v)| (k, v));
        let auth = self.auth.iter().map(|v| (&header::AUTHORIZATION, v));
        let ctype = json.then_some((&header::CONTENT_TYPE, &JSON));
        forwarded.chain(auth).chain(ctype)
    }

    #[allow(clippy::too_many_arguments)]
    async fn send_h1(
        &self,
        (pool, host, prefix): (&h1::Pool, &str, &str),
        method: &Method,
        path: &str,
        body: &Bytes,
        headers: &[(HeaderName, HeaderValue)],
        wait: HeaderWait,
    ) -> Result<UpstreamResponse, ProxyError> {
        // Inline: a request has a handful (a `Vec` was an allocation).
        let list: smallvec::SmallVec<[_; 6]> = self.outgoing(headers, !body.is_empty()).collect();
        let inline = body.len() <= h1::INLINE_BODY;
        let mut wire = Vec::with_capacity(512 + if inline { body.len() } else { 0 });
        h1::encode_head(&mut wire, method, (prefix, path), host, &list, body.len());
        let rest: &[u8] = if inline {
            wire.extend_from_slice(body);
            &[]
        } else {
            body
        };
        let sent = pool.request(&wire, rest, method == Method::HEAD);
        match tokio::time::timeout_at(wait.deadline, sent).await {
            Err(_) => Err(ProxyError::Timeout(wait.timer)),
            Ok(Ok(r)) => Ok(UpstreamResponse {
                status: r.status,
                content_type: r.content_type,
                headers: r.headers,
                body: UpstreamBody::H1(r.body),
                bounds: self.bounds,
            }),
            Ok(Err(e)) => Err(self.classify_h1(path, e)),
        }
    }

    async fn send_hyper(
        &self,
        inner: &hyper_util::client::legacy::Client<Connector, Full<Bytes>>,
        method: Method,
        path: &str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
        wait: HeaderWait,
    ) -> Result<UpstreamResponse, ProxyError> {
        let uri = format!("{}{}", self.target, path);
        let build = || {
            let mut req = Request::builder().method(method.clone()).uri(&uri);
            for (k, v) in self.outgoing(headers, !body.is_empty()) {
                req = req.header(k, v);
            }
            req.body(Full::new(body.clone()))
                .map_err(|e| ProxyError::Internal(format!("building a request to {path}: {e}")))
        };
        let deadline = wait.deadline;
        let mut result = attempt(inner, build()?, deadline).await;
        // A pooled connection the server closed while idle fails before any response byte
        // (cpp-httplib under llama.cpp does this after a stream). The server never saw the
        // request, so sending it once more, on a fresh connection, is safe.
        if matches!(&result, Err(e) if closed_before_response(e)) {
            result = attempt(inner, build()?, deadline).await;
        }
        if let Err(Failure::Timeout) = result {
            return Err(ProxyError::Timeout(wait.timer));
        }
        let resp = result.map_err(|e| self.classify(path, e))?;
        let (parts, body) = resp.into_parts();
        Ok(UpstreamResponse {
            status: parts.status,
            content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
            headers: parts.headers,
            body: UpstreamBody::Hyper(body),
            bounds: self.bounds,
        })
    }
}

/// A plain `http://host[:port][/prefix]` URL as lingo's own client reaches it.
fn h1_transport(base: &str, t: &Timeouts) -> Option<Transport> {
    let uri: http::Uri = base.parse().ok()?;
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let auth = uri.authority()?;
    let port = auth.port_u16().unwrap_or(80);
    let host = match auth.port_u16() {
        Some(p) => format!("{}:{p}", auth.host()),
        None => auth.host().to_string(),
    };
    let settings = h1::Settings {
        idle_timeout: t.pool_idle,
        connect_timeout: t.connect,
        max_idle: 1024,
    };
    Some(Transport::H1 {
        pool: h1::Pool::new(auth.host(), port, settings),
        host,
        prefix: uri.path().trim_end_matches('/').to_string(),
    })
}

fn hyper_transport(t: &Timeouts) -> Transport {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(t.connect));
    connector.set_keepalive(Some(Duration::from_secs(60)));
    connector.enforce_http(false);
    let inner = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(t.pool_idle)
        // Without a timer, expired idle connections are only noticed at the next checkout:
        // an upstream that stays open would keep them (and their fds) forever.
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .pool_max_idle_per_host(1024)
        .build(tls(connector));
    Transport::Hyper(Box::new(inner))
}

/// TLS for `https://` upstreams (hosted OpenAI-compatible APIs).
fn tls(http: HttpConnector) -> Connector {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

/// The system's certificates, or Mozilla's bundled roots where the system has none: read
/// once per process, since a pool of a thousand discovered endpoints builds a thousand
/// connectors and reading the system's store takes milliseconds each time.
fn tls_config() -> rustls::ClientConfig {
    use hyper_rustls::ConfigBuilderExt;
    static CONFIG: std::sync::OnceLock<rustls::ClientConfig> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(
            || match rustls::ClientConfig::builder().with_native_roots() {
                Ok(b) => b.with_no_client_auth(),
                Err(e) => {
                    tracing::debug!(error = %e, "no system certificates; using bundled roots");
                    rustls::ClientConfig::builder()
                        .with_webpki_roots()
                        .with_no_client_auth()
                }
            },
        )
        .clone()
}

enum Failure {
    Timeout,
    Client(hyper_util::client::legacy::Error),
}

async fn attempt(
    inner: &hyper_util::client::legacy::Client<Connector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
    deadline: tokio::time::Instant,
) -> Result<hyper::Response<Incoming>, Failure> {
    match tokio::time::timeout_at(deadline, inner.request(req)).await {
        Err(_) => Err(Failure::Timeout),
        Ok(r) => r.map_err(Failure::Client),
    }
}

/// The connection closed before the response began: hyper's "incomplete message".
fn closed_before_response(e: &Failure) -> bool {
    let Failure::Client(e) = e else { return false };
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message();
        }
        src = s.source();
    }
    false
}

impl Client {
    /// A failed send as the client may see it: the upstream by its configured name and what
    /// happened in a word; the URL and the OS's error text go to the log only.
    fn classify(&self, path: &str, e: Failure) -> ProxyError {
        let e = match e {
            Failure::Timeout => return ProxyError::Timeout(Timer::ResponseHeaders),
            Failure::Client(e) => e,
        };
        let mut text = e.to_string();
        let mut io_kind = None;
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            text.push_str(": ");
            text.push_str(&s.to_string());
            io_kind = io_kind.or(s.downcast_ref::<std::io::Error>().map(|io| io.kind()));
            src = s.source();
        }
        tracing::warn!(upstream = %self.name, url = %self.shown, path, error = %text, "upstream request failed");
        // hyper-util's connect timer fails the connect with `TimedOut`.
        let connect = e.is_connect() || io_kind == Some(std::io::ErrorKind::TimedOut);
        self.io_failure(io_kind, connect)
    }

    fn classify_h1(&self, path: &str, e: h1::Error) -> ProxyError {
        tracing::warn!(upstream = %self.name, url = %self.shown, path, error = ?e, "upstream request failed");
        match e {
            h1::Error::Connect(io) => self.io_failure(Some(io.kind()), true),
            h1::Error::Closed { io, .. } => self.io_failure(io.map(|e| e.kind()), false),
            h1::Error::Protocol(m) => ProxyError::UpstreamProtocol(m),
        }
    }

    /// A request that got no response, by what the OS said: the upstream by its configured
    /// name and what happened in a word (the URL and the OS's text go to the log only).
    fn io_failure(&self, kind: Option<std::io::ErrorKind>, connect: bool) -> ProxyError {
        use std::io::ErrorKind as K;
        let name = &self.name;
        match kind {
            Some(K::TimedOut) if connect => ProxyError::Timeout(Timer::Connect),
            Some(K::ConnectionRefused) => {
                ProxyError::UpstreamRefused(format!("`{name}` refused the connection"))
            }
            _ if connect => {
                ProxyError::UpstreamRefused(format!("`{name}` could not be connected to"))
            }
            Some(K::ConnectionReset) => {
                ProxyError::UpstreamUnreachable(format!("`{name}` reset the connection"))
            }
            Some(K::ConnectionAborted) => {
                ProxyError::UpstreamUnreachable(format!("`{name}` closed the connection"))
            }
            _ => ProxyError::UpstreamUnreachable(format!(
                "`{name}` closed the connection before answering"
            )),
        }
    }
}

/// A URL with its credentials masked, for anything a person or client may read:
/// `http://user:secret@host/` becomes `http://user:***@host/`; a lone user part (often a
/// token) is masked whole.
pub fn redact_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..end].rfind('@') else {
        return url.to_string();
    };
    let masked = match rest[..at].split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_string(),
    };
    format!("{}{masked}{}", &url[..start], &rest[at..])
}

/// What `forward_headers` gives.
pub type Forwarded = smallvec::SmallVec<[(HeaderName, HeaderValue); 2]>;

/// The client headers worth forwarding upstream: credentials and the request id. Anthropic's
/// SDK sends its key as `x-api-key`; OpenAI-style servers (vLLM `--api-key`) read a bearer
/// token, so that is what it becomes. At most two (inline: a `Vec` was an allocation).
pub fn forward_headers(headers: &HeaderMap) -> Forwarded {
    // Names as constants: a lookup by `&str` parses the name first, at every request.
    const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
    // One pass over a client's few headers, comparing names, where a lookup each would
    // hash every name looked for; the first value of a name counts, as `get` would give.
    let (mut auth, mut id, mut key) = (None, None, None);
    for (name, value) in headers {
        let slot = if name == header::AUTHORIZATION {
            &mut auth
        } else if name == X_REQUEST_ID {
            &mut id
        } else if name == X_API_KEY {
            &mut key
        } else {
            continue;
        };
        slot.get_or_insert(value);
    }
    let bearer = key
        .filter(|_| auth.is_none())
        .and_then(|k| k.to_str().ok())
        .and_then(|k| HeaderValue::try_from(format!("Bearer {k}")).ok())
        .map(|mut v| {
            v.set_sensitive(true);
            v
        });
    let mut out = Forwarded::new();
    if let Some(v) = auth {
        out.push((header::AUTHORIZATION, v.clone()));
    }
    if let Some(v) = id {
        out.push((X_REQUEST_ID, v.clone()));
    }
    if let Some(v) = bearer {
        out.push((header::AUTHORIZATION, v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{forward_headers, redact_url};

    fn forwarded(pairs: &[(&'static str, &'static str)]) -> Vec<(String, String)> {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, http::HeaderValue::from_static(v));
        }
        forward_headers(&h)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect()
    }

    fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
        want.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn credentials_and_the_request_id_go_upstream_and_nothing_else() {
        let got = forwarded(&[
            ("content-type", "application/json"),
            ("x-request-id", "r1"),
            ("authorization", "Bearer a"),
            ("authorization", "Bearer b"),
            ("x-api-key", "k"),
        ]);
        let want = [("authorization", "Bearer a"), ("x-request-id", "r1")];
        assert_eq!(got, pairs(&want));
        // An Anthropic-style key becomes a bearer token, unless there is one already.
        let got = forwarded(&[("x-api-key", "k"), ("host", "h")]);
        assert_eq!(got, pairs(&[("authorization", "Bearer k")]));
        assert!(forwarded(&[("host", "h")]).is_empty());
    }

    #[test]
    fn redact_url_masks_credentials_only() {
        let cases = [
            (
                "http://user:secret@127.0.0.1:8000",
                "http://user:***@127.0.0.1:8000",
            ),
            ("https://u:p@w@host/v1?x=a@b", "https://u:***@host/v1?x=a@b"),
            ("http://token@host:1/", "http://***@host:1/"),
            ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
            ("http://host/path@x", "http://host/path@x"),
            ("user:pw@host:80", "user:***@host:80"),
            ("", ""),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "{url}");
        }
    }
}
