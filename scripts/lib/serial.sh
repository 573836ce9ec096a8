# One client sending requests one after another on one keep-alive connection, as
# scripts/callgrind.sh and scripts/allocs.sh drive a proxy under valgrind. Sourced.

# What both set up: LINGO (built if missing), valgrind there, OUT made, every process in
# `pids` stopped at exit, and `free_port` (a port on 127.0.0.1 free now).
serial_setup() {
  TARGET=${CARGO_TARGET_DIR:-target}
  LINGO=${LINGO:-$TARGET/release/lingo}
  [[ -x "$LINGO" ]] || cargo build --release --quiet --bin lingo
  command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
  OUT=${OUT:-$(mktemp -d)}
  mkdir -p "$OUT"
  pids=()
  trap serial_cleanup EXIT
}
serial_cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

# Sets P and BODY for MODE (nonstream, stream, sglang, sglang-stream, chat-stream) and TOKENS.
serial_request() {
  case $MODE in
    nonstream) P=/v1/completions BODY="{\"model\":\"mock-model\",\"prompt\":\"a b c d\",\"max_tokens\":$TOKENS,\"ignore_eos\":true}" ;;
    stream) P=/v1/completions BODY="{\"model\":\"mock-model\",\"prompt\":\"a b c d\",\"max_tokens\":$TOKENS,\"ignore_eos\":true,\"stream\":true}" ;;
    sglang) P=/generate BODY="{\"text\":\"a b c d\",\"sampling_params\":{\"max_new_tokens\":$TOKENS,\"ignore_eos\":true}}" ;;
    sglang-stream) P=/generate BODY="{\"text\":\"a b c d\",\"sampling_params\":{\"max_new_tokens\":$TOKENS,\"ignore_eos\":true},\"stream\":true}" ;;
    chat-stream) P=/v1/chat/completions BODY="{\"model\":\"mock-model\",\"messages\":[{\"role\":\"user\",\"content\":\"a b c d\"}],\"max_tokens\":$TOKENS,\"ignore_eos\":true,\"stream\":true}" ;;
    *) echo "MODE: nonstream, stream, sglang, sglang-stream or chat-stream" >&2; exit 2 ;;
  esac
}

# Returns once a request through port $1 is answered 200 (valgrind starts a proxy slowly),
# at most a minute.
serial_ready() {
  for _ in $(seq 1 600); do
    [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "$BODY" "http://127.0.0.1:$1$P")" = 200 ] && return 0
    sleep 0.1
  done
}

# $2 requests through port $1, each checked.
serial_drive() {
  python3 - "$1" "$P" "$BODY" "$2" <<'PY'
import http.client, sys
port, path, body, n = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
for _ in range(n):
    c.request("POST", path, body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"status {r.status}")
PY
}
