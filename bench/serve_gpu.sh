#!/usr/bin/env bash
# bench/serve_gpu.sh PART... — the [serve] issue's measurements on the GPU machine (docs/performance.md records them).
# Run from the repo root after `. .devdeps/env.sh`, with the CUDA build as build-cuda/ (QWENFT: its binary); results
# in $OUT (each part appends to one file there: a device call returns at most 8 files).
#   tests    the GPU tests of the decoding path: test_paged_cuda (every attention form), test_paged_cuda_attn*,
#            test_paged_prompt_cuda, test_graph_cuda, gpu_serve, gpu_generate ($OUT/serve_gpu_tests.txt)
#   decode   build-cuda/decode_bench 512 under the defaults and each bench hook (QWENFT_DECODE_ATTN=rows|inflight,
#            QWENFT_GEMV_PF=8, QWENFT_DECODE_ATTN_SPLIT=64, QWENFT_GEMM_TUNE=8: cuBLASLt's
#            algorithm timed for the decoding shapes, M = 8 to 128 rows; DECODE_HOOKS:
#            another list, VAR=VALUE[,VAR=VALUE] each, "defaults" none): per-layer parts and the step as one graph
#            ($OUT/serve_gpu_decode.txt)
#   ahead    Qwen2.5-7B bf16 served (bench/serve_bench.sh without Locust) and generated (bench/generate_bench.sh,
#            batch 1 and 32, no peer) with --decode-ahead on (the default) and off, in that order
#            ($OUT/serve_bench.jsonl, $OUT/generate_bench.jsonl)
#   trace    the GPU timeline of generate's 7B decoding at batch 1 (bench/kernel_trace.c through
#            CUDA_INJECTION64_PATH): per kernel, the idle time, and one step's kernels in order with the gap before
#            each ($OUT/serve_gpu_trace.txt; the CSV gzipped)
#   spec     Qwen2.5-7B bf16 served (bench/serve_bench.sh without Locust) with --speculate 0 and 4 (SPEC_N: others),
#            in that order: batch 1, 32 concurrent and the shared start, with the drafts fed and accepted
#            ($OUT/serve_bench.jsonl)
#   locust   bench/serve_bench.sh in full: batch 1, 32 concurrent and the seed's Locust test for 2 minutes
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build-cuda/qwen-ft}
B=$(dirname "$Q")
out=${OUT:-/tmp}
work=$(mktemp -d)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ $# -ge 1 ] || { echo "usage: bench/serve_gpu.sh tests|decode|ahead|trace|spec|locust ..." >&2; exit 2; }
for part in "$@"; do
  echo "== serve_gpu.sh $part ($(date -u +%H:%M:%S))"
  case "$part" in
    tests)
      ctest --test-dir "$B" -R 'test_paged_cuda|test_paged_prompt_cuda|test_graph_cuda|gpu_serve|gpu_generate' \
        --output-on-failure 2>&1 | tail -40 | tee -a "$out/serve_gpu_tests.txt" ;;
    decode)
      for hook in ${DECODE_HOOKS:-defaults QWENFT_DECODE_ATTN=rows QWENFT_DECODE_ATTN=inflight QWENFT_GEMV_PF=8 \
        QWENFT_DECODE_ATTN_SPLIT=64 QWENFT_GEMM_TUNE=8}; do
        echo "-- decode_bench 512 $hook" | tee -a "$out/serve_gpu_decode.txt"
        [ "$hook" = defaults ] && hook=
        # shellcheck disable=SC2086 # a hook: VAR=VALUE[,VAR=VALUE...]
        env ${hook//,/ } timeout 120 "$B/decode_bench" 512 > "$work/decode.txt" 2>&1
        cat "$work/decode.txt" >> "$out/serve_gpu_decode.txt"
        grep -E "^M =|one CUDA graph|attention|one ahead| o |down" "$work/decode.txt" | head -24
      done ;;
    ahead)
      for a in "" "--decode-ahead off"; do
        SERVE_ARGS="$a" BENCH_LOCUST_TIME=0 QWENFT=$Q bash "$root/bench/serve_bench.sh" 2>&1 | grep -E '^\{|exit' | tail -3
        GEN_ARGS="$a" BENCH_14B=0 BENCH_PEER=0 QWENFT=$Q bash "$root/bench/generate_bench.sh" 2>&1 | grep '^{' | tail -2
      done ;;
    trace)
      lib=${QF_TRACE_LIB:-$B/libqf_kernel_trace.so}
      [ -f "$lib" ] || { echo "serve_gpu.sh trace: no $lib (built where the CUDA toolkit has CUPTI)" >&2; continue; }
      # the toolkit's CUPTI carried with the build where the GPU machine has none (docs/testing.md)
      [ -d "$B/cupti" ] && export LD_LIBRARY_PATH="$B/cupti:${LD_LIBRARY_PATH:-}"
      python3 -c "import json, random
r = random.Random(1)
print(json.dumps({'prompt_ids': [r.randrange(150000) for _ in range(512)]}))" > "$work/p1.jsonl"
      CUDA_INJECTION64_PATH=$lib QF_TRACE_OUT=$work/trace-gen.csv QWENFT_BACKEND=cuda timeout 300 "$Q" generate \
        --model preset:qwen2.5-7b --prompts "$work/p1.jsonl" --max-new-tokens 128 --ignore-eos --json --timing \
        > /dev/null 2> "$work/gen.err"
      tail -1 "$work/gen.err" | tee -a "$out/serve_gpu_trace.txt"
      # a decoding step ends with the argmax; the first 16 are the warm-up (the prompt, graph captures)
      python3 "$root/bench/trace_summary.py" "$work/trace-gen.csv" --step-kernel argmax --skip 16 --steps 3 \
        >> "$out/serve_gpu_trace.txt" 2>&1
      gzip -c "$work/trace-gen.csv" > "$out/trace-gen.csv.gz"
      head -40 "$out/serve_gpu_trace.txt" ;;
    spec)
      for n in 0 ${SPEC_N:-4}; do
        SERVE_ARGS="--speculate $n" BENCH_LOCUST_TIME=0 QWENFT=$Q bash "$root/bench/serve_bench.sh" 2>&1 |
          grep -E '^\{|exit|speculation' | tail -6
      done ;;
    locust)
      QWENFT=$Q bash "$root/bench/serve_bench.sh" 2>&1 | grep -E '^\{|exit' ;;
    *) echo "serve_gpu.sh: unknown part $part (tests, decode, ahead, trace, spec, locust)" >&2; exit 2 ;;
  esac
done
rm -rf "$work"
