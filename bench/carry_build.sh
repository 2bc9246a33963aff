#!/usr/bin/env bash
# bench/carry_build.sh [TEST...] — build-slim/: the part of build-cuda/ that a device call carries (what travels is
# capped at 64 MiB with .devdeps): the binaries stripped, the CTest files, no object files, libraries or CMake
# folders, and of the CUDA test programs (5-6 MiB each) only those named. On the GPU machine
# `ln -sfn build-slim build-cuda` first: the CTest files and the scripts name build-cuda's paths.
#   bash bench/carry_build.sh test_graph_cuda test_paged_cuda   # then carry [".devdeps/debs", ".devdeps/env.sh",
#                                                               #  ".devdeps/bench", "build-slim"]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build-cuda/qwen-ft ] || { echo "bench/carry_build.sh: no build-cuda/qwen-ft (build with -DQWENFT_CUDA=ON first)" >&2; exit 2; }
keep=" $* "
rm -rf build-slim
mkdir build-slim
(cd build-cuda && tar cf - --exclude='*.o' --exclude='*.a' --exclude=CMakeFiles --exclude=pyref --exclude=Testing --exclude=./tests/work .) |
  (cd build-slim && tar xf -)
for f in build-slim/tests/*; do
  if [ ! -f "$f" ] || [ ! -x "$f" ]; then continue; fi
  if [ "$(stat -c %s "$f")" -gt 2000000 ] && [[ "$keep" != *" $(basename "$f") "* ]]; then rm -f "$f"; fi
done
for f in build-slim/qwen-ft build-slim/*_bench build-slim/tests/*; do
  if [ -f "$f" ] && [ -x "$f" ] && file "$f" | grep -q ELF; then strip "$f"; fi
done
du -sh build-slim
