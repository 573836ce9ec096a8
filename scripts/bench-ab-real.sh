#!/usr/bin/env bash
# Two lingo builds side by side on the realistic mock of bench-peers.sh's part 2 (TTFT 20 ms,
# 5 ms a token, 64 tokens, 64 streams from `lingo bench`): CPU per streamed token (user+sys
# of the proxy from /proc), A then B within a round, each round on freshly started servers
# (where connections land among the workers is decided as they connect). For a change's
# effect on the per-token cost, which bench-ab.sh's instant mock does not show. A benchmark,
# not a test; 127.0.0.1 only, bounded by the request count and lingo bench's --duration.
#   scripts/bench-ab-real.sh A_BINARY B_BINARY   ROUNDS=3 REQS=640
#   DIALECT=openai-completions (passthrough) | sglang (translated)
set -euo pipefail
A=${1:?usage: bench-ab-real.sh A_BINARY B_BINARY} B=${2:?usage: bench-ab-real.sh A_BINARY B_BINARY}
ROUNDS=${ROUNDS:-3} REQS=${REQS:-640} DIALECT=${DIALECT:-openai-completions}
. "$(dirname "$0")/lib/ab.sh"
M=$(free_port)
LINGO_LOG=warn "$B" mock --listen 127.0.0.1:$M --kind vllm --ttft 20ms --itl 5ms >"$W/mock.log" 2>&1 & pids+=($!)
printf '[pools.p]\nendpoints = [{ url = "http://127.0.0.1:%s", kind = "vllm" }]\n' $M >"$W/l.toml"
# Text prompts of 128 words (the mock counts a word a token), as bench-peers.sh sends.
python3 - >"$W/prompts.jsonl" <<'PY'
import json, random
rng = random.Random(0)
words = "time river stone cloud green light house tree bird road song field".split()
for _ in range(256):
    print(json.dumps({"prompt": " ".join(rng.choice(words) for _ in range(128)), "output_len": 64}))
PY
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
echo "round side CPU µs/token ($DIALECT, $REQS requests of 64 tokens, 64 streams)"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    port=$(free_port)
    LINGO_LOG=warn "$bin" serve --listen 127.0.0.1:$port --config "$W/l.toml" >"$W/$side.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do curl -s -o /dev/null -m 2 "http://127.0.0.1:$port/health" && break; sleep 0.05; done
    before=$(ticks $pid)
    "$B" bench --url "http://127.0.0.1:$port" --dialect "$DIALECT" --model mock-model \
      --concurrency 64 --dataset "$W/prompts.jsonl" --output-len 64 \
      --requests-per-level "$REQS" --warmup 0 --duration 120s --timeout 60s >/dev/null 2>"$W/bench.err" \
      || { echo "lingo bench failed:" >&2; cat "$W/bench.err" >&2; exit 1; }
    after=$(ticks $pid)
    kill $pid; wait $pid 2>/dev/null || true
    python3 -c "print('$r     $side    %.2f' % (($after - $before) / $HZ * 1e6 / ($REQS * 64)))"
  done
done
