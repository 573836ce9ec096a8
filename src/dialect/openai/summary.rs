//! A fast reader for whole OpenAI completions and chat responses that gives a passthrough's
//! metrics exactly what serde's `decode_response` would (`Counts`), or nothing. serde's
//! reader builds the whole `Response` (every string copied, logprobs taken apart) for three
//! numbers: in a profile of a non-streaming passthrough, a tenth of lingo's instructions.
//! This walks the body once, checking what serde would check and keeping only the counts.
//! `completion` reads a whole completions `Response` the same way, for translation (where
//! serde's reader was an eighth of a translated request's instructions); a choice with
//! logprobs is left to serde.
//!
//! It answers only when serde would read the body without error: a field given twice, an
//! escaped key, an integer with a sign, a number with an exponent in a `Value`, a surrogate
//! escape that is not a whole pair, anything that is not well-formed JSON, and the caller
//! reads the body with serde instead (which then gives its own answer or error).

use super::cursor::{Cursor, Seen, Sure};
use super::finish_from_wire;
use super::scan;
use crate::dialect::Counts;
use crate::model::{Choice, Response, Usage};

/// What one choice adds: its finish label and, with both token id lists, their lengths.
struct ChoiceCounts {
    finish: Option<&'static str>,
    ids: Option<(u64, u64)>,
}

/// For the fuzzers: what the fast readers give for a whole answer, when they give anything,
/// is what serde's path gives (decoded whole, then counted).
pub(crate) fn agrees_with_serde(text: &str) {
    for chat in [false, true] {
        if let Some(fast) = counts(text, chat) {
            let serde = counts_by_serde(text, chat);
            assert_eq!(Some(fast), serde, "counted fast otherwise: {text}");
        }
    }
    if let Some(fast) = completion(text) {
        let serde = super::completions::decode_by_serde(text.as_bytes()).ok();
        assert_eq!(
            Some(fast),
            serde,
            "a completion read fast otherwise than serde: {text}"
        );
    }
}

/// What serde's path gives: the response decoded whole, then counted. What `counts` must
/// agree with.
fn counts_by_serde(text: &str, chat: bool) -> Option<Counts> {
    let resp = match chat {
        false => super::completions::decode_by_serde(text.as_bytes()),
        true => super::chat::decode_response(text.as_bytes()),
    };
    resp.ok().map(Counts::of)
}

/// `Counts` of a completions (`chat: false`) or chat response, as serde would give them.
pub(crate) fn counts(text: &str, chat: bool) -> Sure<Counts> {
    let mut c = Cursor::new(text);
    let mut seen = Seen::default();
    let mut usage = None;
    // The first choice's finish, and what the choices' token ids add up to.
    let (mut finish, mut ids) = (None, (0u64, 0u64));
    c.object(|c, key| match key {
        "id" => seen.first(0).and_then(|()| c.check_string()),
        "model" => seen.first(1).and_then(|()| c.check_string()),
        "choices" => {
            seen.first(2)?;
            let mut first = true;
            // Folded as they come: no list to allocate (a list of `()` allocates nothing).
            c.array(|c| {
                let ch = choice(c, chat)?;
                if std::mem::take(&mut first) {
                    finish = ch.finish;
                }
                if let Some((p, t)) = ch.ids {
                    ids = (ids.0.saturating_add(p), ids.1.saturating_add(t));
                }
                Some(())
            })?;
            Some(())
        }
        "usage" => {
            seen.first(3)?;
            usage = c
                .nullable(scan::usage)?
                .map(|u| (u.prompt_tokens, u.completion_tokens));
            Some(())
        }
        _ => c.skip_value(0),
    })?;
    c.end()?;
    // `choices` has no default: without it serde refuses the response.
    if !seen.has(2) {
        return None;
    }
    // The response's own usage, else what its choices' token ids add up to
    // (`Response::fill_usage`, one prompt per choice).
    let (prompt_tokens, completion_tokens) = usage.unwrap_or(ids);
    Some(Counts {
        prompt_tokens,
        completion_tokens,
        finish,
    })
}

/// One completions choice (`text`, `prompt_token_ids`) or chat choice (`message`).
fn choice(c: &mut Cursor<'_>, chat: bool) -> Sure<ChoiceCounts> {
    let mut seen = Seen::default();
    let (mut finish, mut ids, mut prompt_ids) = (None, None, None);
    c.object(|c, key| match key {
        "index" => seen.first(0).and_then(|()| c.u32()).map(drop),
        "text" if !chat => seen.first(1).and_then(|()| c.check_string()),
        "message" if chat => seen.first(1).and_then(|()| message(c)),
        "finish_reason" => {
            seen.first(2)?;
            let reason = c.nullable(|c| c.string())?;
            finish = finish_from_wire(reason.as_deref(), None).map(|f| f.label());
            Some(())
        }
        "stop_reason" => seen.first(3).and_then(|()| c.check_value(0)),
        "matched_stop" => seen.first(4).and_then(|()| c.check_value(0)),
        "logprobs" => seen.first(5).and_then(|()| c.check_value(0)),
        "token_ids" => {
            seen.first(6)?;
            ids = c.nullable(Cursor::id_count)?;
            Some(())
        }
        "prompt_token_ids" if !chat => {
            seen.first(7)?;
            prompt_ids = c.nullable(Cursor::id_count)?;
            Some(())
        }
        _ => c.skip_value(0),
    })?;
    // A chat choice's `message` has no default.
    if chat && !seen.has(1) {
        return None;
    }
    Some(ChoiceCounts {
        finish,
        // Only completions choices carry counts of their own, and only with both lists.
        ids: prompt_ids.zip(ids),
    })
}

/// A chat message: an object whose `content` is a string or null.
fn message(c: &mut Cursor<'_>) -> Sure<()> {
    let mut seen = Seen::default();
    c.object(|c, key| match key {
        "content" => seen
            .first(0)
            .and_then(|()| c.nullable(Cursor::check_string))
            .map(drop),
        _ => c.skip_value(0),
    })
}

/// A completions response as serde's `completions::decode_response` reads it.
pub(crate) fn completion(text: &str) -> Sure<Response> {
    let mut c = Cursor::new(text);
    let mut seen = Seen::default();
    let mut r = Response::default();
    c.object(|c, key| {
        match key {
            "id" => r.id = seen.first(0).and_then(|()| c.string())?.into_owned(),
            "model" => r.model = seen.first(1).and_then(|()| c.string())?.into_owned(),
            "choices" => r.choices = seen.first(2).and_then(|()| c.array(completion_choice))?,
            "usage" => {
                let usage = seen.first(3).and_then(|()| c.nullable(scan::usage))?;
                r.usage = usage.map(Into::into);
            }
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    c.end()?;
    // `choices` has no default: without it serde refuses the response.
    seen.has(2).then_some(r)
}

/// One completions choice, as `completion` reads it.
fn completion_choice(c: &mut Cursor<'_>) -> Sure<Choice> {
    let mut seen = Seen::default();
    let mut ch = Choice::default();
    let (mut reason, mut stop, mut matched, mut prompt_ids) = (None, None, None, None);
    c.object(|c, key| {
        match key {
            "index" => ch.index = seen.first(0).and_then(|()| c.u32())?,
            "text" => ch.text = seen.first(1).and_then(|()| c.string())?.into_owned(),
            "finish_reason" => reason = seen.first(2).and_then(|()| c.nullable(Cursor::string))?,
            "stop_reason" => stop = seen.first(3).and_then(|()| c.value())?,
            "matched_stop" => matched = seen.first(4).and_then(|()| c.value())?,
            // Logprobs are serde's to take apart: only `null` is read here.
            "logprobs" => drop(seen.first(5).and_then(|()| c.nullable(|_| None::<()>))?),
            "token_ids" => {
                ch.token_ids = seen.first(6).and_then(|()| c.nullable(|c| c.ids()))?;
            }
            "prompt_token_ids" => {
                prompt_ids = seen.first(7).and_then(|()| c.nullable(Cursor::id_count))?;
            }
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    ch.finish = finish_from_wire(reason.as_deref(), stop.as_ref().or(matched.as_ref()));
    // With vLLM's `return_token_ids` each choice's counts are exact.
    ch.usage = prompt_ids
        .zip(ch.token_ids.as_ref())
        .map(|(prompt, ids)| Usage {
            prompt_tokens: prompt,
            completion_tokens: ids.len() as u64,
            cached_tokens: None,
        });
    Some(ch)
}

#[cfg(test)]
mod tests {
    use super::counts_by_serde as serde;
    use super::*;
    use crate::dialect::openai::completions;
    use crate::dialect::openai::cursor::mangled_bodies;

    /// Completions responses as servers send them: each must be read fast, as serde reads it.
    const COMPLETIONS: &[&str] = &[
        r#"{"id":"cmpl-4a76","object":"text_completion","created":1796147249,"model":"mock-model","choices":[{"index":0,"text":" warm pear drum","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":4,"total_tokens":20,"completion_tokens":16,"prompt_tokens_details":null},"kv_transfer_params":null}"#,
        r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"line\nbreak \"quoted\" \\ \/ \u00e9 \ud83d\ude00","logprobs":null,"finish_reason":"stop","stop_reason":"\n\n"},{"index":1,"text":"b","finish_reason":"stop","stop_reason":13}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":3}}}"#,
        r#"{"id":"x","model":"m","choices":[{"index":0,"text":"é ünï","finish_reason":"abort","token_ids":[1, 22,333],"prompt_token_ids":[5,6]},{"index":1,"text":"","finish_reason":null,"token_ids":[4],"prompt_token_ids":[5,6]}]}"#,
        r#"{"id":"x","model":"m","choices":[{"index":0,"text":"a","finish_reason":"eos_token","matched_stop":"stop-here","token_ids":null}],"usage":null}"#,
        r#"{"id":"x","model":"m","choices":[{"index":0,"text":"a b","logprobs":{"tokens":["a"," b"],"token_logprobs":[-0.5,-1.25],"top_logprobs":[{"a":-0.5},{" b":-1.0}],"text_offset":[0,1]},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        r#"{"id":"x","model":"m","choices":[{"index":0,"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-0.5],"top_logprobs":[{"a":-0.5}],"text_offset":[0]}}],"usage":{}}"#,
        " { \"id\" : \"x\" ,\n \"model\":\"m\",\t\"choices\" : [ { \"index\" : 0 , \"text\" : \"a\" , \"finish_reason\" : \"weird\" } ] , \"extra\": {\"n\": [1.5e-3, -0, true, false, null, {}, []]} , \"usage\" : { \"completion_tokens\" : 18446744073709551615 } } \n",
        r#"{"choices":[]}"#,
        r#"{"object":"text_completion","choices":[{"text":"\t","stop_reason":[1,{"a":"b"}]}],"usage":{"prompt_tokens":0,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":null,"audio_tokens":0}}}"#,
    ];

    /// Chat responses as servers send them.
    const CHAT: &[&str] = &[
        r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\"\n","refusal":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":[1,2,3]}],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3,"prompt_tokens_details":null},"prompt_logprobs":null}"#,
        r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":7}}"#,
        r#"{"id":"c","model":"m","choices":[{"index":0,"message":{},"logprobs":{"content":[{"token":"a","logprob":-0.25,"bytes":[97],"top_logprobs":[]}]},"finish_reason":"length"}]}"#,
    ];

    /// Responses the fast reader must leave to serde (which may take or refuse them).
    const DEFERRED: &[&str] = &[
        r#"{"id":"a","id":"b","choices":[]}"#,
        r#"{"choices":[],"choices":[]}"#,
        r#"{"choices":[{"index":0,"index":1}]}"#,
        r#"{"choices":[{"text":"a","text":"b"}]}"#,
        r#"{"i\u0064":"x","choices":[]}"#,
        r#"{"choices":[{"index":-1}]}"#,
        r#"{"choices":[{"index":1.0}]}"#,
        r#"{"choices":[{"text":null}]}"#,
        r#"{"choices":[{"text":"\ud800"}]}"#,
        r#"{"choices":[{"text":"\udc00"}]}"#,
        r#"{"choices":[{"text":"\ud800\u0041"}]}"#,
        r#"{"choices":[{"stop_reason":1e400}]}"#,
        r#"{"choices":[{"logprobs":{"x":"\ud800"}}]}"#,
        r#"{"choices":[{"token_ids":[1,-2],"prompt_token_ids":[1]}]}"#,
        r#"{"choices":[{"token_ids":[4294967296]}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":-1}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1.0}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":18446744073709551616}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":-1}}}"#,
        r#"{"choices":[],"usage":[1,2]}"#,
        r#"{"id":null,"choices":[]}"#,
        r#"{"model":"m"}"#,
        r#"{"choices":null}"#,
        r#"{"choices":[[0,"text"]]}"#,
        r#"["id","model",[]]"#,
        r#"{"choices":[]} x"#,
        r#"{"choices":[],}"#,
        r#"{"choices":[{"text":"a	tab"}]}"#,
        r#"{"choices":[{"text":"\x"}]}"#,
        r#"{"object":"error","message":"boom","type":"BadRequestError","code":400}"#,
        "",
    ];

    /// Chat responses the fast reader must leave to serde.
    const CHAT_DEFERRED: &[&str] = &[
        r#"{"choices":[{"index":0,"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"message":null}]}"#,
        r#"{"choices":[{"message":{"content":1}}]}"#,
        r#"{"choices":[{"message":{"content":"a","content":"b"}}]}"#,
    ];

    #[test]
    fn common_responses_are_read_fast_and_as_serde_reads_them() {
        let cases = COMPLETIONS.iter().map(|t| (t, false));
        for (text, chat) in cases.chain(CHAT.iter().map(|t| (t, true))) {
            let fast = counts(text, chat);
            assert!(fast.is_some(), "not read fast: {text}");
            assert_eq!(fast, serde(text, chat), "{text}");
        }
        let first = counts(COMPLETIONS[0], false).unwrap();
        assert_eq!((first.prompt_tokens, first.completion_tokens), (4, 16));
        assert_eq!(first.finish, Some("length"));
        // Without usage, each choice's token ids count.
        let ids = counts(COMPLETIONS[2], false).unwrap();
        assert_eq!((ids.prompt_tokens, ids.completion_tokens), (4, 4));
        assert_eq!(ids.finish, Some("abort"));
    }

    #[test]
    fn what_it_is_not_sure_of_goes_to_serde() {
        for text in DEFERRED {
            assert_eq!(counts(text, false), None, "{text}");
            assert_eq!(counts(text, true), None, "{text}");
        }
        for text in CHAT_DEFERRED {
            assert_eq!(counts(text, true), None, "{text}");
        }
    }

    /// serde's whole completions `Response`, or its error's text.
    fn serde_completion(text: &str) -> Result<Response, String> {
        completions::decode_by_serde(text.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_completions_are_read_fast_and_as_serde_reads_them() {
        for text in COMPLETIONS {
            let with_logprobs = text.contains(r#""logprobs":{"#);
            let fast = completion(text);
            assert_eq!(fast.is_some(), !with_logprobs, "{text}");
            if let Some(fast) = fast {
                assert_eq!(Ok(fast), serde_completion(text), "{text}");
            }
        }
        let r = completion(COMPLETIONS[2]).unwrap();
        assert_eq!(r.choices[0].token_ids, Some(vec![1, 22, 333]));
        assert_eq!(r.choices[0].usage.map(|u| u.prompt_tokens), Some(2));
        let r = completion(COMPLETIONS[1]).unwrap();
        assert_eq!(r.choices[0].text, "line\nbreak \"quoted\" \\ / é 😀");
        assert_eq!(
            r.choices[1].finish,
            Some(crate::model::Finish::StopToken(13))
        );
        for text in DEFERRED {
            assert_eq!(completion(text), None, "{text}");
        }
    }

    /// JSON's own characters, for `cursor::mangle`'s edits.
    const JSON_BYTES: &[u8] = b"{}[]\":,\\ -.0123456789eEnulltruefalsxu\n\tDd";

    #[test]
    fn mangled_responses_are_never_read_otherwise_than_serde_would() {
        // Bounded: 40,000 random edits of the corpus, each read as both endpoints' shape.
        let corpus: Vec<&str> = [COMPLETIONS, CHAT, DEFERRED, CHAT_DEFERRED].concat();
        let (mut read_fast, mut read_whole) = (0, 0);
        mangled_bodies(&corpus, JSON_BYTES, 12, 40_000, |text| {
            for chat in [false, true] {
                if let Some(fast) = counts(text, chat) {
                    read_fast += 1;
                    assert_eq!(Some(fast), serde(text, chat), "chat {chat}: {text}");
                }
            }
            if let Some(fast) = completion(text) {
                read_whole += 1;
                assert_eq!(Ok(fast), serde_completion(text), "{text}");
            }
            true
        });
        assert!(read_fast > 5_000, "only {read_fast} edits were read fast");
        assert!(
            read_whole > 2_000,
            "only {read_whole} edits were read whole"
        );
    }
}
