#!/usr/bin/env bash
# lingo against nginx and the SGLang and vLLM projects' routers, side by side in one run on this
# machine (a benchmark, not a test; issue 12's goals are ratios of its figures).
#
# 1. Instant upstream (`lingo mock --kind vllm`, no delays, 16 tokens): `wrk -t1 -c$CONC` for
#    $DURATION per run, a 16-token /v1/completions POST, streaming and not, through each path:
#    direct, nginx, sglang-router, vllm-router, lingo passthrough (OpenAI completions to the
#    vLLM upstream), lingo translation (an SGLang /generate body to the same upstream), and lingo
#    in front of a pool of four mock replicas (round robin) in both routes, beside lingo's pool
#    of one. Rounds alternate (every path once per round, the order reversed every other
#    round) so drift, and a path's place after another, weigh on all alike.
#    Each run prints req/s, latency p50/p99 and the proxy's CPU per request: time on a CPU from
#    /proc (schedstat, in ns) of every process of the proxy (nginx's master and workers, a
#    router and its children), before and after, over requests completed.
# 2. Realistic upstream (TTFT 20 ms, 5 ms per token, 64 tokens), $REAL_CONC concurrent streams
#    driven by `lingo bench`: tok/s, TTFT p50, added TTFT p50 against direct in the same round,
#    and the proxy's CPU per streamed token (CPU delta / output tokens delivered).
# 2b. The same realistic load through two paths at once, each with its own mock and driver
#    (two lingo processes alike as a control, nginx and lingo passthrough, nginx and lingo
#    translation, lingo's pool of one and its fleet of four in each route): CPU per streamed
#    token of both, B / A per round. Both meet the machine in the same state, so the ratio
#    holds still where part 2's moves.
# 2c. The TTFT each proxy adds with one stream at a time (4 tokens a request): the floor under
#    part 2's added TTFT, which is this plus queueing behind other streams' events.
# 3. Memory: lingo's RSS (VmRSS) against in-flight streams ($MEM_STEPS), held open by a slow
#    mock and one bounded `lingo bench` per step; the count is read from lingo's own
#    lingo_requests_in_flight before RSS is read. Prints the least-squares slope in KiB per
#    stream, and nginx's (established client connections from `ss`) for reference.
# Then the ratios issue 12's goals are written in.
#
# Knobs (environment):
#   DURATION=10s      wrk duration per run in part 1
#   ROUNDS=4          rounds of parts 1 and 2 (a round's ratio moves by up to ±15% on this
#                     machine: the median of two is their mean, one odd round moves it half
#                     way; of four, one odd round barely moves it)
#   CONC=32           wrk connections in part 1
#   WARM=1s           an unrecorded wrk run per path and mode before round 1 (0 or empty: none)
#   REAL_CONC=64      concurrent streams in part 2
#   REAL_REQS=1280    requests per path and round in part 2
#   MEM_STEPS="0 500 1000 1500 2000"   in-flight streams at which part 3 reads RSS
#   MEM_ITL=100ms MEM_TOKENS=120       part 3's streams: long enough to stay open while read
#   MEM_NGINX=1       also measure nginx in part 3 (0: lingo only)
#   ROUTER_POLICY=round_robin          both routers' policy (one worker: the proxying cost only)
#   PARTS="instant realistic idle paired memory"   which parts to run
#   IDLE_REQS=200 IDLE_ROUNDS=2   part 2c: requests a path and round, one stream at a time
#   PAIRS="pass/pass nginx/pass nginx/trans pass/fpass trans/ftrans direct/nginx direct/pass
#          direct/trans"   part 2b's pairs, A/B (pass/pass: two lingo processes alike, the
#                     measure's own spread; direct: the mock alone, for the TTFT a proxy adds)
#   PAIR_ROUNDS=8 PAIR_REQS=1280                              part 2b's rounds, requests a side
#   INSTALL=1         install what is missing (0: skip what is missing)
#   LINGO_BIN=path    measure this lingo binary instead of building this checkout's
#   PGO=0             1: measure this checkout's profile-guided build (scripts/build-pgo.sh,
#                     about 15 minutes more) instead of the plain release build
#   LINGO_WORKERS=n   lingo serve's `workers` (read by lingo itself; unset: one per core; 0: tokio's)
#   KEEP=1            keep the work directory (every process's log, the bench JSON) at exit
#
# Installs (as root, when missing): nginx-light and wrk from Debian; sglang-router and
# vllm-router from PyPI into ${CARGO_TARGET_DIR:-target}/bench-venv. A router that cannot be
# installed or does not start is reported and skipped. Everything listens on 127.0.0.1; every
# load is bounded in time (wrk -d, bench --duration and --timeout, bounded polls).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/nginx.sh
. scripts/lib/realistic.sh
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-4}
CONC=${CONC:-32}
WARM=${WARM:-1s}
REAL_CONC=${REAL_CONC:-64}
REAL_REQS=${REAL_REQS:-1280}
MEM_STEPS=${MEM_STEPS:-0 500 1000 1500 2000}
MEM_ITL=${MEM_ITL:-100ms}
MEM_TOKENS=${MEM_TOKENS:-120}
MEM_NGINX=${MEM_NGINX:-1}
ROUTER_POLICY=${ROUTER_POLICY:-round_robin}
PARTS=${PARTS:-instant realistic idle paired memory}
PAIRS=${PAIRS:-pass/pass nginx/pass nginx/trans pass/fpass trans/ftrans direct/nginx direct/pass direct/trans}
PAIR_ROUNDS=${PAIR_ROUNDS:-8}
PAIR_REQS=${PAIR_REQS:-1280}
IDLE_REQS=${IDLE_REQS:-200}
IDLE_ROUNDS=${IDLE_ROUNDS:-2}
INSTALL=${INSTALL:-1}
KEEP=${KEEP:-0}
mkdir -p "${CARGO_TARGET_DIR:-target}"
TARGET=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)
VENV=$TARGET/bench-venv

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "$KEEP" = 1 ]; then echo "kept $WORK (logs, configs, bench JSON)" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
# 2,000 streams through a proxy are 4,000 sockets; the mock and the driver hold as many.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# ---------------------------------------------------------------------------------------------
# Tools
install_tools() {
  local apt=()
  command -v nginx >/dev/null || apt+=(nginx-light)
  command -v wrk >/dev/null || apt+=(wrk)
  if [ ${#apt[@]} -gt 0 ] && [ "$INSTALL" = 1 ]; then
    echo "installing ${apt[*]} (apt-get)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt[@]}"; } \
      >"$WORK/apt.log" 2>&1 || echo "apt-get install ${apt[*]} failed (see above); going on" >&2
  fi
  [ -x "$VENV/bin/pip" ] || [ "$INSTALL" != 1 ] || python3 -m venv "$VENV" >&2 ||
    echo "python3 -m venv failed: no routers" >&2
  local pkg
  for pkg in sglang-router vllm-router; do
    [ -x "$VENV/bin/$pkg" ] || [ "$INSTALL" != 1 ] || [ ! -x "$VENV/bin/pip" ] ||
      "$VENV/bin/pip" install -q "$pkg" >&2 || echo "pip install $pkg failed: skipped" >&2
  done
}
install_tools
# LINGO_BIN measures another build (an A/B of two commits); by default, this checkout's,
# plain or (PGO=1) profile-guided.
if [ -n "${LINGO_BIN:-}" ]; then
  build=$LINGO_BIN
elif [ "${PGO:-0}" = 1 ]; then
  build=$(scripts/build-pgo.sh | tail -1)
else
  cargo build --release --quiet
  build=$TARGET/release/lingo
fi
cp "$build" "$WORK/lingo"  # a rebuild during the run changes nothing here
LINGO=$WORK/lingo

# ---------------------------------------------------------------------------------------------
# Processes
. scripts/lib/ports.sh
# Until a POST answers 200: a proxy is ready when it proxies, not when it listens.
wait_post() { # url body [tries]
  for _ in $(seq 1 "${3:-400}"); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$1")" = 200 ] && return 0
    sleep 0.05
  done
  return 1
}
stop() { # pid...: TERM, then KILL after 5 s
  local p
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}
# /proc accounting over a process and all its descendants (nginx workers, router children).
cat >"$WORK/proc.py" <<'PY'
import os, sys
what, root = sys.argv[1], int(sys.argv[2])
kids, val = {}, {}
def on_cpu(task):  # a thread's ns on a CPU; 0 once it has left (its time leaves with it)
    try:
        return int(open(f"{task}/schedstat").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
for d in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{d}/stat").read()
        f = stat[stat.rindex(")") + 2:].split()  # f[n-3] is field n of proc(5)
        kids.setdefault(int(f[1]), []).append(int(d))
        if what == "cpu":  # ns on a CPU, each live thread's (schedstat: /proc/PID/stat's
            # utime and stime count 10 ms ticks, 1% of a second's round), and a reaped
            # child's, which only stat keeps (cutime and cstime). The proxies' threads live
            # through a run; one that ended mid-round would take its time out of the sum.
            threads = sum(on_cpu(f"/proc/{d}/task/{t}") for t in os.listdir(f"/proc/{d}/task"))
            val[int(d)] = threads + sum(map(int, f[13:15])) * 10**9 // os.sysconf("SC_CLK_TCK")
        else:
            rss = [l for l in open(f"/proc/{d}/status") if l.startswith("VmRSS:")]
            val[int(d)] = int(rss[0].split()[1]) if rss else 0
    except (OSError, ValueError, IndexError):
        continue  # the process left while we read
total, todo = 0, [root]
while todo:
    p = todo.pop()
    total += val.get(p, 0)
    todo += kids.get(p, [])
print(total)
PY
ticks() { python3 "$WORK/proc.py" cpu "$1"; }
rss_kib() { python3 "$WORK/proc.py" rss "$1"; }
HZ=1000000000 # ticks() counts nanoseconds

start_mock() { # tag replicas args...: sets MOCK_PID and MOCK_PORTS (one per replica)
  local tag=$1 n=$2; shift 2
  : >"$WORK/$tag.urls"  # there before the first poll below reads it
  LINGO_LOG=warn $LINGO mock --listen 127.0.0.1:0 --replicas "$n" --kind vllm "$@" \
    >"$WORK/$tag.urls" 2>"$WORK/$tag.log" & MOCK_PID=$!; PIDS+=("$MOCK_PID")
  for _ in $(seq 1 200); do [ "$(wc -l <"$WORK/$tag.urls")" -ge "$n" ] && break; sleep 0.05; done
  mapfile -t MOCK_PORTS < <(sed 's/.*://' "$WORK/$tag.urls")
  [ "${#MOCK_PORTS[@]}" -ge "$n" ] || { echo "mock $tag did not start" >&2; cat "$WORK/$tag.log" >&2; exit 1; }
}

NS='{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true}'
ST='{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true,"stream":true}'
SGL_NS='{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true}}'
SGL_ST='{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true},"stream":true}'

# A path: its port, the pid its CPU is read from (none for direct), its route and dialect.
declare -A PORT PID ROUTE DIALECT NAME
PATHS=()
add_path() { # key name port pid route dialect
  PATHS+=("$1"); NAME[$1]=$2; PORT[$1]=$3; PID[$1]=$4; ROUTE[$1]=$5; DIALECT[$1]=$6
}
start_nginx() { # tag upstream-port: sets SRV_PORT SRV_PID
  SRV_PORT=$(free_port)
  nginx_conf "$WORK/$1.nginx" "$SRV_PORT" auto "127.0.0.1:$2"
  nginx -c "$WORK/$1.nginx/nginx.conf" -g 'daemon off;' 2>"$WORK/$1.nginx.log" & SRV_PID=$!; PIDS+=("$SRV_PID")
}
start_sglang_router() { # tag upstream-port
  SRV_PORT=$(free_port)
  "$VENV/bin/sglang-router" launch --host 127.0.0.1 --port "$SRV_PORT" \
    --worker-urls "http://127.0.0.1:$2" --policy "$ROUTER_POLICY" --log-level warn \
    --prometheus-port "$(free_port)" >"$WORK/$1.sglang-router.log" 2>&1 & SRV_PID=$!; PIDS+=("$SRV_PID")
}
start_vllm_router() { # tag upstream-port
  SRV_PORT=$(free_port)
  "$VENV/bin/vllm-router" --host 127.0.0.1 --port "$SRV_PORT" \
    --worker-urls "http://127.0.0.1:$2" --policy "$ROUTER_POLICY" --log-level warning \
    --worker-startup-check-interval 1 --prometheus-port "$(free_port)" \
    >"$WORK/$1.vllm-router.log" 2>&1 & SRV_PID=$!; PIDS+=("$SRV_PID")
}
start_lingo() { # tag upstream-port...: one pool, round robin, of these endpoints
  local tag=$1; shift
  SRV_PORT=$(free_port)
  printf '[pools.bench]\npolicy = "round_robin"\nendpoints = [%s]\n' \
    "$(printf '{ url = "http://127.0.0.1:%s", kind = "vllm" },' "$@")" >"$WORK/$tag.toml"
  LINGO_LOG=warn $LINGO serve --listen "127.0.0.1:$SRV_PORT" --config "$WORK/$tag.toml" \
    >"$WORK/$tag.log" 2>&1 & SRV_PID=$!; PIDS+=("$SRV_PID")
}
# Every path in front of the mock's first replica, the fleet in front of all four.
start_paths() { # tag: uses MOCK_PORTS
  local tag=$1 up=${MOCK_PORTS[0]}
  PATHS=()
  add_path direct "direct" "$up" "" /v1/completions oai
  if command -v nginx >/dev/null; then
    start_nginx "$tag" "$up"; add_path nginx "nginx" "$SRV_PORT" "$SRV_PID" /v1/completions oai
  else echo "nginx: not installed, skipped" >&2; fi
  if [ -x "$VENV/bin/sglang-router" ]; then
    start_sglang_router "$tag" "$up"; add_path sglang "sglang-router" "$SRV_PORT" "$SRV_PID" /v1/completions oai
  else echo "sglang-router: not installed, skipped" >&2; fi
  if [ -x "$VENV/bin/vllm-router" ]; then
    start_vllm_router "$tag" "$up"; add_path vllm "vllm-router" "$SRV_PORT" "$SRV_PID" /v1/completions oai
  else echo "vllm-router: not installed, skipped" >&2; fi
  start_lingo "$tag.one" "$up"
  add_path pass "lingo passthrough" "$SRV_PORT" "$SRV_PID" /v1/completions oai
  add_path trans "lingo translation" "$SRV_PORT" "$SRV_PID" /generate sgl
  start_lingo "$tag.four" "${MOCK_PORTS[@]:0:4}"
  add_path fpass "lingo fleet(4) passthrough" "$SRV_PORT" "$SRV_PID" /v1/completions oai
  add_path ftrans "lingo fleet(4) translation" "$SRV_PORT" "$SRV_PID" /generate sgl
  # Drop what did not come up (a router that fails to start is reported, not fatal).
  local p ok=()
  for p in "${PATHS[@]}"; do
    local body=$NS; [ "${DIALECT[$p]}" = sgl ] && body=$SGL_NS
    if wait_post "http://127.0.0.1:${PORT[$p]}${ROUTE[$p]}" "$body"; then ok+=("$p")
    else
      echo "${NAME[$p]}: did not answer 200 within 20 s, skipped; its log:" >&2
      tail -n 5 "$WORK"/"$tag".*.log >&2 || true
      if [ -n "${PID[$p]}" ]; then stop "${PID[$p]}"; fi
    fi
  done
  PATHS=("${ok[@]}")
}
# PATHS in round $1's order: reversed in even rounds, so no path always runs right after
# another (lingo after nginx, the fleet after the pool of one).
round_order() {
  local i
  if (($1 % 2)); then printf '%s\n' "${PATHS[@]}"
  else for ((i = ${#PATHS[@]} - 1; i >= 0; i--)); do printf '%s\n' "${PATHS[$i]}"; done; fi
}
stop_paths() {
  local p pids=()
  for p in "${PATHS[@]}"; do if [ -n "${PID[$p]}" ]; then pids+=("${PID[$p]}"); fi; done
  [ ${#pids[@]} -eq 0 ] || mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -u)
  [ ${#pids[@]} -eq 0 ] || stop "${pids[@]}"
}

# ---------------------------------------------------------------------------------------------
echo "# lingo against nginx and the routers — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -m)"
echo "lingo $(git rev-parse --short HEAD) ($build); $(nginx -v 2>&1 || echo 'no nginx'); $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
for pkg in sglang-router vllm-router; do
  v=$("$VENV/bin/pip" show "$pkg" 2>/dev/null | awk '/^Version/ {print $2}' || true)
  echo "$pkg ${v:-not installed}, policy $ROUTER_POLICY"
done
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "knobs: DURATION=$DURATION ROUNDS=$ROUNDS CONC=$CONC WARM=$WARM REAL_CONC=$REAL_CONC REAL_REQS=$REAL_REQS MEM_STEPS=\"$MEM_STEPS\" MEM_ITL=$MEM_ITL MEM_TOKENS=$MEM_TOKENS"
START=$SECONDS

# ---------------------------------------------------------------------------------------------
part_instant() {
  echo
  echo "## 1. Instant upstream, 16 tokens, wrk -t1 -c$CONC -d$DURATION, $ROUNDS rounds"
  if ! command -v wrk >/dev/null; then echo "skipped: no wrk"; return; fi
  start_mock instant 4
  start_paths instant
  run_wrk() { # path body duration -> "req/s p50 p99 cpu_us errors" (cpu "-" for direct)
    local p=$1 before=0 after=0 out
    printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' \
      "'$2'" >"$WORK/post.lua"
    if [ -n "${PID[$p]}" ]; then before=$(ticks "${PID[$p]}"); fi
    out=$(wrk -t1 -c"$CONC" -d"$3" --latency -s "$WORK/post.lua" "http://127.0.0.1:${PORT[$p]}${ROUTE[$p]}" 2>&1) || true
    if [ -n "${PID[$p]}" ]; then after=$(ticks "${PID[$p]}"); fi
    WRK_OUT=$out python3 - "$before" "$after" "$HZ" "${PID[$p]:-none}" <<'PY'
import os, re, sys
out = os.environ["WRK_OUT"]
before, after, hz, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
m = re.search(r"(\d+) requests in", out)
if not m:
    print("0 - - - wrk-failed"); sys.exit()
n = int(m.group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
def ms(q):
    v, unit = re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)\b", out).groups()
    return float(v) * {"us": 1e-3, "ms": 1, "s": 1e3}[unit]
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
errs = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
cpu = "-" if pid == "none" else f"{(after - before) / hz / max(n, 1) * 1e6:.1f}"
print(f"{rps:.0f} {ms(50):.3f} {ms(99):.3f} {cpu} {errs}")
PY
  }
  local mode p r body rps p50 p99 cpu errs
  if [ -n "$WARM" ] && [ "$WARM" != 0 ]; then
    for mode in non-stream stream; do for p in "${PATHS[@]}"; do
      body=$(body_for "$p" "$mode"); run_wrk "$p" "$body" "$WARM" >/dev/null
    done; done
  fi
  printf '%-5s %-10s %-28s %9s %8s %8s %11s %6s\n' round mode path "req/s" "p50 ms" "p99 ms" "CPU µs/req" errors
  for r in $(seq 1 "$ROUNDS"); do
    for mode in non-stream stream; do
      for p in $(round_order "$r"); do
        body=$(body_for "$p" "$mode")
        read -r rps p50 p99 cpu errs < <(run_wrk "$p" "$body" "$DURATION")
        printf '%-5s %-10s %-28s %9s %8s %8s %11s %6s\n' "$r" "$mode" "${NAME[$p]}" "$rps" "$p50" "$p99" "$cpu" "$errs"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$mode" "$p" "$rps" "$p50" "$p99" "$cpu" "$errs" >>"$WORK/instant.tsv"
      done
    done
  done
  stop_paths; stop "$MOCK_PID"
  python3 - "$WORK/instant.tsv" <<'PY'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
val = collections.defaultdict(dict)  # (mode, path) -> {round: (rps, p50, p99, cpu)}
num = lambda x: None if x in ("-", "") else float(x)
for r, mode, path, rps, p50, p99, cpu, _ in rows:
    val[mode, path][int(r)] = (num(rps), num(p50), num(p99), num(cpu))
names = {"direct": "direct", "nginx": "nginx", "sglang": "sglang-router", "vllm": "vllm-router",
         "pass": "lingo passthrough", "trans": "lingo translation",
         "fpass": "lingo fleet(4) passthrough", "ftrans": "lingo fleet(4) translation"}
def paired(mode, a, b, i):
    """Median over rounds of a/b, each round's a against the b measured beside it."""
    A, B = val.get((mode, a), {}), val.get((mode, b), {})
    xs = [A[r][i] / B[r][i] for r in A if r in B and A[r][i] and B[r][i]]
    return statistics.median(xs) if xs else None
fmt = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"
def span(xs, d=0):
    xs = [x for x in xs if x is not None]
    if not xs: return "-"
    lo, hi = min(xs), max(xs)
    return f"{lo:.{d}f}" if lo == hi else f"{lo:.{d}f}-{hi:.{d}f}"
print()
print("### Summary, instant upstream (ranges over rounds; ratios: median of per-round ratios)")
for mode in ("non-stream", "stream"):
    print(f"\n{mode}:")
    print(f"  {'path':<28} {'req/s':>13} {'x nginx':>8} {'p50 ms':>11} {'p99 ms':>11} {'CPU µs/req':>13} {'x nginx':>8}")
    for path, name in names.items():
        v = val.get((mode, path))
        if not v: continue
        col = lambda i, d: span([x[i] for x in v.values()], d)
        print(f"  {name:<28} {col(0, 0):>13} {fmt(paired(mode, path, 'nginx', 0)):>8} {col(1, 2):>11} "
              f"{col(2, 2):>11} {col(3, 1):>13} {fmt(paired(mode, path, 'nginx', 3)):>8}")
print("\nGoals (issue 12), instant upstream:")
for mode in ("non-stream", "stream"):
    print(f"  {mode:<10} req/s x nginx: passthrough {fmt(paired(mode, 'pass', 'nginx', 0))} (>= 1.0), "
          f"translation {fmt(paired(mode, 'trans', 'nginx', 0))} (>= 0.9); "
          f"CPU/req x nginx: passthrough {fmt(paired(mode, 'pass', 'nginx', 3))} (<= 1.25), "
          f"translation {fmt(paired(mode, 'trans', 'nginx', 3))} (<= 1.5)")
print("  fleet(4) / pool of one (goal: within 5%; req/s >= 0.95, the others <= 1.05):")
for mode in ("non-stream", "stream"):
    for f, one, route in (("fpass", "pass", "passthrough"), ("ftrans", "trans", "translation")):
        print(f"    {mode:<10} {route:<12} req/s {fmt(paired(mode, f, one, 0), 3)}  p50 {fmt(paired(mode, f, one, 1), 3)}"
              f"  p99 {fmt(paired(mode, f, one, 2), 3)}  CPU/req {fmt(paired(mode, f, one, 3), 3)}")
PY
}
body_for() { # path mode
  if [ "${DIALECT[$1]}" = sgl ]; then [ "$2" = stream ] && echo "$SGL_ST" || echo "$SGL_NS"
  else [ "$2" = stream ] && echo "$ST" || echo "$NS"; fi
}

# ---------------------------------------------------------------------------------------------
part_realistic() {
  echo
  echo "## 2. Realistic upstream (TTFT 20 ms, 5 ms/token, 64 tokens), $REAL_CONC streams, lingo bench, $REAL_REQS requests, $ROUNDS rounds"
  start_mock real 4 --ttft 20ms --itl 5ms
  start_paths real
  write_prompts "$WORK/prompts.jsonl"
  local p r before after
  printf '%-5s %-28s %9s %12s %14s %10s %s\n' round path "tok/s" "TTFT p50 ms" "CPU µs/token" tokens notes
  for r in $(seq 1 "$ROUNDS"); do
    for p in $(round_order "$r"); do
      local dialect=openai-completions; [ "${DIALECT[$p]}" = sgl ] && dialect=sglang
      before=0; after=0
      if [ -n "${PID[$p]}" ]; then before=$(ticks "${PID[$p]}"); fi
      realistic_bench "$LINGO" "http://127.0.0.1:${PORT[$p]}" "$dialect" "$REAL_CONC" \
        "$REAL_REQS" "$WORK/prompts.jsonl" --json "$WORK/real.$p.$r.json" \
        >/dev/null 2>"$WORK/real.bench.err" || true
      if [ -n "${PID[$p]}" ]; then after=$(ticks "${PID[$p]}"); fi
      python3 - "$WORK/real.$p.$r.json" "$before" "$after" "$HZ" "${PID[$p]:-none}" "$r" "$p" "${NAME[$p]}" \
        >>"$WORK/real.tsv" <<'PY'
import json, sys
f, before, after, hz, pid, r, key, name = sys.argv[1], *map(int, sys.argv[2:5]), *sys.argv[5:]
try:
    l = json.load(open(f))["levels"][0]
except (OSError, ValueError, KeyError, IndexError):
    print(f"{r}\t{key}\t0\t-\t-\t0\tbench failed"); sys.exit()
if not l["ok"]:
    errs = "; ".join(e["error"][:80] for e in l.get("errors", [])[:2])
    print(f"{r}\t{key}\t0\t-\t-\t0\tall {l['fail']} failed: {errs}"); sys.exit()
cpu = "-" if pid == "none" else f"{(after - before) / hz / max(l['tokens'], 1) * 1e6:.2f}"
notes = []
if l["fail"]: notes.append(f"{l['fail']} failed")
if l.get("self_check", {}).get("driver_bound"): notes.append("driver-bound")
print(f"{r}\t{key}\t{l['agg_tok_s']:.0f}\t{l['ttft_p50'] * 1e3:.3f}\t{cpu}\t{l['tokens']}\t{', '.join(notes)}")
PY
      tail -n 1 "$WORK/real.tsv" | awk -F'\t' -v n="${NAME[$p]}" \
        '{printf "%-5s %-28s %9s %12s %14s %10s %s\n", $1, n, $3, $4, $5, $6, $7}'
    done
  done
  stop_paths; stop "$MOCK_PID"
  python3 - "$WORK/real.tsv" <<'PY'
import collections, statistics, sys
val = collections.defaultdict(dict)  # path -> {round: (tok_s, ttft_ms, cpu_us_per_token)}
num = lambda x: None if x in ("-", "") else float(x)
for line in open(sys.argv[1]):
    r, path, tps, ttft, cpu, *_ = line.rstrip("\n").split("\t")
    val[path][int(r)] = (num(tps), num(ttft), num(cpu))
names = {"direct": "direct", "nginx": "nginx", "sglang": "sglang-router", "vllm": "vllm-router",
         "pass": "lingo passthrough", "trans": "lingo translation",
         "fpass": "lingo fleet(4) passthrough", "ftrans": "lingo fleet(4) translation"}
def per_round(a, b, i, op):
    A, B = val.get(a, {}), val.get(b, {})
    xs = [op(A[r][i], B[r][i]) for r in A if r in B and A[r][i] is not None and B[r][i]]
    return statistics.median(xs) if xs else None
ratio = lambda a, b, i: per_round(a, b, i, lambda x, y: x / y)
added = lambda a: per_round(a, "direct", 1, lambda x, y: x - y)
med = lambda a, i: (lambda xs: statistics.median(xs) if xs else None)([v[i] for v in val.get(a, {}).values() if v[i] is not None])
fmt = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"
print()
print("### Summary, realistic upstream (medians over rounds; ratios and added TTFT: per round, then median)")
print(f"  {'path':<28} {'tok/s':>8} {'x direct':>9} {'TTFT p50 ms':>12} {'added ms':>9} {'CPU µs/token':>13} {'µs/request':>11} {'x nginx':>8}")
for path, name in names.items():
    if path not in val: continue
    cpu = med(path, 2)
    print(f"  {name:<28} {fmt(med(path, 0), 0):>8} {fmt(ratio(path, 'direct', 0), 3):>9} {fmt(med(path, 1), 2):>12} "
          f"{fmt(added(path) if path != 'direct' else None, 2):>9} {fmt(cpu, 2):>13} "
          f"{fmt(cpu * 64 if cpu is not None else None, 0):>11} {fmt(ratio(path, 'nginx', 2)):>8}")
print("\nGoals (issue 12), realistic upstream: CPU per streamed token x nginx: "
      f"passthrough {fmt(ratio('pass', 'nginx', 2))} (<= 1.05), translation {fmt(ratio('trans', 'nginx', 2))} (<= 1.15); "
      f"added TTFT p50: passthrough {fmt(added('pass'), 2)} ms, translation {fmt(added('trans'), 2)} ms (< 0.3)")
for f, one, route in (("fpass", "pass", "passthrough"), ("ftrans", "trans", "translation")):
    print(f"  fleet(4) / pool of one, {route}: tok/s {fmt(ratio(f, one, 0), 3)}  TTFT p50 {fmt(ratio(f, one, 1), 3)}"
          f"  CPU/token {fmt(ratio(f, one, 2), 3)}  (goal: each within 5%)")
PY
}

# ---------------------------------------------------------------------------------------------
# 2c. The TTFT a proxy adds with one stream at a time: the floor under part 2's figure (each
# hop wakes the proxy on an idle machine), so the rest of part 2's is queueing at 64 streams.
part_idle() {
  echo
  echo "## 2c. Added TTFT one stream at a time (TTFT 20 ms, 5 ms/token, 4 tokens), $IDLE_REQS requests, $IDLE_ROUNDS rounds"
  start_mock idle 1 --ttft 20ms --itl 5ms
  local up=${MOCK_PORTS[0]} p r
  PATHS=()
  add_path direct "direct" "$up" "" /v1/completions oai
  if command -v nginx >/dev/null; then
    start_nginx idle "$up"; add_path nginx "nginx" "$SRV_PORT" "$SRV_PID" /v1/completions oai
  fi
  start_lingo idle.one "$up"
  add_path pass "lingo passthrough" "$SRV_PORT" "$SRV_PID" /v1/completions oai
  add_path trans "lingo translation" "$SRV_PORT" "$SRV_PID" /generate sgl
  local ok=()
  for p in "${PATHS[@]}"; do
    local body=$NS; [ "${DIALECT[$p]}" = sgl ] && body=$SGL_NS
    if wait_post "http://127.0.0.1:${PORT[$p]}${ROUTE[$p]}" "$body"; then ok+=("$p")
    else echo "${NAME[$p]}: did not answer 200 within 20 s, skipped" >&2; fi
  done
  PATHS=("${ok[@]}")
  write_prompts "$WORK/idle.prompts.jsonl" 4
  printf '%-5s %-28s %12s\n' round path "TTFT p50 ms"
  for r in $(seq 1 "$IDLE_ROUNDS"); do
    for p in $(round_order "$r"); do
      local dialect=openai-completions; [ "${DIALECT[$p]}" = sgl ] && dialect=sglang
      realistic_bench "$LINGO" "http://127.0.0.1:${PORT[$p]}" "$dialect" 1 "$IDLE_REQS" \
        "$WORK/idle.prompts.jsonl" --json "$WORK/idle.$p.$r.json" \
        >/dev/null 2>"$WORK/idle.bench.err" || true
      python3 -c 'import json, sys
try: print(sys.argv[2], sys.argv[3], "%.3f" % (json.load(open(sys.argv[1]))["levels"][0]["ttft_p50"] * 1e3), sep="\t")
except (OSError, ValueError, KeyError, IndexError, TypeError): print(sys.argv[2], sys.argv[3], "-", sep="\t")' \
        "$WORK/idle.$p.$r.json" "$r" "$p" >>"$WORK/idle.tsv"
      tail -n 1 "$WORK/idle.tsv" | awk -F'\t' -v n="${NAME[$p]}" '{printf "%-5s %-28s %12s\n", $1, n, $3}'
    done
  done
  stop_paths; stop "$MOCK_PID"
  python3 - "$WORK/idle.tsv" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, p, v = line.split()
    if v != "-":
        t[int(r)][p] = float(v)
added = collections.defaultdict(list)
for row in t.values():
    for p, v in row.items():
        if p != "direct" and "direct" in row:
            added[p].append(v - row["direct"])
print("### Summary: TTFT added to direct's with one stream, per round, then median (ms; part 2's"
      " figure at 64 streams is this plus waiting behind other streams' events)")
for p in ("nginx", "pass", "trans"):
    xs = added.get(p)
    if xs:
        print(f"  {p:<6} {statistics.median(xs):.3f}  ({min(xs):.3f}-{max(xs):.3f})")
PY
}

# ---------------------------------------------------------------------------------------------
# One side of a pair: its own paced mock and its proxy. Sets SIDE_PID (empty for direct)
# SIDE_PORT SIDE_DIALECT SIDE_MOCK. Sides: direct (the mock alone), nginx, pass, trans (lingo,
# a pool of one), fpass, ftrans (a pool of four).
start_side() { # key tag
  local key=$1 tag=$2 n=1
  case $key in fpass | ftrans) n=4 ;; esac
  start_mock "$tag.mock" "$n" --ttft 20ms --itl 5ms; SIDE_MOCK=$MOCK_PID
  SRV_PID="" SRV_PORT=${MOCK_PORTS[0]}
  case $key in
    direct) ;;
    nginx) start_nginx "$tag" "${MOCK_PORTS[0]}" ;;
    *) start_lingo "$tag" "${MOCK_PORTS[@]:0:$n}" ;;
  esac
  SIDE_PID=$SRV_PID SIDE_PORT=$SRV_PORT SIDE_DIALECT=openai-completions
  case $key in trans | ftrans) SIDE_DIALECT=sglang ;; esac
  local route=/v1/completions body=$ST
  [ "$SIDE_DIALECT" = sglang ] && route=/generate body=$SGL_ST
  wait_post "http://127.0.0.1:$SIDE_PORT$route" "$body" || { echo "$tag did not start" >&2; return 1; }
}
side_ticks() { if [ -n "$1" ]; then ticks "$1"; else echo 0; fi; }

# 2b. Two paths at once, each with its own mock and its own `lingo bench`: both meet the same
# machine at the same moment (the neighbours' load, the cores' speed), so the ratio of their
# CPU per token holds still where part 2's, from runs seconds apart, moves by 10-30% from round
# to round. The side started first alternates. The first pair, two lingo processes alike,
# shows the measure's own spread (0.95-1.04 over six rounds when it was written). A pair with
# `direct` (the mock alone) gives the TTFT a proxy adds, both measured at the same moment.
part_paired() {
  echo
  echo "## 2b. Realistic upstream, two paths at once (each its own mock and $REAL_CONC streams), $PAIR_ROUNDS rounds of $PAIR_REQS requests"
  [ -f "$WORK/prompts.jsonl" ] || write_prompts "$WORK/prompts.jsonl"
  local pair tag a b r ap bp am bm aport bport ad bd a0 b0 a1 b1 first
  printf '%-5s %-14s %12s %12s %8s %11s %11s %9s\n' round pair "A µs/tok" "B µs/tok" "B / A" \
    "A TTFT ms" "B TTFT ms" "B - A ms"
  for pair in $PAIRS; do
    a=${pair%/*} b=${pair#*/} tag=${pair/\//-}
    if [[ " $a $b " == *" nginx "* ]] && ! command -v nginx >/dev/null; then
      echo "nginx: not installed, $pair skipped" >&2; continue
    fi
    start_side "$a" "pair.$tag.a" || continue
    ap=$SIDE_PID aport=$SIDE_PORT ad=$SIDE_DIALECT am=$SIDE_MOCK
    start_side "$b" "pair.$tag.b" || { stop ${ap:+"$ap"} "$am"; continue; }
    bp=$SIDE_PID bport=$SIDE_PORT bd=$SIDE_DIALECT bm=$SIDE_MOCK
    for r in $(seq 1 "$PAIR_ROUNDS"); do
      a0=$(side_ticks "$ap"); b0=$(side_ticks "$bp")
      local runs=()
      for first in $( ((r % 2)) && echo "a b" || echo "b a"); do
        local port=$aport dialect=$ad
        [ "$first" = b ] && port=$bport dialect=$bd
        realistic_bench "$LINGO" "http://127.0.0.1:$port" "$dialect" "$REAL_CONC" "$PAIR_REQS" \
          "$WORK/prompts.jsonl" --json "$WORK/pair.$tag.$first.$r.json" \
          >/dev/null 2>>"$WORK/pair.bench.err" &
        runs+=($!)
      done
      wait "${runs[@]}" || true
      a1=$(side_ticks "$ap"); b1=$(side_ticks "$bp")
      python3 - "$WORK/pair.$tag.a.$r.json" "$WORK/pair.$tag.b.$r.json" $((a1 - a0)) $((b1 - b0)) \
        "$HZ" "$r" "$pair" "${ap:-none}" "${bp:-none}" >>"$WORK/pair.tsv" <<'PY'
import json, sys
fa, fb, ta, tb, hz, r, pair, pa, pb = sys.argv[1:]
def level(f):
    try:
        l = json.load(open(f))["levels"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return l if l["ok"] and not l["fail"] and l["tokens"] else None
la, lb = level(fa), level(fb)
if not la or not lb:
    print(f"{r}\t{pair}\t-\t-\t-\t-\t-\ta bench failed or lost requests"); sys.exit()
cpu = lambda t, l, p: None if p == "none" else int(t) / int(hz) / l["tokens"] * 1e6
ca, cb = cpu(ta, la, pa), cpu(tb, lb, pb)
fmt = lambda x, f: "-" if x is None else format(x, f)
ratio = cb / ca if ca and cb is not None else None
print(f"{r}\t{pair}\t{fmt(ca, '.2f')}\t{fmt(cb, '.2f')}\t{fmt(ratio, '.3f')}"
      f"\t{la['ttft_p50'] * 1e3:.3f}\t{lb['ttft_p50'] * 1e3:.3f}\t")
PY
      tail -n 1 "$WORK/pair.tsv" | awk -F'\t' '{printf "%-5s %-14s %12s %12s %8s %11s %11s %9s %s\n",
        $1, $2, $3, $4, $5, $6, $7, ($6 == "-" ? "-" : sprintf("%.3f", $7 - $6)), $8}'
    done
    stop ${ap:+"$ap"} ${bp:+"$bp"} "$am" "$bm"
  done
  [ -s "$WORK/pair.tsv" ] || { echo "no pair ran"; return; }
  python3 - "$WORK/pair.tsv" <<'PY'
import collections, statistics, sys
ratios, added = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, pair, ca, cb, ratio, ta, tb, *_ = line.rstrip("\n").split("\t")
    if ratio != "-": ratios[pair].append(float(ratio))
    if ta != "-": added[pair].append(float(tb) - float(ta))
goal = {"pass/pass": "control: two lingo processes alike (1.00 but for the measure's own spread)",
        "nginx/pass": "passthrough x nginx (<= 1.05)", "nginx/trans": "translation x nginx (<= 1.15)",
        "pass/fpass": "fleet(4) / pool of one, passthrough (within 5%)",
        "trans/ftrans": "fleet(4) / pool of one, translation (within 5%)"}
span = lambda xs, f: f"{statistics.median(xs):{f}}  ({min(xs):{f}}-{max(xs):{f}}, {len(xs)} rounds)"
print("\n### Summary, two paths at once (median of rounds, then min-max)")
print("CPU per streamed token, B / A:")
for pair, xs in ratios.items():
    print(f"  {pair:<14} {span(xs, '.3f')}  {goal.get(pair, '')}")
print("TTFT p50, B - A in ms (against direct: the TTFT the proxy adds, on a machine carrying two\n"
      "loads at once, so not part 2's operating point; against nginx: lingo's TTFT beside nginx's):")
for pair, xs in added.items():
    print(f"  {pair:<14} {span(xs, '.3f')}")
PY
}

# ---------------------------------------------------------------------------------------------
part_memory() {
  echo
  echo "## 3. Memory against in-flight streams (mock ITL $MEM_ITL, $MEM_TOKENS tokens a stream), streaming passthrough"
  start_mock mem 1 --itl "$MEM_ITL"
  local up=${MOCK_PORTS[0]} L LP N NP n
  start_lingo mem "$up"; L=$SRV_PORT; LP=$SRV_PID
  wait_post "http://127.0.0.1:$L/v1/completions" "$ST" || { echo "lingo did not start"; return; }
  N=""; NP=""
  if [ "$MEM_NGINX" = 1 ] && command -v nginx >/dev/null; then
    start_nginx mem "$up"; N=$SRV_PORT; NP=$SRV_PID
    wait_post "http://127.0.0.1:$N/v1/completions" "$ST" || { echo "nginx did not start"; N=""; }
  fi
  # shellcheck disable=SC2317  # called through hold's $fn
  lingo_in_flight() {
    curl -s "http://127.0.0.1:$L/metrics" | awk '/^lingo_requests_in_flight[{ ]/ {s += $2} END {print s + 0}'
  }
  # shellcheck disable=SC2317
  nginx_clients() { ss -Htn state established "( sport = :$N )" | wc -l; }
  hold() { # port count in-flight-fn pid -> "seen rss_kib": start count streams, read RSS once all are open
    local port=$1 want=$2 fn=$3 pid=$4 seen=0 bench=""
    if [ "$want" -gt 0 ]; then
      $LINGO bench --url "http://127.0.0.1:$port" --dialect openai-completions --concurrency "$want" \
        --requests-per-level "$want" --input-len 16 --output-len "$MEM_TOKENS" --warmup 0 \
        --duration 60s --timeout 60s >/dev/null 2>&1 & bench=$!
      for _ in $(seq 1 400); do seen=$($fn); [ "$seen" -ge "$want" ] && break; sleep 0.05; done
    fi
    echo "$seen $(rss_kib "$pid")"
    if [ -n "$bench" ]; then wait "$bench" || true; fi
    # The next step starts from none in flight.
    for _ in $(seq 1 200); do [ "$($fn)" -eq 0 ] && break; sleep 0.05; done
  }
  mib() { if [ "$1" = - ]; then echo -; else awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; fi; }
  printf '%-8s %12s %15s %12s %15s\n' streams "lingo seen" "lingo RSS MiB" "nginx seen" "nginx RSS MiB"
  for n in $MEM_STEPS; do
    # Through a file, not `read < <(hold)`: hold must have finished (its streams ended) before
    # the next one starts.
    hold "$L" "$n" lingo_in_flight "$LP" >"$WORK/hold"; read -r ls lr <"$WORK/hold"
    ns=-; nr=-
    if [ -n "$N" ]; then hold "$N" "$n" nginx_clients "$NP" >"$WORK/hold"; read -r ns nr <"$WORK/hold"; fi
    printf '%-8s %12s %15s %12s %15s\n' "$n" "$ls" "$(mib "$lr")" "$ns" "$(mib "$nr")"
    printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$ls" "$lr" "$ns" "$nr" >>"$WORK/mem.tsv"
  done
  stop "$LP" ${NP:+"$NP"} "$MOCK_PID"
  python3 - "$WORK/mem.tsv" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
def slope(pts):
    """Least-squares slope of RSS (KiB) against streams actually seen in flight."""
    if len(pts) < 2: return None
    mx = sum(x for x, _ in pts) / len(pts); my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None
lingo = [(float(s), float(r)) for _, s, r, _, _ in rows]
nginx = [(float(s), float(r)) for _, _, _, s, r in rows if s != "-"]
full = all(float(s) >= float(n) for n, s, *_ in rows)
l, n = slope(lingo), slope(nginx)
print(f"\nRSS slope: lingo {l:.1f} KiB per in-flight stream (goal <= 16)" if l is not None else "\nRSS slope: -",
      f"; nginx (master + workers) {n:.1f} KiB per client connection" if n is not None else "",
      "" if full else "  (some step did not reach its count: see 'seen')", sep="")
PY
}

for part in $PARTS; do "part_$part"; done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); run took $((SECONDS - START)) s"
