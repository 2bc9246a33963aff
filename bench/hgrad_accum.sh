#!/usr/bin/env bash
# bench/hgrad_accum.sh [MODEL] [MICRO] — the gradient shard in host memory with accumulation on the GPU machine:
# one layout (ZeRO-2 + optimizer offload, offload_optimizer.gradients = host, full recomputation, seq 512,
# train_batch_size 32 in micro-batches of MICRO, gpu_memory_limit_gb $CAP), its prediction by `qwen-ft plan` (the
# speed model with the host accumulation term, rates calibrated here) against a training run of $STEPS steps
# (tokens/s: the median of the steps after the second; the second pays the host's first touch of the optimizer
# state). Writes $OUT/hgrad_accum.txt (one line), the plan's JSON, the run's log and the calibration cache.
#   QWENFT=build-cuda/qwen-ft bash bench/hgrad_accum.sh 7b 8      # session 16's misprediction: 1,447 measured, 5,307 said
# MODEL: 1.5b 3b 7b (Qwen2.5, random init) or tiny (a small explicit model: CPU ranks, a smoke test of the script).
# Env: CAP (GB, default 24; 0 = none), STEPS (5), TLIMIT (s, default 150: the run is killed after it, no checkpoint).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build-cuda/qwen-ft}
. "$root/bench/random_model.sh"
out=${OUT:-/tmp}
m=${1:-7b}
micro=${2:-8}
cap=${CAP:-24}
steps=${STEPS:-5}
work=$(mktemp -d)
mkdir -p "$out/plan-cache"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bench_random_model "$m"
bench_random_data "$work" $((32 * (steps + 1))) 512
cat > "$work/deck.cfg" <<DECK
$model
data = { train = "$work/d.h5"; seq_len = 512; shuffle = false; };
train_batch_size = 32; train_micro_batch_size_per_gpu = $micro;
max_steps = $steps; gradient_clipping = 1.0;
activation_checkpointing = "full";
optimizer = { type = "AdamW"; params = { lr = 1e-5; weight_decay = 0.01; }; };
bf16 = { enabled = true; };
zero_optimization = { stage = 2; overlap_comm = true;
                      offload_optimizer = { device = "cpu"; pin_memory = true; gradients = "host"; }; };
gpu_memory_limit_gb = $cap;
checkpoint = { every_steps = 0; at_end = false; };
log = { steps_per_print = 1; };
eval = { every_steps = 0; };
DECK
t0=$(date +%s.%N)
"$Q" plan "$work/deck.cfg" --cache "$out/plan-cache" --top 1000 --json > "$out/hgrad_accum-plan.json" 2> "$work/plan.err" ||
  { echo "bench/hgrad_accum.sh: plan failed:"; cat "$work/plan.err"; }
plan_s=$(python3 -c "import time,sys; print(round(time.time() - float(sys.argv[1]), 2))" "$t0")
timeout -s KILL "${TLIMIT:-150}" mpirun -np 1 --bind-to none -x NCCL_NVLS_ENABLE -x QWENFT_BACKEND "$Q" train \
  "$work/deck.cfg" --set checkpoint.dir="$work/ck" --set log.dir="$work/log" > "$out/hgrad_accum-train.log" 2>&1
rc=$?
python3 - "$out/hgrad_accum-plan.json" "$work/log/metrics.jsonl" "$out/plan-cache/qwenft-plan-rates.json" "$m" \
  "$micro" "$cap" "$rc" "$plan_s" <<'PY' | tee "$out/hgrad_accum.txt"
import json, sys
plan_p, met_p, rates_p, m, micro, cap, rc, plan_s = sys.argv[1:9]
try: # plan ranks every layout: this deck's is at stage 2, optimizer offload, MICRO (full recomputation where the
     # planner lists it: only where the layout does not fit without)
    c = [q for q in json.load(open(plan_p))["plans"] if q["stage"] == 2 and q["offload"] == "optimizer" and
         q["micro_batch"] == int(micro) and q["ratio"] == 1.0]
    p = ([q for q in c if q["activation_checkpointing"] == "full"] or c)[0]
except (OSError, ValueError, KeyError, IndexError):
    p = {}
try:
    steps = [json.loads(l) for l in open(met_p) if '"loss"' in l]
except OSError:
    steps = []
try:
    r = json.load(open(rates_p))["rates"]
except (OSError, ValueError, KeyError):
    r = {}
t = sorted(s["tokens_per_s"] for s in (steps[2:] or steps))
mid = t[len(t) // 2] if t else None
fmt = lambda v, f="{:.0f}": f.format(v) if isinstance(v, (int, float)) else "?"
print(f"{m} micro {micro} cap {cap}: measured {fmt(mid)} tok/s over {len(steps[2:])} steps after the second "
      f"(rc {rc}; all steps {[round(s['tokens_per_s']) for s in steps]}); predicted {fmt(p.get('tokens_per_s'))} "
      f"(step {fmt(p.get('step_s'), '{:.2f}')} s: compute {fmt(p.get('compute_s'), '{:.2f}')}, PCIe and host "
      f"accumulation {fmt(p.get('pcie_s'), '{:.2f}')}, optimizer {fmt(p.get('optimizer_s'), '{:.2f}')}); host add "
      f"{fmt(r.get('host_add', 0) / 1e9, '{:.2f}')} G/s, sum of squares {fmt(r.get('host_sumsq', 0) / 1e9, '{:.2f}')} G/s, "
      f"d2h {fmt(r.get('d2h', 0) / 1e9, '{:.1f}')} GB/s; plan {plan_s} s; gradients on the host in the plan: "
      f"{p.get('grads_on_host')}, recomputation {p.get('activation_checkpointing')} in {p.get('recompute_layers')} layers "
      f"(-1: all; the run recomputes all: where the plan lists the layout without, its prediction is for that)")
PY
rm -rf "$work"
