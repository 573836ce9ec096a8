#!/usr/bin/env python3
"""TGI's official Python client (`text-generation`) against lingo: generate and
generate_stream (both post to TGI's compat route `POST /`), details, stop sequences, a
seed, return_full_text and the typed validation error. Exits non-zero on any mismatch;
exits 3 if the client is not installed.

usage: tgi_sdk_client.py --base http://127.0.0.1:30000
"""
import argparse
import sys

try:
    import text_generation
    from text_generation.errors import ValidationError
except ImportError:
    print("text-generation not installed (pip install text-generation)")
    sys.exit(3)

N = 10
PROMPT = "one two three four"


def check(what, cond, detail=""):
    if not cond:
        print(f"FAIL {what}: {detail}")
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", help="ignored: TGI serves one model")
    ap.add_argument("--refuses-stop", action="store_true",
                    help="the upstream cannot keep a stop sequence in the text as TGI does "
                         "(llama.cpp): lingo must refuse `stop` by name")
    args = ap.parse_args()
    client = text_generation.Client(args.base, timeout=30)

    r = client.generate(PROMPT, max_new_tokens=N)
    d = r.details
    check("generate text", bool(r.generated_text), r)
    check("details counts", d.generated_tokens == N and len(d.tokens) == N, d)
    check("finish reason", d.finish_reason.value == "length", d.finish_reason)
    check("greedy has no seed", d.seed is None, d.seed)
    check("token texts add up", "".join(t.text for t in d.tokens) == r.generated_text,
          (d.tokens, r.generated_text))

    text, last, events = "", None, 0
    for ev in client.generate_stream(PROMPT, max_new_tokens=N):
        events += 1
        if not ev.token.special:
            text += ev.token.text
        last = ev
    check("stream text", text == r.generated_text, (text, r.generated_text))
    check("stream final", last.generated_text == r.generated_text, last)
    check("stream details", last.details.generated_tokens == N, last.details)
    check("one event per token", events >= N, events)

    sampled = client.generate(PROMPT, max_new_tokens=N, do_sample=True, seed=7)
    check("sampling seed echoed", sampled.details.seed == 7, sampled.details)

    full = client.generate(PROMPT, max_new_tokens=N, return_full_text=True)
    check("return_full_text", full.generated_text == PROMPT + r.generated_text,
          full.generated_text)

    stop_word = r.generated_text.split()[2]
    if args.refuses_stop:
        try:
            client.generate(PROMPT, max_new_tokens=N, stop_sequences=[stop_word])
            check("stop refused", False, "no error")
        except ValidationError as e:
            check("the refusal names stop", "stop" in str(e), e)
    else:
        s = client.generate(PROMPT, max_new_tokens=N, stop_sequences=[stop_word])
        check("stop sequence", s.details.finish_reason.value == "stop_sequence", s.details)
        check("stopped early", s.details.generated_tokens < N, s.details)

    try:
        client.generate(PROMPT, max_new_tokens=N, temperature=0.0, do_sample=True)
        check("temperature 0 refused", False, "no error")
    except ValidationError as e:
        check("validation error names temperature", "temperature" in str(e), e)
    print(f"ok: text-generation {text_generation.__name__} client")


if __name__ == "__main__":
    main()
