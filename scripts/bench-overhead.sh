#!/usr/bin/env bash
# What lingo costs, measured side by side in one run on this machine (a benchmark, not a test).
#
# 1. A realistic mock (TTFT 20 ms, 5 ms per token, 64 tokens), streaming, concurrency 1 and 64:
#    the mock directly, then through lingo in passthrough (OpenAI completions) and in
#    translation (SGLang /generate -> vLLM /v1/completions), and through nginx (two workers,
#    bench-peers.sh's settings) where it is installed, the yardstick for what a proxy hop adds
#    on this machine. Reports throughput ratios and the added TTFT p50. Goals: >= 0.97 of
#    direct throughput, < 0.3 ms added TTFT p50.
# 2. An instant mock (no delays, 16 tokens), concurrency 32, streaming and not, load from wrk:
#    lingo against nginx (proxy_buffering off) in front of the same mock. Goals: lingo's
#    requests/s >= 1.0x nginx's in passthrough and >= 0.9x in translation.
#
# Needs: cargo, and for part 2 wrk and nginx (apt-get install -y wrk nginx-light); part 2 is
# skipped if they are missing. Everything listens on 127.0.0.1; every load is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/nginx.sh
REQS=${REQS:-200}          # requests per level in part 1
DURATION=${DURATION:-10s}  # wrk duration per run in part 2
cargo build --release --quiet
LINGO=target/release/lingo
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

. scripts/lib/ports.sh
wait_http() { for _ in $(seq 1 100); do curl -sf "$1" >/dev/null && return 0; sleep 0.05; done; echo "not up: $1" >&2; return 1; }
start_mock() { # port ttft itl
  LINGO_LOG=warn $LINGO mock --listen "127.0.0.1:$1" --kind vllm --ttft "$2" --itl "$3" & PIDS+=($!)
  wait_http "http://127.0.0.1:$1/health"
}
start_lingo() { # port upstream-port
  LINGO_LOG=warn $LINGO serve --listen "127.0.0.1:$1" --upstream "http://127.0.0.1:$2" --upstream-kind vllm & PIDS+=($!)
  wait_http "http://127.0.0.1:$1/health"
}
bench() { # url dialect concurrency out.json
  $LINGO bench --url "$1" --dialect "$2" --concurrency "$3" --input-len 128 --output-len 64 \
    --requests-per-level "$REQS" --warmup 4 --json "$4" >/dev/null
}
field() { python3 -c "import json,sys; d=json.load(open('$1')); print(d['levels'][0]['$2'])"; }

echo "# lingo overhead — $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m)"
echo
echo "## 1. Realistic mock: TTFT 20 ms, 5 ms/token, 64 tokens, streaming"
M=$(free_port); L=$(free_port)
start_mock "$M" 20ms 5ms
start_lingo "$L" "$M"
RUNS=(direct pass trans)
if command -v nginx >/dev/null; then
  N1=$(free_port)
  nginx_conf "$WORK/nginx1" "$N1" 2 "127.0.0.1:$M"
  nginx -c "$WORK/nginx1/nginx.conf" -g 'daemon off;' & PIDS+=($!)
  wait_http "http://127.0.0.1:$N1/health"
  RUNS+=(nginx)
fi
printf '%-5s %-26s %12s %10s %14s %16s\n' C path "tok/s" "ratio" "TTFT p50 ms" "added p50 ms"
for c in 1 64; do
  bench "http://127.0.0.1:$M" openai-completions "$c" "$WORK/direct.json"
  bench "http://127.0.0.1:$L" openai-completions "$c" "$WORK/pass.json"
  bench "http://127.0.0.1:$L" sglang "$c" "$WORK/trans.json"
  [ -n "${N1:-}" ] && bench "http://127.0.0.1:$N1" openai-completions "$c" "$WORK/nginx.json"
  d_tps=$(field "$WORK/direct.json" agg_tok_s); d_ttft=$(field "$WORK/direct.json" ttft_p50)
  for run in "${RUNS[@]}"; do
    tps=$(field "$WORK/$run.json" agg_tok_s); ttft=$(field "$WORK/$run.json" ttft_p50)
    name=$(case $run in direct) echo "mock directly";; pass) echo "lingo passthrough";; trans) echo "lingo SGLang->OpenAI";; nginx) echo "nginx (the yardstick)";; esac)
    python3 - "$c" "$name" "$tps" "$d_tps" "$ttft" "$d_ttft" <<'PY'
import sys
c, name, tps, dtps, ttft, dttft = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
print(f"{c:<5} {name:<26} {tps:12.0f} {tps/dtps:10.3f} {ttft*1e3:14.3f} {(ttft-dttft)*1e3:16.3f}")
PY
  done
done

echo
echo "## 2. Instant mock (16 tokens), concurrency 32, wrk for $DURATION: lingo vs nginx"
if ! command -v wrk >/dev/null || ! command -v nginx >/dev/null; then
  echo "skipped: needs wrk and nginx (apt-get install -y wrk nginx-light)"; exit 0
fi
M2=$(free_port); L2=$(free_port); N=$(free_port)
start_mock "$M2" 0s 0s
start_lingo "$L2" "$M2"
nginx_conf "$WORK/nginx" "$N" 1 "127.0.0.1:$M2"
nginx -c "$WORK/nginx/nginx.conf" -g 'daemon off;' & PIDS+=($!)
wait_http "http://127.0.0.1:$N/health"
wrk_rps() { # url path body
  cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$3'
wrk.headers["Content-Type"] = "application/json"
LUA
  wrk -t2 -c32 -d"$DURATION" -s "$WORK/post.lua" "$1$2" | awk '/Requests\/sec/ {print $2}'
}
OAI_NS='{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true}'
OAI_S='{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true,"stream":true}'
SGL_NS='{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true}}'
SGL_S='{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true},"stream":true}'
printf '%-34s %10s %10s %10s %8s\n' case direct nginx lingo "lingo/nginx"
for mode in ns s; do
  if [ $mode = ns ]; then o=$OAI_NS; g=$SGL_NS; label="non-streaming"; else o=$OAI_S; g=$SGL_S; label="streaming"; fi
  direct=$(wrk_rps "http://127.0.0.1:$M2" /v1/completions "$o")
  ngx=$(wrk_rps "http://127.0.0.1:$N" /v1/completions "$o")
  pass=$(wrk_rps "http://127.0.0.1:$L2" /v1/completions "$o")
  trans=$(wrk_rps "http://127.0.0.1:$L2" /generate "$g")
  python3 - "$label" "$direct" "$ngx" "$pass" "$trans" <<'PY'
import sys
label, d, n, p, t = sys.argv[1], *map(float, sys.argv[2:])
print(f"{'passthrough ' + label:<34} {d:10.0f} {n:10.0f} {p:10.0f} {p/n:8.2f}")
print(f"{'translation (SGLang) ' + label:<34} {d:10.0f} {n:10.0f} {t:10.0f} {t/n:8.2f}")
PY
done
