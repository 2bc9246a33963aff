#!/usr/bin/env bash
# bench/fuzz.sh N [TARGET...]: runs each libFuzzer target (tests/fuzz, docs/reliability.md) for N seconds under
# ASan + UBSan, one after the other, from a copy of the committed seed corpus (tests/fuzz/corpus/<target>; the
# copy grows, the committed seeds do not). Builds build-fuzz/ with clang first when it is missing. Crashes, leaks,
# UB reports and timeouts leave their input in build-fuzz/fuzz-artifacts/<target>/; the script exits 1 if any
# target found something, 0 when all ran clean.
set -uo pipefail
N=${1:?usage: bench/fuzz.sh SECONDS [deck|ds|include|jsonl|safetensors|tokenizer|dataset|serve_req|serve_json ...]}; shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${FUZZ_BUILD:-$SRC/build-fuzz}
targets=${*:-deck ds include jsonl safetensors tokenizer dataset serve_req serve_json}
mkdir -p "$B"
if [ ! -x "$B/tests/fuzz/fuzz_deck" ]; then
  CC=clang cmake -S "$SRC" -B "$B" -DQWENFT_FUZZ=ON -DQWENFT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBUILD_TESTING=OFF > "$B/fuzz-configure.log" 2>&1 || { echo "fuzz.sh: configure failed (clang, libclang-rt-dev?): $B/fuzz-configure.log"; exit 2; }
fi
cmake --build "$B" -j"${JOBS:-2}" > "$B/fuzz-build.log" 2>&1 || { echo "fuzz.sh: build failed: $B/fuzz-build.log"; exit 2; }
export QWENFT_SRC=$SRC OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# leaks are reported (detect_leaks), UB stops the run (halt_on_error) so that it counts as a finding
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$SRC/tests/fuzz/lsan.supp:print_suppressions=0}
found=0
# first_frame LOG: the innermost stack frame of the finding that is not the sanitizer's, libFuzzer's or libc's, nor
# the allocator ASan intercepts (an oversized request is charged to whoever asked for it: libhdf5's H5C_protect, say)
first_frame() { sed -n '/ERROR\|timeout after\|runtime error/,$p' "$1" | grep -E '^ +#[0-9]+ ' |
  grep -vE 'sanitizer|fuzzer::|libc\.so|__interceptor|Alarm| in (malloc|calloc|realloc|free|posix_memalign|aligned_alloc) ' |
  head -1; }
for t in $targets; do
  work="$B/fuzz-corpus/$t" art="$B/fuzz-artifacts/$t"
  mkdir -p "$work" "$art"
  cp -n "$SRC/tests/fuzz/corpus/$t/"* "$work/" 2> /dev/null || true
  rm -f "$art"/*
  log="$B/fuzz-$t.log" end=$(( $(date +%s) + N )) runs=0 hangs=0 verdict=clean
  # A hang or crash inside libhdf5 on a corrupted file (HDF5 1.10.8's own defects, docs/reliability.md) is counted,
  # its input kept, and the target restarted for the rest of its time; anything else ends the target as a finding.
  while :; do
    left=$(( end - $(date +%s) )); [ $left -gt 0 ] || break
    "$B/tests/fuzz/fuzz_$t" -max_total_time="$left" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$art/" -print_final_stats=1 "$work" > "$log" 2>&1
    rc=$?
    runs=$(( runs + $(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 | grep -E '^[0-9]+$' || echo 0) ))
    [ $rc -eq 0 ] && break
    frame=$(first_frame "$log")
    if echo "$frame" | grep -q libhdf5; then
      hangs=$((hangs + 1)); cp "$log" "$B/fuzz-$t.hdf5-$hangs.log"; continue
    fi
    verdict="FOUND (exit $rc): $(grep -m1 -E 'ERROR|runtime error|timeout after' "$log" | cut -c1-160); at ${frame:-?}"
    found=1; break
  done
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  echo "fuzz_$t: $verdict: $runs inputs in ${N}s, ${cov:-cov ?}, corpus $(ls "$work" | wc -l) files$( [ $hangs -gt 0 ] && echo ", hangs/crashes inside libhdf5: $hangs (logs $B/fuzz-$t.hdf5-*.log)")"
  [ "$verdict" = clean ] || echo "         inputs: $(ls "$art" | head -3 | tr '\n' ' ') (log $log)"
done
exit $found
