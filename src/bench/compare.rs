//! Two runs side by side: per level and metric, A, B and the ratio B/A. Used by
//! `lingo bench compare a.json b.json` and by `--vs-url` (A and B levels of one run).

use std::fmt::Write;

use super::summary::Summary;

/// A compared figure: its name, unit scale and how to read it from a summary.
struct Metric {
    name: &'static str,
    /// Multiplier for display (1e3: seconds shown as milliseconds).
    scale: f64,
    get: fn(&Summary) -> Option<f64>,
}

const METRICS: &[Metric] = &[
    Metric {
        name: "req/s",
        scale: 1.0,
        get: |s| Some(s.request_throughput),
    },
    Metric {
        name: "output tok/s",
        scale: 1.0,
        get: |s| Some(s.agg_tok_s),
    },
    Metric {
        name: "total tok/s",
        scale: 1.0,
        get: |s| Some(s.total_tok_s),
    },
    Metric {
        name: "goodput req/s",
        scale: 1.0,
        get: |s| s.goodput,
    },
    Metric {
        name: "TTFT mean ms",
        scale: 1e3,
        get: |s| s.ttft.mean,
    },
    Metric {
        name: "TTFT p50 ms",
        scale: 1e3,
        get: |s| s.ttft_p50,
    },
    Metric {
        name: "TTFT p99 ms",
        scale: 1e3,
        get: |s| s.ttft_p99,
    },
    Metric {
        name: "TPOT mean ms",
        scale: 1e3,
        get: |s| s.tpot.mean,
    },
    Metric {
        name: "ITL p50 ms",
        scale: 1e3,
        get: |s| s.itl_p50,
    },
    Metric {
        name: "ITL p99 ms",
        scale: 1e3,
        get: |s| s.itl_p99,
    },
    Metric {
        name: "E2E p50 ms",
        scale: 1e3,
        get: |s| s.e2e_p50,
    },
    Metric {
        name: "E2E p99 ms",
        scale: 1e3,
        get: |s| s.e2e_p99,
    },
    Metric {
        name: "failed",
        scale: 1.0,
        get: |s| Some(s.fail as f64),
    },
];

/// Pair the levels of two runs by label and target, in A's order (levels only one run has
/// are listed as unmatched).
pub fn pair<'a>(
    a: &'a [Summary],
    b: &'a [Summary],
) -> (Vec<(&'a Summary, &'a Summary)>, Vec<String>) {
    let mut pairs = Vec::new();
    let mut unmatched = Vec::new();
    for x in a {
        match b.iter().find(|y| same(x, y)) {
            Some(y) => pairs.push((x, y)),
            None => unmatched.push(format!("{} (only in A)", x.label)),
        }
    }
    for y in b.iter().filter(|y| !a.iter().any(|x| same(x, y))) {
        unmatched.push(format!("{} (only in B)", y.label));
    }
    (pairs, unmatched)
}

fn same(x: &Summary, y: &Summary) -> bool {
    x.label == y.label && x.target == y.target
}

/// The side-by-side table.
pub fn render(pairs: &[(&Summary, &Summary)], a_name: &str, b_name: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A = {a_name}\nB = {b_name}\n");
    let _ = writeln!(
        out,
        "{:>9} | {:<14} | {:>12} | {:>12} | {:>7}",
        "Level", "Metric", "A", "B", "B/A"
    );
    let _ = writeln!(out, "{}", "-".repeat(66));
    for (a, b) in pairs {
        for (i, m) in METRICS.iter().enumerate() {
            let (va, vb) = ((m.get)(a), (m.get)(b));
            if va.is_none() && vb.is_none() {
                continue;
            }
            let show =
                |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{:.2}", v * m.scale));
            let level = if i == 0 { a.label.as_str() } else { "" };
            let _ = writeln!(
                out,
                "{:>9} | {:<14} | {:>12} | {:>12} | {:>7}",
                level,
                m.name,
                show(va),
                show(vb),
                ratio(va, vb)
            );
        }
    }
    out
}

/// `b / a` to three decimals; `-` where undefined.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a != 0.0 => format!("{:.3}", b / a),
        (Some(a), Some(b)) if a == 0.0 && b == 0.0 => "1.000".into(),
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios() {
        assert_eq!(ratio(Some(2.0), Some(3.0)), "1.500");
        assert_eq!(ratio(Some(0.0), Some(0.0)), "1.000");
        assert_eq!(ratio(Some(0.0), Some(1.0)), "-");
        assert_eq!(ratio(None, Some(1.0)), "-");
    }
}
