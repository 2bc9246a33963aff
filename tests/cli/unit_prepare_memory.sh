#!/usr/bin/env bash
# `qwen-ft prepare` streams: under `ulimit -v` set to 240 MiB above what its libraries and MPI take (measured
# below; 350 MiB in all for a CPU build) it reads a gzip corpus of 400 MB (decompressed; larger than the whole
# limit) with --check, and writes the dataset of an 80 MB corpus (47M tokens: held in memory, tokens and masks
# alone would need 235 MB, which the limit does not leave; the in-memory prepare of before this change fails here). Also: the same 80 MB as 1 and 5 gzip members
# gives the same token count, and the progress line is off when stderr is not a terminal.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
set -euo pipefail
: "${QWENFT:?set QWENFT to the qwen-ft binary}" "${WORK:?set WORK to a scratch directory}" "${SRC:?set SRC}"
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}" OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
export OMP_NUM_THREADS=1
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
command -v python3 >/dev/null && command -v gzip >/dev/null || { echo "SKIP: python3 or gzip not found"; exit 77; }
TOK="$SRC/tests/reference/fixtures/tokenizer/tokenizer.json"
# The limit is what the binary's libraries take (a CPU build: about 108 MiB of address space; a CUDA build maps
# cuBLAS, cuDNN and NCCL too: far more) plus HEADROOM_KB for prepare's own data: the smallest `ulimit -v` under
# which a one-record prepare starts, found by doubling and halving, plus 240 MiB (the CPU build's limit was 350 MiB
# in all before the base was measured).
HEADROOM_KB=245760
printf '%s\n' '{"text": "tiny"}' > tiny.jsonl
starts() { ( ulimit -v "$1"; "$QWENFT" prepare --tokenizer "$TOK" --in tiny.jsonl --out tiny.h5 > /dev/null 2>&1 ) 2> /dev/null; } # Open MPI may crash under a too-small limit
hi=65536
while ! starts "$hi"; do
  hi=$((hi * 2))
  [ "$hi" -le 33554432 ] || { echo "SKIP: a one-record prepare does not start under ulimit -v 32 GiB here (a sanitizer's shadow memory?)"; exit 77; }
done
lo=$((hi / 2))
while [ $((hi - lo)) -gt 8192 ]; do mid=$(((lo + hi) / 2)); if starts "$mid"; then hi=$mid; else lo=$mid; fi; done
LIMIT_KB=$((hi + HEADROOM_KB))
starts "$LIMIT_KB" || fail "a one-record prepare does not start under ulimit -v $LIMIT_KB"
echo "base address space of a one-record prepare: $hi KiB; limit $LIMIT_KB KiB"

python3 - <<'PY'
import json, random
rng = random.Random(1)
words = "the of MPI rank HDF5 tokenizer café 東京 Qwen gradient 42 shard node data record line packed".split()
with open("c.jsonl", "w", encoding="utf-8") as f:
    for i in range(20000):
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(700))}, ensure_ascii=False) + "\n")
PY
gzip -c c.jsonl > c.gz
for i in 1 2 3 4 5; do cat c.gz; done > c5.gz           # 5 gzip members: 400 MB decompressed
rm -f c.gz
bytes=$(( $(stat -c %s c.jsonl) * 5 ))
[ "$bytes" -gt $((HEADROOM_KB * 1024)) ] || fail "the corpus ($bytes bytes) is not larger than prepare's headroom"

# 1. --check of 400 MB under the limit
rc=0; ( ulimit -v "$LIMIT_KB"; "$QWENFT" prepare --tokenizer "$TOK" --in c5.gz --check > out.txt 2> err.txt ) || rc=$?
[ "$rc" -eq 0 ] || fail "--check of $bytes bytes under ulimit -v $LIMIT_KB: exit $rc"
grep -q "100000 records (text 100000)" out.txt || fail "--check did not see 100000 records"
grep -q "80000 records repeat 20000 contents" out.txt || fail "the duplicates of the 5 copies are not counted"
grep -q $'\r' err.txt && fail "a progress line was printed to a file"
tok5=$(sed -n 's/.*tokens \([0-9]*\), trained.*/\1/p' out.txt)

# 2. the dataset of the 80 MB corpus under the limit
rc=0; ( ulimit -v "$LIMIT_KB"; "$QWENFT" prepare --tokenizer "$TOK" --in c.jsonl --out c.h5 > out.txt 2> err.txt ) || rc=$?
[ "$rc" -eq 0 ] || fail "prepare of $(stat -c %s c.jsonl) bytes under ulimit -v $LIMIT_KB: exit $rc"
tok1=$(sed -n 's/.*tokens \([0-9]*\), trained.*/\1/p' out.txt)
[ "$((tok1 * 5))" -eq "$tok5" ] || fail "5 gzip members hold $tok5 tokens, not 5 x $tok1"
[ "$tok1" -gt 40000000 ] || fail "only $tok1 tokens: not the corpus this test means"
echo "unit_prepare_memory: $bytes bytes (--check) and $tok1 tokens (written) under ulimit -v $LIMIT_KB: all checks passed"
