#!/usr/bin/env bash
# Two lingo builds side by side: each `lingo serve` in front of one instant `lingo mock`, the
# same `wrk -t1 -c32` load on each in turn (A then B within a round; run it again with the
# two swapped to see the order's own bias), printing req/s and the proxy's CPU (user+sys from
# /proc) per request. For a change's effect on time when callgrind's instruction count is
# not enough. A benchmark, not a test; 127.0.0.1 only, bounded by wrk's -d.
#   scripts/bench-ab.sh A_BINARY B_BINARY    ROUNDS=3 DURATION=5s
#   MODES="sglang sglang-stream nonstream"   sglang: /generate translated to the vLLM mock;
#                                            nonstream, stream: /v1/completions passed through
set -euo pipefail
A=${1:?usage: bench-ab.sh A_BINARY B_BINARY} B=${2:?usage: bench-ab.sh A_BINARY B_BINARY}
ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5s} MODES=${MODES:-sglang sglang-stream nonstream}
command -v wrk >/dev/null || { echo "wrk is not installed" >&2; exit 1; }
. "$(dirname "$0")/lib/ab.sh"
M=$(free_port)
"$B" mock --listen 127.0.0.1:$M --kind vllm >"$W/mock.log" 2>&1 & pids+=($!)
printf '[pools.p]\nendpoints = [{ url = "http://127.0.0.1:%s", kind = "vllm" }]\n' $M >"$W/l.toml"
declare -A PORT PID
for side in A B; do
  bin=$A; [ $side = B ] && bin=$B
  PORT[$side]=$(free_port)
  LINGO_LOG=warn "$bin" serve --listen 127.0.0.1:${PORT[$side]} --config "$W/l.toml" >"$W/$side.log" 2>&1 &
  PID[$side]=$!; pids+=($!)
done
for side in A B; do
  for _ in $(seq 1 100); do curl -s -o /dev/null -m 2 "http://127.0.0.1:${PORT[$side]}/health" && break; sleep 0.05; done
done
lua() { printf 'wrk.method="POST"\nwrk.body=%s\nwrk.headers["Content-Type"]="application/json"\n' "'$1'"; }
lua '{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true}}' >"$W/sglang.lua"
lua '{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true},"stream":true}' >"$W/sglang-stream.lua"
lua '{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true}' >"$W/nonstream.lua"
lua '{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true,"stream":true}' >"$W/stream.lua"
cpu() { awk '{print $14 + $15}' /proc/$1/stat; }
tck=$(getconf CLK_TCK)
echo "# A=$A B=$B — $(date -u '+%F %R') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for mode in $MODES; do
    path=/v1/completions; [[ $mode == sglang* ]] && path=/generate
    for side in A B; do
      c0=$(cpu ${PID[$side]})
      out=$(wrk -t1 -c32 -d"$DURATION" -s "$W/$mode.lua" "http://127.0.0.1:${PORT[$side]}$path")
      c1=$(cpu ${PID[$side]})
      n=$(awk '/requests in/ {print $1}' <<<"$out")
      python3 -c "n, t = $n, $tck; print(f'$r  {\"$mode\":<14} $side  req/s {n / ${DURATION%s}:8.0f}  CPU µs/req {($c1 - $c0) / t * 1e6 / n:6.1f}')"
    done
  done
done
