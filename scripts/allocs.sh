#!/usr/bin/env bash
# Heap allocations per request in `lingo serve`, by site (valgrind's DHAT): which code
# allocates, how often a request and how large, for the same load as scripts/callgrind.sh
# (one instant `lingo mock --kind vllm`, one worker, requests one after another on one
# keep-alive connection). Counts include the warm-up request and startup, so a site made
# once per request shows about 1.00x.
#   MODE=nonstream|stream|sglang|sglang-stream   (default nonstream)
#   N=500 TOKENS=16   LINGO=path (default: target/release/lingo, built if missing)
#   OUT=dir           keep dhat.json there (default: a temporary directory)
#   TOP=40            sites listed
# Build with line tables for readable sites: CARGO_PROFILE_RELEASE_DEBUG=line-tables-only.
# Talks to 127.0.0.1 only; bounded by N and the client's timeouts.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/serial.sh
MODE=${MODE:-nonstream} N=${N:-500} TOKENS=${TOKENS:-16} TOP=${TOP:-40}
serial_setup

LPORT=$(free_port)
: >"$OUT/mock.urls"
LINGO_LOG=warn "$LINGO" mock --listen 127.0.0.1:0 --replicas 1 --kind vllm >"$OUT/mock.urls" 2>"$OUT/mock.log" &
pids+=($!)
for _ in $(seq 1 200); do [ -s "$OUT/mock.urls" ] && break; sleep 0.05; done
URL=$(head -1 "$OUT/mock.urls")
[ -n "$URL" ] || { echo "the mock did not start" >&2; cat "$OUT/mock.log" >&2; exit 1; }
printf '[pools.p]\nendpoints = [{ url = "%s", kind = "vllm" }]\n[load]\nenabled = false\n' "$URL" >"$OUT/lingo.toml"
LINGO_LOG=warn valgrind --tool=dhat --dhat-out-file="$OUT/dhat.json" \
  "$LINGO" serve --listen "127.0.0.1:$LPORT" --config "$OUT/lingo.toml" --workers 1 >"$OUT/proxy.log" 2>&1 &
VG=$!
pids+=($VG)
serial_request
serial_ready "$LPORT"
serial_drive "$LPORT" "$N"
# DHAT writes its profile as the proxy exits.
kill "$VG"; wait "$VG" 2>/dev/null || true
python3 - "$OUT/dhat.json" "$N" "$TOP" "$MODE" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1])); n, top, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
frames = d["ftbl"]
plumbing = re.compile(r"(alloc/src|std/src|raw_vec|vec/mod\.rs|boxed\.rs:|alloc\.rs:|\((unix|alloc)\.rs)")
rows = []
for pp in d["pps"]:
    per = pp["tbk"] / n
    if pp["tb"] == 0 or per < 0.5:
        continue
    sites = []
    for f in (re.sub(r"^0x[0-9A-F]+: ", "", frames[i]) for i in pp["fs"][1:]):
        if plumbing.search(f):
            continue
        m = re.match(r"(.*?) \((.*)\)$", f)
        name, loc = (m.group(1), m.group(2)) if m else (f, "")
        for _ in range(2):
            name = re.sub(r"<[^<>]*>", "", name)
        sites.append(f"{name[:48]}@{loc.split('/')[-1]}")
        if len(sites) == 4:
            break
    rows.append((per, pp["tb"] / pp["tbk"], sites))
rows.sort(key=lambda r: -r[0])
print(f"mode={mode} requests={n} allocations_per_request={sum(r[0] for r in rows):.1f}")
for per, size, sites in rows[:top]:
    print(f"{per:6.2f}x {size:7.0f} B  " + " < ".join(sites))
PY
echo "profile: $OUT/dhat.json"
