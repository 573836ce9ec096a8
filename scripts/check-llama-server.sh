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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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
import json, sys, urllib.request

UP, PX = sys.argv[1], sys.argv[2]
MAX = 8
PROMPT = "The capital of France is"
failures = []
passes = [0]

def call(base, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()

def predicted_total():
    _, _, text = call(UP, "/metrics")
    for line in text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total"):
            return int(float(line.split()[-1]))
    raise SystemExit("no llamacpp:tokens_predicted_total in /metrics")

def sse(text):
    out = []
    for block in text.split("\n\n"):
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

# Readers: (completion tokens the client was told, text) per dialect.
def read_sglang(body, stream):
    last = [e for e in sse(body) if e != "[DONE]"][-1] if stream else json.loads(body)
    return last["meta_info"]["completion_tokens"], last["text"]

def read_openai(body, stream, chat):
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

def read_llamacpp(body, stream):
    if not stream:
        v = json.loads(body)
        return v["tokens_predicted"], v["content"]
    events = sse(body)
    assert "[DONE]" not in events, "native stream sends no [DONE]"
    return events[-1]["tokens_predicted"], "".join(e["content"] for e in events)

def read_ollama(body, stream):
    objs = [json.loads(l) for l in body.splitlines() if l.strip()]
    last = objs[-1]
    text = "".join(o.get("response") or (o.get("message") or {}).get("content", "") for o in objs)
    return last.get("eval_count", 0), text

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
            status, ctype, body = call(PX, path, req(stream))
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

print(f"{passes[0]} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
PY

# The official SDKs (and TGI's client) through lingo, as in CI against the mocks, with what a
# real llama.cpp does differently: its OpenAI routes answer `stop` for EOS and stop strings
# alike (so Anthropic cannot be told which stop matched), and cannot keep a stop string in
# the text (so a TGI client's `stop` is refused by name). Skipped when an SDK is missing.
MODEL=gemma3-270m
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
sdk openai_sdk_client.py
sdk anthropic_sdk_client.py --vague-stop
sdk ollama_sdk_client.py
sdk tgi_sdk_client.py --refuses-stop
# The headline: an SGLang benchmark script, unchanged (its batch check needs per-prompt
# counts, which llama.cpp does not give for a batch).
sdk sglang_style_client.py --no-batch --output-len 16

# Every field of docs/dialects.md's tables through lingo to this llama-server, each outcome held
# against the table's llamacpp column (made from lingo's mock of llama.cpp).
if LINGO_COMPAT_UPSTREAM=$UP LINGO_COMPAT_KIND=llamacpp LINGO_COMPAT_MODEL=$MODEL timeout 900 \
    cargo test --quiet --test compat_table -- --ignored --nocapture >"$LOGS/compat.log" 2>&1; then
  echo "ok   docs/dialects.md's llamacpp column: $(grep -c '^ok  ' "$LOGS/compat.log") fields agree with the real llama-server"
else
  echo "FAIL docs/dialects.md's llamacpp column:"; grep -E '^DIFF|panicked|error' "$LOGS/compat.log" | head -30; rc=1
fi

# Fault handling against the real server: a first-token timer that fires, a client that
# walks away mid-stream, client keys. Each must stop llama.cpp generating (its
# llamacpp:requests_processing returns to 0 long before the 900 tokens asked for (about 10 s) are done)
# and be counted exactly once by lingo.
TPORT=$(free_port)
printf 'ops:sk-check-key\n' >"$LOGS/keys"
"$LINGO" serve --listen "127.0.0.1:$TPORT" --upstream "$UP" --upstream-kind llamacpp \
  --timeout-first-token 1ms --auth-keys-file "$LOGS/keys" >"$LOGS/lingo-faults.log" 2>&1 & pids+=($!)
TX=http://127.0.0.1:$TPORT
for _ in $(seq 100); do curl -sf "$TX/health" >/dev/null 2>&1 && break; sleep 0.1; done
python3 - "$UP" "$PX" "$TX" <<'PY' || rc=1
import http.client, json, sys, time, urllib.error, urllib.parse, urllib.request

UP, PX, TX = sys.argv[1:4]
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
        if metric(UP, "llamacpp:requests_processing") == 0:
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

LONG = {"model": "gemma3-270m", "prompt": "Once upon a time", "max_tokens": 900,
        "ignore_eos": True, "stream": True}
KEY = {"Authorization": "Bearer sk-check-key"}

# Client keys, in front of the real server.
status, body = post(TX, "/v1/completions", {**LONG, "stream": False, "max_tokens": 4})
check("no key: 401 in OpenAI's shape", status == 401 and "error" in json.loads(body), body)
status, body = post(TX, "/v1/messages", {"model": "gemma3-270m", "max_tokens": 4,
                     "messages": [{"role": "user", "content": "hi"}]}, {"x-api-key": "wrong"})
check("wrong key: 401 in Anthropic's shape",
      status == 401 and json.loads(body)["error"]["type"] == "authentication_error", body)

# A first token later than timeouts.first_token (1 ms): a 504 before anything was sent, or
# the in-band error after; either way llama.cpp stops and lingo counts one timeout.
before = metric(TX, "lingo_requests_total")
status, body = post(TX, "/v1/completions", LONG, KEY)
timed_out = status == 504 or '"error"' in body
check("first_token timer fires against llama.cpp", timed_out, f"{status} {body[:300]}")
check("llama.cpp stopped generating after the timeout", idle_within(3))
check("the timeout is counted once",
      metric(TX, "lingo_requests_total") - before == 1
      and metric(TX, "lingo_requests_total", outcome="timeout") == 1
      and metric(TX, "lingo_errors_total", kind="timeout_first_token") == 1)

# A client that leaves after three events: lingo closes the upstream connection.
predicted = metric(UP, "llamacpp:tokens_predicted_total")
before = metric(PX, "lingo_requests_total", outcome="cancelled")
url = urllib.parse.urlparse(PX)
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
conn.request("POST", "/v1/completions", json.dumps(LONG), {"Content-Type": "application/json"})
resp = conn.getresponse()
events = 0
while events < 3:
    line = resp.fp.readline()
    if not line:
        break
    events += line.startswith(b"data: ")
conn.sock.close()
conn.close()
check("abandoned mid-stream: llama.cpp stopped generating", idle_within(3))
end = time.time() + 10
while time.time() < end and metric(PX, "lingo_requests_total", outcome="cancelled") == before:
    time.sleep(0.1)
check("the abandoned stream is counted once, cancelled",
      metric(PX, "lingo_requests_total", outcome="cancelled") - before == 1)
check("the abandoned stream left in-flight at 0", metric(PX, "lingo_requests_in_flight") == 0)
spent = metric(UP, "llamacpp:tokens_predicted_total") - predicted
check("llama.cpp generated far fewer than the 900 tokens asked", spent < 450, f"{spent}")

print(f"{len(failures)} fault checks failed" if failures else "fault checks passed")
sys.exit(1 if failures else 0)
PY
exit $rc
