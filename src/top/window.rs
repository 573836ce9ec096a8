//! What happened between two scrapes, for all traffic, one model, one dialect or one
//! upstream group (a pool's endpoints share their group's `upstream` label).
//!
//! The metric names are lingo's own (`metrics/names.rs`, private to the metrics module);
//! `tests/top.rs` scrapes a real lingo, so a renamed metric fails a test rather than showing
//! zeros.

use super::parse::parse_value;
use super::quantile::quantile;
use super::snapshot::{Series, Snapshot};

use crate::metrics::names::{self, ITL_BUCKET, TTFT_BUCKET};

const REQUESTS: &str = names::REQUESTS.0;
const PROMPT_TOKENS: &str = names::PROMPT_TOKENS.0;
const GENERATION_TOKENS: &str = names::GENERATION_TOKENS.0;
const ERRORS: &str = names::ERRORS.0;
const IN_FLIGHT: &str = names::IN_FLIGHT.0;

/// The series that carry `model` and `dialect` labels.
const BROKEN_DOWN: &[&str] = &[
    REQUESTS,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    ERRORS,
    TTFT_BUCKET,
    ITL_BUCKET,
];

/// Request outcomes that lingo also counts in `lingo_errors_total` (every outcome but `ok`
/// and `cancelled`): the error count of a model, whose errors carry no model label.
const FAILED_OUTCOMES: &[&str] = &["client_error", "upstream_error", "timeout"];

/// Which series a window adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group<'a> {
    All,
    Model(&'a str),
    Dialect(&'a str),
    Upstream(&'a str),
}

impl Group<'_> {
    fn matches(self, s: &Series) -> bool {
        match self {
            Group::All => true,
            Group::Model(m) => s.label("model") == Some(m),
            Group::Dialect(d) => s.label("dialect") == Some(d),
            Group::Upstream(u) => s.label("upstream") == Some(u),
        }
    }
}

/// Increases between two scrapes; histograms as `(le, count)` bucket increases, by `le`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    pub requests: f64,
    pub errors: f64,
    pub prompt_tokens: f64,
    pub generation_tokens: f64,
    pub ttft: Vec<(f64, f64)>,
    pub itl: Vec<(f64, f64)>,
}

impl Window {
    pub fn between(prev: &Snapshot, cur: &Snapshot, group: Group<'_>) -> Window {
        let mut w = Window::default();
        for (s, _) in cur.iter().filter(|(s, _)| group.matches(s)) {
            let inc = cur.increase(prev, s);
            match s.name.as_str() {
                REQUESTS => {
                    w.requests += inc;
                    let failed = s
                        .label("outcome")
                        .is_some_and(|o| FAILED_OUTCOMES.contains(&o));
                    if failed && matches!(group, Group::Model(_)) {
                        w.errors += inc;
                    }
                }
                ERRORS => w.errors += inc,
                PROMPT_TOKENS => w.prompt_tokens += inc,
                GENERATION_TOKENS => w.generation_tokens += inc,
                TTFT_BUCKET => add_bucket(&mut w.ttft, s, inc),
                ITL_BUCKET => add_bucket(&mut w.itl, s, inc),
                _ => {}
            }
        }
        w
    }

    pub fn ttft_quantile(&self, q: f64) -> Option<f64> {
        quantile(q, &self.ttft)
    }

    pub fn itl_quantile(&self, q: f64) -> Option<f64> {
        quantile(q, &self.itl)
    }
}

/// Sum bucket increases of the same `le` across series, keeping the buckets sorted.
fn add_bucket(buckets: &mut Vec<(f64, f64)>, s: &Series, inc: f64) {
    let Some(le) = s.label("le").and_then(parse_value) else {
        return;
    };
    match buckets.binary_search_by(|(b, _)| b.total_cmp(&le)) {
        Ok(i) => buckets[i].1 += inc,
        Err(i) => buckets.insert(i, (le, inc)),
    }
}

/// Requests being served now, over every upstream.
pub fn in_flight(cur: &Snapshot) -> f64 {
    cur.iter()
        .filter(|(s, v)| s.name == IN_FLIGHT && !v.is_nan())
        .map(|(_, v)| v)
        .sum()
}

/// The values of `label` (`model`, `dialect` or `upstream`) in this scrape, sorted.
pub fn label_values(cur: &Snapshot, label: &str) -> Vec<String> {
    let mut values: Vec<String> = cur
        .iter()
        .filter(|(s, _)| BROKEN_DOWN.contains(&s.name.as_str()))
        .filter_map(|(s, _)| s.label(label))
        .map(str::to_string)
        .collect();
    values.sort();
    values.dedup();
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two scrapes as lingo writes them (labels trimmed to what matters): SGLang and OpenAI
    /// traffic to one model, and a second model only OpenAI clients use.
    const PREV: &str = r#"
# TYPE lingo_requests_total counter
lingo_requests_total{dialect="sglang",model="m1",outcome="ok",upstream="u"} 10
lingo_requests_total{dialect="openai-chat",model="m1",outcome="ok",upstream="u"} 4
lingo_prompt_tokens_total{dialect="sglang",model="m1",upstream="u"} 100
lingo_generation_tokens_total{dialect="sglang",model="m1",upstream="u"} 800
lingo_errors_total{dialect="sglang",kind="upstream_status",upstream="u"} 1
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m1",upstream="u",le="0.1"} 5
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m1",upstream="u",le="0.5"} 9
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m1",upstream="u",le="+Inf"} 10
lingo_time_to_first_token_seconds_sum{dialect="sglang",model="m1",upstream="u"} 1.5
lingo_time_to_first_token_seconds_count{dialect="sglang",model="m1",upstream="u"} 10
lingo_requests_in_flight{upstream="u"} 2
"#;

    const CUR: &str = r#"
lingo_requests_total{dialect="sglang",model="m1",outcome="ok",upstream="u"} 13
lingo_requests_total{dialect="sglang",model="m1",outcome="upstream_error",upstream="u"} 2
lingo_requests_total{dialect="sglang",model="m1",outcome="cancelled",upstream="u"} 1
lingo_requests_total{dialect="openai-chat",model="m1",outcome="ok",upstream="u"} 4
lingo_requests_total{dialect="openai-chat",model="m2",outcome="ok",upstream="u"} 5
lingo_prompt_tokens_total{dialect="sglang",model="m1",upstream="u"} 130
lingo_generation_tokens_total{dialect="sglang",model="m1",upstream="u"} 1040
lingo_prompt_tokens_total{dialect="openai-chat",model="m2",upstream="u"} 50
lingo_generation_tokens_total{dialect="openai-chat",model="m2",upstream="u"} 20
lingo_errors_total{dialect="sglang",kind="upstream_status",upstream="u"} 3
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m1",upstream="u",le="0.1"} 5
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m1",upstream="u",le="0.5"} 11
lingo_time_to_first_token_seconds_bucket{dialect="sglang",model="m1",upstream="u",le="+Inf"} 14
lingo_time_to_first_token_seconds_bucket{dialect="openai-chat",model="m2",upstream="u",le="0.1"} 4
lingo_time_to_first_token_seconds_bucket{dialect="openai-chat",model="m2",upstream="u",le="0.5"} 4
lingo_time_to_first_token_seconds_bucket{dialect="openai-chat",model="m2",upstream="u",le="+Inf"} 4
lingo_requests_in_flight{upstream="u"} 3
lingo_requests_in_flight{upstream="v"} 1
"#;

    fn window(group: Group<'_>) -> Window {
        let (prev, cur) = (
            Snapshot::parse(PREV).unwrap(),
            Snapshot::parse(CUR).unwrap(),
        );
        Window::between(&prev, &cur, group)
    }

    #[test]
    fn counts_per_group() {
        let all = window(Group::All);
        assert_eq!(all.requests, 3.0 + 2.0 + 1.0 + 5.0);
        assert_eq!(all.prompt_tokens, 30.0 + 50.0);
        assert_eq!(all.generation_tokens, 240.0 + 20.0);
        assert_eq!(all.errors, 2.0);

        let m1 = window(Group::Model("m1"));
        assert_eq!((m1.requests, m1.prompt_tokens), (6.0, 30.0));
        // From the failed outcomes: the cancelled request is not an error.
        assert_eq!(m1.errors, 2.0);
        let m2 = window(Group::Model("m2"));
        assert_eq!(
            (m2.requests, m2.generation_tokens, m2.errors),
            (5.0, 20.0, 0.0)
        );

        let sglang = window(Group::Dialect("sglang"));
        assert_eq!((sglang.requests, sglang.errors), (6.0, 2.0));
        let chat = window(Group::Dialect("openai-chat"));
        assert_eq!(
            (chat.requests, chat.prompt_tokens, chat.errors),
            (5.0, 50.0, 0.0)
        );
    }

    #[test]
    fn histogram_deltas_are_summed_by_le() {
        let inf = f64::INFINITY;
        assert_eq!(
            window(Group::All).ttft,
            [(0.1, 4.0), (0.5, 6.0), (inf, 8.0)]
        );
        let m1 = window(Group::Model("m1"));
        assert_eq!(m1.ttft, [(0.1, 0.0), (0.5, 2.0), (inf, 4.0)]);
        assert!(m1.itl.is_empty());
        assert_eq!(m1.itl_quantile(0.5), None);
    }

    fn approx(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn quantiles_of_the_window_not_of_all_time() {
        // m1 in the window: 2 in (0.1, 0.5], 2 above 0.5. All time, p50 would be under 0.1.
        let m1 = window(Group::Model("m1"));
        assert!(approx(m1.ttft_quantile(0.5), 0.5));
        assert!(approx(m1.ttft_quantile(0.25), 0.1 + 0.4 * 0.5));
        assert!(approx(m1.ttft_quantile(0.99), 0.5));
        // All: 4 in (0, 0.1], 2 in (0.1, 0.5], 2 above. Rank 4 is the end of the first bucket.
        let all = window(Group::All);
        assert!(approx(all.ttft_quantile(0.5), 0.1));
        assert!(approx(all.ttft_quantile(0.125), 0.025));
    }

    #[test]
    fn rows_and_in_flight() {
        let cur = Snapshot::parse(CUR).unwrap();
        assert_eq!(label_values(&cur, "model"), ["m1", "m2"]);
        assert_eq!(label_values(&cur, "dialect"), ["openai-chat", "sglang"]);
        assert_eq!(label_values(&cur, "upstream"), ["u"]);
        let u = Window::between(&Snapshot::parse(PREV).unwrap(), &cur, Group::Upstream("u"));
        assert_eq!(u, window(Group::All));
        assert_eq!(window(Group::Upstream("v")), Window::default());
        assert_eq!(in_flight(&cur), 4.0);
    }
}
