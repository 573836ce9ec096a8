//! What lingo relays from its endpoints under vLLM's names (`--metrics-compat vllm`): the
//! figures only an engine knows (its waiting queue, running batch, KV-cache use, and its
//! queue-time and prefill-time histograms), combined per model the way vLLM's own meaning
//! asks: queues, batches and histogram counts summed over the model's endpoints (each is one
//! more engine), KV-cache use averaged (each engine's is a share of its own memory).

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};

/// One engine histogram, summed over its series: cumulative counts by upper bound.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hist {
    /// (upper bound, cumulative count), without `+Inf` (the count is that bucket).
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

impl Hist {
    /// Add another engine's histogram (bounds matched by value; vLLM's are fixed).
    pub fn add(&mut self, o: &Hist) {
        for (le, c) in &o.buckets {
            match self.buckets.iter_mut().find(|(l, _)| l == le) {
                Some((_, n)) => *n += c,
                None => self.buckets.push((*le, *c)),
            }
        }
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.sum += o.sum;
        self.count += o.count;
    }
}

/// The histogram families relayed, by vLLM name.
pub const HISTOGRAMS: [(&str, &str); 2] = [
    (
        "vllm:request_queue_time_seconds",
        "Time requests waited in their engine's queue (relayed from the endpoints, summed per model).",
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Time requests spent in prefill (relayed from the endpoints, summed per model).",
    ),
];

/// A model's relayed figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRelay {
    /// Summed over the endpoints that report it; `None` if none does.
    pub waiting: Option<u64>,
    pub running: Option<u64>,
    /// Averaged over the endpoints that report it.
    pub kv_usage: Option<f64>,
    /// Per `HISTOGRAMS` entry.
    pub hists: [Option<Hist>; 2],
}

/// The relayed histograms as a collector of the registry (so every exposition has them).
pub struct Relayed {
    descs: Vec<Desc>,
    pub models: Mutex<BTreeMap<String, ModelRelay>>,
}

impl Default for Relayed {
    fn default() -> Relayed {
        Relayed::new()
    }
}

impl Relayed {
    pub fn new() -> Relayed {
        let descs = HISTOGRAMS
            .iter()
            .map(|(n, h)| {
                Desc::new(
                    n.to_string(),
                    h.to_string(),
                    vec!["model_name".into()],
                    Default::default(),
                )
                .expect("valid metric")
            })
            .collect();
        Relayed {
            descs,
            models: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Collector for Relayed {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let models = self.models.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (i, (name, help)) in HISTOGRAMS.iter().enumerate() {
            let metrics: Vec<Metric> = models
                .iter()
                .filter_map(|(m, r)| Some(metric(m, r.hists[i].as_ref()?)))
                .collect();
            // An empty family is not valid exposition: leave it out until an engine reports.
            if metrics.is_empty() {
                continue;
            }
            let mut f = MetricFamily::default();
            f.set_name(name.to_string());
            f.set_help(help.to_string());
            f.set_field_type(MetricType::HISTOGRAM);
            f.set_metric(metrics);
            out.push(f);
        }
        out
    }
}

fn metric(model: &str, h: &Hist) -> Metric {
    let mut label = LabelPair::default();
    label.set_name("model_name".into());
    label.set_value(model.to_string());
    let buckets = h
        .buckets
        .iter()
        .filter(|(le, _)| le.is_finite())
        .map(|(le, c)| {
            let mut b = Bucket::default();
            b.set_upper_bound(*le);
            b.set_cumulative_count(*c);
            b
        })
        .collect();
    let mut hist = Histogram::default();
    hist.set_sample_count(h.count);
    hist.set_sample_sum(h.sum);
    hist.set_bucket(buckets);
    let mut m = Metric::from_label(vec![label]);
    m.set_histogram(hist);
    m
}

/// Read `name`'s histogram out of a Prometheus exposition, summed over its series.
pub fn parse_hist(text: &str, name: &str) -> Option<Hist> {
    let mut by_le: BTreeMap<String, u64> = BTreeMap::new();
    let (mut sum, mut count, mut seen) = (0.0, 0u64, false);
    for line in text.lines().filter(|l| l.starts_with(name)) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        let rest = &series[name.len()..];
        if let Some(labels) = rest.strip_prefix("_bucket{") {
            let Some(le) = labels
                .split(',')
                .find_map(|kv| kv.trim().strip_prefix("le=\""))
            else {
                continue;
            };
            *by_le
                .entry(le.trim_end_matches(['"', '}']).to_string())
                .or_default() += v as u64;
            seen = true;
        } else if rest.starts_with("_sum") {
            sum += v;
        } else if rest.starts_with("_count") {
            count += v as u64;
        }
    }
    if !seen {
        return None;
    }
    let mut buckets: Vec<(f64, u64)> = by_le
        .into_iter()
        .filter_map(|(le, c)| Some((le.parse::<f64>().ok()?, c)))
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(Hist {
        buckets,
        sum,
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_summed_over_series_and_engines() {
        let text = "vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"m\"} 2.0\n\
            vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 3.0\n\
            vllm:request_queue_time_seconds_bucket{engine=\"1\",le=\"0.3\",model_name=\"m\"} 1.0\n\
            vllm:request_queue_time_seconds_bucket{engine=\"1\",le=\"+Inf\",model_name=\"m\"} 1.0\n\
            vllm:request_queue_time_seconds_sum{engine=\"0\",model_name=\"m\"} 0.5\n\
            vllm:request_queue_time_seconds_count{engine=\"0\",model_name=\"m\"} 3.0\n\
            vllm:request_queue_time_seconds_count{engine=\"1\",model_name=\"m\"} 1.0\n";
        let h = parse_hist(text, "vllm:request_queue_time_seconds").unwrap();
        assert_eq!(h.buckets, vec![(0.3, 3), (f64::INFINITY, 4)]);
        assert_eq!((h.sum, h.count), (0.5, 4));
        assert_eq!(parse_hist(text, "vllm:request_prefill_time_seconds"), None);
        let mut twice = h.clone();
        twice.add(&h);
        assert_eq!(twice.count, 8);
        assert_eq!(twice.buckets[0], (0.3, 6));
    }

    #[test]
    fn the_collector_exports_only_reported_models() {
        let r = Relayed::new();
        assert!(r.collect().is_empty());
        let h = Hist {
            buckets: vec![(0.1, 1), (f64::INFINITY, 2)],
            sum: 0.3,
            count: 2,
        };
        r.models.lock().unwrap().insert(
            "m".into(),
            ModelRelay {
                hists: [Some(h), None],
                ..ModelRelay::default()
            },
        );
        let fams = r.collect();
        assert_eq!(fams.len(), 1);
        use prometheus::Encoder;
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&fams, &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("vllm:request_queue_time_seconds_bucket{model_name=\"m\",le=\"0.1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vllm:request_queue_time_seconds_count{model_name=\"m\"} 2"),
            "{text}"
        );
    }
}
