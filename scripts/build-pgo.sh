#!/usr/bin/env bash
# A release build of lingo laid out by a profile of its own proxying (profile-guided
# optimisation): rustc builds an instrumented lingo, `lingo serve` runs a training load through
# it, and the counts it writes at exit tell the second build which branches and functions are
# hot. The proxy's time a token is mostly spent waiting for its code and data again after the
# kernel's turn (docs/performance.md, "where a token's user time goes"), so the layout is what
# PGO is for here.
#
# Training load (a few minutes under instrumentation, run RUNS times): against `lingo mock`,
# through one `lingo serve`, `lingo bench` in every client dialect, streaming and not,
# passthrough and translated; the paced 64-stream load of bench-peers.sh's realistic part; a
# pool of four.
# The proxy's counts weigh WEIGHT times the mock's and the driver's (the same binary: without
# theirs, `lingo bench` and `lingo mock` would be laid out as cold code), so where they share
# code the proxy's branches decide.
#
# Output: $CARGO_TARGET_DIR/pgo/lingo (default target/pgo/lingo). The two builds use their own
# target directories under target/pgo (about 2 GB each), so the plain release build is left
# as it is.
#   REQS=400        requests per training run (each run is also bounded by --duration)
#   WEIGHT=4        the proxy's profile against the mock's and the driver's
#   RUNS=2          training runs, their counts summed. Each run's counts depend on timing
#                   (how events batch): builds from one run each, of the same source, have
#                   differed by 2-5% in callgrind's counts; three builds from two runs each
#                   spanned 0.8-2.2% (docs/performance.md, tenth session)
#   KEEP_GEN=0      1: keep the instrumented build's target directory (a rerun is faster)
# Line tables, for callgrind's source lines in the shipped code: set
# CARGO_PROFILE_RELEASE_DEBUG=line-tables-only (and another CARGO_TARGET_DIR) for the whole
# script, never for the second build alone. Cargo's metadata hash, in every symbol's name,
# includes the debug setting, so a profile from a build without it matches no function, and
# rustc says nothing: that build counted as many instructions as the plain one.
# Needs the toolchain's llvm-tools (installed with rustup when missing). Listens on 127.0.0.1
# only.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ports.sh
TARGET=${CARGO_TARGET_DIR:-target}
PGO=$(mkdir -p "$TARGET/pgo" && cd "$TARGET/pgo" && pwd)
REQS=${REQS:-400}
KEEP_GEN=${KEEP_GEN:-0}
WEIGHT=${WEIGHT:-4}
RUNS=${RUNS:-2}

profdata_tool() {
  find "$(rustc --print sysroot)/lib/rustlib" -name llvm-profdata -type f 2>/dev/null | head -1
}
PROFDATA=$(profdata_tool)
if [ -z "$PROFDATA" ]; then
  rustup component add llvm-tools >&2
  PROFDATA=$(profdata_tool)
fi
[ -n "$PROFDATA" ] || { echo "llvm-profdata not found (rustup component add llvm-tools)" >&2; exit 1; }

echo "== instrumented build" >&2
rm -rf "$PGO/profiles"
mkdir -p "$PGO/profiles/serve" "$PGO/profiles/other"
RUSTFLAGS="-Cprofile-generate=$PGO/profiles/other" CARGO_TARGET_DIR="$PGO/gen" \
  cargo build --release --locked --quiet --bin lingo
GEN=$PGO/gen/release/lingo

pids=()
W=$(mktemp -d)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

# mock URLS_FILE MODEL REPLICAS TTFT ITL: starts a vllm-kind mock, waits for its URLs. Started
# as a command, not through a function: `$!` of a function run in the background is the
# subshell's, and the mock outlived the TERM sent to it (and never wrote its counts).
mock() {
  : >"$1"
  LLVM_PROFILE_FILE=$OTHER LINGO_LOG=warn "$GEN" mock --listen 127.0.0.1:0 --model "$2" \
    --replicas "$3" --kind vllm --ttft "$4" --itl "$5" >"$1" 2>"$1.log" &
  pids+=($!)
  for _ in $(seq 1 200); do [ "$(wc -l <"$1")" -ge "$3" ] && return 0; sleep 0.05; done
  echo "the mock did not start" >&2; cat "$1.log" >&2; exit 1
}

# One training run: the mocks, one proxy and the loads through it; every process writes its
# counts as it exits (a file per run and process, so the runs' counts add up in the merge).
training_run() { # RUN: the run's number, in its files' names
  OTHER=$PGO/profiles/other/$1-%p.profraw
  # Three models, a pool each: one instant endpoint, four instant replicas, one paced endpoint.
  mock "$W/one" mock-model 1 0s 0s
  mock "$W/fleet" fleet 4 0s 0s
  mock "$W/paced" paced 1 20ms 5ms
  pool() { # NAME URLS_FILE
    printf '[pools.%s]\npolicy = "round_robin"\nendpoints = [%s]\n' "$1" \
      "$(sed 's/.*/{ url = "&", kind = "vllm" },/' "$2" | tr -d '\n')"
  }
  { pool one "$W/one"; pool fleet "$W/fleet"; pool paced "$W/paced"; } >"$W/lingo.toml"
  PORT=$(free_port)
  LLVM_PROFILE_FILE="$PGO/profiles/serve/$1-%p.profraw" LINGO_LOG=warn \
    "$GEN" serve --listen "127.0.0.1:$PORT" --config "$W/lingo.toml" >"$W/serve.log" 2>&1 &
  SERVE=$!
  pids+=($SERVE)
  for _ in $(seq 1 200); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/health" && break
    sleep 0.05
  done

  # train MODEL DIALECT CONCURRENCY TOKENS [bench flags...]
  train() {
    local model=$1 dialect=$2 conc=$3 tokens=$4
    shift 4
    echo "== $dialect $model c=$conc $*" >&2
    LLVM_PROFILE_FILE=$OTHER LINGO_LOG=warn "$GEN" bench --url "http://127.0.0.1:$PORT" \
      --dialect "$dialect" --model "$model" --concurrency "$conc" --requests-per-level "$REQS" \
      --warmup 0 --input-len 4 --output-len "$tokens" --duration 60s --timeout 60s \
      --max-fail 0 "$@" >/dev/null
  }
  for dialect in openai-completions sglang openai-chat; do
    train mock-model "$dialect" 32 16
    train mock-model "$dialect" 32 16 --no-stream
    train fleet "$dialect" 32 16
  done
  for dialect in tgi anthropic vllm-legacy llamacpp ollama-generate ollama-chat; do
    train mock-model "$dialect" 8 16
    train mock-model "$dialect" 8 16 --no-stream
  done
  train paced openai-completions 64 64 --ramp-up 100ms
  train paced sglang 64 64 --ramp-up 100ms
  curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics"

  # Each process writes its counts as it exits.
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
}
for run in $(seq 1 "$RUNS"); do
  echo "== training run $run of $RUNS" >&2
  training_run "$run"
done
ls "$PGO"/profiles/serve/*.profraw >/dev/null || { echo "the proxy wrote no profile" >&2; exit 1; }
inputs=()
for f in "$PGO"/profiles/serve/*.profraw; do inputs+=("--weighted-input=$WEIGHT,$f"); done
for f in "$PGO"/profiles/other/*.profraw; do [ -s "$f" ] && inputs+=("$f"); done
"$PROFDATA" merge -o "$PGO/lingo.profdata" "${inputs[@]}"
rm -rf "$PGO/profiles"

echo "== optimised build" >&2
RUSTFLAGS="-Cprofile-use=$PGO/lingo.profdata" CARGO_TARGET_DIR="$PGO/use" \
  cargo build --release --locked --quiet --bin lingo
cp "$PGO/use/release/lingo" "$PGO/lingo"
[ "$KEEP_GEN" = 1 ] || rm -rf "$PGO/gen"
echo "$PGO/lingo"
