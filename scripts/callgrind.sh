#!/usr/bin/env bash
# Instructions per request in `lingo serve` (or in nginx, PROXY=nginx), by callgrind:
# repeatable on a shared, noisy machine where req/s and CPU time are not, as long as nothing
# takes both cores beside it (a build or a test run moves how events batch, and the counts
# with them: -7% for a paced stream, +3% non-streaming, measured). One instant
# `lingo mock --kind vllm`, the proxy on one worker under callgrind, and a client on one
# keep-alive connection sending WARM requests, then N more with collection on; prints
# instructions per request (the N's only) and the top functions by their own instructions.
#   MODE=nonstream|stream|sglang|sglang-stream|chat-stream   (default nonstream; chat-stream:
#                               /v1/chat/completions passed through)
#   N=2000 WARM=300 TOKENS=16   LINGO=path (default: target/release/lingo, built if missing)
#   REPLICAS=1                  more: one round-robin pool of that many mock replicas
#   TTFT=0s ITL=0s              the mock's pacing: with ITL, every event arrives on its own
#                               and is read, decoded and written on its own (per-token cost)
#   OUT=dir                     keep callgrind.out there (default: a temporary directory)
#   LOAD_POLL=1                 0: no engine load polls (`[load] enabled = false`). They run
#                               every 250 ms per endpoint, so under callgrind's slowdown their
#                               share of a count grows with the run's wall time (about 4% of a
#                               paced request); off, counts from runs of different speed agree
#   CONC=0                      more: `lingo bench` keeps CONC requests in flight on CONC
#                               connections (WARM, then N of them), not one request after
#                               another, with its own bodies (4 prompt token ids; streams
#                               ask for token ids and usage on every event, as in
#                               bench-peers.sh's realistic part). Costs only concurrency
#                               brings show (a fleet's endpoints, several streams' events in
#                               one wake-up), and the count still repeats within about 0.5%
#   VG_ARGS=""                  more valgrind flags, e.g. "--cache-sim=yes" for simulated
#                               cache misses (D1mr, DLmr: a token's cold memory)
#   PROXY=lingo|nginx|bare      nginx: the same load through nginx (one worker process,
#                               bench-peers.sh's proxy settings), the yardstick for lingo's
#                               figures; bare: through scripts/bare-relay (the upstream's
#                               bytes relayed read by read on one current-thread tokio
#                               runtime, nothing parsed, counted or timed: the floor under
#                               any tokio proxy's count; built into $TARGET/bare-relay);
#                               both MODE nonstream or stream only, one replica
# Build with line tables for readable names: CARGO_PROFILE_RELEASE_DEBUG=line-tables-only.
# Compare counts only between builds made alike: the same code counted 5,316 instructions a
# paced passthrough token built with line tables and 4,715 without, and the profile-guided
# build (LINGO=target/pgo/lingo) lays out and inlines enough that a cut's saving there can
# be a third of the plain build's.
# Talks to 127.0.0.1 only; bounded by N and curl's timeouts.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/nginx.sh
. scripts/lib/serial.sh
MODE=${MODE:-nonstream} N=${N:-2000} WARM=${WARM:-300} TOKENS=${TOKENS:-16} LOAD_POLL=${LOAD_POLL:-1}
VG_ARGS=${VG_ARGS:-} REPLICAS=${REPLICAS:-1} TTFT=${TTFT:-0s} ITL=${ITL:-0s} PROXY=${PROXY:-lingo} CONC=${CONC:-0}
serial_setup

LPORT=$(free_port)
: >"$OUT/mock.urls"
LINGO_LOG=warn "$LINGO" mock --listen 127.0.0.1:0 --replicas "$REPLICAS" --kind vllm \
  --ttft "$TTFT" --itl "$ITL" \
  >"$OUT/mock.urls" 2>"$OUT/mock.log" &
pids+=($!)
for _ in $(seq 1 200); do [ "$(wc -l <"$OUT/mock.urls")" -ge "$REPLICAS" ] && break; sleep 0.05; done
mapfile -t URLS <"$OUT/mock.urls"
[ "${#URLS[@]}" -ge "$REPLICAS" ] || { echo "the mock did not start" >&2; cat "$OUT/mock.log" >&2; exit 1; }
if [ "$PROXY" = bare ]; then
  [[ $MODE == sglang* || $MODE == chat-stream ]] && { echo "bare relays, it does not translate: MODE nonstream or stream" >&2; exit 2; }
  [ "$REPLICAS" = 1 ] || { echo "bare relays to one upstream: REPLICAS=1" >&2; exit 2; }
  CARGO_TARGET_DIR=$TARGET/bare-relay cargo build --release --locked --quiet \
    --manifest-path scripts/bare-relay/Cargo.toml
  valgrind --tool=callgrind --instr-atstart=no $VG_ARGS --callgrind-out-file="$OUT/callgrind.out" \
    "$TARGET/bare-relay/release/bare-relay" "127.0.0.1:$LPORT" "${URLS[0]#http://}" \
    >"$OUT/proxy.log" 2>&1 &
  VG=$!
elif [ "$PROXY" = nginx ]; then
  command -v nginx >/dev/null || { echo "nginx is not installed (scripts/bench-peers.sh installs it)" >&2; exit 1; }
  [[ $MODE == sglang* ]] && { echo "nginx does not translate: MODE nonstream or stream" >&2; exit 2; }
  upstreams=("${URLS[@]:0:$REPLICAS}")
  nginx_conf "$OUT/nginx" "$LPORT" 1 "${upstreams[@]#http://}"
  valgrind --tool=callgrind --instr-atstart=no $VG_ARGS --callgrind-out-file="$OUT/callgrind.out" \
    nginx -c "$OUT/nginx/nginx.conf" -g 'daemon off; master_process off;' >"$OUT/proxy.log" 2>&1 &
  VG=$!
else
  printf '[pools.p]\npolicy = "round_robin"\nendpoints = [%s]\n' \
    "$(printf '{ url = "%s", kind = "vllm" },' "${URLS[@]:0:$REPLICAS}")" >"$OUT/lingo.toml"
  [ "$LOAD_POLL" = 0 ] && printf '[load]\nenabled = false\n' >>"$OUT/lingo.toml"
  LINGO_LOG=warn valgrind --tool=callgrind --instr-atstart=no $VG_ARGS \
    --callgrind-out-file="$OUT/callgrind.out" \
    "$LINGO" serve --listen "127.0.0.1:$LPORT" --config "$OUT/lingo.toml" --workers 1 \
    >"$OUT/proxy.log" 2>&1 &
  VG=$!
fi
pids+=($VG)

serial_request
serial_ready "$LPORT"

# CONC: the MODE's route and stream flag as `lingo bench` speaks them.
concurrent() { # requests
  local args=(--dialect openai-completions)
  case $MODE in
    sglang*) args=(--dialect sglang) ;;
    chat-stream) args=(--dialect openai-chat) ;;
  esac
  case $MODE in nonstream | sglang) args+=(--no-stream) ;; esac
  "$LINGO" bench --url "http://127.0.0.1:$LPORT" "${args[@]}" --model mock-model \
    --concurrency "$CONC" --requests-per-level "$1" --warmup 0 --input-len 4 \
    --output-len "$TOKENS" --duration 600s --timeout 120s --json "$OUT/bench.json" \
    >/dev/null 2>"$OUT/bench.err"
  python3 - "$OUT/bench.json" "$1" "$TOKENS" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))["levels"][0]
if l["ok"] != int(sys.argv[2]) or l["tokens"] != l["ok"] * int(sys.argv[3]):
    sys.exit(f"bench: {l['ok']} ok, {l['fail']} failed, {l['tokens']} tokens: {l.get('errors', [])[:2]}")
PY
}
drive() { if [ "$CONC" -gt 0 ]; then concurrent "$1"; else serial_drive "$LPORT" "$1"; fi; }

drive "$WARM"
callgrind_control -i on "$VG" >/dev/null 2>&1
drive "$N"
callgrind_control -i off "$VG" >/dev/null 2>&1
# Instrumentation off: the profile valgrind writes as the proxy exits holds the N requests only.
kill "$VG"; wait "$VG" 2>/dev/null || true
dump=$OUT/callgrind.out
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ && !t {gsub(",","",$1); t=$1} END {print t}')
echo "proxy=$PROXY mode=$MODE replicas=$REPLICAS conc=$CONC requests=$N tokens=$TOKENS ttft=$TTFT itl=$ITL instructions=$total per_request=$((total / N)) per_token=$((total / N / TOKENS))"
callgrind_annotate --threshold=80 "$dump" 2>/dev/null | sed -n '/file:function/,$p' | sed -n 1,30p
echo "profile: $dump"
