#!/usr/bin/env bash
# Routing for the prefix cache, measured side by side in one run (a benchmark, not a test).
#
# Four SGLang-kind mocks with prefix caches (LRU over 16-token blocks), a prefill cost per
# uncached token and a cap on running requests (a queue behind it), so where a request goes
# decides its TTFT. Three workloads through each router:
#   multiturn: CONV conversations of TURNS turns behind one shared system prompt of SYS tokens,
#              CONC conversations in flight (their first turns spread over RAMP, as live
#              traffic arrives, not all cold at once), each turn's prompt the whole history
#              so far; each mock's cache (CACHE_TOKENS) could hold every conversation in flight;
#   multiturn-tight: the same against four other mocks whose caches (TIGHT_CACHE_TOKENS) hold
#              the system prompt and about a quarter of the conversations in flight: what one
#              server cannot keep, four can, as with real servers whose prefix cache is the KV
#              memory the running batch leaves free;
#   random:    RANDOM_N independent prompts of 512 tokens, no sharing, concurrency CONC.
# Routers: lingo with every policy, and SGLang's own router (PyPI `sglang-router`) with
# `cache_aware` and `round_robin`, all in front of the same mocks (caches flushed between runs).
# Per run: TTFT p50/p99, output tokens/s, the mocks' prefix-cache hit rate, failures, and how
# evenly the load spread (max/mean requests per mock). Then two lingo replicas with
# prefix_affinity, each fed half of the conversations (`lingo bench --url A --url B`), on both
# multi-turn workloads.
#
# Needs cargo, python3 (a venv for sglang-router is made under target/bench-venv), curl.
# Everything listens on 127.0.0.1; every load is bounded in count.
set -euo pipefail
cd "$(dirname "$0")/.."
# POLICIES, ROUTERS, WORKLOADS narrow a run; POOL_EXTRA adds lines to lingo's pool (e.g.
# 'load_bound = 1.5'), LINGO_EXTRA to its config (e.g. $'[load]\nenabled = false').
POLICIES=${POLICIES-prefix_affinity least_outstanding round_robin random session}
ROUTERS=${ROUTERS-cache_aware round_robin}
WORKLOADS=${WORKLOADS-multiturn multiturn-tight random}
CONV=${CONV:-192}; TURNS=${TURNS:-5}; SYS=${SYS:-1024}; CONC=${CONC:-16}; RANDOM_N=${RANDOM_N:-192}
RAMP=${RAMP:-1s}; CACHE_TOKENS=${CACHE_TOKENS:-24576}; TIGHT_CACHE_TOKENS=${TIGHT_CACHE_TOKENS:-4096}
MOCK_FLAGS=(--kind sglang --ttft 2ms --itl 2ms
  --prefill-per-token "${PREFILL:-100us}" --max-running "${MAX_RUNNING:-4}")
cargo build --release --quiet
LINGO=$PWD/target/release/lingo
VENV=$PWD/target/bench-venv
if ! "$VENV/bin/python" -c 'import sglang_router' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check sglang-router
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

. scripts/lib/ports.sh
wait_http() { for _ in $(seq 1 300); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "not up: $1" >&2; return 1; }

# Four mocks per process, one process per cache size; their URLs come on stdout once all
# listen. `use_mocks NAME` points MOCKS (what the functions below act on) at one set.
start_mocks() { # name cache-tokens
  LINGO_LOG=warn "$LINGO" mock --listen 127.0.0.1:0 --replicas 4 --cache-tokens "$2" "${MOCK_FLAGS[@]}" > "$WORK/mocks.$1" & PIDS+=($!)
  for _ in $(seq 1 100); do [ "$(wc -l < "$WORK/mocks.$1")" -ge 4 ] && break; sleep 0.05; done
  [ "$(wc -l < "$WORK/mocks.$1")" -eq 4 ] || { echo "the $1 mocks did not start" >&2; exit 1; }
}
use_mocks() { mapfile -t MOCKS < "$WORK/mocks.$1"; }
start_mocks ample "$CACHE_TOKENS"
start_mocks tight "$TIGHT_CACHE_TOKENS"

stats() { # -> one JSON list of the mocks' /mock/stats
  python3 - "${MOCKS[@]}" <<'PY'
import json, sys, urllib.request
print(json.dumps([json.load(urllib.request.urlopen(u + "/mock/stats")) for u in sys.argv[1:]]))
PY
}
flush() { for m in "${MOCKS[@]}"; do curl -sf -X POST "$m/flush_cache" >/dev/null; done; }

start_lingo() { # policy; sets PID and URL
  local port; port=$(free_port)
  { echo "${LINGO_EXTRA:-}"; echo "[pools.bench]"; echo "policy = \"$1\""; echo "${POOL_EXTRA:-}"; echo "endpoints = ["
    for m in "${MOCKS[@]}"; do echo "  { url = \"$m\", kind = \"sglang\" },"; done; echo "]"; } > "$WORK/$1.$port.toml"
  LINGO_LOG=warn "$LINGO" serve --listen "127.0.0.1:$port" --config "$WORK/$1.$port.toml" >/dev/null 2>&1 &
  PID=$!; PIDS+=($PID); URL=http://127.0.0.1:$port; wait_http "$URL/health"
}
start_sglang_router() { # policy; sets PID and URL
  local port; port=$(free_port)
  "$VENV/bin/python" -m sglang_router.launch_router --host 127.0.0.1 --port "$port" \
    --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" --policy "$1" --worker-urls "${MOCKS[@]}" --log-level warn >"$WORK/router.$port.log" 2>&1 &
  PID=$!; PIDS+=($PID); URL=http://127.0.0.1:$port; wait_http "$URL/health"
}

bench() { # workload out.json url...
  local workload=$1 out=$2; shift 2
  local urls=(); for u in "$@"; do urls+=(--url "$u"); done
  local shape=(--workload multiturn --conversations "$CONV" --turns "$TURNS" --system-prompt-len "$SYS"
    --input-len 64 --output-len 32)
  [ "$workload" = random ] && shape=(--input-len 512 --output-len 32 --requests-per-level "$RANDOM_N")
  "$LINGO" bench "${urls[@]}" --dialect openai-chat --concurrency "$CONC" "${shape[@]}" \
    --warmup 0 --seed 7 --ramp-up "$RAMP" --json "$out" >/dev/null
}

report() { # name workload before.json after.json bench.json
  python3 - "$@" <<'PY'
import json, sys
name, workload, b, a, out = sys.argv[1:]
before, after = json.load(open(b)), json.load(open(a))
level = json.load(open(out))["levels"][0]
d = lambda k: [x[k] - y[k] for x, y in zip(after, before)]
q, h, reqs = sum(d("prefix_cache_queries")), sum(d("prefix_cache_hits")), d("requests")
mean = sum(reqs) / len(reqs)
ms = lambda v: f"{v * 1e3:9.1f}" if v is not None else "        -"
print(f"{workload:<15} {name:<34} {ms(level.get('ttft_p50'))} {ms(level.get('ttft_p99'))} "
      f"{level['agg_tok_s']:9.0f} {100 * h / max(q, 1):8.1f}% {level['fail']:6d} "
      f"{max(reqs) / max(mean, 1e-9):8.2f}")
PY
}

run() { # name workload url...
  local name=$1 workload=$2; shift 2
  flush; stats > "$WORK/before.json"
  bench "$workload" "$WORK/out.json" "$@"
  stats > "$WORK/after.json"
  report "$name" "$workload" "$WORK/before.json" "$WORK/after.json" "$WORK/out.json" | tee -a "$WORK/table"
}

echo "# lingo routing — $(date -u +%Y-%m-%d), $(nproc) cores; 4 SGLang mocks (cache $CACHE_TOKENS tokens, multiturn-tight $TIGHT_CACHE_TOKENS; prefill ${PREFILL:-100us}/token, max running ${MAX_RUNNING:-4})"
echo "# multiturn: $CONV conversations x $TURNS turns, system prompt $SYS tokens, $CONC in flight, ramp-up $RAMP; random: $RANDOM_N prompts of 512 tokens"
echo
printf '%-15s %-34s %9s %9s %9s %9s %6s %8s\n' workload router "TTFT p50" "TTFT p99" "tok/s" "hit rate" fails "max/mean"
mocks_of() { [ "$1" = multiturn-tight ] && echo tight || echo ample; }
for workload in $WORKLOADS; do
  use_mocks "$(mocks_of "$workload")"
  for policy in $POLICIES; do
    start_lingo "$policy"; run "lingo $policy" "$workload" "$URL"; kill "$PID"
  done
  for policy in $ROUTERS; do
    start_sglang_router "$policy"; run "sglang-router $policy" "$workload" "$URL"; kill "$PID"
  done
done
echo
echo "## Two router replicas, each fed half of the conversations"
for workload in $WORKLOADS; do
  [ "$workload" = random ] && continue
  use_mocks "$(mocks_of "$workload")"
  start_lingo prefix_affinity; p1=$PID u1=$URL
  start_lingo prefix_affinity; p2=$PID u2=$URL
  run "lingo prefix_affinity x2 replicas" "$workload" "$u1" "$u2"
  kill "$p1" "$p2"
  case " $ROUTERS " in *" cache_aware "*) ;; *) continue ;; esac
  start_sglang_router cache_aware; p1=$PID u1=$URL
  start_sglang_router cache_aware; p2=$PID u2=$URL
  run "sglang-router cache_aware x2" "$workload" "$u1" "$u2"
  kill "$p1" "$p2"
done
