//! lingo as its own process (the built binary), for what only a process has: an open-file
//! limit and signals. It binds port 0 and reports the address in its start-up log line,
//! which is read before the test goes on (no readiness sleep).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

pub struct Lingo {
    pub proc: tokio::process::Child,
    pub addr: SocketAddr,
    /// The `--metrics-listen` address, when one was asked for (`127.0.0.1:0`).
    pub metrics: Option<SocketAddr>,
    /// Every stderr line so far, for failure messages.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Lingo {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Send a signal by name (`TERM`, `INT`) with `kill`.
    pub fn signal(&self, name: &str) {
        let pid = self.proc.id().expect("running").to_string();
        let ok = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} {pid}");
    }

    /// The exit status, waiting at most `bound` (then the test fails with the log).
    pub async fn exit_status(&mut self, bound: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(bound, self.proc.wait()).await {
            Ok(s) => s.unwrap(),
            Err(_) => panic!("lingo still running after {bound:?}:\n{}", self.log()),
        }
    }
}

/// Start `lingo serve --listen 127.0.0.1:0 ARGS`, under `ulimit -n NOFILE` (soft and hard)
/// when given.
pub async fn spawn(nofile: Option<u32>, args: &[&str]) -> Lingo {
    let exe = env!("CARGO_BIN_EXE_lingo");
    let mut cmd = match nofile {
        Some(n) => {
            let mut c = Command::new("bash");
            c.arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(exe);
            c
        }
        None => Command::new(exe),
    };
    for (k, _) in std::env::vars() {
        if k.starts_with("LINGO_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    cmd.arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("LINGO_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut proc = cmd.spawn().unwrap();
    let mut lines = BufReader::new(proc.stderr.take().unwrap()).lines();
    let want_metrics = args.contains(&"--metrics-listen");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (mut addr, mut metrics) = (None, None);
    let started = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let line = strip_ansi(&line);
            addr = addr.or_else(|| field(&line, "listen="));
            metrics = metrics.or_else(|| field(&line, "metrics_listen="));
            log.lock().unwrap().push(line);
            if addr.is_some() && (metrics.is_some() || !want_metrics) {
                return true;
            }
        }
        false
    })
    .await;
    let seen = log.lock().unwrap().join("\n");
    assert!(started == Ok(true), "lingo did not start:\n{seen}");
    // Keep reading, so lingo never blocks on a full pipe.
    tokio::spawn({
        let log = log.clone();
        async move {
            while let Ok(Some(line)) = lines.next_line().await {
                log.lock().unwrap().push(strip_ansi(&line));
            }
        }
    });
    Lingo {
        proc,
        addr: addr.unwrap(),
        metrics,
        log,
    }
}

fn field(line: &str, key: &str) -> Option<SocketAddr> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .and_then(|v| v.parse().ok())
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
