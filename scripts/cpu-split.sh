#!/usr/bin/env bash
# Where a proxy's CPU per request goes: user and system time from /proc per request for
# nginx, lingo passthrough and lingo translation in front of one instant `lingo mock`, the
# same `wrk -t1 -c32` load, rounds alternating; with STRACE=1 also system calls per request
# (`strace -c` on every thread of the proxy; it slows the proxy, so that round's times are
# not comparable). A benchmark, not a test. Talks to 127.0.0.1 only; bounded by wrk's -d.
#   LINGO=path (default target/release/lingo, built if missing)  ROUNDS=3  DURATION=5s
#   STRACE=0   needs nginx and wrk (scripts/bench-peers.sh installs them) and strace
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
LINGO=${LINGO:-$TARGET/release/lingo} ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5s}
STRACE=${STRACE:-0}
[[ -x "$LINGO" ]] || cargo build --release --quiet --bin lingo
for tool in nginx wrk; do command -v $tool >/dev/null || { echo "$tool is not installed" >&2; exit 1; }; done
W=$(mktemp -d)
pids=()
cleanup() {
  [ -f "$W/ng/nginx.pid" ] && nginx -s stop -c "$W/ng/nginx.conf" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
. scripts/lib/ports.sh
M=$(free_port) N=$(free_port) L=$(free_port)
"$LINGO" mock --listen 127.0.0.1:$M --kind vllm >"$W/mock.log" 2>&1 & pids+=($!)
printf '[pools.p]\nendpoints = [{ url = "http://127.0.0.1:%s", kind = "vllm" }]\n' $M >"$W/l.toml"
LINGO_LOG=warn "$LINGO" serve --listen 127.0.0.1:$L --config "$W/l.toml" >"$W/lingo.log" 2>&1 &
LP=$!; pids+=($LP)
mkdir -p "$W/ng/body" "$W/ng/proxy"
cat >"$W/ng/nginx.conf" <<NG
worker_processes auto; pid $W/ng/nginx.pid; error_log $W/ng/error.log;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $W/ng/body; proxy_temp_path $W/ng/proxy;
  keepalive_requests 1000000;
  upstream mock { server 127.0.0.1:$M; keepalive 64; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$N; location / { proxy_pass http://mock; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_buffering off; } } }
NG
nginx -c "$W/ng/nginx.conf"
for _ in $(seq 1 100); do
  curl -s -o /dev/null -m 2 "http://127.0.0.1:$L/health" && [ -f "$W/ng/nginx.pid" ] && break
  sleep 0.05
done
NP="$(cat "$W/ng/nginx.pid") $(pgrep -P "$(cat "$W/ng/nginx.pid")" | tr '\n' ' ')"
lua() { printf 'wrk.method="POST"\nwrk.body=%s\nwrk.headers["Content-Type"]="application/json"\n' "'$1'"; }
lua '{"model":"mock-model","prompt":"a b c d","max_tokens":16,"ignore_eos":true}' >"$W/pass.lua"
lua '{"text":"a b c d","sampling_params":{"max_new_tokens":16,"ignore_eos":true}}' >"$W/trans.lua"
times() { local u=0 s=0 a b; for p in "$@"; do read -r a b < <(awk '{print $14, $15}' /proc/$p/stat); u=$((u + a)); s=$((s + b)); done; echo "$u $s"; }
tck=$(getconf CLK_TCK)
echo "# user and system µs per request — $(date -u '+%F %R') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for what in nginx lingo-pass lingo-trans; do
    case $what in
      nginx) procs=$NP url=http://127.0.0.1:$N/v1/completions script=pass ;;
      lingo-pass) procs=$LP url=http://127.0.0.1:$L/v1/completions script=pass ;;
      lingo-trans) procs=$LP url=http://127.0.0.1:$L/generate script=trans ;;
    esac
    read -r u0 s0 < <(times $procs)
    out=$(wrk -t1 -c32 -d"$DURATION" -s "$W/$script.lua" "$url")
    read -r u1 s1 < <(times $procs)
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    python3 -c "n, t = $n, $tck; print(f'$r  {\"$what\":<12} req/s {n / ${DURATION%s}:8.0f}  user {($u1 - $u0) / t * 1e6 / n:6.1f}  sys {($s1 - $s0) / t * 1e6 / n:6.1f}')"
  done
done
if [ "$STRACE" = 1 ]; then
  command -v strace >/dev/null || { echo "strace is not installed" >&2; exit 1; }
  for what in nginx lingo-pass; do
    case $what in nginx) procs=$NP port=$N ;; lingo-pass) procs=$LP port=$L ;; esac
    args=(); for p in $procs; do for t in /proc/$p/task/*; do args+=(-p "${t##*/}"); done; done
    strace -c -f "${args[@]}" -o "$W/strace.$what" 2>/dev/null & S=$!
    sleep 0.5
    n=$(wrk -t1 -c32 -d3s -s "$W/pass.lua" "http://127.0.0.1:$port/v1/completions" | awk '/requests in/ {print $1}')
    kill -INT $S; wait $S 2>/dev/null || true
    echo "## $what: system calls per request ($n requests)"
    awk -v n="$n" '$NF ~ /^[a-z_0-9]+$/ && $4+0 > 0 && $NF != "total" {printf "  %-14s %.2f\n", $NF, $4 / n}' "$W/strace.$what" | sort -k2 -rn | head -8
  done
fi
