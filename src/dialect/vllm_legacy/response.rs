//! Whole `/generate` answers of the legacy server: `{"text": [prompt + output, ...]}`.

use serde::Deserialize;
use serde_json::json;

use crate::dialect::Ctx;
use crate::error::ProxyError;
use crate::model::{Choice, Response};

/// The prompt a choice's text is prefixed with (choices are prompt-major, `n` per prompt).
pub fn echo_of(ctx: &Ctx, index: u32) -> &str {
    let prompt = (index / ctx.n.max(1)) as usize;
    ctx.echo.get(prompt).map_or("", String::as_str)
}

pub fn encode_response(resp: &Response, ctx: &Ctx) -> Vec<u8> {
    let mut choices: Vec<&Choice> = resp.choices.iter().collect();
    choices.sort_by_key(|c| c.index);
    let texts: Vec<String> = choices
        .iter()
        .map(|c| format!("{}{}", echo_of(ctx, c.index), c.text))
        .collect();
    json!({ "text": texts }).to_string().into_bytes()
}

#[derive(Debug, Deserialize)]
pub(super) struct AnswerWire {
    pub text: Vec<String>,
}

/// Decode an answer without its request: each text keeps the prompt in front.
pub fn decode_response(body: &[u8]) -> Result<Response, ProxyError> {
    decode_response_for(body, None)
}

/// Decode an answer, removing `prompt` from the front of each text.
pub fn decode_response_for(body: &[u8], prompt: Option<&str>) -> Result<Response, ProxyError> {
    let w: AnswerWire = crate::dialect::json::from_bytes(body)
        .map_err(|e| ProxyError::UpstreamProtocol(format!("generate answer: {e}")))?;
    let choices = w
        .text
        .into_iter()
        .enumerate()
        .map(|(i, text)| Choice {
            index: i as u32,
            text: match prompt.and_then(|p| text.strip_prefix(p)) {
                Some(rest) => rest.to_string(),
                None => text,
            },
            ..Choice::default()
        })
        .collect();
    Ok(Response {
        id: String::new(),
        model: String::new(),
        choices,
        usage: None,
    })
}
