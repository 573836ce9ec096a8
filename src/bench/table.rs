//! The sweep table, one row per concurrency level, with notes on anything estimated.

use std::fmt::Write;

use super::report::LevelReport;

const HEADER: &str =
    "   C |  Agg tok/s |  Per-req tok/s |  TTFT(s) |   Tokens |  Wall(s) |   Ok | Fail";

/// How many distinct failure messages to show per level.
const ERRORS_SHOWN: usize = 3;

/// Render the sweep as a fixed-width table, followed by notes when figures need them.
pub fn render_table(levels: &[LevelReport]) -> String {
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');
    out.push_str(&rule());
    out.push('\n');
    for l in levels {
        let _ = writeln!(
            out,
            "{:>4} | {:>10.1} | {:>14.1} | {:>8.3} | {:>8} | {:>8.2} | {:>4} | {:>4}",
            l.concurrency,
            l.agg_tok_s(),
            l.per_req_tok_s(),
            l.mean_ttft(),
            l.total_tokens(),
            l.wall.as_secs_f64(),
            l.ok(),
            l.fail(),
        );
    }
    for note in notes(levels) {
        out.push_str(&note);
        out.push('\n');
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

fn notes(levels: &[LevelReport]) -> Vec<String> {
    let mut notes = Vec::new();
    let estimated: usize = levels.iter().map(LevelReport::estimated).sum();
    if estimated > 0 {
        notes.push(format!(
            "Note: the server reported no token counts for {estimated} request(s); their tokens \
             were estimated on the client (one per non-empty text chunk, or the returned token ids)."
        ));
    }
    if let Some(l) = levels.first() {
        if l.dialect.is_chat() {
            notes.push(
                "Note: chat input length is approximate: the prompt is that many words, one token \
                 each in lingo's mock; a real tokenizer and its chat template differ."
                    .to_string(),
            );
        } else if !l.dialect.takes_token_ids() {
            notes.push(
                "Note: input length is approximate: this dialect takes text, so the prompt is \
                 that many words, one token each in lingo's mock; a real tokenizer differs."
                    .to_string(),
            );
        }
        if !l.stream {
            notes.push("Note: not streamed, so TTFT equals end-to-end latency.".to_string());
        }
    }
    notes.push(
        "Tokens: output tokens of successful requests as the server counted them; Agg tok/s = \
         Tokens / Wall; Per-req tok/s = mean of tokens / E2E over successful requests."
            .to_string(),
    );
    for l in levels.iter().filter(|l| l.fail() > 0) {
        for (msg, n) in l.errors().into_iter().take(ERRORS_SHOWN) {
            notes.push(format!("C={}: {n} x {msg}", l.concurrency));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::RequestResult;
    use crate::dialect::Dialect;

    #[test]
    fn columns_line_up_with_the_header() {
        let r = RequestResult {
            ok: true,
            error: None,
            ttft: Some(Duration::from_millis(250)),
            e2e: Duration::from_secs(1),
            output_tokens: 100,
            prompt_tokens: 10,
            estimated: true,
            itl: Vec::new(),
        };
        let level = LevelReport {
            concurrency: 16,
            wall: Duration::from_secs(2),
            results: vec![r.clone(), r],
            dialect: Dialect::OpenaiChat,
            stream: true,
        };
        let t = render_table(&[level]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(
            lines[2],
            "  16 |      100.0 |          100.0 |    0.250 |      200 |     2.00 |    2 |    0"
        );
        let bars = |s: &str| s.match_indices('|').map(|(i, _)| i).collect::<Vec<_>>();
        assert_eq!(bars(lines[0]), bars(lines[2]));
        assert!(t.contains("estimated"));
        assert!(t.contains("chat input length is approximate"));
    }
}
