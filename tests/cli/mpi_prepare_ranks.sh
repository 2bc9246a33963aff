#!/usr/bin/env bash
# `mpirun -np N qwen-ft prepare` gives the 1-rank datasets bit for bit: a mixed corpus (three plain files, one
# gzip, one zstd; chat, Alpaca, text and pre-tokenized records, duplicates) with --valid-fraction and --dedup, on
# 1, 2 and 3 ranks: h5diff finds no difference in any dataset or attribute of the train and validation files. A
# broken line that a later rank reads is reported with its true FILE:LINE, and no file is written; --check prints
# the same summary on 1 and 3 ranks.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree), MPIEXEC.
set -euo pipefail
: "${QWENFT:?set QWENFT to the qwen-ft binary}" "${WORK:?set WORK to a scratch directory}" "${SRC:?set SRC}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
MPIRUN=${MPIEXEC:-mpirun}
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"

fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
prep() { local np=$1; shift; rc=0; timeout 300 "$MPIRUN" -np "$np" "$QWENFT" prepare "$@" > out.txt 2> err.txt || rc=$?; }
command -v h5diff >/dev/null || { echo "SKIP: h5diff not found (hdf5-tools)"; exit 77; }
command -v gzip >/dev/null && command -v zstd >/dev/null || { echo "SKIP: gzip or zstd not found"; exit 77; }

FIX="$SRC/tests/reference/fixtures"
TOK="$FIX/tokenizer/tokenizer.json"
for i in $(seq 12); do cat "$FIX/chat/input.jsonl"; done > c1.jsonl            # 120 records, many duplicates
for i in $(seq 5); do cat "$FIX/formats/alpaca.jsonl"; done > c2.jsonl          # 35
for i in $(seq 300); do echo "{\"text\": \"line $i of a plain text corpus, $((i * i)) squared\"}"; done > c3.jsonl
for i in $(seq 40); do echo "{\"input_ids\": [$i, $((i + 1)), $((i % 5 + 2))], \"loss_mask\": [0, 1, 1]}"; done > c4.jsonl
gzip -c c2.jsonl > c5.jsonl.gz
zstd -q -c c1.jsonl > c6.jsonl.zst
IN=(--in c1.jsonl --in c5.jsonl.gz --in c3.jsonl --in c6.jsonl.zst --in c4.jsonl --in c2.jsonl)

for np in 1 2 3; do
    prep "$np" --tokenizer "$TOK" "${IN[@]}" --out "r$np.h5" --valid-fraction 0.2 --dedup --seq-len 64
    [ "$rc" -eq 0 ] || fail "np=$np: exit $rc"
    grep "^prepare: summary\|duplicates\|split" out.txt | sed "s/^/np=$np: /"
    sed -n '/^prepare: summary/,/padding/p' out.txt > "sum$np.txt"
done
for np in 2 3; do
    for f in "" .valid; do
        h5diff "r1$f.h5" "r$np$f.h5" || fail "np=$np: r$np$f.h5 differs from the 1-rank file"
    done
    cmp -s sum1.txt "sum$np.txt" || { diff sum1.txt "sum$np.txt"; fail "np=$np: another summary"; }
done
echo "1, 2 and 3 ranks: identical train and validation files"

# a broken line late in the input (read by the last rank): its true FILE:LINE, nothing written
cp c3.jsonl late.jsonl
sed -i '277s/.*/{"text": broken}/' late.jsonl
prep 3 --tokenizer "$TOK" --in c1.jsonl --in late.jsonl --out bad.h5
[ "$rc" -eq 2 ] || fail "np=3, a broken line: exit $rc, expected 2"
grep -q "late.jsonl:277:" err.txt || fail "np=3 does not name late.jsonl:277"
[ "$(grep -c "late.jsonl" err.txt)" -eq 1 ] || fail "the error is printed more than once"
[ ! -e bad.h5 ] && [ ! -e bad.h5.tmp ] || fail "a file was written"
[ -z "$(ls ./*spill* 2>/dev/null)" ] || fail "spill files left behind: $(ls ./*spill*)"
prep 1 --tokenizer "$TOK" --in c1.jsonl --in late.jsonl --check --skip-bad
grep "summary" out.txt > check1.txt
prep 3 --tokenizer "$TOK" --in c1.jsonl --in late.jsonl --check --skip-bad
grep "summary" out.txt > check3.txt
grep -q "late.jsonl:277" check3.txt || fail "--check on 3 ranks does not name late.jsonl:277"
cmp -s check1.txt check3.txt || fail "--check prints another summary on 3 ranks"
echo "mpi_prepare_ranks: all checks passed"
