//! What the bench sends: per request a prompt of the asked length (token ids where the
//! dialect takes them, else text sized by a tokenizer), greedy sampling, `ignore_eos`, and
//! the body encoded by the target dialect's own upstream encoder (the bench writes no wire
//! JSON). Every choice is a pure function of the seed and the request's sequence number.

use bytes::Bytes;
use serde_json::Value;

use super::dataset::{Logged, Sample};
use super::report::InputLengths;
use super::rng::Rng;
use super::tokens::Calibration;
use crate::dialect::openai::Flavor;
use crate::dialect::Dialect;
use crate::model::{Message, Prompt, Request, Role};

/// Token ids are drawn from this range: clear of the special and byte-fallback ids at the
/// bottom of common vocabularies and inside every vocabulary of 30k or more.
const ID_LOW: u32 = 1000;
const ID_HIGH: u32 = 30000;
/// Keys of replayed sessions' prompt generators: `SESSION_KEY + first line` (apart from
/// every request's own key, a sequence number).
const SESSION_KEY: u64 = 0x5E55_0000_0000_0000;

/// How text reaches the dialect: a raw prompt, or one user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextShape {
    Raw,
    Chat,
}

/// What the dialect's encoder accepts, found by asking it (so new dialects need no list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shapes {
    pub token_ids: bool,
    pub text: TextShape,
    /// The dialect carries `ignore_eos` (Ollama's does not: outputs may then end early).
    pub ignore_eos: bool,
}

impl Shapes {
    pub fn probe(dialect: Dialect, flavor: Flavor) -> Shapes {
        let accepts = |p: Prompt| dialect.encode_request_as(&Request::new(p), flavor).is_ok();
        let text = Prompt::Text(vec!["a".into()]);
        let chat = Prompt::Chat(vec![crate::model::Message {
            role: crate::model::Role::User,
            content: serde_json::Value::String("a".into()),
        }]);
        let mut eos = Request::new(if accepts(text.clone()) { text } else { chat });
        eos.sampling.ignore_eos = true;
        Shapes {
            ignore_eos: dialect.encode_request_as(&eos, flavor).is_ok(),
            token_ids: accepts(Prompt::Tokens(vec![vec![ID_LOW]])),
            text: if accepts(Prompt::Text(vec!["a".into()])) {
                TextShape::Raw
            } else {
                TextShape::Chat
            },
        }
    }
}

/// Lengths drawn per request: `len * [1 - range, 1 + range]`, uniform, at least 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub len: u32,
    pub range: f64,
}

impl Span {
    #[cfg(test)]
    pub fn fixed(len: u32) -> Span {
        Span { len, range: 0.0 }
    }

    fn bounds(self) -> (u32, u32) {
        let l = f64::from(self.len);
        let lo = (l * (1.0 - self.range)).floor().max(1.0) as u32;
        let hi = (l * (1.0 + self.range)).ceil().max(1.0) as u32;
        (lo, hi.max(lo))
    }

    pub fn draw(self, rng: &mut Rng) -> u32 {
        let (lo, hi) = self.bounds();
        rng.between(lo, hi)
    }
}

/// What each request of a run asks for.
#[derive(Debug, Clone)]
pub enum Items {
    /// Random prompts.
    Random { input: Span, output: Span },
    /// Lengths replayed from a request log, in order (the arrival times are the schedule's),
    /// with the links between the lines of one session, when any line names one.
    Replay(Vec<Logged>, Option<super::sessions::Links>),
    /// Dataset prompts, in the (seeded) order given, with their output lengths.
    Dataset(Vec<(Sample, u32)>),
    /// Multi-turn conversations (`item` gives single random prompts of the user-message
    /// lengths, for the warmup).
    Multiturn(super::conversation::Dialogues),
}

/// One prepared request.
#[derive(Debug, Clone)]
pub struct Item {
    pub body: Bytes,
    /// Asked-for input tokens (0 for dataset prompts, whose length the server reports).
    pub input_len: u32,
    pub output_len: u32,
    /// Sent as `x-session-id` (multi-turn: the conversation), so a lingo request log keeps
    /// the conversations for a replay.
    pub session: Option<String>,
}

/// The request-independent part of every request of a run.
#[derive(Debug, Clone)]
pub struct Workload {
    pub dialect: Dialect,
    /// Which OpenAI extensions the server takes (`Standard`: a plain OpenAI-compatible API).
    pub flavor: Flavor,
    pub model: Option<String>,
    pub stream: bool,
    pub seed: u64,
    pub shapes: Shapes,
    /// How text prompts are sized (unused when token ids go out).
    pub calibration: Calibration,
    pub items: std::sync::Arc<Items>,
}

impl Workload {
    /// How the prompts' lengths were made.
    pub fn input_lengths(&self) -> InputLengths {
        match &*self.items {
            Items::Dataset(_) => InputLengths::Dataset,
            // Histories are text, whatever the dialect takes.
            Items::Multiturn(_) => self.calibration.lengths,
            _ if self.shapes.token_ids => InputLengths::TokenIds,
            _ => self.calibration.lengths,
        }
    }

    /// Request `index` of its level, the `seq`-th request of the run (distinct sequence
    /// numbers give distinct prompts, so a prefix cache cannot serve one from another).
    pub fn item(&self, index: u64, seq: u64) -> anyhow::Result<Item> {
        let mut rng = Rng::new(self.seed, seq);
        let (prompt, input_len, output_len) = match &*self.items {
            Items::Random { input, output }
            | Items::Multiturn(super::conversation::Dialogues { input, output, .. }) => {
                let (i, o) = (input.draw(&mut rng), output.draw(&mut rng));
                (self.synthetic(i, &mut rng), i, o)
            }
            Items::Replay(log, links) => {
                let at = (index % log.len() as u64) as usize;
                let l = &log[at];
                let i = clamp_u32(l.prompt_tokens.max(1));
                let o = clamp_u32(l.completion_tokens.max(1));
                // A session's prompts come from one generator, started at its first line,
                // so each is a prefix or an extension of the one before.
                let root = links
                    .as_ref()
                    .and_then(|k| k.root.get(at).copied().flatten());
                if let Some(root) = root {
                    rng = Rng::new(self.seed, SESSION_KEY.wrapping_add(root as u64));
                }
                (self.synthetic(i, &mut rng), i, o)
            }
            Items::Dataset(samples) => {
                let (s, o) = &samples[(seq % samples.len() as u64) as usize];
                (self.text(s.prompt.clone()), 0, *o)
            }
        };
        Ok(Item {
            body: self.encode(prompt, output_len)?,
            input_len,
            output_len,
            session: None,
        })
    }

    /// The body of one request for `prompt`, asking for `output_len` tokens.
    pub fn encode(&self, prompt: Prompt, output_len: u32) -> anyhow::Result<Bytes> {
        let mut req = Request::new(prompt);
        req.model = self.model.clone();
        req.stream = self.stream;
        req.stream_usage = self.stream;
        req.sampling.max_tokens = Some(output_len);
        req.sampling.temperature = Some(0.0);
        req.sampling.ignore_eos = self.shapes.ignore_eos;
        req.sampling.n = 1;
        let body = self
            .dialect
            .encode_request_as(&req, self.flavor)
            .map_err(|e| anyhow::anyhow!("encoding a {} request: {e}", self.dialect.label()))?;
        Ok(Bytes::from(body))
    }

    fn synthetic(&self, tokens: u32, rng: &mut Rng) -> Prompt {
        if self.shapes.token_ids {
            let span = u64::from(ID_HIGH - ID_LOW);
            let ids = (0..tokens)
                .map(|_| ID_LOW + rng.below(span) as u32)
                .collect();
            return Prompt::Tokens(vec![ids]);
        }
        self.text(self.calibration.text(tokens, rng))
    }

    fn text(&self, text: String) -> Prompt {
        match self.shapes.text {
            TextShape::Raw => Prompt::Text(vec![text]),
            TextShape::Chat => Prompt::Chat(vec![Message {
                role: Role::User,
                content: Value::String(text),
            }]),
        }
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(dialect: Dialect, items: Items) -> Workload {
        Workload {
            dialect,
            flavor: Flavor::Vllm,
            model: Some("m".into()),
            stream: true,
            seed: 42,
            shapes: Shapes::probe(dialect, Flavor::Vllm),
            calibration: Calibration::approximate(),
            items: std::sync::Arc::new(items),
        }
    }

    fn random(input: Span, output: Span) -> Items {
        Items::Random { input, output }
    }

    fn decode(w: &Workload, index: u64, seq: u64) -> Request {
        let item = w.item(index, seq).unwrap();
        w.dialect.decode_request(&item.body).unwrap()
    }

    #[test]
    fn shapes_come_from_the_encoders() {
        assert!(Shapes::probe(Dialect::Sglang, Flavor::Vllm).token_ids);
        assert!(Shapes::probe(Dialect::OpenaiCompletions, Flavor::Vllm).token_ids);
        let chat = Shapes::probe(Dialect::OpenaiChat, Flavor::Vllm);
        assert!(!chat.token_ids);
        assert_eq!(chat.text, TextShape::Chat);
    }

    #[test]
    fn token_prompts_are_exact_deterministic_and_distinct() {
        let w = workload(Dialect::Sglang, random(Span::fixed(100), Span::fixed(7)));
        let a = decode(&w, 0, 1);
        let Prompt::Tokens(ids) = &a.prompt else {
            panic!("expected token ids")
        };
        assert_eq!(ids[0].len(), 100);
        assert!(ids[0].iter().all(|&i| (ID_LOW..ID_HIGH).contains(&i)));
        assert_eq!(a, decode(&w, 0, 1));
        assert_ne!(a.prompt, decode(&w, 0, 2).prompt);
        assert_eq!(a.sampling.max_tokens, Some(7));
        assert!(a.sampling.ignore_eos);
        assert_eq!(a.sampling.temperature, Some(0.0));
    }

    #[test]
    fn ranged_lengths_stay_in_bounds_and_vary() {
        let w = workload(
            Dialect::Sglang,
            random(
                Span {
                    len: 1000,
                    range: 0.1,
                },
                Span {
                    len: 10,
                    range: 0.5,
                },
            ),
        );
        let items: Vec<Item> = (0..200).map(|s| w.item(0, s).unwrap()).collect();
        assert!(items.iter().all(|i| (900..=1100).contains(&i.input_len)));
        assert!(items.iter().all(|i| (5..=15).contains(&i.output_len)));
        let distinct: std::collections::HashSet<u32> = items.iter().map(|i| i.input_len).collect();
        assert!(distinct.len() > 50);
        let r = w.dialect.decode_request(&items[3].body).unwrap();
        let Prompt::Tokens(ids) = &r.prompt else {
            panic!()
        };
        assert_eq!(ids[0].len() as u32, items[3].input_len);
    }

    #[test]
    fn chat_prompt_has_input_len_words() {
        let w = workload(
            Dialect::OpenaiChat,
            random(Span::fixed(100), Span::fixed(7)),
        );
        let Prompt::Chat(msgs) = &decode(&w, 0, 3).prompt else {
            panic!("expected chat")
        };
        let text = msgs[0].content.as_str().unwrap();
        assert_eq!(text.split(' ').count(), 100);
    }

    #[test]
    fn replay_takes_the_logged_lengths() {
        let log = vec![
            Logged {
                time: 1.0,
                prompt_tokens: 12,
                completion_tokens: 3,
                session: None,
            },
            Logged {
                time: 2.0,
                prompt_tokens: 40,
                completion_tokens: 0,
                session: None,
            },
        ];
        let w = workload(Dialect::OpenaiCompletions, Items::Replay(log, None));
        let (a, b) = (w.item(0, 9).unwrap(), w.item(1, 10).unwrap());
        assert_eq!((a.input_len, a.output_len), (12, 3));
        assert_eq!((b.input_len, b.output_len), (40, 1));
    }

    #[test]
    fn bodies_come_from_the_dialect_encoders() {
        // TGI takes neither token prompts nor ignore_eos: the bench cannot drive it exactly.
        for d in Dialect::ALL.into_iter().filter(|d| *d != Dialect::Tgi) {
            let w = workload(d, random(Span::fixed(100), Span::fixed(7)));
            let body = w.item(0, 5).unwrap().body;
            let v: Value = serde_json::from_slice(&body).unwrap();
            let back = d.decode_request(&body).unwrap();
            assert_eq!(back.sampling.max_tokens, Some(7), "{d:?}: {v}");
            assert_eq!(back.sampling.ignore_eos, w.shapes.ignore_eos, "{d:?}");
            assert!(back.stream, "{d:?}");
        }
    }
}
