//! Prompts and lengths from files: a ShareGPT-format JSON dataset, a JSONL of prompts, or
//! lingo's own request log (`lingo serve --request-log`) to replay.

use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

/// One dataset prompt; the output length is the reference answer's when the dataset has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub prompt: String,
    /// The reference answer (ShareGPT's first `gpt` turn after the prompt).
    pub reply: Option<String>,
    /// An explicit output length (`output_len` in a JSONL line).
    pub output_len: Option<u32>,
}

/// One line of a request log: when it arrived (Unix seconds) and its lengths.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Logged {
    pub time: f64,
    /// `null` in the log when unknown (an abandoned request): replayed as 0 (the shortest).
    #[serde(deserialize_with = "null_as_zero")]
    pub prompt_tokens: u64,
    #[serde(deserialize_with = "null_as_zero")]
    pub completion_tokens: u64,
    /// The client's session: its lines replay in order, with prompts sharing a prefix.
    #[serde(default)]
    pub session: Option<String>,
}

fn null_as_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Option::<u64>::deserialize(d).map(Option::unwrap_or_default)
}

#[derive(Deserialize)]
struct Conversation {
    conversations: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    from: String,
    value: String,
}

#[derive(Deserialize)]
struct PromptLine {
    prompt: String,
    output_len: Option<u32>,
}

/// Read a dataset: a JSON array of ShareGPT conversations, or JSONL of `{"prompt": ...}`.
/// Conversations without a human turn followed by a gpt turn are skipped, as vLLM does.
pub fn load(path: &Path) -> anyhow::Result<Vec<Sample>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the dataset {}", path.display()))?;
    let samples = if text.trim_start().starts_with('[') {
        let convs: Vec<Conversation> = serde_json::from_str(&text)
            .with_context(|| format!("{}: not ShareGPT JSON", path.display()))?;
        convs.into_iter().filter_map(first_exchange).collect()
    } else {
        lines(&text, path, |p: PromptLine| Sample {
            prompt: p.prompt,
            reply: None,
            output_len: p.output_len,
        })?
    };
    if samples.is_empty() {
        bail!("{}: no usable prompt in the dataset", path.display());
    }
    Ok(samples)
}

fn first_exchange(c: Conversation) -> Option<Sample> {
    let at = c
        .conversations
        .windows(2)
        .position(|w| is_human(&w[0].from) && w[1].from == "gpt" && !w[0].value.is_empty())?;
    let mut turns = c.conversations.into_iter().skip(at);
    let prompt = turns.next()?.value;
    let reply = turns.next()?.value;
    Some(Sample {
        prompt,
        reply: Some(reply),
        output_len: None,
    })
}

fn is_human(from: &str) -> bool {
    matches!(from, "human" | "user")
}

/// Read a request log to replay, in arrival order.
pub fn load_log(path: &Path) -> anyhow::Result<Vec<Logged>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the request log {}", path.display()))?;
    let mut lines = lines(&text, path, |l: Logged| l)?;
    if lines.is_empty() {
        bail!("{}: the request log is empty", path.display());
    }
    lines.sort_by(|a, b| a.time.total_cmp(&b.time));
    Ok(lines)
}

fn lines<T: for<'de> Deserialize<'de>, U>(
    text: &str,
    path: &Path,
    f: impl Fn(T) -> U,
) -> anyhow::Result<Vec<U>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<T>(l)
                .map(&f)
                .with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lingo-dataset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn sharegpt_takes_the_first_human_gpt_pair() {
        let p = write(
            "s.json",
            r#"[{"conversations":[{"from":"system","value":"s"},{"from":"human","value":"hi there"},
                {"from":"gpt","value":"hello you"}]},
               {"conversations":[{"from":"human","value":"alone"}]}]"#,
        );
        let s = load(&p).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].prompt, "hi there");
        assert_eq!(s[0].reply.as_deref(), Some("hello you"));
    }

    #[test]
    fn jsonl_prompts_and_logs() {
        let p = write(
            "p.jsonl",
            "{\"prompt\":\"a b\"}\n\n{\"prompt\":\"c\",\"output_len\":7}\n",
        );
        let s = load(&p).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].output_len, Some(7));
        let l = write(
            "l.jsonl",
            "{\"time\":5.5,\"prompt_tokens\":3,\"completion_tokens\":4,\"dialect\":\"x\"}\n\
             {\"time\":5.0,\"prompt_tokens\":1,\"completion_tokens\":2}\n\
             {\"time\":6.0,\"prompt_tokens\":null,\"completion_tokens\":null,\"partial\":true}\n",
        );
        let log = load_log(&l).unwrap();
        assert_eq!(log[0].time, 5.0);
        assert_eq!(log[1].prompt_tokens, 3);
        assert_eq!((log[2].prompt_tokens, log[2].completion_tokens), (0, 0));
        assert!(load_log(&write("bad.jsonl", "{}\n")).is_err());
    }
}
