#!/usr/bin/env bash
# bench/run_bench.sh NGPU MODEL:SEQ:MICRO:ACKPT[:STAGE] ... — qwen-ft and the peer (PyTorch FSDP2 + HF Qwen2,
# ../shared/bench/peer_torch.py, staged into .devdeps/bench/) on the same GPUs in the same call: same model
# (random init from the preset), seq_len, micro batch and activation checkpointing. Prints one JSON line per run
# and the ratio; results also go to $OUT/bench.jsonl. Run on the GPU machine after `. .devdeps/env.sh`.
# QWENFT_UPDATE_OVERLAP=1 is passed to the ranks (the row says which: docs/zero.md); PEER=0 runs qwen-ft only.
set -uo pipefail
n=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build/qwen-ft}
out=${OUT:-/tmp}
work=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/bench/lib/deck.sh"
for spec in "$@"; do
  IFS=: read -r model seq micro ackpt stage <<<"$spec"
  stage=${stage:-$([ "$n" -gt 1 ] && echo 3 || echo 0)}
  steps=8
  rows=$(( micro * n * (steps + 2) ))
  vocab=$(deck_vocab "$model")
  deck_data "$Q" "$work/d.h5" "$rows" "$seq" "$vocab"
  deck_write "$work/bench.cfg" "$model" "$seq" "$micro" "$steps" "$work/d.h5" bf16 \
    ackpt="$([ "$ackpt" = 1 ] && echo true || echo false)" stage="$stage" overlap=true ckpt="$work/ck-$model" \
    log="$work/log-$model-$seq-$micro-$ackpt-$n"
  rm -rf "$work/ck-$model"
  timeout 600 mpirun -np "$n" -x NCCL_NVLS_ENABLE ${QWENFT_UPDATE_OVERLAP:+-x QWENFT_UPDATE_OVERLAP} "$Q" train "$work/bench.cfg" > "$work/q.out" 2>&1 ||
    { echo "qwen-ft failed:"; tail -20 "$work/q.out"; }
  cp "$work/q.out" "$out/qwen-ft-$model-x$n.log"
  python3 - "$work/log-$model-$seq-$micro-$ackpt-$n/metrics.jsonl" "$model" "$n" "$seq" "$micro" "$ackpt" "$stage" <<'PY' | tee -a "$out/bench.jsonl"
import json, os, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
t = sorted(s["tokens_per_s"] for s in steps[2:])
mid = t[len(t) // 2]
s = [x for x in steps if x["tokens_per_s"] == mid][0]
print(json.dumps(dict(impl="qwen-ft", model=sys.argv[2], world=int(sys.argv[3]), seq=int(sys.argv[4]), mbs=int(sys.argv[5]),
      ckpt=int(sys.argv[6]), stage=int(sys.argv[7]), tok_s=round(mid), mfu=s["mfu"], peak_mem_gb=s.get("peak_gpu_mem_gib"),
      update_overlap=os.environ.get("QWENFT_UPDATE_OVERLAP") == "1")))
PY
  [ "${PEER:-1}" = 0 ] || bash "$root/.devdeps/bench/run_peer.sh" "$n" "$model:$seq:$micro:$ackpt:0" | grep '^{' | tail -1 >> "$out/bench.jsonl"
done
python3 - "$out/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = [r for r in rows if r.get("impl") == "qwen-ft"]
for q in ours:
    peer = [r for r in rows if r.get("peer") and r["model"] == q["model"] and r["world"] == q["world"] and r["seq"] == q["seq"] and r["mbs"] == q["mbs"] and r["ckpt"] == q["ckpt"]]
    if peer:
        p = peer[-1]
        print(f"{q['model']} x{q['world']} seq {q['seq']} mbs {q['mbs']} ckpt {q['ckpt']}: qwen-ft {q['tok_s']} tok/s (MFU {q['mfu']:.3f}, {q['peak_mem_gb']} GB) "
              f"vs peer {p['tok_s']} (MFU {p['mfu']:.3f}, {p['peak_mem_gb']} GB): ratio {q['tok_s'] / p['tok_s']:.2f}")
PY
