#!/usr/bin/env bash
# Coverage-guided fuzzing of lingo's decoders: `scripts/fuzz.sh [SECONDS_PER_TARGET]`.
#
# Runs each cargo-fuzz target in fuzz/ (request, stream, response, http1; TARGETS="http1"
# for some of them) for the given time (default 60 s), one after another, copies any crash,
# timeout or out-of-memory input into fuzz/regressions/<target>/ (replayed by `cargo test
# --test fuzz_regressions`), and prints executions and findings per target. Exits 1 if
# anything was found.
#
# cargo-fuzz wants a nightly compiler for its `-Z` flags (sanitizer coverage); this project
# pins a stable one, so the build runs with RUSTC_BOOTSTRAP=1, which lets stable rustc accept
# them. The sanitizer is off (`-s none`): lingo forbids unsafe code, so AddressSanitizer would
# only slow the run; `-a` keeps debug assertions and overflow checks on, so an arithmetic
# overflow is a finding. The fuzz build has its own target dir, fuzz/target (gitignored, about
# 1 GB); the growing working corpus lives there too, so the committed one stays small.
set -euo pipefail

secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
read -ra targets <<<"${TARGETS:-request stream response http1}"
work="$root/fuzz/target/corpus"
logs="$root/fuzz/target/logs"
flags=(-s none -a)

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

# Refresh the seed corpus from tests/fixtures (and check the committed corpora still pass).
FUZZ_WRITE_SEEDS=1 cargo test --locked --test fuzz_regressions

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="$root/fuzz/target"
cargo fuzz build "${flags[@]}"

found=0
summary=()
for t in "${targets[@]}"; do
    mkdir -p "$work/$t" "$logs" "fuzz/regressions/$t" "fuzz/artifacts/$t"
    before=$(find "fuzz/artifacts/$t" -type f | wc -l)
    log="$logs/$t.log"
    echo "== $t: ${secs}s (log: $log)"
    # libFuzzer stops at its first finding; a nonzero exit is reported below, not fatal.
    cargo fuzz run "${flags[@]}" "$t" "$work/$t" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -dict=fuzz/lingo.dict -max_len=65536 -print_final_stats=1 >"$log" 2>&1 || true
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    new=$(find "fuzz/artifacts/$t" -type f | wc -l)
    findings=$((new - before))
    if [ "$findings" -gt 0 ]; then
        found=1
        cp -n fuzz/artifacts/"$t"/* "fuzz/regressions/$t/"
        grep -m1 -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" || true
    fi
    summary+=("$(printf '%-9s %6ss %12s execs  %d findings' "$t" "$secs" "$execs" "$findings")")
done

echo
echo "target      time     executions  findings"
printf '%s\n' "${summary[@]}"
[ "$found" -eq 0 ] || echo "new inputs copied to fuzz/regressions/; replay: cargo test --test fuzz_regressions"
exit "$found"
