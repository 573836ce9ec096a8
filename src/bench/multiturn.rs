//! A multi-turn level: C workers each take the next conversation and send its turns strictly
//! in order (turn t + 1 leaves when turn t's answer ended, with that answer in its history),
//! so C conversations are in flight; with a ramp-up, worker k starts its first conversation
//! `k / C` of it after the level (as the closed loop does). A failed turn ends its conversation: the later turns
//! are not sent, and the report counts them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::closed::ramp_slot;
use super::conversation::{answer_text, Dialogues, History};
use super::level::Level;
use super::report::RequestResult;
use super::workload::Item;
use crate::model::Role;

/// Run the level's conversations with `concurrency` in flight; results ordered by
/// conversation, then turn.
pub async fn run(
    level: &Arc<Level>,
    concurrency: u32,
    dialogues: &Dialogues,
    ramp_up: Duration,
) -> anyhow::Result<Vec<RequestResult>> {
    let next = Arc::new(AtomicU32::new(0));
    let mut workers = JoinSet::new();
    let n = concurrency.min(dialogues.conversations);
    for k in 0..n {
        let (level, next, d) = (level.clone(), next.clone(), dialogues.clone());
        workers.spawn(async move {
            let mut done = Vec::new();
            let mut free = ramp_slot(&level, k, n, ramp_up).await;
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= d.conversations {
                    break;
                }
                done.extend(conversation(&level, &d, c, free).await);
                free = Instant::now();
            }
            done
        });
    }
    let mut results = Vec::new();
    while let Some(done) = workers.join_next().await {
        results.extend(done?);
    }
    results.sort_by_key(|r| (r.conversation, r.turn));
    Ok(results)
}

/// Conversation `c` of the level, turn by turn, until its last turn or its first failure.
async fn conversation(level: &Level, d: &Dialogues, c: u32, free: Instant) -> Vec<RequestResult> {
    let w = &level.workload;
    // Numbered across the run, so each level has conversations of its own.
    let global = level.seq_base + u64::from(c);
    let mut history = History::new(d.system.as_deref());
    let mut out = Vec::with_capacity(d.turns as usize);
    let mut free = free;
    for turn in 0..d.turns {
        let (text, input_len, output_len) = d.user(w, global, turn);
        history.push(Role::User, &text);
        let item = w
            .encode(history.prompt(w.shapes.text), output_len)
            .map(|body| Item {
                body,
                input_len,
                output_len,
                session: Some(format!("bench-{}-{global}", w.seed)),
            });
        let mut r = level.send(item, u64::from(c), None, free).await;
        free = Instant::now();
        r.conversation = Some(c);
        r.turn = Some(turn);
        let answer = r.answer.take().unwrap_or_default();
        let ok = r.ok;
        out.push(r);
        if !ok {
            break;
        }
        history.push(Role::Assistant, answer_text(&answer));
    }
    out
}
