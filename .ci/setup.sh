#!/usr/bin/env bash
# .ci/setup.sh demo|test|deps|build — the README's set-up, on a fresh Debian 12 / Ubuntu machine:
#   demo: install what is missing, build, prepare the bundled dataset and train inputs/demo.cfg
#   test: the same, then the whole test suite (ctest)
#   deps: only install the packages;  build: only configure and build
#   asan: build-asan/ with ASan + UBSan (gcc) and its unit, ref and mpi labels (docs/reliability.md)
#   fuzz: the libFuzzer targets (clang), FUZZ_SECONDS each (default 60): bench/fuzz.sh; FUZZ_TARGETS (default:
#         deck ds include jsonl safetensors tokenizer serve_req serve_json; the dataset target runs by hand,
#         docs/reliability.md)
# Environment: BUILD_DIR (default build), NP (MPI ranks for the demo, default 2), QWENFT_CUDA (AUTO|ON|OFF),
#              CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES; default 80;89;90),
#              CTEST_ARGS (extra ctest arguments).
set -euo pipefail
mode=${1:-demo}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD_DIR=${BUILD_DIR:-build}
NP=${NP:-2}

# Debian packages qwen-ft builds and tests against (Open MPI, parallel HDF5, libconfig, jansson; PCRE2, utf8proc and
# nettle for the tokenizer; zlib and zstd for compressed JSONL).
PKGS=(build-essential cmake pkg-config openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools libconfig-dev
      libjansson-dev libpcre2-dev libutf8proc-dev nettle-dev python3 python3-venv zlib1g-dev
      libzstd-dev libevent-dev)

# only for `fuzz`: clang with its libFuzzer/sanitizer runtimes (a Recommends of clang, so named) and OpenMP
FUZZ_PKGS=(clang libclang-rt-14-dev libomp-dev)

install_deps() {
  local missing=() want=("${PKGS[@]}" "$@")
  for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then echo "setup: all packages present"; return; fi
  echo "setup: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

build() {
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${QWENFT_CUDA:+-DQWENFT_CUDA=$QWENFT_CUDA} \
    ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS}
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}

# ASan + UBSan build of the unit, ref and mpi labels (measured: docs/reliability.md). Leak checking is off: Open MPI
# keeps its allocations to exit; any UB stops the test.
asan() {
  cmake -S . -B build-asan -DQWENFT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
  cmake --build build-asan -j "$(nproc)"
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -L 'unit|ref|mpi' -j "$(nproc)" --output-on-failure
}

# Open MPI refuses root unless told; oversubscribe so that NP ranks run on fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

demo() {
  mkdir -p demo-out
  local q="$BUILD_DIR/qwen-ft"
  "$q" prepare --in inputs/demo/train.jsonl --out demo-out/train.h5 --vocab-size 320 --eos-id 256 --pad-id 256
  "$q" prepare --in inputs/demo/valid.jsonl --out demo-out/valid.h5 --vocab-size 320 --eos-id 256 --pad-id 256
  rm -rf demo-out/ckpt demo-out/logs
  mpirun -np "$NP" "$q" inputs/demo.cfg
  echo "setup: demo done; metrics in demo-out/logs/metrics.jsonl, checkpoints in demo-out/ckpt"
}

# the tokenizer references of the ref tests (tests/reference/requirements.txt: tokenizers, transformers, tiktoken;
# no torch) in BUILD_DIR/pyref from PyPI; without network the tests that need them skip, saying why
pyref_setup() {
  local py="$BUILD_DIR/pyref/bin/python" req=tests/reference/requirements.txt nd=tests/reference/requirements-nodeps.txt
  local srv=tests/reference/requirements-serve.txt
  if [ -x "$py" ] && "$py" -m pip install -q --no-deps --no-index -r "$req" -r "$nd" -r "$srv" 2>/dev/null; then return 0; fi # pinned: present
  echo "setup: installing the tokenizer references of $req and $nd into $BUILD_DIR/pyref (PyPI)"
  { { [ -x "$py" ] || python3 -m venv "$BUILD_DIR/pyref"; } && "$py" -m pip install -q --disable-pip-version-check -r "$req" &&
    "$py" -m pip install -q --disable-pip-version-check --no-deps -r "$nd"; } ||
    echo "setup: could not install $req / $nd (no PyPI?): the tests that compare with HF tokenizers will skip"
  echo "setup: installing the serve clients of $srv into $BUILD_DIR/pyref (PyPI)"
  { [ -x "$py" ] && "$py" -m pip install -q --disable-pip-version-check -r "$srv"; } ||
    echo "setup: could not install $srv (no PyPI?): ref_serve_clients will skip"
}

# the `system` tests' Slurm + munge + Lmod + TensorBoard (root only; QWENFT_SYSTEM_SETUP=0 skips it and the
# system tests then skip themselves, saying why)
system_setup() {
  [ "${QWENFT_SYSTEM_SETUP:-1}" = 1 ] || return 0
  if [ "$(id -u)" -eq 0 ]; then bash .ci/system-setup.sh
  elif sudo -n true 2>/dev/null; then sudo bash .ci/system-setup.sh
  else echo "setup: not root and no sudo: the system tests (Slurm, Lmod) will skip"; fi
}

case "$mode" in
  deps) install_deps ;;
  build) install_deps; build ;;
  demo) install_deps; build; demo ;;
  test) install_deps; build; demo; system_setup; pyref_setup; ctest --test-dir "$BUILD_DIR" --output-on-failure ${CTEST_ARGS:-} ;;
  asan) install_deps; asan ;;
  # CI fuzzes qwen-ft's own parsers; the dataset target mostly finds libhdf5 1.10.8's own defects on corrupted
  # files (hangs, wild reads, out-of-memory: docs/reliability.md), so it runs by hand (FUZZ_TARGETS=dataset)
  fuzz) install_deps "${FUZZ_PKGS[@]}"
        JOBS=$(nproc) bash bench/fuzz.sh "${FUZZ_SECONDS:-60}" ${FUZZ_TARGETS:-deck ds include jsonl safetensors tokenizer serve_req serve_json} ;;
  *) echo "usage: .ci/setup.sh demo|test|deps|build|asan|fuzz" >&2; exit 2 ;;
esac
