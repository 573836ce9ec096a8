#!/usr/bin/env python3
"""An SGLang user's benchmark script, written the way they write them: stdlib only, POST
/generate with input_ids and sampling_params, read the SSE stream, keep data["text"] (SGLang
streams cumulative text) and meta_info.completion_tokens. Exits non-zero on any mismatch.

usage: sglang_style_client.py --base http://127.0.0.1:30000 [--requests 8] [--output-len 32]
"""
import argparse
import json
import sys
import urllib.request


def post(base, path, payload):
    req = urllib.request.Request(
        base + path,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    return urllib.request.urlopen(req, timeout=60)


def stream_generate(base, input_ids, output_len):
    payload = {
        "input_ids": input_ids,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True},
        "stream": True,
        "lora_path": None,
        "return_logprob": False,
        "logprob_start_len": -1,
    }
    generated_text, output_len_seen, chunks = "", 0, 0
    with post(base, "/generate", payload) as resp:
        assert resp.status == 200, resp.status
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            body = line[len("data:"):].strip()
            if body == "[DONE]":
                break
            data = json.loads(body)
            if "error" in data:
                raise SystemExit(f"in-band error: {data}")
            if data.get("text"):
                assert data["text"].startswith(generated_text), "text must be cumulative"
                generated_text = data["text"]
                output_len_seen = data["meta_info"]["completion_tokens"]
                chunks += 1
    return generated_text, output_len_seen, chunks, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", help="ignored: SGLang's /generate names no model")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--no-batch", action="store_true",
                    help="skip the batch check (llama.cpp reports one usage for a whole batch)")
    args = ap.parse_args()

    with urllib.request.urlopen(args.base + "/v1/models", timeout=30) as r:
        model = json.load(r)["data"][0]["id"]
    with urllib.request.urlopen(args.base + "/get_model_info", timeout=30) as r:
        assert json.load(r)["model_path"] == model

    total = 0
    for i in range(args.requests):
        input_ids = [1000 + (i * 7 + j) % 500 for j in range(16 + i)]
        text, n, chunks, last = stream_generate(args.base, input_ids, args.output_len)
        if n != args.output_len:
            raise SystemExit(f"request {i}: completion_tokens {n} != {args.output_len}")
        if not text or chunks < 2:
            raise SystemExit(f"request {i}: text={text!r} chunks={chunks}")
        meta = last["meta_info"]
        if meta["prompt_tokens"] != len(input_ids):
            raise SystemExit(f"request {i}: prompt_tokens {meta['prompt_tokens']} != {len(input_ids)}")
        if meta["finish_reason"]["type"] != "length":
            raise SystemExit(f"request {i}: finish_reason {meta['finish_reason']}")
        total += n

    # Non-streaming, batch of two prompts: a JSON array in order.
    if args.no_batch:
        print(f"ok: {args.requests} streamed requests, {total} tokens")
        return
    with post(args.base, "/generate", {"input_ids": [[1001, 1002], [1003]],
                                      "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}) as r:
        out = json.load(r)
    assert isinstance(out, list) and len(out) == 2, out
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [2, 1], out
    assert all(o["meta_info"]["completion_tokens"] == 4 for o in out), out

    with urllib.request.urlopen(args.base + "/get_server_info", timeout=30) as r:
        info = json.load(r)
    assert info.get("incremental_streaming_output") is False, info
    print(f"ok: {args.requests} streamed requests, {total} tokens, batch ok")


if __name__ == "__main__":
    sys.exit(main())
