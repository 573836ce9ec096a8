#!/usr/bin/env bash
# A fleet of two real llama-server processes (llama.cpp, Gemma 3 270M) behind one lingo pool:
# kinds detected per endpoint, traffic in two dialects (SGLang /generate translated, OpenAI
# completions passed through) spread over both, token counts checked against the servers' own
# (`llamacpp:tokens_predicted_total`), per-endpoint request counts against lingo's own; then one
# server is killed: every request still succeeds (failover), the dead one is ejected, the pool
# stays healthy; it is restarted on its port and comes back after a probe.
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
LINGO=${LINGO:-${CARGO_TARGET_DIR:-target}/debug/lingo}
[[ -x "$LINGO" ]] || cargo build --quiet --bin lingo
. scripts/lib/real.sh
A=$(free_port); B=$(free_port); P=$(free_port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
llama() { # port -> starts one server (one core each: the two share the machine's two)
  "$LLAMA_HOME/llama-server" -m "$LLAMA_HOME/model.gguf" --host 127.0.0.1 --port "$1" \
    -c 1024 -np 2 -t 1 --alias gemma3-270m --metrics --no-webui >"$LOGS/llama.$1.log" 2>&1 &
  LAST=$!; pids+=($LAST); disown "$LAST"  # the check kills one: no "Killed" line from bash
  for _ in $(seq 240); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "llama-server on $1 did not start"; cat "$LOGS/llama.$1.log"; exit 1
}
llama "$A"; PA=$LAST
llama "$B"; PB=$LAST
serve_pool "$P" "http://127.0.0.1:$A=llama-a" "http://127.0.0.1:$B=llama-b"

rc=0
python3 - "$PX" "http://127.0.0.1:$A" "http://127.0.0.1:$B" "$PB" "$LLAMA_HOME" <<'PY' || rc=1
import json, sys
from realcheck import Checks, call, failover_checks, fleet, metric

PX, UA, UB, PID_B, home = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
check = Checks()
predicted = lambda base: metric(base, "llamacpp:tokens_predicted_total")

kinds = [e["kind"] for e in fleet(PX)]
check("both endpoints detected as llama.cpp", kinds == ["llamacpp", "llamacpp"], kinds)

before = predicted(UA) + predicted(UB)
lingo_before = metric(PX, "lingo_generation_tokens_total")
ok = 0
for i in range(8):
    s, _, t = call(PX, "/generate", {"text": f"Count to {i}:", "sampling_params": {"max_new_tokens": 8}})
    ok += s == 200 and "meta_info" in t
    s, _, t = call(PX, "/v1/completions", {"model": "gemma3-270m", "prompt": f"Item {i}:", "max_tokens": 8})
    ok += s == 200 and json.loads(t)["usage"]["completion_tokens"] > 0
check("16 requests in two dialects all succeed", ok == 16, ok)
after = predicted(UA) + predicted(UB)
lingo_after = metric(PX, "lingo_generation_tokens_total")
check("lingo's token count equals the two servers' own", lingo_after - lingo_before == after - before,
      (lingo_after - lingo_before, after - before))
per = [e["requests"] for e in fleet(PX)]
check("round robin spread the requests over both servers", per[0] >= 8 and per[1] >= 8, per)

# One server dies: every request still succeeds, it is ejected, the pool stays healthy; it
# comes back on its port, a probe brings it in and it takes requests again.
port = UB.rsplit(":", 1)[1]
failover_checks(check, PX, 1, PID_B,
                [f"{home}/llama-server", "-m", f"{home}/model.gguf", "--host", "127.0.0.1",
                 "--port", port, "-c", "1024", "-np", "2", "-t", "1", "--alias", "gemma3-270m",
                 "--metrics", "--no-webui"],
                lambda i: call(PX, "/v1/completions", {"model": "gemma3-270m",
                               "prompt": f"After {i}:", "max_tokens": 4})[0],
                "the second server")
check.exit()
PY
[[ $rc -eq 0 ]] || { echo "--- lingo log"; tail -30 "$LOGS/lingo.log"; }
exit $rc
