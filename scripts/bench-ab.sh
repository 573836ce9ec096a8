#!/usr/bin/env bash
# Two lingo builds side by side: each `lingo serve` in front of one instant `lingo mock`, the
# same `wrk -t1 -c32` load on each in turn (A then B in odd rounds, B then A in even ones, so
# neither always runs second), printing req/s and the proxy's CPU (user+sys from /proc) per
# request, then per mode B's CPU over A's round by round and their median. For a change's
# effect on time when callgrind's instruction count is not enough: a build with fewer
# instructions can still cost more on the clock (docs/performance.md, 2026-12-06). The
# rounds of one build against itself spread by about ±10% here, and its median was 0.96 in
# one run: the two servers' places differ too. Run it again with A and B swapped and take
# the geometric mean of B/A and 1/(A/B), ten rounds or more each. A benchmark, not a test;
# 127.0.0.1 only, bounded by wrk's -d.
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
    sides="A B"; ((r % 2)) || sides="B A"
    for side in $sides; do
      c0=$(cpu ${PID[$side]})
      out=$(wrk -t1 -c32 -d"$DURATION" -s "$W/$mode.lua" "http://127.0.0.1:${PORT[$side]}$path")
      c1=$(cpu ${PID[$side]})
      n=$(awk '/requests in/ {print $1}' <<<"$out")
      python3 -c "n, t = $n, $tck; print(f'$r  {\"$mode\":<14} $side  req/s {n / ${DURATION%s}:8.0f}  CPU µs/req {($c1 - $c0) / t * 1e6 / n:6.1f}')" |
        tee -a "$W/rounds.txt"
    done
  done
done
python3 - "$W/rounds.txt" <<'PY'
import collections, statistics, sys
cpu = collections.defaultdict(dict)  # (mode, round) -> {side: µs}
for line in open(sys.argv[1]):
    f = line.split()
    cpu[(f[1], f[0])][f[2]] = float(f[-1])
modes = dict.fromkeys(m for m, _ in cpu)
for mode in modes:
    ratios = [c["B"] / c["A"] for (m, _), c in cpu.items() if m == mode and c.get("A")]
    print(f"{mode:<14} B/A CPU per request by round: {' '.join(f'{x:.3f}' for x in ratios)}"
          f"  median {statistics.median(ratios):.3f}")
PY
