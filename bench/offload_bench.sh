#!/usr/bin/env bash
# bench/offload_bench.sh SPEC ... — qwen-ft offload runs on one GPU as the [offload] issue measures them, one JSON line
# each (tokens/s as the median of the steps after the second, MFU, GPU peak, host growth per parameter), into
# $OUT/offload.jsonl (each run's output and metrics.jsonl in $OUT/qwen-ft-SPEC.log and .metrics.jsonl, SPEC's ':'
# as '_'). Run on the GPU machine after `. .devdeps/env.sh`.
#   SPEC = model:seq:micro:ackpt:offload:accum:prec[:cap_gb[:steps[:breakdown[:ratio]]]]
#     offload none | opt (optimizer states on the host) | all (+ parameters), ZeRO-3; prec bf16 | fp16;
#     cap_gb: gpu_memory_limit_gb (0 = none); breakdown 1: log.wall_clock_breakdown (its breakdown object is kept);
#     ratio: zero_optimization.offload_optimizer.ratio (default 1: all of the optimizer on the host).
# The DeepSpeed peer runs the same specs through .devdeps/bench/peer_deepspeed.py (bench/offload_peer.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build/qwen-ft}
out=${OUT:-/tmp}
work=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
used() { awk '/MemTotal/{t=$2} /MemAvailable/{a=$2} END{print (t-a)*1024}' /proc/meminfo; }
for spec in "$@"; do
  IFS=: read -r model seq micro ackpt off accum prec cap steps bd ratio <<<"$spec"
  cap=${cap:-0}; steps=${steps:-6}; bd=${bd:-0}; ratio=${ratio:-1}
  vocab=$([ "${model#qwen2.5-}" = 7b ] || [ "${model#qwen2.5-}" = 14b ] && echo 152064 || echo 151936)
  python3 "$root/bench/make_data.py" "$work/d.jsonl" $((micro * accum * (steps + 1))) "$seq" "$vocab"
  "$Q" prepare --in "$work/d.jsonl" --out "$work/d.h5" --vocab-size "$vocab" > /dev/null
  offcfg=""
  [ "$off" != none ] && offcfg="offload_optimizer = { device = \"cpu\"; pin_memory = true; ratio = $ratio; };"
  [ "$off" = all ] && offcfg="$offcfg"' offload_param = { device = "cpu"; pin_memory = true; };'
  cat > "$work/b.cfg" <<DECK
model = { preset = "$model"; init_seed = 1; };
data = { train = "$work/d.h5"; seq_len = $seq; shuffle = false; };
train_micro_batch_size_per_gpu = $micro; gradient_accumulation_steps = $accum;
max_steps = $steps; gradient_clipping = 1.0;
activation_checkpointing = $([ "$ackpt" = 1 ] && echo true || echo false);
optimizer = { type = "AdamW"; params = { lr = 1e-5; weight_decay = 0.01; }; };
$([ "$prec" = fp16 ] && echo 'fp16 = { enabled = true; loss_scale_window = 100; };' || echo 'bf16 = { enabled = true; };')
zero_optimization = { stage = 3; overlap_comm = true; $offcfg };
gpu_memory_limit_gb = $cap;
checkpoint = { dir = "$work/ck"; every_steps = 0; at_end = false; };
log = { dir = "$work/log"; steps_per_print = 1; wall_clock_breakdown = $([ "$bd" = 1 ] && echo true || echo false); };
peak_tflops = 989;
DECK
  rm -rf "$work/ck" "$work/log"
  base=$(used)
  ( peak=$base; while sleep 0.5; do u=$(used); [ "$u" -gt "$peak" ] && peak=$u && echo "$peak" > "$work/peak"; done ) &
  sampler=$!
  timeout "${TLIMIT:-300}" mpirun -np 1 --bind-to none -x NCCL_NVLS_ENABLE -x QWENFT_OFFLOAD_OVERLAP -x QWENFT_ATTN ${OMP_NUM_THREADS:+-x OMP_NUM_THREADS} "$Q" train "$work/b.cfg" > "$work/q.out" 2>&1
  rc=$?
  kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
  peak=$(cat "$work/peak" 2>/dev/null || echo "$base")
  cp "$work/q.out" "$out/qwen-ft-${spec//:/_}.log"
  cp "$work/log/metrics.jsonl" "$out/qwen-ft-${spec//:/_}.metrics.jsonl" 2> /dev/null
  python3 - "$work/log/metrics.jsonl" "$spec" "$rc" "$base" "$peak" "$work/q.out" <<'PY' | tee -a "$out/offload.jsonl"
import json, re, sys
path, spec, rc, base, peak, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
try:
    steps = [json.loads(l) for l in open(path) if '"loss"' in l]
except OSError:
    steps = []
params = None
for line in open(log, errors="replace"):
    m = re.search(r"\| ([0-9.]+) M params", line)
    if m and params is None: params = float(m.group(1)) * 1e6
rest = steps[2:] or steps
t = sorted(s["tokens_per_s"] for s in rest)
mid = t[len(t) // 2] if t else None
s = next((x for x in rest if x["tokens_per_s"] == mid), {})
row = dict(impl="qwen-ft", spec=spec, rc=rc, steps=len(steps), tok_s=round(mid) if mid else None, mfu=s.get("mfu"),
           peak_gpu_gib=max((x["peak_gpu_mem_gib"] for x in steps), default=None), skipped=sum(1 for x in steps if x["skipped"]),
           loss=steps[-1]["loss"] if steps else None, host_growth_gib=round((peak - base) / 2**30, 2),
           host_bytes_per_param=round((peak - base) / params, 2) if params else None)
if "breakdown" in s: row["breakdown"] = s["breakdown"]
mean = lambda k: (sum(x[k] for x in rest if x.get(k) is not None) / max(1, sum(1 for x in rest if x.get(k) is not None))
                  if any(x.get(k) is not None for x in rest) else None)
row["monitor"] = dict(gpu_util_mean=mean("gpu_util_mean"), pcie_gbs=mean("pcie_gbs"),
                      h2d_gbs=mean("pcie_h2d_bytes") / s["step_time_s"] / 1e9 if mean("pcie_h2d_bytes") else None,
                      d2h_gbs=mean("pcie_d2h_bytes") / s["step_time_s"] / 1e9 if mean("pcie_d2h_bytes") else None)
print(json.dumps(row))
PY
done
