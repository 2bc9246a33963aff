#!/usr/bin/env bash
# bench/generate_bench.sh [PRESET] [PROMPT_LEN] [NEW_TOKENS] — `qwen-ft generate` against transformers' generate on
# the same GPU in the same call (the [generate] issue's speed target): the preset randomly initialised (default
# qwen2.5-7b), bf16, greedy, prompts of PROMPT_LEN random ids (default 512), exactly NEW_TOKENS new tokens (default
# 128, --ignore-eos), batch 1 and 32; time to first token and decode tokens/s. Then Qwen2.5-14B on one GPU capped at
# 24 GB (--gpu-memory-limit-gb 24: the layers stream from host memory) at batch 1 and 32. One JSON line per run in
# $OUT/generate_bench.jsonl (BENCH_14B=0: not the 14B runs; BENCH_PEER=0: not transformers; GEN_ARGS adds generate
# options to the 7B runs, e.g. "--decode-ahead off"). Run on the GPU machine after `. .devdeps/env.sh` (torch +
# transformers for the peer).
set -uo pipefail
model=${1:-qwen2.5-7b}; T=${2:-512}; N=${3:-128}
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build-cuda/qwen-ft}
out=${OUT:-/tmp}
work=$(mktemp -d)
prompts() { # B -> $work/p$B.jsonl: B prompts of T random ids (fixed seed)
  python3 -c "import json, random, sys
r = random.Random(1); B, T = int(sys.argv[1]), int(sys.argv[2])
for _ in range(B): print(json.dumps({'prompt_ids': [r.randrange(150000) for _ in range(T)]}))" "$1" "$T" > "$work/p$1.jsonl"
}
ours() { # MODEL B [ARGS...]: one JSON line from --timing
  local m=$1 b=$2; shift 2
  QWENFT_BACKEND=cuda "$Q" generate --model "preset:$m" --prompts "$work/p$b.jsonl" --max-new-tokens "$N" --ignore-eos \
    --json --timing "$@" > "$work/o.jsonl" 2> "$work/o.err" || { echo "qwen-ft failed:"; tail -5 "$work/o.err"; return; }
  python3 - "$work/o.err" "$m" "$b" "$T" "$N" "$*" <<'PY'
import json, re, sys
t = open(sys.argv[1]).read(); m, b, T, N, extra = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
f = re.search(r"first token after ([0-9.]+) s; (\d+) new tokens in ([0-9.]+) s", t)
ttft, n, dec = float(f.group(1)), int(f.group(2)), float(f.group(3))
print(json.dumps({"impl": "qwen-ft", "args": extra, "model": m, "batch": b, "prompt": T, "new": N, "ttft_s": ttft,
                  "decode_tok_s_per_row": round((n / b - 1) / dec, 1), "decode_tok_s": round((n - b) / dec, 1)}))
PY
}
for b in 1 32; do
  prompts $b
  # shellcheck disable=SC2086
  ours "$model" $b ${GEN_ARGS:-} | tee -a "$out/generate_bench.jsonl"
  [ "${BENCH_PEER:-1}" = 0 ] || python3 "$root/bench/peer_generate.py" "$model" $b "$T" "$N" | tee -a "$out/generate_bench.jsonl"
done
[ "${BENCH_14B:-1}" = 0 ] || # BENCH_14B=0: not the 14B runs (PCIe-bound; two minutes)
  for b in 1 32; do ours qwen2.5-14b $b --gpu-memory-limit-gb 24 | tee -a "$out/generate_bench.jsonl"; done
rm -rf "$work"
