#!/usr/bin/env bash
# bench/run_bench.sh NGPU MODEL:SEQ:MICRO:ACKPT[:STAGE] ... — qwen-ft and the peer (PyTorch FSDP2 + HF Qwen2,
# ../shared/bench/peer_torch.py, staged into .devdeps/bench/) on the same GPUs in the same call: same model
# (random init from the preset), seq_len, micro batch and activation checkpointing. Prints one JSON line per run
# and the ratio; results also go to $OUT/bench.jsonl. Run on the GPU machine after `. .devdeps/env.sh`.
set -uo pipefail
n=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build/qwen-ft}
out=${OUT:-/tmp}
work=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for spec in "$@"; do
  IFS=: read -r model seq micro ackpt stage <<<"$spec"
  stage=${stage:-$([ "$n" -gt 1 ] && echo 3 || echo 0)}
  steps=8
  rows=$(( micro * n * (steps + 2) ))
  vocab=$([ "${model#qwen2.5-}" = 7b ] || [ "${model#qwen2.5-}" = 14b ] && echo 152064 || echo 151936)
  python3 "$root/bench/make_data.py" "$work/d.jsonl" "$rows" "$seq" "$vocab"
  "$Q" prepare --in "$work/d.jsonl" --out "$work/d.h5" --vocab-size "$vocab" > /dev/null
  cat > "$work/bench.cfg" <<DECK
model = { preset = "$model"; init_seed = 1; };
data = { train = "$work/d.h5"; seq_len = $seq; shuffle = false; };
train_micro_batch_size_per_gpu = $micro; gradient_accumulation_steps = 1;
max_steps = $steps; gradient_clipping = 1.0;
activation_checkpointing = $([ "$ackpt" = 1 ] && echo true || echo false);
optimizer = { type = "AdamW"; params = { lr = 1e-5; weight_decay = 0.01; }; };
bf16 = { enabled = true; };
zero_optimization = { stage = $stage; overlap_comm = true; };
checkpoint = { dir = "$work/ck-$model"; every_steps = 0; keep = 1; at_end = false; };
log = { dir = "$work/log-$model-$seq-$micro-$ackpt-$n"; steps_per_print = 1; };
peak_tflops = 989;
DECK
  rm -rf "$work/ck-$model"
  timeout 600 mpirun -np "$n" -x NCCL_NVLS_ENABLE "$Q" train "$work/bench.cfg" > "$work/q.out" 2>&1 ||
    { echo "qwen-ft failed:"; tail -20 "$work/q.out"; }
  cp "$work/q.out" "$out/qwen-ft-$model-x$n.log"
  python3 - "$work/log-$model-$seq-$micro-$ackpt-$n/metrics.jsonl" "$model" "$n" "$seq" "$micro" "$ackpt" "$stage" <<'PY' | tee -a "$out/bench.jsonl"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
t = sorted(s["tokens_per_s"] for s in steps[2:])
mid = t[len(t) // 2]
s = [x for x in steps if x["tokens_per_s"] == mid][0]
print(json.dumps(dict(impl="qwen-ft", model=sys.argv[2], world=int(sys.argv[3]), seq=int(sys.argv[4]), mbs=int(sys.argv[5]),
      ckpt=int(sys.argv[6]), stage=int(sys.argv[7]), tok_s=round(mid), mfu=s["mfu"], peak_mem_gb=s.get("peak_gpu_mem_gib"))))
PY
  bash "$root/.devdeps/bench/run_peer.sh" "$n" "$model:$seq:$micro:$ackpt:0" | grep '^{' | tail -1 >> "$out/bench.jsonl"
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
