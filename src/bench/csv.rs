//! `--csv`: one row per level, the summary's scalar figures (times in seconds).

use std::fmt::Write;

use super::summary::Summary;

/// The CSV text: a header, then one row per level.
pub fn render(summaries: &[Summary], percentiles: &[f64]) -> String {
    let mut header: Vec<String> = [
        "level",
        "target",
        "url",
        "total",
        "ok",
        "fail",
        "wall_s",
        "request_throughput",
        "output_tok_s",
        "total_tok_s",
        "per_req_tok_s",
        "goodput",
        "tokens",
        "prompt_tokens",
        "estimated",
    ]
    .map(String::from)
    .to_vec();
    for m in ["ttft", "tpot", "itl", "e2e"] {
        header.push(format!("{m}_mean"));
        header.extend(percentiles.iter().map(|p| format!("{m}_p{p}")));
    }
    header.extend(
        [
            "achieved_rate",
            "send_lag_p99",
            "driver_cpu",
            "driver_bound",
            "server_ttft_mean",
            "server_tokens",
        ]
        .map(String::from),
    );
    // Multi-turn runs add per-turn columns after the others (none for other workloads).
    let turns = summaries
        .iter()
        .filter_map(|s| s.multiturn.as_ref().map(|d| d.turns_per_conversation))
        .max()
        .unwrap_or(0);
    header.extend(super::turns::csv_header(turns));
    let mut out = header.join(",");
    out.push('\n');
    let num = |v: Option<f64>| v.map_or_else(String::new, |v| v.to_string());
    for s in summaries {
        let mut row = vec![
            s.label.clone(),
            s.target.clone(),
            quote(&s.url),
            s.total.to_string(),
            s.ok.to_string(),
            s.fail.to_string(),
            s.wall_s.to_string(),
            s.request_throughput.to_string(),
            s.agg_tok_s.to_string(),
            s.total_tok_s.to_string(),
            s.per_req_tok_s.to_string(),
            num(s.goodput),
            s.tokens.to_string(),
            s.prompt_tokens.to_string(),
            s.estimated.to_string(),
        ];
        for d in [&s.ttft, &s.tpot, &s.itl, &s.e2e] {
            row.push(num(d.mean));
            row.extend(percentiles.iter().map(|p| num(d.p(*p))));
        }
        let c = &s.self_check;
        row.extend([
            num(c.achieved_rate),
            num(c.send_lag_p99),
            num(c.cpu),
            c.driver_bound.to_string(),
            num(s.server.as_ref().and_then(|v| v.ttft_mean)),
            num(s.server.as_ref().map(|v| v.generation_tokens)),
        ]);
        row.extend(super::turns::csv_row(s.multiturn.as_ref(), turns));
        let _ = writeln!(out, "{}", row.join(","));
    }
    out
}

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
