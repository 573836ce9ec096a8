//! The `lingo` binary: parse the command line and run the chosen job.

mod cli;

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    // The servers log what they do; the demo and the bench print results and only warn.
    let default = match cli.command {
        cli::Command::Serve(_) | cli::Command::Mock(_) => "info",
        _ => "warn",
    };
    let lingo_log = std::env::var("LINGO_LOG").ok();
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, bad) = log_filter(default, lingo_log.as_deref(), rust_log.as_deref());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Some(bad) = bad {
        tracing::warn!(filter = %bad, "log filter not understood; using {default}");
    }
    cli::run(cli).await
}

/// The log filter: `LINGO_LOG`, else the ecosystem's `RUST_LOG`, else `default`. A filter
/// that does not parse is returned beside the default, to be reported once logging works.
fn log_filter(
    default: &str,
    lingo_log: Option<&str>,
    rust_log: Option<&str>,
) -> (EnvFilter, Option<String>) {
    let chosen = [lingo_log, rust_log]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty());
    match chosen.map(EnvFilter::try_new) {
        None => (EnvFilter::new(default), None),
        Some(Ok(f)) => (f, None),
        Some(Err(_)) => (EnvFilter::new(default), chosen.map(str::to_string)),
    }
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    fn shown(lingo: Option<&str>, rust: Option<&str>) -> String {
        log_filter("info", lingo, rust).0.to_string()
    }

    #[test]
    fn lingo_log_wins_then_rust_log_then_the_default() {
        assert_eq!(shown(Some("debug"), Some("trace")), "debug");
        assert_eq!(shown(None, Some("lingo=trace")), "lingo=trace");
        assert_eq!(shown(Some(""), Some("warn")), "warn");
        assert_eq!(shown(None, None), "info");
    }

    #[test]
    fn a_filter_that_does_not_parse_falls_back_and_is_reported() {
        let (f, bad) = log_filter("info", None, Some("lingo=[["));
        assert_eq!(f.to_string(), "info");
        assert_eq!(bad.as_deref(), Some("lingo=[["));
    }
}
