#!/usr/bin/env bash
# Two lingo builds side by side on the realistic mock of bench-peers.sh's part 2 (TTFT 20 ms,
# 5 ms a token, 64 tokens, 64 streams from `lingo bench`): CPU per streamed token (the
# proxy's threads' time on a CPU, from /proc in ns). For a change's effect on the per-token
# cost, which bench-ab.sh's instant mock does not show. A benchmark, not a test; 127.0.0.1
# only, bounded by the request count and lingo bench's --duration.
#   scripts/bench-ab-real.sh A_BINARY B_BINARY   ROUNDS=3 REQS=1280
#   DIALECT=openai-completions (passthrough) | sglang (translated)
#   AT_ONCE=1   both builds at the same time, each with its own mock and its own driver, on
#               servers started once: both meet the machine in the same state, so B / A holds
#               within a few per cent from round to round (bench-peers.sh's part 2b). 0: A then
#               B within a round, each round on freshly started servers (where connections
#               land among the workers is decided as they connect); the machine's drift
#               between the two runs is then in the ratio, 10-30% a round.
set -euo pipefail
A=${1:?usage: bench-ab-real.sh A_BINARY B_BINARY} B=${2:?usage: bench-ab-real.sh A_BINARY B_BINARY}
ROUNDS=${ROUNDS:-3} REQS=${REQS:-1280} DIALECT=${DIALECT:-openai-completions} AT_ONCE=${AT_ONCE:-1}
. "$(dirname "$0")/lib/ab.sh"
. "$(dirname "$0")/lib/realistic.sh"
write_prompts "$W/prompts.jsonl"
. "$(dirname "$0")/lib/cpu.sh"
ticks() { cpu_ns "$1"; }
HZ=1000000000 # ticks() counts nanoseconds

# mock SIDE: a paced mock of its own for SIDE; sets MOCK (its port).
mock() {
  MOCK=$(free_port)
  LINGO_LOG=warn "$B" mock --listen "127.0.0.1:$MOCK" --kind vllm --ttft 20ms --itl 5ms \
    >"$W/mock.$1.log" 2>&1 &
  pids+=($!)
  printf '[pools.p]\nendpoints = [{ url = "http://127.0.0.1:%s", kind = "vllm" }]\n' "$MOCK" \
    >"$W/$1.toml"
}
# serve SIDE BINARY: lingo serve in front of SIDE's mock; sets PORT and PID.
serve() {
  PORT=$(free_port)
  LINGO_LOG=warn "$2" serve --listen "127.0.0.1:$PORT" --config "$W/$1.toml" >"$W/$1.log" 2>&1 &
  PID=$!
  pids+=($PID)
  for _ in $(seq 1 100); do
    curl -s -o /dev/null -m 2 "http://127.0.0.1:$PORT/health" && break
    sleep 0.05
  done
}
# drive PORT NAME: the realistic load through the proxy on PORT.
drive() {
  realistic_bench "$B" "http://127.0.0.1:$1" "$DIALECT" 64 "$REQS" "$W/prompts.jsonl" \
    --max-fail 0 >/dev/null 2>"$W/bench.$2.err" ||
    { echo "lingo bench failed:" >&2; cat "$W/bench.$2.err" >&2; exit 1; }
}
per_token() { python3 -c "print('%.2f' % (($1) / $HZ * 1e6 / ($REQS * 64)))"; }

if [ "$AT_ONCE" = 1 ]; then
  mock A; serve A "$A"; pa=$PID porta=$PORT
  mock B; serve B "$B"; pb=$PID portb=$PORT
  echo "round  A µs/token  B µs/token  B / A" \
    "  ($DIALECT, $REQS requests of 64 tokens, 64 streams a side, at once)"
  ratios=()
  for r in $(seq 1 "$ROUNDS"); do
    a0=$(ticks $pa) b0=$(ticks $pb)
    # The side started first alternates.
    if ((r % 2)); then order="A B"; else order="B A"; fi
    runs=()
    for side in $order; do
      port=$porta; [ "$side" = B ] && port=$portb
      drive "$port" "$side" &
      runs+=($!)
    done
    for p in "${runs[@]}"; do wait "$p"; done
    a=$(per_token "$(ticks $pa) - $a0") b=$(per_token "$(ticks $pb) - $b0")
    ratio=$(python3 -c "print('%.3f' % ($b / $a))")
    ratios+=("$ratio")
    echo "$r      $a       $b       $ratio"
  done
  printf '%s\n' "${ratios[@]}" | python3 -c "
import statistics, sys
xs = [float(l) for l in sys.stdin]
print(f'B / A: median {statistics.median(xs):.3f}, rounds {min(xs):.3f}-{max(xs):.3f}')"
  exit 0
fi

mock shared
echo "round side CPU µs/token ($DIALECT, $REQS requests of 64 tokens, 64 streams)"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    serve shared "$bin"
    before=$(ticks $PID)
    drive "$PORT" "$side"
    after=$(ticks $PID)
    kill $PID; wait $PID 2>/dev/null || true
    echo "$r     $side    $(per_token "$after - $before")"
  done
done
