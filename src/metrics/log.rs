//! The request log: one JSON line per request (finished, failed or abandoned), written off
//! the request path.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use tokio::sync::mpsc;

use super::RequestRecord;

/// Where request records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Stdout,
    File(PathBuf),
}

impl LogTarget {
    /// `-` is standard output, anything else a file path (appended to).
    pub fn parse(s: &str) -> LogTarget {
        match s {
            "-" | "stdout" => LogTarget::Stdout,
            path => LogTarget::File(PathBuf::from(path)),
        }
    }
}

/// One request, as logged. No prompt or completion text.
#[derive(Debug, Serialize)]
pub struct LogLine<'a> {
    /// Unix time the request arrived, in seconds.
    pub time: f64,
    pub request_id: Option<&'a str>,
    pub dialect: &'a str,
    pub upstream: &'a str,
    pub model: Option<&'a str>,
    pub stream: bool,
    /// `null` when unknown (a request that ended before anything counted it).
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub tokens_estimated: bool,
    /// The request ended before its response did: the counts are those known by then.
    pub partial: bool,
    pub ttft: Option<f64>,
    pub e2e: Option<f64>,
    pub outcome: &'a str,
    pub finish_reason: Option<&'a str>,
    pub error_kind: Option<&'a str>,
    /// The client key's name (never the key); null without auth.
    pub key: Option<&'a str>,
    /// The client's session key (`x-session-id`, else the OpenAI `user` field), at most 128
    /// bytes; absent when the client sent none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<&'a str>,
}

/// When a request that started at `started` arrived, in Unix seconds: read as its line is
/// written (a wall clock read per logged request, none per request when nothing is logged).
fn arrived_unix(started: std::time::Instant) -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    now - started.elapsed().as_secs_f64()
}

impl<'a> LogLine<'a> {
    pub fn from_record(r: &'a RequestRecord) -> LogLine<'a> {
        LogLine {
            time: arrived_unix(r.started),
            request_id: r.request_id.as_deref(),
            dialect: r.labels.dialect,
            upstream: &r.labels.upstream,
            model: r.model.as_deref(),
            stream: r.stream,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens(),
            tokens_estimated: r.estimated,
            partial: r.partial,
            ttft: r.ttft(),
            e2e: r
                .e2e()
                .or_else(|| r.ended.map(|e| (e - r.started).as_secs_f64())),
            outcome: r.outcome.label(),
            finish_reason: r.finish,
            error_kind: r.error_kind,
            key: r.key.as_ref().map(|k| k.name()),
            session: r.session.as_deref(),
        }
    }
}

/// A bounded queue to a writer task: logging never blocks a response; when the writer falls
/// behind, lines are dropped and counted.
pub struct RequestLog {
    tx: mpsc::Sender<String>,
    dropped: std::sync::atomic::AtomicU64,
}

impl RequestLog {
    /// Open the target and start its writer task (needs a Tokio runtime).
    pub fn start(target: LogTarget) -> std::io::Result<RequestLog> {
        let mut sink: Box<dyn Write + Send> = match &target {
            LogTarget::Stdout => Box::new(std::io::stdout()),
            LogTarget::File(p) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
        };
        let (tx, mut rx) = mpsc::channel::<String>(8192);
        tokio::task::spawn_blocking(move || {
            while let Some(line) = rx.blocking_recv() {
                let ok = sink.write_all(line.as_bytes()).is_ok() && sink.flush().is_ok();
                if !ok {
                    break;
                }
            }
        });
        Ok(RequestLog {
            tx,
            dropped: std::sync::atomic::AtomicU64::new(0),
        })
    }

    pub fn record(&self, r: &RequestRecord) {
        let Ok(mut line) = serde_json::to_string(&LogLine::from_record(r)) else {
            return;
        };
        line.push('\n');
        if self.tx.try_send(line).is_err() {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::metrics::{session_key, Labels};

    fn line(session: Option<&str>) -> serde_json::Value {
        let labels = Labels {
            dialect: "openai-chat",
            upstream: "u".into(),
            model: "m".into(),
        };
        let mut r = RequestRecord::new(labels, std::time::Instant::now());
        r.session = session.and_then(session_key);
        r.session_from_user(Some("from-user"));
        serde_json::to_value(LogLine::from_record(&r)).unwrap()
    }

    #[test]
    fn the_session_is_the_header_else_the_user_and_bounded() {
        assert_eq!(line(Some("conv-7"))["session"], "conv-7");
        assert_eq!(line(None)["session"], "from-user");
        let long = "é".repeat(100);
        let kept = session_key(&long).unwrap();
        assert!(kept.len() <= 128 && long.starts_with(&kept));
        assert_eq!(session_key("  "), None);
    }

    #[test]
    fn no_session_no_field() {
        let labels = Labels {
            dialect: "sglang",
            upstream: "u".into(),
            model: "m".into(),
        };
        let r = RequestRecord::new(labels, std::time::Instant::now());
        let v = serde_json::to_value(LogLine::from_record(&r)).unwrap();
        assert!(v.get("session").is_none(), "{v}");
    }
}
