//! Prompts as the mock's tokenizer sees them: token ids, the text they came from, and a hash.
//!
//! Chat template: every message costs 3 template tokens (`<|im_start|>`, its role, `<|im_end|>`)
//! plus the words of its text content, so a chat prompt counts `sum(words) + 3 * messages`.
//! The prompt hash covers the token ids only, so a text prompt and the same prompt sent as the
//! ids `/tokenize` returned generate identical output.

use super::vocab::{self, mix, IM_END_ID, IM_START_ID};

/// One prompt of a request.
#[derive(Debug, Clone)]
pub(crate) struct Prompt {
    pub ids: Vec<u32>,
    /// The prompt text when it came as text (for `echo`); token prompts decode on demand.
    pub text: Option<String>,
    pub hash: u64,
}

/// One chat message reduced to what the template uses.
pub(crate) struct ChatTurn<'a> {
    pub role: &'a str,
    /// The text parts of the content, in order.
    pub texts: Vec<&'a str>,
}

impl Prompt {
    pub fn from_text(text: String) -> Prompt {
        Prompt::build(vocab::encode(&text).collect(), Some(text))
    }

    pub fn from_ids(ids: Vec<u32>) -> Prompt {
        Prompt::build(ids, None)
    }

    pub fn from_chat(turns: &[ChatTurn<'_>]) -> Prompt {
        let mut ids = Vec::new();
        for turn in turns {
            ids.push(IM_START_ID);
            ids.push(role_id(turn.role));
            for text in &turn.texts {
                ids.extend(vocab::encode(text));
            }
            ids.push(IM_END_ID);
        }
        Prompt::build(ids, None)
    }

    fn build(ids: Vec<u32>, text: Option<String>) -> Prompt {
        let hash = ids
            .iter()
            .fold(0x6c69_6e67_6f00_0000, |h, id| mix(h, u64::from(*id)));
        Prompt { ids, text, hash }
    }

    pub fn len(&self) -> u32 {
        u32::try_from(self.ids.len()).unwrap_or(u32::MAX)
    }

    /// The prompt as text: as sent, or decoded from its ids.
    pub fn echo_text(&self) -> String {
        match &self.text {
            Some(text) => text.clone(),
            None => self.ids.iter().map(|id| vocab::decode(*id)).collect(),
        }
    }
}

/// Role token ids sit among the special ids (below `FIRST_WORD_ID`), so they decode to nothing.
fn role_id(role: &str) -> u32 {
    match role {
        "system" | "developer" => 5,
        "user" => 6,
        "assistant" => 7,
        "tool" => 8,
        _ => 9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_words_and_template_tokens() {
        assert_eq!(Prompt::from_text("a b  c\n".into()).len(), 3);
        assert_eq!(Prompt::from_text(String::new()).len(), 0);
        let turns = [
            ChatTurn {
                role: "system",
                texts: vec!["be brief"],
            },
            ChatTurn {
                role: "user",
                texts: vec!["hello there", "friend"],
            },
        ];
        assert_eq!(Prompt::from_chat(&turns).len(), 2 + 3 + 3 + 3);
    }

    #[test]
    fn text_and_ids_hash_alike() {
        let text = Prompt::from_text("the red fox".into());
        let ids = Prompt::from_ids(text.ids.clone());
        assert_eq!(text.hash, ids.hash);
        assert_eq!(ids.echo_text(), " the red fox");
    }
}
