//! One scrape of `/metrics`: every sample by series (name and labels), and how much a counter
//! grew between two scrapes.

use std::collections::BTreeMap;

use super::parse::{parse, ParseError, Sample};

/// A metric name and its labels, sorted by label name so the same series always compares
/// equal whatever order the exposition wrote the labels in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    pub name: String,
    pub labels: Vec<(String, String)>,
}

impl Series {
    pub fn new(name: &str, labels: &[(&str, &str)]) -> Series {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        labels.sort();
        Series {
            name: name.to_string(),
            labels,
        }
    }

    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    series: BTreeMap<Series, f64>,
}

impl Snapshot {
    /// Read a text exposition; a repeated series keeps its last value.
    pub fn parse(text: &str) -> Result<Snapshot, ParseError> {
        Ok(Snapshot::from_samples(parse(text)?))
    }

    pub fn from_samples(samples: Vec<Sample>) -> Snapshot {
        let series = samples
            .into_iter()
            .map(|mut s| {
                s.labels.sort();
                let key = Series {
                    name: s.name,
                    labels: s.labels,
                };
                (key, s.value)
            })
            .collect();
        Snapshot { series }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Series, f64)> {
        self.series.iter().map(|(k, v)| (k, *v))
    }

    pub fn get(&self, series: &Series) -> Option<f64> {
        self.series.get(series).copied()
    }

    /// How much the counter `series` grew from `prev` to this scrape. A series new since
    /// `prev` grew from 0; one that went down was reset (lingo restarted), so like
    /// Prometheus' `increase` its whole current value is the growth. NaN counts as 0.
    pub fn increase(&self, prev: &Snapshot, series: &Series) -> f64 {
        let cur = self.get(series).filter(|v| !v.is_nan()).unwrap_or(0.0);
        let before = prev.get(series).filter(|v| !v.is_nan()).unwrap_or(0.0);
        match cur >= before {
            true => cur - before,
            false => cur,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_order_does_not_matter() {
        let s = Snapshot::parse("m{b=\"2\",a=\"1\"} 5\n").unwrap();
        assert_eq!(
            s.get(&Series::new("m", &[("a", "1"), ("b", "2")])),
            Some(5.0)
        );
        assert_eq!(s.get(&Series::new("m", &[("a", "1")])), None);
    }

    #[test]
    fn increase_handles_new_series_resets_and_nan() {
        let prev = Snapshot::parse("a 10\nb 7\nc NaN\n").unwrap();
        let cur = Snapshot::parse("a 15\nb 3\nc 4\nd 2\n").unwrap();
        let inc = |n: &str| cur.increase(&prev, &Series::new(n, &[]));
        assert_eq!(inc("a"), 5.0);
        assert_eq!(inc("b"), 3.0, "reset: counts from zero");
        assert_eq!(inc("c"), 4.0);
        assert_eq!(inc("d"), 2.0, "new series");
        assert_eq!(inc("gone"), 0.0);
    }
}
