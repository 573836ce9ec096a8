//! `lingo top`: a live view of a running proxy, computed from two scrapes of its `/metrics`.
//!
//! `parse` reads the text exposition, `snapshot` keys one scrape by series, `window` adds up
//! what grew between two scrapes for all traffic, a model, a dialect or an upstream group,
//! `endpoints` does the same per endpoint of a fleet, `quantile` estimates latency
//! percentiles from bucket increases, and `render` lays out one frame of any view. All of that is
//! pure; `scrape` is the only I/O here, and the screen loop lives in the CLI.

mod endpoints;
mod endpoints_view;
mod parse;
mod quantile;
mod render;
mod snapshot;
mod window;

pub use endpoints::{endpoints, EndpointRow};
pub use endpoints_view::render_endpoints;
pub use parse::{parse, ParseError, Sample};
pub use quantile::quantile;
pub use render::{render, render_groups, View};
pub use snapshot::{Series, Snapshot};
pub use window::{Group, Window};

use crate::error::ProxyError;
use crate::upstream::Client;

#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("fetching {url}/metrics")]
    Fetch { url: String, source: ProxyError },
    #[error("{url}/metrics answered HTTP {status}")]
    Status {
        url: String,
        status: http::StatusCode,
    },
    #[error("reading {url}/metrics")]
    Parse { url: String, source: ParseError },
}

/// Fetch and parse `/metrics` once.
pub async fn scrape(client: &Client) -> Result<Snapshot, ScrapeError> {
    let url = client.base().to_string();
    let fetch = |source| ScrapeError::Fetch {
        url: url.clone(),
        source,
    };
    let resp = client.get("/metrics").await.map_err(fetch)?;
    if !resp.status.is_success() {
        return Err(ScrapeError::Status {
            url: url.clone(),
            status: resp.status,
        });
    }
    let body = resp.bytes().await.map_err(fetch)?;
    Snapshot::parse(&String::from_utf8_lossy(&body))
        .map_err(|source| ScrapeError::Parse { url, source })
}
