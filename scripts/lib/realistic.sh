# The realistic load of bench-peers.sh's parts 2 and 2b and bench-ab-real.sh, in one place so
# the runs they compare drive the same thing: 64 tokens a request from a paced mock (TTFT 20
# ms, 5 ms a token, started by each script), text prompts of 128 words from a file.

# write_prompts FILE [OUTPUT_LEN]: the prompts (the mock counts a word a token), each asking
# for OUTPUT_LEN tokens (64; a dataset's `output_len` is what `lingo bench` asks for). Text,
# not token ids: sglang-router refuses a completions prompt of token ids, `lingo bench`'s
# default.
write_prompts() {
  python3 - "${2:-64}" >"$1" <<'PY'
import json, random, sys
rng = random.Random(0)
words = "time river stone cloud green light house tree bird road song field".split()
for _ in range(256):
    print(json.dumps({"prompt": " ".join(rng.choice(words) for _ in range(128)), "output_len": int(sys.argv[1])}))
PY
}

# realistic_bench LINGO URL DIALECT CONCURRENCY REQUESTS PROMPTS [bench flags...]: no warmup,
# so each path opens its connections inside the level alike and every token the proxy
# carries is one the report counts; bounded by --duration and --timeout.
realistic_bench() {
  local bin=$1 url=$2 dialect=$3 conc=$4 reqs=$5 prompts=$6
  shift 6
  "$bin" bench --url "$url" --dialect "$dialect" --model mock-model --concurrency "$conc" \
    --dataset "$prompts" --output-len 64 --requests-per-level "$reqs" --warmup 0 \
    --duration 120s --timeout 60s "$@"
}
