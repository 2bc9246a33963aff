#!/usr/bin/env bash
# bench/scaling.sh MODEL:SEQ:MICRO:ACKPT "N1 N2 ..." — ZeRO-3 scaling of qwen-ft and the peer over GPU counts, each
# count one bench/run_bench.sh (qwen-ft and ../shared/bench/peer_torch.py on the same GPUs, same call), then the
# efficiency against the smallest count: eff(n) = tok_s(n) / (n / n0 * tok_s(n0)). Run on the GPU machine after
# `. .devdeps/env.sh`; e.g. `bash bench/scaling.sh qwen2.5-7b:4096:1:1 "1 2 4 8"` on nvidia-h200-x8 (the [scale]
# issue asks >= 90% at 8). Results: $OUT/bench.jsonl (one line per run) and a table on stdout.
set -uo pipefail
spec=$1; counts=$2
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
for n in $counts; do
  [ "$n" -le "$(nvidia-smi -L | wc -l)" ] || { echo "skipping $n GPUs: only $(nvidia-smi -L | wc -l) visible"; continue; }
  OUT=$out bash "$root/bench/run_bench.sh" "$n" "$spec:3"
done
python3 - "$out/bench.jsonl" "$spec" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
model, seq, mbs, ckpt = sys.argv[2].split(":")
pick = lambda impl: {r["world"]: r["tok_s"] for r in rows if r.get("model") == model and r.get("seq") == int(seq)
                     and r.get("mbs") == int(mbs) and r.get("ckpt") == int(ckpt) and (("peer" in r) == (impl == "peer"))}
for impl in ("qwen-ft", "peer"):
    t = pick(impl)
    if not t: continue
    n0 = min(t)
    print(f"{impl} {model}: " + ", ".join(f"{n} GPUs {t[n]:.0f} tok/s ({t[n] / (n / n0 * t[n0]):.0%})" for n in sorted(t)))
PY
