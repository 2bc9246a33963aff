#!/usr/bin/env bash
# bench/stage_device_extras.sh — run here after ../shared/device/stage.sh: adds to .devdeps/debs the Debian runtime
# library qwen-ft links that the GPU machine (Ubuntu 24.04, no package registry) lacks: the tokenizer's utf8proc.
# `. .devdeps/env.sh` on a fresh machine unpacks every staged package. PCRE2, nettle and jansson are left to the
# host's own (same sonames): staging Debian's older copies would put them ahead of the host's on LD_LIBRARY_PATH
# for every program, the peer's Python included.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$root/.devdeps/debs" ] || { echo "run ../shared/device/stage.sh first (no .devdeps/debs)" >&2; exit 2; }
cd "$root/.devdeps/debs"
apt-get download -q libutf8proc2 2>&1 | grep -v '^Get:' || true
ls libutf8proc2_*.deb
