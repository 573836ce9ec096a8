#!/usr/bin/env bash
# lingo in front of a real llama-server (llama.cpp, Gemma 3 270M): every client dialect once,
# streaming and not, with token counts checked against llama.cpp's own (`/metrics`
# llamacpp:tokens_predicted_total), the real server's quirks lingo relies on, then the
# official Python SDKs (openai, anthropic, ollama, text-generation) through lingo, every field of
# docs/dialects.md's tables (tests/compat_table.rs against this server), then fault
# handling: a timer that fires, a client that leaves mid-stream, client keys.
# Skips (exit 0) when /opt/llama-server/llama-server is not installed
# (shared/tools/llama-server/install.sh installs it). Talks to 127.0.0.1 only; bounded.
#   LLAMA_HOME (/opt/llama-server)  LINGO (target/debug/lingo, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_HOME=${LLAMA_HOME:-/opt/llama-server}
if [[ ! -x "$LLAMA_HOME/llama-server" ]]; then
  echo "skipped: no $LLAMA_HOME/llama-server"
  exit 0
fi
RUN=${RUN_SH:-}
for cand in ../shared/tools/llama-server/run.sh /work/shared/tools/llama-server/run.sh; do
  [[ -z "$RUN" && -x "$cand" ]] && RUN=$cand
done
LINGO=${LINGO:-${CARGO_TARGET_DIR:-target}/debug/lingo}
[[ -x "$LINGO" ]] || cargo build --quiet --bin lingo
. scripts/lib/real.sh
LPORT=$(free_port); PPORT=$(free_port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
if [[ -n "$RUN" ]]; then
  PORT=$LPORT SLOTS=2 "$RUN" >"$LOGS/llama.log" 2>&1 & pids+=($!)
else
  "$LLAMA_HOME/llama-server" -m "$LLAMA_HOME/model.gguf" --host 127.0.0.1 --port "$LPORT" \
    -c 2048 -np 2 -t 2 --alias gemma3-270m --metrics --no-webui >"$LOGS/llama.log" 2>&1 & pids+=($!)
fi
UP=http://127.0.0.1:$LPORT
for _ in $(seq 240); do curl -sf "$UP/health" >/dev/null 2>&1 && break; sleep 0.5; done
curl -sf "$UP/health" >/dev/null || { echo "llama-server did not start"; cat "$LOGS/llama.log"; exit 1; }
"$LINGO" serve --listen "127.0.0.1:$PPORT" --upstream "$UP" --upstream-kind auto \
  >"$LOGS/lingo.log" 2>&1 & pids+=($!)
PX=http://127.0.0.1:$PPORT
for _ in $(seq 100); do curl -sf "$PX/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done

rc=0
python3 - "$UP" "$PX" <<'PY' || rc=1
import json, sys
from realcheck import (Checks, call, sse, read_llamacpp, read_ollama, read_openai,
                       read_sglang)

UP, PX = sys.argv[1], sys.argv[2]
MAX = 8
PROMPT = "The capital of France is"
check = Checks()

def predicted_total():
    _, _, text = call(UP, "/metrics")
    for line in text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total"):
            return int(float(line.split()[-1]))
    raise SystemExit("no llamacpp:tokens_predicted_total in /metrics")

msgs = [{"role": "user", "content": PROMPT}]
rows = [
    ("sglang", "/generate", lambda s: {"text": PROMPT, "stream": s,
        "sampling_params": {"max_new_tokens": MAX, "temperature": 0}}, read_sglang),
    ("openai-completions", "/v1/completions", lambda s: {"prompt": PROMPT, "max_tokens": MAX,
        "temperature": 0, "stream": s, **({"stream_options": {"include_usage": True}} if s else {})},
        lambda b, s: read_openai(b, s, False)),
    ("openai-chat", "/v1/chat/completions", lambda s: {"messages": msgs, "max_tokens": MAX,
        "temperature": 0, "stream": s, **({"stream_options": {"include_usage": True}} if s else {})},
        lambda b, s: read_openai(b, s, True)),
    ("llamacpp", "/completion", lambda s: {"prompt": PROMPT, "n_predict": MAX, "temperature": 0,
        "stream": s}, read_llamacpp),
    ("ollama-generate", "/api/generate", lambda s: {"model": "gemma3-270m", "prompt": PROMPT,
        "raw": True, "stream": s, "options": {"num_predict": MAX, "temperature": 0}}, read_ollama),
    ("ollama-chat", "/api/chat", lambda s: {"model": "gemma3-270m", "messages": msgs,
        "stream": s, "options": {"num_predict": MAX, "temperature": 0}}, read_ollama),
]

_, _, info = call(PX, "/get_server_info")
check("lingo detects llama-server (GET /props)",
      json.loads(info)["lingo"]["upstream_kind"] == "llamacpp", info[:200])

for name, path, req, read in rows:
    for stream in (False, True):
        what = f"{name} stream={stream}"
        before = predicted_total()
        try:
            status, _, body = call(PX, path, req(stream))
        except Exception as e:
            check(what, False, repr(e))
            continue
        after = predicted_total()
        try:
            told, text = read(body, stream)
        except Exception as e:
            check(what, False, f"unreadable answer ({e!r}): {body[:300]}")
            continue
        check(f"{what}: tokens {told} = llama.cpp's {after - before}", told == after - before,
              body[-400:])
        check(f"{what}: text", bool(text.strip()), body[:200])

# Quirks of the real server that lingo's decoders rely on (read directly, not through lingo).
_, _, body = call(UP, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "stream": True,
                                          "model": "not-the-alias"})
events = [e for e in sse(body) if e != "[DONE]"]
last = events[-1]
check("completions stream: finish_reason, usage and timings on one last chunk with choices",
      bool(last["choices"]) and last["choices"][0]["finish_reason"] and "usage" in last
      and "timings" in last, json.dumps(last)[:300])
check("completions stream: no usage-only chunk",
      all(e["choices"] for e in events), body[-300:])
check("ids start with chatcmpl-", all(e["id"].startswith("chatcmpl-") for e in events))
check("the request's model is ignored and the alias echoed",
      all(e["model"] == "gemma3-270m" for e in events))
_, _, body = call(UP, "/completion", {"prompt": PROMPT, "n_predict": 2, "stream": True})
events = sse(body)
check("native stream: ends with stop: true and no [DONE]",
      "[DONE]" not in events and events[-1]["stop"] is True, body[-300:])
_, _, props = call(UP, "/props")
check("/props has default_generation_settings and model_path",
      "default_generation_settings" in json.loads(props) and "model_path" in json.loads(props))
_, _, models = call(UP, "/v1/models")
check("/v1/models says owned_by llamacpp", json.loads(models)["data"][0]["owned_by"] == "llamacpp")

check.exit()
PY

# The official SDKs (and TGI's client) through lingo, as in CI against the mocks, with what a
# real llama.cpp does differently: its OpenAI routes answer `stop` for EOS and stop strings
# alike (so Anthropic cannot be told which stop matched), and cannot keep a stop string in
# the text (so a TGI client's `stop` is refused by name). Skipped when an SDK is missing.
MODEL=gemma3-270m
sdk openai_sdk_client.py
sdk anthropic_sdk_client.py --vague-stop
sdk ollama_sdk_client.py
sdk tgi_sdk_client.py --refuses-stop
# The headline: an SGLang benchmark script, unchanged (its batch check needs per-prompt
# counts, which llama.cpp does not give for a batch).
sdk sglang_style_client.py --no-batch --output-len 16

# Every field of docs/dialects.md's tables through lingo to this llama-server, each outcome held
# against the table's llamacpp column (made from lingo's mock of llama.cpp).
compat_sweep llamacpp "$UP"

# Fault handling against the real server: a first-token timer that fires, a client that
# walks away mid-stream, client keys. Each must stop llama.cpp generating (its
# llamacpp:requests_processing returns to 0 long before the 900 tokens asked for (about 10 s) are done, and its count of generated tokens says it stopped early)
# and be counted exactly once by lingo.
TPORT=$(free_port)
printf 'ops:sk-check-key\n' >"$LOGS/keys"
"$LINGO" serve --listen "127.0.0.1:$TPORT" --upstream "$UP" --upstream-kind llamacpp \
  --timeout-first-token 1ms --auth-keys-file "$LOGS/keys" >"$LOGS/lingo-faults.log" 2>&1 & pids+=($!)
TX=http://127.0.0.1:$TPORT
for _ in $(seq 100); do curl -sf "$TX/health" >/dev/null 2>&1 && break; sleep 0.1; done
python3 - "$UP" "$PX" "$TX" <<'PY' || rc=1
import sys
from realcheck import Checks, fault_checks, metric

UP, PX, TX = sys.argv[1:4]
check = Checks()
fault_checks(check, UP, PX, TX, "gemma3-270m", "llama.cpp",
             idle=lambda: metric(UP, "llamacpp:requests_processing") == 0,
             generated="llamacpp:tokens_predicted_total",
             abandoned=[("/v1/completions", None)])
check.exit("fault checks")
PY
exit $rc
