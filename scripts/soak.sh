#!/usr/bin/env bash
# Soak: lingo in front of fault-injecting mocks under mixed traffic (a script, not a test).
#
#   scripts/soak.sh [DURATION_SECONDS] [CONCURRENCY]     # default 1800 s, 200 clients
#
# Three lingo instances (in front of a vLLM, an SGLang and an Ollama mock, so passthrough and
# translation both run, SSE and NDJSON), ~200 concurrent clients over every client dialect,
# streaming and not, 20% of requests asking the mock for a fault (hangs, stalls, broken and
# malformed streams, resets, huge error bodies, slow tokens), 5% abandoned by their client.
# Every 10 s it samples each lingo's RSS, open fds and requests in flight. At the end it checks
# that requests sent = lingo_requests_total = request-log lines, in-flight is 0, fds are back
# at the idle level, and reports the RSS slope after warm-up. Exits non-zero on a mismatch.
# Everything listens on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-1800}
CONCURRENCY=${2:-200}
cargo build --release --quiet --bin lingo --example soak
LINGO=${CARGO_TARGET_DIR:-target}/release/lingo
SOAK=${CARGO_TARGET_DIR:-target}/release/examples/soak
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

. scripts/lib/ports.sh
# Up once it answers anything over HTTP (an Ollama mock has no /health).
wait_http() {
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" != 000 ] && return 0
    sleep 0.05
  done
  echo "not up: $1" >&2; return 1
}

LINGO_PIDS=()
URLS=()
for kind in vllm sglang ollama; do
  mport=$(free_port)
  LINGO_LOG=error $LINGO mock --listen "127.0.0.1:$mport" --kind "$kind" --ttft 20ms --itl 5ms \
    --fault-error-bytes 4194304 --fault-slow-ms 300 & PIDS+=($!)
  wait_http "http://127.0.0.1:$mport/health"
  lport=$(free_port)
  # Short upstream timers so the hang faults end in seconds rather than minutes.
  LINGO_LOG=error $LINGO serve --listen "127.0.0.1:$lport" --upstream "http://127.0.0.1:$mport" \
    --upstream-kind "$kind" --request-log "$WORK/$kind.jsonl" \
    --timeout-first-token 3s --timeout-stream-idle 3s --timeout-response-headers 10s & PIDS+=($!)
  LINGO_PIDS+=($!)
  URLS+=("http://127.0.0.1:$lport")
  wait_http "http://127.0.0.1:$lport/health"
done

sample() { # label -> one line per lingo: label pid rss_kb fds in_flight
  local i=0
  for pid in "${LINGO_PIDS[@]}"; do
    local rss fds inflight
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" | wc -l)
    inflight=$(curl -sf "${URLS[$i]}/metrics" | awk '/^lingo_requests_in_flight/ {s+=$2} END {print s+0}')
    echo "$1 $pid $rss $fds $inflight"
    i=$((i + 1))
  done
}

sample idle > "$WORK/idle.txt"
cat "$WORK/idle.txt"
lingo_args=()
for u in "${URLS[@]}"; do lingo_args+=(--lingo "$u"); done
"$SOAK" "${lingo_args[@]}" --duration "$DURATION" --concurrency "$CONCURRENCY" > "$WORK/summary.json" &
DRIVER=$!
start=$(date +%s)
while kill -0 "$DRIVER" 2>/dev/null; do
  sleep 10
  sample "$(( $(date +%s) - start ))" | tee -a "$WORK/samples.txt"
done
wait "$DRIVER"
# Idle pooled upstream connections close after timeouts.pool_idle (4 s).
sleep 6
sample end > "$WORK/end.txt"
cat "$WORK/end.txt"
for kind in vllm sglang ollama; do wc -l < "$WORK/$kind.jsonl"; done > "$WORK/loglines.txt"

python3 - "$WORK" "$DURATION" <<'EOF'
import json, sys
work, duration = sys.argv[1], float(sys.argv[2])
s = json.load(open(f"{work}/summary.json"))
log_lines = sum(int(l) for l in open(f"{work}/loglines.txt"))
def rows(name):
    return [l.split() for l in open(f"{work}/{name}") if l.strip()]
idle, end = rows("idle.txt"), rows("end.txt")
samples = rows("samples.txt")
# RSS of all lingo processes together, per sample time, after a warm-up of 20% (>= 60 s).
by_t = {}
for t, _pid, rss, _fds, _inf in samples:
    by_t[float(t)] = by_t.get(float(t), 0) + int(rss)
warm = max(60.0, 0.2 * duration)
pts = sorted((t, r) for t, r in by_t.items() if t >= warm)
slope = rel = float("nan")
if len(pts) >= 2:
    n = len(pts); mt = sum(t for t, _ in pts) / n; mr = sum(r for _, r in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (r - mr) for t, r in pts) / den if den else 0.0
    lo, hi = min(r for _, r in pts), max(r for _, r in pts)
    rel = (hi - lo) / mr / 2
idle_fds = sum(int(r[3]) for r in idle); end_fds = sum(int(r[3]) for r in end)
in_flight = sum(float(r[4]) for r in end)
print(json.dumps(s))
print(f"requests sent {s['sent']}, lingo_requests_total {int(s['lingo_requests_total'])}, request-log lines {log_lines}")
print(f"in flight at end {in_flight:g}; fds idle {idle_fds}, end {end_fds}")
if pts:
    print(f"RSS after warm-up: {pts[0][1]} kB -> {pts[-1][1]} kB, within +-{rel*100:.1f}% of its mean, slope {slope*60:.1f} kB/min")
ok = (s["sent"] == s["lingo_requests_total"] == log_lines and in_flight == 0
      and end_fds <= idle_fds + 2 and s["hung"] == 0 and s["transport"] == 0
      and (rel != rel or rel <= 0.10))
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
EOF
