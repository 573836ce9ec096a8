#!/usr/bin/env bash
# What the fleet costs, measured side by side in one run on this machine (a benchmark, not a
# test). Two parts:
#
# 1. Instant mock (no delays, 16 tokens), `wrk -t1 -c32`, streaming and not, rounds
#    alternating: lingo as it was before the fleet entered the request path (BASE_REV, built
#    into its own target directory), today's lingo with the same single upstream (a pool of
#    one), and today's lingo in front of a pool of four instant mocks (round robin). Prints
#    req/s, latency p50/p99 and the proxy's CPU time per request (its threads' time on a CPU,
#    from /proc in ns); the goal is a pool of one within 5% of the old single upstream's CPU
#    per request.
# 2. Four realistic mocks (TTFT 20 ms, 5 ms per token, 64 tokens), 128 concurrent streams as
#    four `lingo bench` drivers of 32: each driver straight at its own mock, then all four at
#    one lingo fronting the four (least_outstanding). Goal: >= 0.97 of direct throughput.
#
# Needs cargo, git, python3, curl, wrk (apt-get install -y wrk). Everything listens on
# 127.0.0.1; every load is bounded in time or count.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE_REV=${BASE_REV:-2d0d248}  # the last commit before src/fleet/ (parent of 0f678e9)
DURATION=${DURATION:-10s}      # wrk duration per run in part 1
ROUNDS=${ROUNDS:-2}            # rounds of part 1
REQS=${REQS:-960}              # requests per driver in part 2
command -v wrk >/dev/null || { echo "needs wrk (apt-get install -y wrk)" >&2; exit 1; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  git -C "$ROOT" worktree remove --force "$WORK/base" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --quiet
cp target/release/lingo "$WORK/lingo"
# The baseline in a worktree of its own, built into target/bench-base (kept between runs).
git worktree add --quiet --detach "$WORK/base" "$BASE_REV"
(cd "$WORK/base" && CARGO_TARGET_DIR="$ROOT/target/bench-base" cargo build --release --quiet)
cp target/bench-base/release/lingo "$WORK/lingo-base"
LINGO=$WORK/lingo

. scripts/lib/ports.sh
wait_http() { for _ in $(seq 1 200); do curl -sf "$1" >/dev/null && return 0; sleep 0.05; done; echo "not up: $1" >&2; return 1; }
start_mock() { # port ttft itl
  LINGO_LOG=warn $LINGO mock --listen "127.0.0.1:$1" --kind vllm --ttft "$2" --itl "$3" & PIDS+=($!)
  wait_http "http://127.0.0.1:$1/health"
}
start_proxy() { # binary port args...; sets PROXY_PID
  local bin=$1 port=$2; shift 2
  LINGO_LOG=warn $bin serve --listen "127.0.0.1:$port" "$@" & PROXY_PID=$!; PIDS+=($PROXY_PID)
  wait_http "http://127.0.0.1:$port/health"
}
. scripts/lib/cpu.sh
cpu_ticks() { cpu_ns "$1"; }

echo "# lingo fleet cost — $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m), base $BASE_REV vs $(git rev-parse --short HEAD)"
echo
echo "## 1. Instant mock, 16 tokens, wrk -t1 -c32 for $DURATION, $ROUNDS rounds"
MI=(); for _ in 1 2 3 4; do p=$(free_port); start_mock "$p" 0s 0s; MI+=("$p"); done
printf '[pools.bench]\npolicy = "%s"\nendpoints = [%s]\n' round_robin \
  "$(printf '{ url = "http://127.0.0.1:%s", kind = "vllm" },' "${MI[@]}")" > "$WORK/pool4.toml"
ONE=(--upstream "http://127.0.0.1:${MI[0]}" --upstream-kind vllm)
P_BASE=$(free_port); start_proxy "$WORK/lingo-base" "$P_BASE" "${ONE[@]}"; PID_BASE=$PROXY_PID
P_ONE=$(free_port); start_proxy "$LINGO" "$P_ONE" "${ONE[@]}"; PID_ONE=$PROXY_PID
P_FOUR=$(free_port); start_proxy "$LINGO" "$P_FOUR" --config "$WORK/pool4.toml"; PID_FOUR=$PROXY_PID

NS='{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true}'
ST='{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true,"stream":true}'
run_wrk() { # port pid body -> "req/s p50 p99 cpu_us_per_req"
  printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' \
    "'$3'" > "$WORK/post.lua"
  local before after out
  before=$(cpu_ticks "$2")
  out=$(wrk -t1 -c32 -d"$DURATION" --latency -s "$WORK/post.lua" "http://127.0.0.1:$1/v1/completions")
  after=$(cpu_ticks "$2")
  python3 - "$before" "$after" 1000000000 <<PY
import re, sys
out = """$out"""
before, after, hz = map(int, sys.argv[1:])
n = int(re.search(r"(\d+) requests in", out).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
def ms(q):
    v, unit = re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)", out).groups()
    return float(v) * {"us": 1e-3, "ms": 1, "s": 1e3}[unit]
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
if bad: sys.exit(f"wrk saw {bad.group(1)} failed responses")
print(f"{rps:.0f} {ms(50):.2f} {ms(99):.2f} {(after - before) / hz / n * 1e6:.1f}")
PY
}
declare -A CPU
printf '%-6s %-13s %-30s %10s %9s %9s %12s\n' round mode path "req/s" "p50 ms" "p99 ms" "CPU µs/req"
for r in $(seq 1 "$ROUNDS"); do
  for mode in non-stream stream; do
    body=$NS; [ $mode = stream ] && body=$ST
    for path in base one four; do
      case $path in
        base) port=$P_BASE; pid=$PID_BASE; name="before the fleet ($BASE_REV)";;
        one) port=$P_ONE; pid=$PID_ONE; name="pool of one (today)";;
        four) port=$P_FOUR; pid=$PID_FOUR; name="pool of four, round robin";;
      esac
      read -r rps p50 p99 cpu < <(run_wrk "$port" "$pid" "$body")
      CPU[$mode.$path]="${CPU[$mode.$path]:-} $cpu"
      printf '%-6s %-13s %-30s %10s %9s %9s %12s\n' "$r" "$mode" "$name" "$rps" "$p50" "$p99" "$cpu"
    done
  done
done
echo
for mode in non-stream stream; do
  python3 - "$mode" "${CPU[$mode.base]}" "${CPU[$mode.one]}" "${CPU[$mode.four]}" <<'PY'
import statistics, sys
mode, base, one, four = sys.argv[1], *[[float(x) for x in a.split()] for a in sys.argv[2:]]
# Paired: each round's ratio to the baseline measured next to it (the machine drifts between
# rounds more than between neighbours), then the median over rounds.
paired = lambda xs: statistics.median(x / b for x, b in zip(xs, base))
print(f"{mode:<11} CPU/request, median of per-round ratios: pool of one {paired(one):.3f}x "
      f"before the fleet (goal <= 1.05), pool of four {paired(four):.3f}x")
PY
done

echo
echo "## 2. Four realistic mocks (TTFT 20 ms, 5 ms/token, 64 tokens), 128 streams (4 drivers x 32)"
MR=(); for _ in 1 2 3 4; do p=$(free_port); start_mock "$p" 20ms 5ms; MR+=("$p"); done
printf '[pools.bench]\npolicy = "least_outstanding"\nendpoints = [%s]\n' \
  "$(printf '{ url = "http://127.0.0.1:%s", kind = "vllm" },' "${MR[@]}")" > "$WORK/real4.toml"
P_REAL=$(free_port); start_proxy "$LINGO" "$P_REAL" --config "$WORK/real4.toml"
drive() { # tag port...: one driver of 32 per port, all at once; prints total tok/s and TTFT p50
  local tag=$1; shift; local i=0 jobs=()
  for port in "$@"; do
    $LINGO bench --url "http://127.0.0.1:$port" --dialect openai-completions --concurrency 32 \
      --input-len 128 --output-len 64 --requests-per-level "$REQS" --warmup 8 \
      --json "$WORK/$tag.$i.json" >/dev/null & jobs+=($!); i=$((i + 1))
  done
  wait "${jobs[@]}"
  python3 - "$WORK" "$tag" <<'PY'
import glob, json, statistics, sys
work, tag = sys.argv[1:]
levels = [json.load(open(f))["levels"][0] for f in sorted(glob.glob(f"{work}/{tag}.*.json"))]
fails = sum(l.get("fail", 0) for l in levels)
if fails: sys.exit(f"{tag}: {fails} failed requests")
# The drivers start together; the slowest one's wall time spans them all.
tok_s = sum(l["tokens"] for l in levels) / max(l["wall_s"] for l in levels)
print(tok_s, statistics.median(l["ttft_p50"] for l in levels))
PY
}
printf '%-6s %-32s %12s %10s %14s\n' round path "tok/s" ratio "TTFT p50 ms"
for r in 1 2; do
  read -r d_tps d_ttft < <(drive "direct$r" "${MR[@]}")
  read -r l_tps l_ttft < <(drive "lingo$r" "$P_REAL" "$P_REAL" "$P_REAL" "$P_REAL")
  python3 - "$r" "$d_tps" "$d_ttft" "$l_tps" "$l_ttft" <<'PY'
import sys
r, dt, dttft, lt, lttft = sys.argv[1], *map(float, sys.argv[2:])
print(f"{r:<6} {'four mocks directly':<32} {dt:12.0f} {1:10.3f} {dttft * 1e3:14.2f}")
print(f"{r:<6} {'lingo, pool of four':<32} {lt:12.0f} {lt / dt:10.3f} {lttft * 1e3:14.2f}"
      "   (goal >= 0.97)")
PY
done
