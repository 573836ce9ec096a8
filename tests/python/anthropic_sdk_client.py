#!/usr/bin/env python3
"""The official anthropic SDK against lingo's /v1/messages: whole and streamed messages (the
SDK's own stream accumulator checks the event sequence), stop sequences, a prefill, and the
typed errors. Exits non-zero on any mismatch; exits 3 if the SDK is not installed.

usage: anthropic_sdk_client.py --base http://127.0.0.1:30000 --model mock-model
"""
import argparse
import sys

try:
    import anthropic
except ImportError:
    print("anthropic SDK not installed (pip install anthropic)")
    sys.exit(3)

N = 12
# Greedy, and lingo's extension of the Messages API for fixed output lengths (as lingo bench
# uses it). SDK 2.x has no temperature argument any more: the API still takes it.
FIXED = {"ignore_eos": True, "temperature": 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--strict-model", action="store_true",
                    help="the upstream rejects unknown models (vLLM does, SGLang does not)")
    ap.add_argument("--vague-stop", action="store_true",
                    help="the upstream does not say which stop ended the text (llama.cpp's "
                         "OpenAI routes answer `stop` for EOS and stop strings alike)")
    args = ap.parse_args()
    client = anthropic.Anthropic(base_url=args.base, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "hello there"}]

    m = client.messages.create(model=args.model, max_tokens=N, messages=messages,
                               system="be brief", extra_body=FIXED)
    assert m.type == "message" and m.role == "assistant", m
    assert m.id.startswith("msg_"), m.id
    assert m.stop_reason == "max_tokens", m
    assert m.usage.output_tokens == N, m.usage
    assert m.usage.input_tokens > 0, m.usage
    assert len(m.content) == 1 and m.content[0].type == "text", m.content
    full_text = m.content[0].text
    assert full_text

    # The SDK's stream helper accumulates the events into a message; it fails on an event
    # sequence it does not expect.
    with client.messages.stream(model=args.model, max_tokens=N, messages=messages,
                                system="be brief", extra_body=FIXED) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == full_text, (streamed, full_text)
    assert final.content[0].text == full_text, final
    assert final.stop_reason == "max_tokens", final
    assert final.usage.output_tokens == N, final.usage
    # Anthropic's input_tokens leaves out cache reads; a server with prompt caching (llama.cpp)
    # reads the repeated prompt from its cache the second time.
    prompt = lambda u: u.input_tokens + (u.cache_read_input_tokens or 0)
    assert prompt(final.usage) == prompt(m.usage), (final.usage, m.usage)

    # Raw events: the documented order (the SDK drops `ping` events itself).
    kinds = [e.type for e in client.messages.create(model=args.model, max_tokens=3,
                                                    messages=messages, stream=True,
                                                    extra_body=FIXED)]
    assert kinds[:2] == ["message_start", "content_block_start"], kinds
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"], kinds
    assert kinds.count("content_block_delta") == 3, kinds

    # A stop sequence taken from the output: the text stops before it, and it is named.
    # (A real model's short answer may have fewer than three words: then two characters from
    # its middle.)
    words = full_text.split()
    mid = len(full_text) // 2
    stop = " " + words[2] if len(words) >= 3 else full_text[mid:mid + 2]
    for stream in (False, True):
        kwargs = dict(model=args.model, max_tokens=N, messages=messages,
                      system="be brief", stop_sequences=[stop], extra_body=FIXED)
        if stream:
            with client.messages.stream(**kwargs) as s:
                r = s.get_final_message()
        else:
            r = client.messages.create(**kwargs)
        if args.vague_stop:
            assert r.stop_reason in ("stop_sequence", "end_turn"), r
        else:
            assert r.stop_reason == "stop_sequence", r
            assert r.stop_sequence == stop, r
        text = r.content[0].text
        assert full_text.startswith(text) and stop not in text, (text, full_text)

    # A final assistant message is continued (prefill), with text blocks.
    r = client.messages.create(
        model=args.model, max_tokens=4, extra_body={"temperature": 0},
        messages=[{"role": "user", "content": [{"type": "text", "text": "count"},
                                               {"type": "text", "text": "please"}]},
                  {"role": "assistant", "content": "one two"}])
    assert r.usage.output_tokens <= 4 and r.stop_reason in ("max_tokens", "end_turn"), r

    # Errors come back as the SDK's typed exceptions, with the field named.
    try:
        client.messages.create(model=args.model, max_tokens=4, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
        raise SystemExit("expected BadRequestError for an image block")
    except anthropic.BadRequestError as e:
        assert "messages[0].content[0].type" in str(e), e
        assert e.body["error"]["type"] == "invalid_request_error", e.body
    try:
        client.messages.create(model=args.model, max_tokens=4, messages=messages,
                               tools=[{"name": "f", "input_schema": {"type": "object"}}])
        raise SystemExit("expected BadRequestError for tools")
    except anthropic.BadRequestError as e:
        assert "tools" in str(e), e
    if args.strict_model:
        try:
            client.messages.create(model="no-such-model", max_tokens=1, messages=messages)
            raise SystemExit("expected NotFoundError")
        except anthropic.NotFoundError as e:
            assert e.body["error"]["type"] == "not_found_error", e.body
    print("ok: anthropic SDK messages, stream and not, stop sequences, prefill, errors")


if __name__ == "__main__":
    sys.exit(main())
