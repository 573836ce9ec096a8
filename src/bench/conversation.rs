//! Multi-turn conversations: what each turn sends. A turn's prompt is the whole history so
//! far (an optional system prompt shared by every conversation, then user 1, the server's
//! answer 1, user 2, ...) plus a new user message. Chat dialects get the messages; text
//! dialects the history flattened in one fixed readable format, so every turn's prompt starts
//! with the previous turn's prompt and answer, as a prefix cache sees it.
//!
//! User messages and output lengths are a pure function of the seed, the conversation's
//! number and the turn; only the answers come from the server.

use serde_json::Value;

use super::rng::Rng;
use super::workload::{Span, TextShape, Workload};
use crate::model::{Message, Prompt, Role};

/// Key of the shared system prompt's generator (distinct from every request's).
const SYSTEM_KEY: u64 = 0x5157_E300_0000_0001;
/// Keys of user messages: `TURN_KEY + conversation * 2^20 + turn` (turns are far fewer).
const TURN_KEY: u64 = 0x7A1C_0000_0000_0000;
/// Longest answer kept in a history, in bytes; a longer one is cut at a character boundary
/// (answers are `output_len` tokens, so this only bounds a misbehaving server).
pub const MAX_ANSWER: usize = 1 << 20;

/// The shape of a multi-turn level, and the lengths of its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Dialogues {
    pub conversations: u32,
    pub turns: u32,
    /// User-message lengths.
    pub input: Span,
    /// Answer lengths asked for.
    pub output: Span,
    /// The shared system prompt, when one was asked for.
    pub system: Option<String>,
}

impl Dialogues {
    /// A shared system prompt of `tokens` tokens (none for 0), from the run's seed.
    pub fn system_prompt(w: &Workload, tokens: u32) -> Option<String> {
        let mut rng = Rng::new(w.seed, SYSTEM_KEY);
        (tokens > 0).then(|| w.calibration.text(tokens, &mut rng))
    }

    /// User message `turn` of conversation `conversation` (numbered across the run), and the
    /// output length its answer is asked for.
    pub fn user(&self, w: &Workload, conversation: u64, turn: u32) -> (String, u32, u32) {
        let key = TURN_KEY
            .wrapping_add(conversation.wrapping_mul(1 << 20))
            .wrapping_add(u64::from(turn));
        let mut rng = Rng::new(w.seed, key);
        let (i, o) = (self.input.draw(&mut rng), self.output.draw(&mut rng));
        (w.calibration.text(i, &mut rng), i, o)
    }
}

/// One conversation's messages so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub messages: Vec<Message>,
}

impl History {
    pub fn new(system: Option<&str>) -> History {
        History {
            messages: system
                .map(|s| message(Role::System, s))
                .into_iter()
                .collect(),
        }
    }

    pub fn push(&mut self, role: Role, text: &str) {
        self.messages.push(message(role, text));
    }

    /// The prompt of the next turn, its new user message being the last one pushed.
    pub fn prompt(&self, shape: TextShape) -> Prompt {
        match shape {
            TextShape::Chat => Prompt::Chat(self.messages.clone()),
            TextShape::Raw => Prompt::Text(vec![flatten(&self.messages)]),
        }
    }
}

fn message(role: Role, text: &str) -> Message {
    Message {
        role,
        content: Value::String(text.to_string()),
    }
}

/// An answer as it enters the history: trimmed (the flattened format adds its own spaces)
/// and at most `MAX_ANSWER` bytes.
pub fn answer_text(answer: &str) -> &str {
    let t = answer.trim();
    let mut end = t.len().min(MAX_ANSWER);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    &t[..end]
}

/// The history as one text: `System: ...`, `User: ...`, `Assistant: ...` blocks separated
/// by a blank line, ending with an open `Assistant:` for the answer. The history with one
/// more answer and user message flattens to this text plus ` answer\n\nUser: ...`, so each
/// turn's prompt extends the last one's.
pub fn flatten(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let text = match &m.content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(role_name(m.role));
        out.push_str(": ");
        out.push_str(&text);
        out.push_str("\n\n");
    }
    out.push_str("Assistant:");
    out
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "System",
        Role::User => "User",
        Role::Assistant => "Assistant",
        Role::Tool => "Tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattening_is_fixed_and_readable() {
        let mut h = History::new(Some("be brief"));
        h.push(Role::User, "hi");
        assert_eq!(
            flatten(&h.messages),
            "System: be brief\n\nUser: hi\n\nAssistant:"
        );
        let mut h = History::default();
        h.push(Role::User, "a b");
        assert_eq!(flatten(&h.messages), "User: a b\n\nAssistant:");
    }

    #[test]
    fn each_flattened_turn_extends_the_last() {
        let mut h = History::new(Some("sys"));
        h.push(Role::User, "one");
        let first = flatten(&h.messages);
        h.push(Role::Assistant, answer_text("  reply one \n"));
        h.push(Role::User, "two");
        let second = flatten(&h.messages);
        assert_eq!(
            second,
            format!("{first} reply one\n\nUser: two\n\nAssistant:")
        );
        assert!(second.starts_with(&first));
    }

    #[test]
    fn chat_prompts_keep_roles_in_order() {
        let mut h = History::new(None);
        h.push(Role::User, "u1");
        h.push(Role::Assistant, "a1");
        h.push(Role::User, "u2");
        let Prompt::Chat(m) = h.prompt(TextShape::Chat) else {
            panic!("expected chat")
        };
        let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
    }

    #[test]
    fn long_answers_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ANSWER);
        let cut = answer_text(&long);
        assert!(cut.len() <= MAX_ANSWER);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
