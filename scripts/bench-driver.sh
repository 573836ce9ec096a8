#!/usr/bin/env bash
# How fast and how exact is `lingo bench` itself? Measured in one run on this machine (a
# benchmark, not a test).
#
# 1. Request rate against wrk: the same instant mock (`lingo mock`, vLLM, no delays), the same
#    small non-streaming /v1/completions request (8 prompt token ids, 16 output tokens), the
#    same connection count. Goal: lingo bench >= 0.7x wrk's requests/s.
# 2. Streaming at concurrency 512:
#    a. tokens/s the driver sustains through an instant mock (no delays, one token per SSE
#       event, 256 tokens per request). Goal: >= 200k tokens/s. Here the driver is the
#       bottleneck, and its self-check must say so (driver-bound: True).
#    b. TTFT error against the mock's injected TTFT (50 ms, then 10 ms per token, 64 tokens,
#       so the pair is not CPU-bound; 512 warmup requests open the connections first; the
#       workers' first requests spread over 100 ms with --ramp-up so the 512 streams do not
#       tick in lockstep): measured TTFT minus 50 ms, p50 / p99 / max. Goal: p99 < 1 ms. The
#       self-check must say the server set the pace (driver-bound: False). Run twice: as is,
#       and with the pair at real-time priority (`chrt -f`), so that other jobs on a shared
#       machine do not hold the mock's or the driver's threads off the cores; the second is
#       the driver's own accuracy, the first also the neighbours'. Each run also prints the
#       mock's own first-token lateness (`/mock/stats?late_last=2048`: the write of each
#       measured stream's first token after its due time): a TTFT error the mock made, not
#       the driver.
# The mock and the driver share this machine's cores, so the figures are of the pair; the
# driver's own CPU share is printed from its self-check. `LINGO=path` runs another build (an
# older one for a before/after comparison: flags it lacks are left out).
#
# Needs: cargo, python3, curl, wrk (installed with apt-get if missing), chrt (util-linux; the
# second 2b run is skipped without it or without the right to use it). Everything listens on
# 127.0.0.1; every load is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}   # seconds per measured run
CONNS=${CONNS:-64}         # connections for part 1
if ! command -v wrk >/dev/null; then
  apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
fi
if [ -z "${LINGO:-}" ]; then
  cargo build --release --quiet
  LINGO=${CARGO_TARGET_DIR:-target}/release/lingo
fi
RAMP=()
if $LINGO bench --help | grep -q -- --ramp-up; then RAMP=(--ramp-up 100ms); fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

. scripts/lib/ports.sh
wait_http() { for _ in $(seq 1 100); do curl -sf "$1" >/dev/null && return 0; sleep 0.05; done; echo "not up: $1" >&2; return 1; }
start_mock() { # port ttft itl [priority command...]
  local port=$1 ttft=$2 itl=$3; shift 3
  LINGO_LOG=warn "$@" $LINGO mock --listen "127.0.0.1:$port" --kind vllm --ttft "$ttft" --itl "$itl" & PIDS+=($!)
  wait_http "http://127.0.0.1:$port/health"
}
stop_mock() { kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; unset 'PIDS[-1]'; }
get() { # file python-expression over d (the report) and l (its first level)
  python3 -c "import json; d=json.load(open('$1')); l=d['levels'][0]; print($2)"
}

echo "# lingo bench driver speed — $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "## 1. Requests/s against wrk: instant mock, non-streaming, $CONNS connections, ${DURATION}s"
M=$(free_port)
start_mock "$M" 0s 0s
IDS=$(python3 -c 'print(",".join(str(1000 + i) for i in range(8)))')
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"model":"mock-model","prompt":[$IDS],"max_tokens":16,"temperature":0.0,"ignore_eos":true}'
wrk.headers["Content-Type"] = "application/json"
LUA
wrk_rps=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -s "$WORK/post.lua" "http://127.0.0.1:$M/v1/completions" | awk '/Requests\/sec/ {print $2}')
$LINGO bench --url "http://127.0.0.1:$M" --dialect openai-completions --no-stream \
  --concurrency "$CONNS" --duration "${DURATION}s" --input-len 8 --output-len 16 --warmup 8 \
  --json "$WORK/rps.json" >/dev/null
lingo_rps=$(get "$WORK/rps.json" "l['request_throughput']")
fails=$(get "$WORK/rps.json" "l['fail']")
cpu=$(get "$WORK/rps.json" "round(100 * (l['self_check']['cpu'] or 0))")
python3 - "$wrk_rps" "$lingo_rps" "$fails" "$cpu" <<'PY'
import sys
w, l = float(sys.argv[1]), float(sys.argv[2])
print(f"wrk          {w:10.0f} req/s")
print(f"lingo bench  {l:10.0f} req/s  ({sys.argv[3]} failed, driver CPU {sys.argv[4]}% of one core)")
print(f"ratio        {l / w:10.2f}   (goal >= 0.70)")
PY
stop_mock

echo
echo "## 2a. Streaming tokens/s at concurrency 512: instant mock, 256 tokens per request, ${DURATION}s"
M=$(free_port)
start_mock "$M" 0s 0s
$LINGO bench --url "http://127.0.0.1:$M" --dialect openai-completions --concurrency 512 \
  --duration "${DURATION}s" --input-len 8 --output-len 256 --warmup 8 --json "$WORK/tok.json" >/dev/null
python3 - "$WORK/tok.json" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))['levels'][0]; c = l['self_check']
share = c.get('driver_share')
print(f"{l['agg_tok_s']:.0f} tokens/s over {l['ok']} requests ({l['fail']} failed), driver CPU {100 * (c['cpu'] or 0):.0f}% of one core   (goal >= 200000)")
print(f"self-check: driver-bound: {c['driver_bound']} (expected True: the mock answers at once)"
      + (f"; driver's share of the requests' time {100 * share:.0f}%" if share is not None else "")
      + (f"; {'; '.join(c['reasons'])}" if c['reasons'] else ""))
PY
stop_mock

echo
ttft_run() { # title, then the priority command (may be empty)
  local title=$1; shift
  echo
  echo "## 2b. TTFT error at concurrency 512$title: mock TTFT 50 ms, 10 ms per token, 64 tokens, 2048 requests"
  M=$(free_port)
  start_mock "$M" 50ms 10ms "$@"
  "$@" $LINGO bench --url "http://127.0.0.1:$M" --dialect openai-completions --concurrency 512 \
    --requests-per-level 2048 --input-len 8 --output-len 64 --warmup 512 "${RAMP[@]}" --percentiles 50,99 \
    --json "$WORK/ttft.json" >/dev/null
  curl -sf "http://127.0.0.1:$M/mock/stats?late_last=2048" >"$WORK/mock.json" || echo '{}' >"$WORK/mock.json"
  python3 - "$WORK/ttft.json" "$WORK/mock.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); l = d['levels'][0]
late = json.load(open(sys.argv[2])).get('first_token_late')
err = sorted(r['ttft_s'] - 0.050 for r in l['requests'] if r['ok'])
q = lambda p: err[min(len(err) - 1, max(0, int(-(-p * len(err) // 1)) - 1))]
print(f"TTFT error  p50 {q(0.5) * 1e3:.3f} ms  p99 {q(0.99) * 1e3:.3f} ms  max {err[-1] * 1e3:.3f} ms"
      f"  min {err[0] * 1e3:.3f} ms   (goal p99 < 1 ms)")
c = l['self_check']
ms = lambda x: f"{1e3 * x:.2f}" if x is not None else "-"
print(f"{l['ok']} ok, {l['fail']} failed; {l['agg_tok_s']:.0f} tokens/s; driver CPU {100 * (c['cpu'] or 0):.0f}% of one core;"
      f" send lag p99 {ms(c['send_lag_p99'])} ms; read lag p50 {ms(c.get('read_lag_p50'))} p99 {ms(c.get('read_lag_p99'))} ms")
print(f"self-check: driver-bound: {c['driver_bound']} (expected False: the mock paces the tokens)"
      + (f"; {'; '.join(c['reasons'])}" if c['reasons'] else ""))
if late and late['count']:
    print(f"the mock's own first-token lateness (its write after the due time, the last {late['count']}"
          f" streams): p50 {late['p50_us'] / 1e3:.3f} ms  p99 {late['p99_us'] / 1e3:.3f} ms"
          f"  max {late['max_us'] / 1e3:.3f} ms")
PY
  stop_mock
}
ttft_run ""
if command -v chrt >/dev/null && chrt -f 10 true 2>/dev/null; then
  ttft_run ", real-time priority (chrt -f 10)" chrt -f 10
else
  echo; echo "## 2b at real-time priority: skipped (no chrt, or no right to use SCHED_FIFO)"
fi
