//! Per-turn figures of a multi-turn level: for each turn index, requests sent, ok, TTFT p50
//! and p99, and the mean prompt the server counted (which grows with the history), plus the
//! conversations a failure ended early and the turns they left unsent.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::report::LevelReport;
use super::stats::{mean_opt, quantile_sorted};

/// One turn index over all conversations of a level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    /// From 1.
    pub turn: u32,
    /// Requests sent at this turn (conversations still going).
    pub requests: usize,
    pub ok: usize,
    /// Conversations that ended before reaching this turn.
    pub not_sent: usize,
    pub ttft_p50: Option<f64>,
    pub ttft_p99: Option<f64>,
    /// Mean prompt tokens of the successful requests, as the server counted them.
    pub prompt_tokens_mean: Option<f64>,
}

/// A multi-turn level's conversations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dialogue {
    pub conversations: u32,
    pub turns_per_conversation: u32,
    /// Conversations a failed turn ended before their last turn.
    pub ended_early: usize,
    /// Turns not sent because their conversation had ended.
    pub not_sent: usize,
    pub turns: Vec<TurnSummary>,
}

impl Dialogue {
    /// Of a multi-turn level; `None` for any other.
    pub fn of(l: &LevelReport) -> Option<Dialogue> {
        let (conversations, turns) = l.dialogues?;
        let per_turn: Vec<TurnSummary> = (0..turns)
            .map(|t| turn(l, t, conversations as usize))
            .collect();
        let ended_early = l
            .results
            .iter()
            .filter(|r| !r.ok && r.turn.is_some_and(|t| t + 1 < turns))
            .count();
        Some(Dialogue {
            conversations,
            turns_per_conversation: turns,
            ended_early,
            not_sent: per_turn.iter().map(|t| t.not_sent).sum(),
            turns: per_turn,
        })
    }
}

fn turn(l: &LevelReport, t: u32, conversations: usize) -> TurnSummary {
    let sent: Vec<_> = l.results.iter().filter(|r| r.turn == Some(t)).collect();
    let oks: Vec<_> = sent.iter().filter(|r| r.ok).collect();
    let mut ttft: Vec<f64> = oks
        .iter()
        .filter_map(|r| r.ttft)
        .map(|d| d.as_secs_f64())
        .collect();
    ttft.sort_by(f64::total_cmp);
    TurnSummary {
        turn: t + 1,
        requests: sent.len(),
        ok: oks.len(),
        not_sent: conversations.saturating_sub(sent.len()),
        ttft_p50: quantile_sorted(&ttft, 0.5),
        ttft_p99: quantile_sorted(&ttft, 0.99),
        prompt_tokens_mean: mean_opt(oks.iter().map(|r| r.prompt_tokens as f64)),
    }
}

/// The per-turn table of one level, headed by its name.
pub fn render(name: &str, d: &Dialogue) -> String {
    let ms = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{:.2}", x * 1e3));
    let mut out = format!(
        "\n{name}: {} conversations x {} turns\n{:>6} | {:>8} | {:>6} | {:>8} | {:>13} | {:>13} | {:>14}\n",
        d.conversations,
        d.turns_per_conversation,
        "Turn",
        "Requests",
        "Ok",
        "Not sent",
        "TTFT p50 (ms)",
        "TTFT p99 (ms)",
        "Prompt tok avg"
    );
    for t in &d.turns {
        let _ = writeln!(
            out,
            "{:>6} | {:>8} | {:>6} | {:>8} | {:>13} | {:>13} | {:>14}",
            t.turn,
            t.requests,
            t.ok,
            t.not_sent,
            ms(t.ttft_p50),
            ms(t.ttft_p99),
            t.prompt_tokens_mean
                .map_or_else(|| "-".into(), |m| format!("{m:.1}")),
        );
    }
    if d.ended_early > 0 {
        let _ = writeln!(
            out,
            "Note {name}: {} conversation(s) ended at a failed turn; their {} later turn(s) were \
             not sent.",
            d.ended_early, d.not_sent
        );
    }
    out
}

/// CSV header cells of `turns` turns: `turn1_requests`, `turn1_ok`, ... per turn.
pub fn csv_header(turns: u32) -> Vec<String> {
    (1..=turns)
        .flat_map(|t| {
            [
                "requests",
                "ok",
                "not_sent",
                "ttft_p50",
                "ttft_p99",
                "prompt_tokens_mean",
            ]
            .map(|m| format!("turn{t}_{m}"))
        })
        .collect()
}

/// CSV cells of one level, `turns` turns wide (blank past the level's own).
pub fn csv_row(d: Option<&Dialogue>, turns: u32) -> Vec<String> {
    let num = |v: Option<f64>| v.map_or_else(String::new, |v| v.to_string());
    (0..turns as usize)
        .flat_map(|i| match d.and_then(|d| d.turns.get(i)) {
            Some(t) => [
                t.requests.to_string(),
                t.ok.to_string(),
                t.not_sent.to_string(),
                num(t.ttft_p50),
                num(t.ttft_p99),
                num(t.prompt_tokens_mean),
            ],
            None => Default::default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::report::tests::{level, ok};

    #[test]
    fn counts_per_turn_and_unsent_turns() {
        let at = |c: u32, t: u32, good: bool| {
            let mut r = ok(4, 10 * (u64::from(t) + 1), 50);
            r.ok = good;
            r.prompt_tokens = 100 * (u64::from(t) + 1);
            (r.conversation, r.turn) = (Some(c), Some(t));
            r
        };
        // Two conversations of three turns; the second fails at turn 2.
        let mut l = level(vec![
            at(0, 0, true),
            at(0, 1, true),
            at(0, 2, true),
            at(1, 0, true),
            at(1, 1, false),
        ]);
        l.dialogues = Some((2, 3));
        let d = Dialogue::of(&l).unwrap();
        let counts: Vec<(usize, usize, usize)> = d
            .turns
            .iter()
            .map(|t| (t.requests, t.ok, t.not_sent))
            .collect();
        assert_eq!(counts, [(2, 2, 0), (2, 1, 0), (1, 1, 1)]);
        assert_eq!((d.ended_early, d.not_sent), (1, 1));
        assert_eq!(d.turns[2].prompt_tokens_mean, Some(300.0));
        assert_eq!(
            d.turns[0].ttft_p50,
            Some(Duration::from_millis(10).as_secs_f64())
        );
        let table = render("c=2", &d);
        assert!(table.contains("1 conversation(s) ended"), "{table}");
        assert_eq!(csv_header(3).len(), csv_row(Some(&d), 3).len());
        assert!(Dialogue::of(&level(Vec::new())).is_none());
    }
}
