//! The `lingo` binary: parse the command line and run the chosen job.

mod cli;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    // The servers log what they do; the demo and the bench print results and only warn.
    let default = match cli.command {
        cli::Command::Serve(_) | cli::Command::Mock(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LINGO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    cli::run(cli).await
}
