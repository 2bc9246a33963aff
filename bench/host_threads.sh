#!/usr/bin/env bash
# bench/host_threads.sh MODEL:SEQ:CAP LAYOUT... — how the host AdamW's thread count changes an offloaded run on the
# GPU machine. The host AdamW of an offloaded step overlaps the next forward, whose kernels the trainer's thread
# queues; with as many AdamW threads as cores that thread competes with them. For each LAYOUT (a name and --set
# pairs joined by commas, e.g. s1sel15=zero_optimization.stage=1,activation_checkpointing=selective,...) and each
# thread count in THREADS (default "default 15 8": "default" leaves OMP_NUM_THREADS unset, the engine's own
# choice), one run of $STEPS steps (train_batch_size 32, Qwen2.5 random init, bf16): tokens/s (the median of the
# steps after the second: the second pays the host's first touch of the optimizer state), NVML's GPU utilisation,
# the step's share of waiting and the host AdamW's own seconds a step (metrics.jsonl host_adamw_s), one line each in $OUT/host_threads.txt; each run's log into
# $OUT/host_threads-logs.tar. Env: STEPS (5), TLIMIT (s per run, default 150: SIGKILL after it, no checkpoint);
# TRACE=1: each run under bench/kernel_trace.c (CUPTI, through CUDA_INJECTION64_PATH; the build's
# libqf_kernel_trace.so): the GPU's kernels, copies and idle time per step after the second go into
# $OUT/host_threads-trace.txt (where the step goes while the host AdamW runs beside the next forward).
#   bash bench/host_threads.sh 7b:512:0 \
#     s1=zero_optimization.stage=1,zero_optimization.offload_optimizer.device=cpu,train_micro_batch_size_per_gpu=32
# Run from the repo root after `. .devdeps/env.sh`, with QWENFT set to the CUDA build's binary.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build-cuda/qwen-ft}
qdir=$(dirname "$Q")
. "$root/bench/random_model.sh"
out=${OUT:-/tmp}
steps=${STEPS:-5}
[ $# -ge 2 ] || { echo "usage: bench/host_threads.sh model:seq:cap name=key=value,key=value ..." >&2; exit 2; }
IFS=: read -r m seq cap <<< "$1"; shift
[[ "$seq" =~ ^[0-9]+$ && "$cap" =~ ^[0-9]+$ ]] || { echo "bench/host_threads.sh: $m:$seq:$cap: model:seq:cap expected" >&2; exit 2; }
work=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bench_random_model "$m"
bench_random_data "$work" $((32 * (steps + 1))) "$seq"
cat > "$work/deck.cfg" <<DECK
$model
data = { train = "$work/d.h5"; seq_len = $seq; shuffle = false; };
train_batch_size = 32;
max_steps = $steps; gradient_clipping = 1.0;
optimizer = { type = "AdamW"; params = { lr = 1e-5; weight_decay = 0.01; }; };
bf16 = { enabled = true; };
zero_optimization = { overlap_comm = true; offload_optimizer = { pin_memory = true; };
                      offload_param = { pin_memory = true; }; };
gpu_memory_limit_gb = $cap;
checkpoint = { every_steps = 0; at_end = false; };
log = { steps_per_print = 1; };
eval = { every_steps = 0; };
DECK
for layout in "$@"; do
  name=${layout%%=*}
  sets=()
  IFS=, read -ra kv <<< "${layout#*=}"
  for x in "${kv[@]}"; do sets+=(--set "$x"); done
  for t in ${THREADS:-default 15 8}; do
    run="$name-t$t"
    rm -rf "${work:?}/$run"
    env=()
    [ "$t" = default ] || env=(-x OMP_NUM_THREADS="$t")
    if [ "${TRACE:-0}" = 1 ]; then
      lib=${QF_TRACE_LIB:-$qdir/libqf_kernel_trace.so}
      [ -f "$lib" ] || { echo "bench/host_threads.sh: TRACE=1: no $lib (built where the CUDA toolkit has CUPTI)" >&2; exit 2; }
      # the toolkit's CUPTI carried with the build where the GPU machine has none (docs/testing.md)
      [ -d "$qdir/cupti" ] && export LD_LIBRARY_PATH="$qdir/cupti:${LD_LIBRARY_PATH:-}"
      env+=(-x CUDA_INJECTION64_PATH="$lib" -x QF_TRACE_OUT="$work/$run.csv" -x LD_LIBRARY_PATH)
    fi
    timeout -s KILL "${TLIMIT:-150}" mpirun -np 1 --bind-to none -x NCCL_NVLS_ENABLE "${env[@]}" "$Q" train \
      "$work/deck.cfg" --set checkpoint.dir="$work/$run/ck" --set log.dir="$work/$run/log" "${sets[@]}" \
      > "$work/$run.log" 2>&1
    rc=$?
    tar -rf "$out/host_threads-logs.tar" -C "$work" "$run.log"
    python3 - "$work/$run.log" "$run" "$rc" "$work/$run/log/metrics.jsonl" <<'PY' | tee -a "$out/host_threads.txt"
import json, re, sys
log, run, rc, met = sys.argv[1:5]
try: recs = [json.loads(l) for l in open(met) if '"loss"' in l][2:]
except (OSError, ValueError): recs = []
rows, threads = [], "?"
for l in open(log, errors="replace"):
    m = re.match(r"step (\d+)/\d+ .*\| (\d+) tok/s .*\| GPU (\d+%|n/a).*\| comm (\d+)%", l)
    if m: rows.append((int(m[1]), int(m[2]), m[3], int(m[4])))  # GPU: n/a on CPU ranks
    t = re.search(r"host AdamW on (\d+) thread", l)
    if t and threads == "?": threads = t.group(1)
after = rows[2:] or rows
mid = lambda v: sorted(v)[len(v) // 2] if v else None
r3 = lambda v: round(v, 3) if isinstance(v, float) else v
print(f"{run}: rc {rc}, host AdamW threads {threads}, {mid([r[1] for r in after])} tok/s over {len(rows[2:])} steps "
      f"after the second (GPU {mid([r[2] for r in after])}, waiting {mid([r[3] for r in after])}%); all steps "
      f"{[r[1] for r in rows]}; host AdamW {r3(mid([x.get('host_adamw_s', 0) for x in recs]))} s a step, the "
      f"trainer waited {r3(mid([x.get('host_adamw_wait_s', 0) for x in recs]))} s (medians after the second step)")
PY
    if [ "${TRACE:-0}" = 1 ] && [ -s "$work/$run.csv" ]; then
      # "steps" from one embedding forward to the next (accumulation 1: one a step; the gradient norm's kernels run
      # once per unit with the gradient shard on the host, so they cannot mark the step)
      { echo "== $run"; python3 "$root/bench/trace_summary.py" "$work/$run.csv" --step-kernel embedding_fwd --skip 2 \
          2>&1 | head -60; } >> "$out/host_threads-trace.txt"
    fi
    # the next run starts once this one's memory is back (the driver frees it after the processes are gone)
    for _ in $(seq 60); do
      v=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | head -1)
      { [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -lt 2048 ]; } || [ -z "$v" ] && break
      sleep 1
    done
  done
done
rm -rf "$work"
