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
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
