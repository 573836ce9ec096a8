#!/usr/bin/env bash
# How accurate and how cheap lingo's metrics are, measured side by side in one run (a
# benchmark, not a test).
#
# 1. Accuracy: a mock with TTFT 50 ms and 10 ms per token; `lingo bench` measures TTFT and
#    ITL as the client sees them, lingo records its own (request log and /metrics).
#    Goals: TTFT medians within 1 ms; ITL within 0.5 ms.
# 2. Cost: an instant mock; the same streaming load through lingo with metrics on and with
#    `--no-metrics`, alternated; goal: metrics cost under 5% of throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
LINGO=target/release/lingo
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
. scripts/lib/ports.sh
wait_http() { for _ in $(seq 1 100); do curl -sf "$1" >/dev/null && return 0; sleep 0.05; done; echo "not up: $1" >&2; return 1; }

echo "# lingo metrics accuracy and cost — $(date -u +%Y-%m-%d), $(nproc) cores"
M=$(free_port); L=$(free_port)
LINGO_LOG=warn $LINGO mock --listen 127.0.0.1:$M --ttft 50ms --itl 10ms & PIDS+=($!)
wait_http http://127.0.0.1:$M/health
LINGO_LOG=warn $LINGO serve --listen 127.0.0.1:$L --upstream http://127.0.0.1:$M --upstream-kind vllm \
  --request-log "$WORK/requests.jsonl" & PIDS+=($!)
wait_http http://127.0.0.1:$L/health
$LINGO bench --url http://127.0.0.1:$L --dialect openai-completions --concurrency 8 \
  --input-len 64 --output-len 32 --requests-per-level 200 --warmup 0 --json "$WORK/bench.json" >/dev/null
curl -s http://127.0.0.1:$L/metrics > "$WORK/metrics.txt"
sleep 0.5 # the request log is written off the request path
python3 - "$WORK" <<'PY'
import json, statistics, sys
w = sys.argv[1]
lvl = json.load(open(f"{w}/bench.json"))["levels"][0]
log = [json.loads(l) for l in open(f"{w}/requests.jsonl")]
lingo_ttft = statistics.median(r["ttft"] for r in log)
def metric(name):
    return sum(float(l.rsplit(" ", 1)[1]) for l in open(f"{w}/metrics.txt") if l.startswith(name + "{"))
lingo_itl = metric("lingo_inter_token_latency_seconds_sum") / metric("lingo_inter_token_latency_seconds_count")
print("\n## 1. Accuracy (mock TTFT 50 ms, 10 ms/token, 32 tokens, concurrency 8, 200 requests)")
print(f"TTFT median: client {lvl['ttft_p50']*1e3:.3f} ms, lingo {lingo_ttft*1e3:.3f} ms, "
      f"difference {abs(lvl['ttft_p50']-lingo_ttft)*1e3:.3f} ms (goal < 1 ms)")
print(f"ITL mean:    client {lvl['tpot_mean']*1e3:.3f} ms (TPOT), lingo {lingo_itl*1e3:.3f} ms, "
      f"difference {abs(lvl['tpot_mean']-lingo_itl)*1e3:.3f} ms (goal < 0.5 ms)")
PY

echo
echo "## 2. Cost (instant mock, 16 tokens, streaming, concurrency 32)"
M2=$(free_port); ON=$(free_port); OFF=$(free_port)
LINGO_LOG=warn $LINGO mock --listen 127.0.0.1:$M2 & PIDS+=($!)
wait_http http://127.0.0.1:$M2/health
LINGO_LOG=warn $LINGO serve --listen 127.0.0.1:$ON --upstream http://127.0.0.1:$M2 --upstream-kind vllm & PIDS+=($!)
LINGO_LOG=warn $LINGO serve --listen 127.0.0.1:$OFF --upstream http://127.0.0.1:$M2 --upstream-kind vllm --no-metrics & PIDS+=($!)
wait_http http://127.0.0.1:$ON/health; wait_http http://127.0.0.1:$OFF/health
for round in 1 2 3; do
  for which in on off; do
    port=$([ $which = on ] && echo $ON || echo $OFF)
    $LINGO bench --url http://127.0.0.1:$port --dialect sglang --concurrency 32 --input-len 16 \
      --output-len 16 --requests-per-level 4000 --warmup 32 --json "$WORK/$which-$round.json" >/dev/null
  done
done
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
tps = lambda f: json.load(open(f))["levels"][0]["agg_tok_s"]
on = [tps(f"{w}/on-{r}.json") for r in (1, 2, 3)]
off = [tps(f"{w}/off-{r}.json") for r in (1, 2, 3)]
print("metrics on  tok/s:", " ".join(f"{x:.0f}" for x in on))
print("metrics off tok/s:", " ".join(f"{x:.0f}" for x in off))
print(f"cost of metrics: {(1 - sum(on)/sum(off))*100:.1f}% of throughput (goal < 5%)")
PY
