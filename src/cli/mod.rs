//! The command line: one binary, one subcommand per job. Every flag can also come from a
//! `LINGO_*` environment variable (command line wins), and `serve` layers both over
//! `--config`.

mod bench;
mod demo;
mod mock;
mod serve;
mod top;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "lingo",
    version,
    about = "LLM-serving compatibility proxy, load driver and mock server"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy: accept every client dialect, translate to the upstream's.
    Serve(Box<serve::ServeArgs>),
    /// Run a simulated inference server (vLLM or SGLang) for tests, demos and benchmarks.
    Mock(mock::MockArgs),
    /// Drive load in any client dialect: a concurrency sweep with throughput and latency.
    Bench(bench::BenchArgs),
    /// A mock vLLM, lingo in front of it, and an SGLang-dialect sweep through lingo.
    Demo(demo::DemoArgs),
    /// Watch a running lingo proxy: tokens/s, requests/s, TTFT and ITL, per model and dialect.
    Top(top::TopArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Mock(args) => mock::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Top(args) => top::run(args).await,
    }
}

/// Resolve on Ctrl-C or SIGTERM, for graceful shutdown.
pub async fn shutdown_signal() {
    Signals::new().recv().await
}

/// The first SIGTERM or SIGINT (start draining), and the second (stop now).
pub fn drain_signals() -> (
    impl std::future::Future<Output = ()>,
    impl std::future::Future<Output = ()>,
) {
    let (first_tx, first) = tokio::sync::oneshot::channel::<()>();
    let (second_tx, second) = tokio::sync::oneshot::channel::<()>();
    let mut signals = Signals::new();
    tokio::spawn(async move {
        signals.recv().await;
        tracing::info!("shutting down: a second signal exits at once");
        let _ = first_tx.send(());
        signals.recv().await;
        let _ = second_tx.send(());
    });
    // A dropped sender means the task is gone; take that as the signal, not as never.
    (
        async move {
            let _ = first.await;
        },
        async move {
            let _ = second.await;
        },
    )
}

/// SIGTERM and SIGINT, registered once so that a signal arriving between two waits is
/// not lost.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn one(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! { _ = one(&mut self.term) => {}, _ = one(&mut self.int) => {} }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
