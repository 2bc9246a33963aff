#!/usr/bin/env bash
# bench/consumer_gpu.sh PART — the [consumer] issue's measurements on the GPU machine, in parts that each fit one
# device call (docs/performance.md records them). Run from the repo root after `. .devdeps/env.sh`, with QWENFT set
# to the CUDA build's binary and ADAMW_BENCH to its adamw_bench; results in $OUT/offload.jsonl and $OUT/adamw.jsonl.
#   tests  the gpu label (ctest), then the host AdamW bf16/fp16/fp32 on all cores
#   3b     Qwen2.5-3B seq 512 micro 16, full offload, cap 24: qwen-ft bf16 and fp16 (and bf16 with one core left to
#          the trainer's thread: host AdamW on cores - 1 threads)
#   peer3b the DeepSpeed peer at the same settings, bf16 and fp16, and DeepSpeed's cpu_adam on the same cores
#   7b     Qwen2.5-7B seq 512 micro 8, full offload: cap 24 and cap 12 (gradients to the host by the memory plan)
#   accum  Qwen2.5-3B seq 512 micro 16, accumulation 16: full offload (cap 24) against no offload
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
export OUT=$out TLIMIT=${TLIMIT:-300}
cores=$(nproc)
case "${1:-}" in
  tests)
    ctest --test-dir "${BUILD:-build-cuda}" -L gpu --output-on-failure 2>&1 | tail -40
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket' | tee "$out/cpu.txt"
    for dt in bf16 fp16 fp32; do "$ADAMW_BENCH" 512 "$cores" "$dt" 3 | tee -a "$out/adamw.jsonl"; done ;;
  3b)
    S=qwen2.5-3b:512:16:1:all:1
    bash "$root/bench/offload_bench.sh" "$S:bf16:24:5" "$S:fp16:24:5"
    OMP_NUM_THREADS=$((cores - 1)) bash "$root/bench/offload_bench.sh" "$S:bf16:24:5" ;;
  peer3b)
    bash "$root/bench/offload_peer.sh" 4 qwen2.5-3b:512:16:1:all:1:bf16 qwen2.5-3b:512:16:1:all:1:fp16
    PYTHONPATH=/tmp/ds-site python3 "$root/bench/adamw_bench_ds.py" 512 "$cores" 3 2>&1 | grep '^{' | tee -a "$out/adamw.jsonl" ;;
  7b)
    S=qwen2.5-7b:512:8:1:all:1:bf16
    bash "$root/bench/offload_bench.sh" "$S:24:5" "$S:12:5" ;;
  accum)
    bash "$root/bench/offload_bench.sh" qwen2.5-3b:512:16:1:all:16:bf16:24:3 qwen2.5-3b:512:16:1:none:16:bf16:0:3 ;;
  *) echo "usage: bench/consumer_gpu.sh tests|3b|peer3b|7b|accum" >&2; exit 2 ;;
esac
