#!/usr/bin/env bash
# bench/stage_device_extras.sh — run here after ../shared/device/stage.sh: adds to .devdeps/debs the Debian runtime
# libraries qwen-ft links that the GPU machine (Ubuntu 24.04, no package registry) may lack: the tokenizer's utf8proc
# and serve's libevent (core, extra, pthreads); hdf5-tools (h5diff, with the serial libhdf5 it links: the tests that
# compare checkpoints bit for bit, e.g. gpu_update_overlap, skip without it); and, for bench/serve_bench.sh, Locust's wheels for the machine's
# Python 3.12 in .devdeps/whl-serve (install there with `pip install --no-index --find-links .devdeps/whl-serve
# --target /tmp/serve-site locust`, then PYTHONPATH=/tmp/serve-site).
# `. .devdeps/env.sh` on a fresh machine unpacks every staged package. PCRE2, nettle and jansson are left to the
# host's own (same sonames): staging Debian's older copies would put them ahead of the host's on LD_LIBRARY_PATH
# for every program, the peer's Python included.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$root/.devdeps/debs" ] || { echo "run ../shared/device/stage.sh first (no .devdeps/debs)" >&2; exit 2; }
cd "$root/.devdeps/debs"
apt-get download -q libutf8proc2 libevent-core-2.1-7 libevent-extra-2.1-7 libevent-pthreads-2.1-7 \
  hdf5-tools libhdf5-103-1 libhdf5-hl-100 libhdf5-cpp-103-1 2>&1 |
  grep -v '^Get:' || true
ls libutf8proc2_*.deb libevent-*.deb hdf5-tools_*.deb
mkdir -p "$root/.devdeps/whl-serve"
pip download -q locust --dest "$root/.devdeps/whl-serve" --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any
du -sh "$root/.devdeps/whl-serve"
