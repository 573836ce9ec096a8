//! What each endpoint of each pool did between two scrapes: requests and failures from
//! `lingo_endpoint_requests_total`, in flight and health as they stand in the later scrape.

use std::collections::BTreeMap;

use super::snapshot::Snapshot;

use crate::metrics::names;

const REQUESTS: &str = names::ENDPOINT_REQUESTS.0;
const IN_FLIGHT: &str = names::ENDPOINT_IN_FLIGHT.0;
/// A 1/0 gauge per endpoint; older lingos do not export it, so its absence shows as unknown.
const HEALTHY: &str = "lingo_endpoint_healthy";

/// Outcomes the endpoint is to blame for. A `client_error` is the request's fault and a
/// `cancelled` one the client's, whichever endpoint served them.
const FAILED_OUTCOMES: &[&str] = &["upstream_error", "timeout"];

/// One endpoint's row: increases over the window, and gauges from the later scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointRow {
    pub pool: String,
    pub endpoint: String,
    pub requests: f64,
    pub errors: f64,
    pub in_flight: f64,
    /// `None` when the scrape has no health gauge for it.
    pub healthy: Option<bool>,
}

/// Every endpoint in `cur`, sorted by pool then endpoint. An endpoint gone since `prev` is
/// left out: it serves nothing now.
pub fn endpoints(prev: &Snapshot, cur: &Snapshot) -> Vec<EndpointRow> {
    let mut rows: BTreeMap<(String, String), EndpointRow> = BTreeMap::new();
    for (s, value) in cur.iter() {
        if ![REQUESTS, IN_FLIGHT, HEALTHY].contains(&s.name.as_str()) {
            continue;
        }
        let (Some(pool), Some(endpoint)) = (s.label("pool"), s.label("endpoint")) else {
            continue;
        };
        let key = (pool.to_string(), endpoint.to_string());
        let row = rows.entry(key).or_insert_with(|| EndpointRow {
            pool: pool.to_string(),
            endpoint: endpoint.to_string(),
            ..EndpointRow::default()
        });
        let value = if value.is_nan() { 0.0 } else { value };
        match s.name.as_str() {
            REQUESTS => {
                let inc = cur.increase(prev, s);
                row.requests += inc;
                if s.label("outcome")
                    .is_some_and(|o| FAILED_OUTCOMES.contains(&o))
                {
                    row.errors += inc;
                }
            }
            IN_FLIGHT => row.in_flight += value,
            _ => row.healthy = Some(value > 0.0),
        }
    }
    rows.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_from_two_scrapes() {
        let prev = Snapshot::parse(
            r#"
lingo_endpoint_requests_total{pool="p",endpoint="a",outcome="ok"} 10
lingo_endpoint_requests_total{pool="p",endpoint="gone",outcome="ok"} 3
"#,
        )
        .unwrap();
        let cur = Snapshot::parse(
            r#"
lingo_endpoint_requests_total{pool="p",endpoint="a",outcome="ok"} 14
lingo_endpoint_requests_total{pool="p",endpoint="a",outcome="timeout"} 1
lingo_endpoint_requests_total{pool="p",endpoint="a",outcome="client_error"} 2
lingo_endpoint_in_flight{pool="p",endpoint="a"} 2
lingo_endpoint_healthy{pool="p",endpoint="a"} 0
lingo_endpoint_in_flight{pool="o",endpoint="b"} 1
"#,
        )
        .unwrap();
        let rows = endpoints(&prev, &cur);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(
            (rows[0].pool.as_str(), rows[0].endpoint.as_str()),
            ("o", "b")
        );
        assert_eq!(
            (rows[0].requests, rows[0].in_flight, rows[0].healthy),
            (0.0, 1.0, None)
        );
        let a = &rows[1];
        assert_eq!((a.requests, a.errors, a.in_flight), (7.0, 1.0, 2.0));
        assert_eq!(a.healthy, Some(false));
    }
}
