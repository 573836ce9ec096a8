//! The sweep table (one row per level) with its notes, and the `--detail` percentile table.

use std::fmt::Write;

use super::config::{Load, Slo};
use super::report::{InputLengths, LevelReport};
use super::summary::Summary;

const HEADER: &str =
    "     Level |  Agg tok/s |  Per-req tok/s |  TTFT(s) |   Tokens |  Wall(s) |   Ok | Fail";

/// How many distinct failure messages to show per level.
const ERRORS_SHOWN: usize = 3;

/// Render levels with the default percentiles and no SLO (as `lingo demo` does).
pub fn render_table(levels: &[LevelReport]) -> String {
    let summaries: Vec<Summary> = levels
        .iter()
        .map(|l| Summary::of(l, &[50.0, 90.0, 99.0], &Slo::default()))
        .collect();
    render(
        &summaries,
        levels.first().is_some_and(|l| l.dialect.is_chat()),
    )
}

/// The level's name in tables: its label, prefixed by the target when two are compared.
pub fn level_name(s: &Summary, two_targets: bool) -> String {
    match two_targets {
        true => format!("{} {}", s.target, s.label),
        false => s.label.clone(),
    }
}

/// The fixed-width table followed by its notes; `chat` adds the chat-template note.
pub fn render(summaries: &[Summary], chat: bool) -> String {
    let two = summaries.iter().any(|s| s.target != "A");
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');
    out.push_str(&rule());
    out.push('\n');
    for s in summaries {
        let _ = writeln!(
            out,
            "{:>10} | {:>10.1} | {:>14.1} | {:>8.3} | {:>8} | {:>8.2} | {:>4} | {:>4}",
            level_name(s, two),
            s.agg_tok_s,
            s.per_req_tok_s,
            s.ttft_mean,
            s.tokens,
            s.wall_s,
            s.ok,
            s.fail,
        );
    }
    for note in notes(summaries, chat, two) {
        out.push_str(&note);
        out.push('\n');
    }
    for s in summaries {
        if let Some(d) = &s.multiturn {
            out.push_str(&super::turns::render(&level_name(s, two), d));
        }
    }
    out
}

/// The header's column separators, drawn as a rule.
fn rule() -> String {
    HEADER
        .chars()
        .map(|c| if c == '|' { '+' } else { '-' })
        .collect()
}

fn notes(summaries: &[Summary], chat: bool, two: bool) -> Vec<String> {
    let mut notes = Vec::new();
    let estimated: usize = summaries.iter().map(|s| s.estimated).sum();
    if estimated > 0 {
        notes.push(format!(
            "Note: the server reported no token counts for {estimated} request(s); their tokens \
             were estimated on the client (one per non-empty text chunk, or the returned token ids)."
        ));
    }
    if let Some(s) = summaries.first() {
        if let Some(n) = input_note(s.input_lengths, chat) {
            notes.push(n);
        }
        if !s.stream {
            notes.push("Note: not streamed, so TTFT equals end-to-end latency.".to_string());
        }
        if s.load.is_open() {
            notes.push(
                "Note: open-loop latencies run from each request's scheduled arrival time, so \
                 waiting for a free slot or a late send counts."
                    .to_string(),
            );
        }
    }
    notes.push(
        "Tokens: output tokens of successful requests as the server counted them; Agg tok/s = \
         Tokens / Wall; Per-req tok/s = mean of tokens / E2E over successful requests."
            .to_string(),
    );
    for s in summaries {
        let name = level_name(s, two);
        notes.push(self_check_line(&name, s));
        if let (Some(good), Some(goodput)) = (s.good, s.goodput) {
            notes.push(format!(
                "Goodput {name}: {good} of {} requests met the SLOs, {goodput:.2} req/s",
                s.total
            ));
        }
        if let Some(v) = &s.server {
            let ms =
                |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{:.1} ms", x * 1e3));
            notes.push(format!(
                "Server {name} ({}metrics): mean TTFT {} (client {}), tokens {} (client {})",
                v.prefix,
                ms(v.ttft_mean),
                ms(s.ttft.mean),
                v.generation_tokens,
                s.tokens
            ));
        }
        if !s.failures.is_empty() {
            let kinds: Vec<String> = s.failures.iter().map(|(k, n)| format!("{k} {n}")).collect();
            notes.push(format!("Failures {name}: {}", kinds.join(", ")));
        }
        for e in s.errors.iter().take(ERRORS_SHOWN) {
            notes.push(format!("{name}: {} x {}", e.count, e.error));
        }
    }
    notes
}

fn input_note(input: InputLengths, chat: bool) -> Option<String> {
    let template = match chat {
        true => " The server adds its chat template's tokens.",
        false => "",
    };
    let text = match input {
        InputLengths::TokenIds => return None,
        InputLengths::ServerTokenizer => {
            format!("Note: input lengths are exact by the server's own /tokenize.{template}")
        }
        InputLengths::LocalTokenizer => {
            format!("Note: input lengths are exact by the --tokenizer file.{template}")
        }
        InputLengths::Approximate => format!(
            "Note: input lengths are approximate: a prompt is that many common words, one token \
             each in lingo's mock; the server has no /tokenize and no --tokenizer was given.{template}"
        ),
        InputLengths::Dataset => "Note: prompts are the dataset's, as written.".to_string(),
    };
    Some(text)
}

fn self_check_line(name: &str, s: &Summary) -> String {
    let c = &s.self_check;
    let ms = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{:.2}", x * 1e3));
    let mut line = format!("Driver {name}: ");
    if let Load::Rate { .. } | Load::Replay { .. } = s.load {
        let rate = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:.2}/s"));
        let _ = write!(
            line,
            "sent {} (schedule {}, target {}); ",
            rate(c.achieved_rate),
            rate(c.scheduled_rate),
            c.target_rate.map_or_else(|| "log".into(), |r| r.label()),
        );
    }
    let _ = write!(
        line,
        "send lag p50 {} p99 {} max {} ms; in flight {:.1}",
        ms(c.send_lag_p50),
        ms(c.send_lag_p99),
        ms(c.send_lag_max),
        c.mean_in_flight
    );
    if c.read_lag_p50.is_some() {
        let _ = write!(
            line,
            "; read lag p50 {} p99 {} ms",
            ms(c.read_lag_p50),
            ms(c.read_lag_p99)
        );
    }
    if let Some(share) = c.driver_share {
        let _ = write!(line, "; driver's share {:.1}%", share * 100.0);
    }
    if let Some(cpu) = c.cpu {
        let _ = write!(
            line,
            "; CPU {:.0}% of 1 core ({} cores)",
            cpu * 100.0,
            c.cores
        );
    }
    match c.driver_bound {
        true => {
            let _ = write!(
                line,
                " -- DRIVER-BOUND (the driver, not the server, set the pace: the figures \
                 understate the server): {}",
                c.reasons.join("; ")
            );
        }
        false => line.push_str(" -- kept up (the server set the pace)"),
    }
    line
}

/// Mean and percentiles of TTFT, TPOT, ITL and E2E per level (ms), and the throughputs.
pub fn render_detail(summaries: &[Summary], percentiles: &[f64]) -> String {
    let two = summaries.iter().any(|s| s.target != "A");
    let mut out = format!("\n{:>10} | {:<6} | {:>9}", "Level", "Metric", "mean");
    for p in percentiles {
        let _ = write!(out, " | {:>9}", format!("p{p}"));
    }
    out.push_str("   (ms)\n");
    for s in summaries {
        let name = level_name(s, two);
        for (i, (m, d)) in [
            ("TTFT", &s.ttft),
            ("TPOT", &s.tpot),
            ("ITL", &s.itl),
            ("E2E", &s.e2e),
        ]
        .into_iter()
        .enumerate()
        {
            let ms = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{:.2}", x * 1e3));
            let level = if i == 0 { name.as_str() } else { "" };
            let _ = write!(out, "{level:>10} | {m:<6} | {:>9}", ms(d.mean));
            for p in percentiles {
                let _ = write!(out, " | {:>9}", ms(d.p(*p)));
            }
            out.push('\n');
        }
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{:>10} | {:>10} | {:>12} | {:>12} | {:>13}",
        "Level", "Req/s", "Out tok/s", "Total tok/s", "Goodput req/s"
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "{:>10} | {:>10.2} | {:>12.1} | {:>12.1} | {:>13}",
            level_name(s, two),
            s.request_throughput,
            s.agg_tok_s,
            s.total_tok_s,
            s.goodput.map_or_else(|| "-".into(), |g| format!("{g:.2}")),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::report::tests::{level, ok};

    #[test]
    fn columns_line_up_with_the_header() {
        let mut r = ok(100, 250, 1000);
        r.estimated = true;
        let mut l = level(vec![r.clone(), r]);
        l.load = Load::Concurrency { concurrency: 16 };
        l.wall = Duration::from_secs(2);
        l.input = InputLengths::Approximate;
        let t = render_table(&[l]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(
            lines[2],
            "      c=16 |      100.0 |          100.0 |    0.250 |      200 |     2.00 |    2 |    0"
        );
        let bars = |s: &str| s.match_indices('|').map(|(i, _)| i).collect::<Vec<_>>();
        assert_eq!(bars(lines[0]), bars(lines[2]));
        assert!(t.contains("estimated"));
        assert!(t.contains("input lengths are approximate"));
        assert!(t.contains("Driver c=16: send lag"), "{t}");
    }
}
