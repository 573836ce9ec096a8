#!/usr/bin/env python3
"""The official openai SDK against lingo: completions and chat, streaming and not, with
usage checked. Exits non-zero on any mismatch; exits 3 if the SDK is not installed.

usage: openai_sdk_client.py --base http://127.0.0.1:30000 --model mock-model
"""
import argparse
import sys

try:
    import openai
except ImportError:
    print("openai SDK not installed (pip install openai)")
    sys.exit(3)

N = 12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-tokens", type=int,
                    help="expected prompt tokens of 'one two three' (tokenizer-specific)")
    ap.add_argument("--strict-model", action="store_true",
                    help="the upstream rejects unknown models (vLLM does, SGLang does not)")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base + "/v1", api_key="unused", max_retries=0)
    extra = {"ignore_eos": True}

    r = client.completions.create(model=args.model, prompt="one two three", max_tokens=N,
                                  temperature=0, extra_body=extra)
    assert r.usage.completion_tokens == N, r.usage
    if args.prompt_tokens is not None:
        assert r.usage.prompt_tokens == args.prompt_tokens, r.usage
    assert r.choices[0].finish_reason == "length", r.choices[0]
    full_text = r.choices[0].text
    assert full_text

    text, usage = "", None
    for chunk in client.completions.create(model=args.model, prompt="one two three", max_tokens=N,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True}, extra_body=extra):
        if chunk.choices:
            text += chunk.choices[0].text
        if chunk.usage:
            usage = chunk.usage
    assert text == full_text, (text, full_text)
    assert usage is not None and usage.completion_tokens == N, usage

    r = client.chat.completions.create(model=args.model, max_tokens=N, temperature=0,
                                       messages=[{"role": "user", "content": "hello there"}],
                                       extra_body=extra)
    assert r.usage.completion_tokens == N, r.usage
    assert r.choices[0].message.role == "assistant"
    chat_text = r.choices[0].message.content

    text, usage, roles = "", None, 0
    for chunk in client.chat.completions.create(model=args.model, max_tokens=N, temperature=0,
                                                messages=[{"role": "user", "content": "hello there"}],
                                                stream=True, stream_options={"include_usage": True},
                                                extra_body=extra):
        if chunk.choices:
            delta = chunk.choices[0].delta
            roles += 1 if delta.role else 0
            text += delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert text == chat_text, (text, chat_text)
    assert usage is not None and usage.completion_tokens == N, usage
    assert roles == 1, roles

    # Errors come back as the SDK's typed exceptions.
    if args.strict_model:
        try:
            client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
            raise SystemExit("expected NotFoundError")
        except openai.NotFoundError:
            pass
    try:
        client.completions.create(model=args.model, prompt="x", max_tokens="many")
        raise SystemExit("expected BadRequestError")
    except openai.BadRequestError:
        pass
    print("ok: openai SDK completions and chat, stream and not")


if __name__ == "__main__":
    sys.exit(main())
