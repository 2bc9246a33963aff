#!/usr/bin/env bash
# bench/offload_rehearsal.sh NGPU [STEPS] — the seed's 8 x RTX 4090 run rehearsed on H200s: Qwen2.5-14B, ZeRO-3 with
# optimizer and parameter offload, bf16 (PREC=fp16: fp16 as inputs/4090.cfg), seq 512, micro 4 (MICRO), activation
# checkpointing, reduce_bucket_size 5e7, gpu_memory_limit_gb = 24 (the allocator refuses more than a 4090 has). On 2 GPUs each holds half of the 16-bit
# gradient shard (14.8 GB), 4x what one of 8 real 4090s holds, hence the smaller micro batch than the seed's 8-GPU
# deck. Samples the node's used host memory (MemTotal - MemAvailable) every second and reports the peak growth per
# parameter.
set -uo pipefail
n=${1:-2}; steps=${2:-3}; accum=${ACCUM:-2}; micro=${MICRO:-4}; prec=${PREC:-bf16}
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build/qwen-ft}
out=${OUT:-/tmp}
work=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
python3 "$root/bench/make_data.py" "$work/d.jsonl" $((micro * n * accum * (steps + 1))) 512 152064
"$Q" prepare --in "$work/d.jsonl" --out "$work/d.h5" --vocab-size 152064 > /dev/null
cat > "$work/rehearsal.cfg" <<DECK
model = { preset = "qwen2.5-14b"; init_seed = 1; };
data = { train = "$work/d.h5"; seq_len = 512; shuffle = false; };
train_micro_batch_size_per_gpu = $micro; gradient_accumulation_steps = $accum;
max_steps = $steps; gradient_clipping = 1.0;
activation_checkpointing = true;
optimizer = { type = "AdamW"; params = { lr = 1e-5; weight_decay = 0.01; }; };
$([ "$prec" = fp16 ] && echo 'fp16 = { enabled = true; initial_scale_power = 16; loss_scale_window = 100; hysteresis = 2; };' || echo 'bf16 = { enabled = true; };')
zero_optimization = { stage = 3; overlap_comm = true; reduce_bucket_size = 5e7;
  offload_optimizer = { device = "cpu"; pin_memory = true; }; offload_param = { device = "cpu"; pin_memory = true; }; };
gpu_memory_limit_gb = 24.0;
checkpoint = { dir = "$work/ck"; at_end = false; };
log = { dir = "$work/log"; steps_per_print = 1; };
peak_tflops = 989;
DECK
used() { awk '/MemTotal/{t=$2} /MemAvailable/{a=$2} END{print (t-a)*1024}' /proc/meminfo; }
base=$(used)
( peak=$base; while sleep 1; do u=$(used); [ "$u" -gt "$peak" ] && peak=$u && echo "$peak" > "$work/peak"; done ) &
sampler=$!
threads=$(( $(nproc) / n )); threads=$(( threads > 0 ? threads : 1 ))
# every rank runs the host AdamW on its share of the cores (mpirun would bind each rank to one core)
timeout "${TLIMIT:-540}" mpirun -np "$n" --bind-to none -x OMP_NUM_THREADS=$threads -x NCCL_NVLS_ENABLE "$Q" train "$work/rehearsal.cfg" > "$out/offload_rehearsal.log" 2>&1
rc=$?
kill $sampler 2>/dev/null
peak=$(cat "$work/peak" 2>/dev/null || echo "$base")
grep -E "^step|^memory|^backend|estimate" "$out/offload_rehearsal.log" | tail -8
python3 - "$base" "$peak" "$work/log/metrics.jsonl" "$rc" "$n" <<'PY' | tee -a "$out/bench.jsonl"
import json, sys
base, peak, rc, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4]), int(sys.argv[5])
params = 14770033664
steps = [json.loads(l) for l in open(sys.argv[3]) if '"loss"' in l] if rc == 0 else []
print(json.dumps(dict(impl="qwen-ft", run="14b-zero3-offload-24gb", world=n, rc=rc, steps=len(steps),
      losses=[s["loss"] for s in steps], tok_s=steps[-1]["tokens_per_s"] if steps else None,
      peak_gpu_mem_gb=max((s["peak_gpu_mem_gib"] for s in steps), default=None),
      host_growth_gb=round((peak - base) / 2**30, 1), host_bytes_per_param=round((peak - base) / params, 2))))
PY
