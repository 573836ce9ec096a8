# The set-up the A/B scripts (bench-ab.sh, bench-ab-real.sh) share: a work directory `W`
# removed at exit with every process in `pids` stopped, and `free_port`, a port on
# 127.0.0.1 free now (for a server about to be told to listen on it).
W=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
