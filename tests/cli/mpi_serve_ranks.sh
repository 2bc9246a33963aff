#!/usr/bin/env bash
# qwen-ft serve runs on one rank: under mpirun with 2 ranks it refuses with exit code 2 on every rank and one message
# saying so (docs/serve.md), before it loads anything or listens.
# Env: QWENFT, WORK, SRC (tests/mpi_common.sh).
source "$SRC/tests/mpi_common.sh"
rc=0
timeout 60 "$MPIRUN" -np 2 "$QWENFT" serve --model preset:qwen2.5-0.5b --port 0 > out.txt 2> err.txt || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: serve on 2 ranks: exit $rc, expected 2"; cat err.txt; exit 1; }
n=$(grep -c "serve runs on one rank" err.txt || true)
[ "$n" -eq 1 ] || { echo "FAIL: expected the refusal once, got $n times:"; cat err.txt; exit 1; }
! grep -q "listening on" err.txt || { echo "FAIL: it listened"; exit 1; }
echo "PASS: serve on 2 ranks: exit 2, '$(grep -o 'serve runs on one rank[^;]*' err.txt)'"
