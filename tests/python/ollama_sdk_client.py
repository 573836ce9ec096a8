#!/usr/bin/env python3
"""The official ollama SDK against lingo: generate (templated and raw) and chat, streaming and
not, counts and finish reasons checked, model listing and a 404. Exits non-zero on any
mismatch; exits 3 if the SDK is not installed.

usage: ollama_sdk_client.py --base http://127.0.0.1:30000 --model mock-model
"""
import argparse
import sys

try:
    import ollama
except ImportError:
    print("ollama SDK not installed (pip install ollama)")
    sys.exit(3)

N = 10


def check(what, cond, detail=""):
    if not cond:
        print(f"FAIL {what}: {detail}")
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--strict-model", action="store_true",
                    help="the upstream rejects unknown models (llama.cpp serves any name)")
    args = ap.parse_args()
    client = ollama.Client(host=args.base, timeout=30)
    opts = {"num_predict": N, "temperature": 0}

    r = client.generate(model=args.model, prompt="one two three", options=opts)
    check("generate", r.done and r.done_reason == "length" and r.eval_count == N, r)
    check("generate durations", (r.total_duration or 0) > 0, r)
    raw = client.generate(model=args.model, prompt="one two three", raw=True, options=opts)
    check("raw generate", raw.eval_count == N and raw.response, raw)

    text, last = "", None
    for part in client.generate(model=args.model, prompt="one two three", options=opts,
                                stream=True):
        text += part.response
        last = part
    check("generate stream", last.done and last.eval_count == N, last)
    check("generate stream text", text == r.response, (text, r.response))

    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    c = client.chat(model=args.model, messages=msgs, options=opts)
    check("chat", c.message.role == "assistant" and c.eval_count == N, c)
    text, last = "", None
    for part in client.chat(model=args.model, messages=msgs, options=opts, stream=True):
        text += part.message.content
        last = part
    check("chat stream", last.done and last.done_reason == "length", last)
    check("chat stream text", text == c.message.content, (text, c.message.content))
    # A templated generate is a one-turn chat after its system message.
    g = client.generate(model=args.model, prompt="hello", system="be brief", options=opts)
    check("templated generate = chat", g.response == c.message.content, (g, c))

    names = [m.model for m in client.list().models]
    check("list", args.model in names, names)
    check("show", client.show(args.model) is not None)
    check("version", bool(client._request_raw("GET", "/api/version").json()["version"]))
    if args.strict_model:
        try:
            client.generate(model="no-such-model", prompt="hi", options=opts)
            check("unknown model", False, "no error")
        except ollama.ResponseError as e:
            check("unknown model is a 404", e.status_code == 404, e)
    print(f"ok: ollama {ollama.__name__} SDK")


if __name__ == "__main__":
    main()
