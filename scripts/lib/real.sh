# What the checks against real servers share (sourced by scripts/check-*.sh): ports, the SDK
# scripts through lingo, the dialect tables against the real server, and the Python helpers
# (scripts/lib/realcheck.py) on the path of the checks' own Python.
export PYTHONPATH=scripts/lib${PYTHONPATH:+:$PYTHONPATH}
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

# sdk SCRIPT [ARGS...]: one of tests/python's clients through lingo ($PX, model $MODEL); a
# failure sets rc=1, a missing SDK (exit 3) is a skip.
sdk() {
  local out
  if out=$(timeout 300 python3 "tests/python/$1" --base "$PX" --model "$MODEL" "${@:2}" 2>&1); then
    echo "ok   $1: ${out##*$'\n'}"
  elif [[ $? -eq 3 ]]; then
    echo "skip $1: ${out##*$'\n'}"
  else
    echo "FAIL $1:"; echo "$out" | tail -15; rc=1
  fi
}

# compat_sweep KIND UPSTREAM: every field of docs/dialects.md's tables through lingo to the
# real server at UPSTREAM (serving $MODEL), each outcome held against the table's KIND column,
# which lingo's mock of that kind made (tests/compat_table.rs). A difference sets rc=1.
compat_sweep() {
  local log=$LOGS/compat.log
  if LINGO_COMPAT_UPSTREAM=$2 LINGO_COMPAT_KIND=$1 LINGO_COMPAT_MODEL=$MODEL timeout 900 \
      cargo test --quiet --test compat_table -- --ignored --nocapture >"$log" 2>&1; then
    echo "ok   docs/dialects.md's $1 column: $(grep -c '^ok  ' "$log") fields agree with the real server"
  else
    echo "FAIL docs/dialects.md's $1 column:"; grep -E '^DIFF|panicked|error' "$log" | head -30; rc=1
  fi
}

# serve_pool PORT URL=GROUP...: lingo on 127.0.0.1:PORT in front of one round-robin pool of
# these endpoints, probed every 500 ms and ejected after two failures (so a killed server is
# out, and a restarted one back, within seconds); sets PX once it answers.
serve_pool() {
  local port=$1 ep
  shift
  {
    printf '[health]\ninterval = "500ms"\nunhealthy_after = 2\nbackoff = "500ms"\n'
    printf '[pools.gemma]\npolicy = "round_robin"\nendpoints = [\n'
    for ep in "$@"; do printf '  { url = "%s", group = "%s" },\n' "${ep%=*}" "${ep##*=}"; done
    printf ']\n'
  } >"$LOGS/fleet.toml"
  "$LINGO" serve --listen "127.0.0.1:$port" --config "$LOGS/fleet.toml" >"$LOGS/lingo.log" 2>&1 & pids+=($!)
  PX=http://127.0.0.1:$port
  for _ in $(seq 100); do curl -sf "$PX/health" >/dev/null 2>&1 && break; sleep 0.1; done
}
