#!/usr/bin/env bash
# bench/speed_gpu.sh PART — the [speed] issue's measurements on the GPU machine (docs/performance.md records them).
# Run from the repo root after `. .devdeps/env.sh`, with QWENFT set to the CUDA build's binary; results in $OUT.
#   breakdown  log.wall_clock_breakdown at Qwen2.5-1.5B seq 4096 micro 2 (no recomputation) and Qwen2.5-7B seq 4096
#              micro 1 (full recomputation): per op class and per op-table entry, the median step
#              ($OUT/breakdown-*.json); with nsys on the machine also a kernel summary of a 3-step run
#   trace      the GPU timeline of the 1.5B step (bench/kernel_trace.c through CUDA_INJECTION64_PATH; no nsys needed):
#              per kernel and per step, the GPU's idle time between kernels ($OUT/trace-1.5b.txt)
#   plans7b    Qwen2.5-7B seq 4096 micro 1 on one GPU under each recomputation plan: none, selective, full
#              (tokens/s, MFU, peak memory; $OUT/plans7b.jsonl)
#   peers      the targets' pairs in one call: qwen-ft Qwen2.5-1.5B seq 4096 micro 2 (no recomputation) and Qwen2.5-7B
#              seq 4096 micro 1 with no recomputation (it fits one H200), against PyTorch FSDP2 + HF at 1.5B without
#              and at 7B with full activation checkpointing (its best setting that fits); ratios in $OUT/peers.txt
#   tune       the cuBLASLt algorithms timed per GEMM shape (QWENFT_GEMM_TUNE=16, a bench hook) against the
#              heuristic's first: test_ops_cuda --bench both ways (1.5B and 7B shapes), then the 1.5B (seq 4096 micro 2,
#              no recomputation) and 7B (seq 4096 micro 1, none) steps both ways ($OUT/tune.txt; the runs' logs,
#              with the tuned choices, in $OUT/tune0-*.log and $OUT/tune16-*.log)
#   SPEC...    any MODEL:SEQ:MICRO:ACKPT[:EXTRA] runs (ACKPT none|selective|full; EXTRA a --set list separated by ,)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build-cuda/qwen-ft}
out=${OUT:-/tmp}
work=$(mktemp -d)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/bench/lib/deck.sh"

# one run: MODEL SEQ MICRO ACKPT STEPS TAG [--set ...] (bench/lib/deck.sh's deck, bf16, ZeRO 0); prints the median
# step's JSON line
one() {
  local model=$1 seq=$2 micro=$3 ackpt=$4 steps=$5 tag=$6; shift 6
  local vocab d="$work/d-$model-$seq-$micro.h5"
  vocab=$(deck_vocab "$model")
  [ -f "$d" ] || deck_data "$Q" "$d" $((micro * (steps + 2))) "$seq" "$vocab"
  deck_write "$work/$tag.cfg" "$model" "$seq" "$micro" "$steps" "$d" bf16 ackpt="$ackpt" ckpt="$work/ck-$tag" \
    log="$work/log-$tag"
  timeout "${TLIMIT:-300}" "$Q" train "$work/$tag.cfg" "$@" > "$out/$tag.log" 2>&1 ||
    { echo "{\"tag\": \"$tag\", \"failed\": true}"; tail -5 "$out/$tag.log" >&2; return; }
  python3 - "$work/log-$tag/metrics.jsonl" "$tag" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][2:]
mid = sorted(steps, key=lambda s: s["tokens_per_s"])[len(steps) // 2]
print(json.dumps(dict(tag=sys.argv[2], tok_s=round(mid["tokens_per_s"]), mfu=mid.get("mfu"),
                      peak_gpu_mem_gib=mid.get("peak_gpu_mem_gib"), step_time_s=mid.get("step_time_s"),
                      loss=[round(s["loss"], 4) for s in steps], breakdown=mid.get("breakdown"))))
PY
}

case "${1:-}" in
  breakdown)
    one qwen2.5-1.5b 4096 2 none 6 bd-1.5b --set log.wall_clock_breakdown=true | tee "$out/breakdown-1.5b.json" | cut -c1-400
    one qwen2.5-7b 4096 1 full 5 bd-7b --set log.wall_clock_breakdown=true | tee "$out/breakdown-7b.json" | cut -c1-400
    if command -v nsys > /dev/null; then
      TLIMIT=300 nsys profile -o "$out/nsys-1.5b" --force-overwrite true -t cuda,nvtx "$Q" train "$work/bd-1.5b.cfg" \
        --set max_steps=3 --set log.wall_clock_breakdown=false > "$out/nsys.log" 2>&1 &&
        nsys stats -r cuda_gpu_kern_sum -f csv -o "$out/nsys-1.5b" "$out/nsys-1.5b.nsys-rep" >> "$out/nsys.log" 2>&1
      rm -f "$out"/nsys-1.5b.nsys-rep "$out"/nsys-1.5b.sqlite
    else
      echo "nsys: not on this machine" | tee "$out/nsys.log"
    fi ;;
  trace)
    # the GPU timeline of the 1.5B step without nsys: bench/kernel_trace.c (CUPTI) loaded into the run, 5 steps; a
    # cycle ends with the gradient norm's kernel (sumsq_partial: one a step, after the backward; the AdamW runs one
    # launch per tensor); the summary per kernel and per step in $OUT/trace-1.5b.txt, the CSV gzipped
    lib=${QF_TRACE_LIB:-$(dirname "$Q")/libqf_kernel_trace.so}
    [ -f "$lib" ] || { echo "speed_gpu.sh trace: no $lib (built where the CUDA toolkit has CUPTI)" >&2; exit 2; }
    CUDA_INJECTION64_PATH=$lib QF_TRACE_OUT=$work/trace-1.5b.csv one qwen2.5-1.5b 4096 2 none 5 tr-1.5b | cut -c1-300
    python3 "$root/bench/trace_summary.py" "$work/trace-1.5b.csv" --step-kernel sumsq_partial --skip 1 > "$out/trace-1.5b.txt" 2>&1
    gzip -c "$work/trace-1.5b.csv" > "$out/trace-1.5b.csv.gz"
    head -30 "$out/trace-1.5b.txt" ;;
  tune)
    b=$(dirname "$Q")/tests/test_ops_cuda
    for t in "" 16; do
      echo "-- test_ops_cuda --bench QWENFT_GEMM_TUNE=${t:-(off)}" | tee -a "$out/tune.txt"
      QWENFT_GEMM_TUNE=$t timeout 200 "$b" --bench 2>&1 | grep "bench matmul" | tee -a "$out/tune.txt"
    done
    # the 7B step without recomputation needs about 132 GiB: an H200, not an H100
    gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    for t in "" 16; do
      QWENFT_GEMM_TUNE=$t one qwen2.5-1.5b 4096 2 none 6 "tune${t:-0}-1.5b" | cut -c1-300 | tee -a "$out/tune.txt"
      if [ "${gib:-0}" -ge 135000 ]; then
        QWENFT_GEMM_TUNE=$t one qwen2.5-7b 4096 1 none 6 "tune${t:-0}-7b" | cut -c1-300 | tee -a "$out/tune.txt"
      fi
    done ;;
  plans7b)
    for a in none selective full; do one qwen2.5-7b 4096 1 "$a" 6 "7b-$a" | tee -a "$out/plans7b.jsonl" | cut -c1-300; done ;;
  peers)
    one qwen2.5-1.5b 4096 2 none 8 q-1.5b | tee "$out/q-1.5b.json" | cut -c1-300
    one qwen2.5-7b 4096 1 none 8 q-7b | tee "$out/q-7b.json" | cut -c1-300
    bash "$root/.devdeps/bench/run_peer.sh" 1 qwen2.5-1.5b:4096:2:0:0 qwen2.5-7b:4096:1:1:0 > "$out/peer.out" 2>&1
    python3 - "$out" <<'PY' | tee "$out/peers.txt"
import json, sys, glob
o = sys.argv[1]
peers = [json.loads(l) for l in open(f"{o}/peer.out") if l.startswith("{")]
for tag, model in (("q-1.5b", "qwen2.5-1.5b"), ("q-7b", "qwen2.5-7b")):
    q = json.loads(open(f"{o}/{tag}.json").read())
    p = [r for r in peers if r.get("model") == model]
    if q.get("failed") or not p:
        print(model, "missing:", q.get("failed"), len(p)); continue
    p = p[-1]
    print(f"{model}: qwen-ft {q['tok_s']} tok/s (MFU {q['mfu']:.3f}, {q['peak_gpu_mem_gib']:.1f} GiB) vs FSDP2 "
          f"{p['tok_s']} (MFU {p['mfu']:.3f}, {p['peak_mem_gb']} GB, ckpt {p.get('ckpt')}): {q['tok_s'] / p['tok_s']:.2f}x")
PY
    ;;
  "") echo "usage: bench/speed_gpu.sh breakdown|trace|plans7b|peers|MODEL:SEQ:MICRO:ACKPT[:SET,SET] ..." >&2; exit 2 ;;
  *)
    for spec in "$@"; do
      IFS=: read -r model seq micro ackpt extra <<<"$spec"
      sets=()
      IFS=, read -ra kv <<<"${extra:-}"
      for x in "${kv[@]}"; do sets+=(--set "$x"); done
      one "$model" "$seq" "$micro" "$ackpt" 6 "run-$model-$seq-$micro-$ackpt" "${sets[@]}" | tee -a "$out/runs.jsonl" | cut -c1-300
    done ;;
esac
