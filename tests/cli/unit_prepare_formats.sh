#!/usr/bin/env bash
# `qwen-ft prepare` on the layouts that need no script: Alpaca records, --map question=user,answer=assistant
# (with a system field) and --map body=text give, element for element, the documents of
# tests/reference/fixtures/formats/golden.json (made by tests/reference/make_formats_golden.py with HF tokenizers
# and finetune.py's preprocess). The same input gzip- or zstd-compressed (also a multi-member gzip), several --in
# and a glob give the same datasets; a truncated or corrupt compressed file is exit 2 naming it; a glob that
# matches nothing is exit 2; --map errors are exit 2.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
. "$SRC/tests/prepare_common.sh"

command -v h5dump >/dev/null || { echo "SKIP: h5dump not found (hdf5-tools)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
command -v gzip >/dev/null && command -v zstd >/dev/null || { echo "SKIP: gzip or zstd (the command-line tools) not found"; exit 77; }

FIX="$SRC/tests/reference/fixtures/formats"
TOK="$SRC/tests/reference/fixtures/tokenizer/tokenizer.json"
GOLD="$FIX/golden.json"

# check FILE.h5 RUN [REPEAT]: the datasets equal golden run RUN's documents (REPEAT times over)
check() {
    local h5=$1 name=$2 rep=${3:-1}
    dump_packed "$h5"
    PYTHONPATH="$SRC/tests/reference" python3 - "$GOLD" "$name" "$h5" "$rep" <<'PY' || fail "$h5 differs from golden run '$name'"
import json, sys
from packed_golden import mismatches, read_dumped
gold, name, h5, rep = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
docs = json.load(open(gold, encoding="utf-8"))["runs"][name]["docs"] * rep
tok, mask, off = read_dumped(h5)
bad = mismatches(docs, tok, mask, off)
print(f"{h5}: {len(docs)} documents vs golden '{name}': " + ("equal" if not bad else f"{bad} mismatches"))
sys.exit(1 if bad else 0)
PY
}
# same A.h5 B.h5: the three datasets are equal
same() { h5diff "$1" "$2" /tokens /tokens && h5diff "$1" "$2" /loss_mask /loss_mask &&
         h5diff "$1" "$2" /doc_offsets /doc_offsets || fail "$1 and $2 differ"; }
args() { python3 -c 'import json,sys; sys.stdout.write("".join(x + "\n" for x in json.load(open(sys.argv[1]))["runs"][sys.argv[2]]["args"]))' "$GOLD" "$1"; }

# 1. the golden runs
for name in alpaca map text; do
    mapfile -t a < <(args "$name")
    run prepare --tokenizer "$TOK" --in "$FIX/$name.jsonl" --out "$name.h5" "${a[@]}"
    [ "$rc" -eq 0 ] || fail "prepare ($name) exited $rc"
    check "$name.h5" "$name"
done
grep -q "alpaca 7" <("$QWENFT" prepare --tokenizer "$TOK" --in "$FIX/alpaca.jsonl" --check) ||
    fail "the summary does not count 7 alpaca records"

# 2. compressed: gzip, zstd, a two-member gzip (cat of two .gz), all read as the plain file
cp "$FIX/alpaca.jsonl" a.jsonl
gzip -c a.jsonl > a.jsonl.gz
zstd -q -c a.jsonl > a.data            # the name does not matter: the magic bytes tell
{ gzip -c a.jsonl; gzip -c a.jsonl; } > twice.gz
run prepare --tokenizer "$TOK" --in a.jsonl.gz --out gz.h5
[ "$rc" -eq 0 ] || fail "gzip input: exit $rc"
check gz.h5 alpaca
grep -q "1 gzip" out.txt || fail "the summary does not count a gzip file"
run prepare --tokenizer "$TOK" --in a.data --out zst.h5
[ "$rc" -eq 0 ] || fail "zstd input: exit $rc"
check zst.h5 alpaca
grep -q "1 zstd" out.txt || fail "the summary does not count a zstd file"
run prepare --tokenizer "$TOK" --in twice.gz --out twice.h5
[ "$rc" -eq 0 ] || fail "two-member gzip: exit $rc"
check twice.h5 alpaca 2

# 3. truncated and corrupt compressed input: exit 2 naming the file, nothing written
head -c 100 a.jsonl.gz > cut.gz
run prepare --tokenizer "$TOK" --in cut.gz --out cut.h5
[ "$rc" -eq 2 ] && grep -q "cut.gz" err.txt && grep -qi "truncated" err.txt || fail "truncated gzip: exit $rc"
[ ! -e cut.h5 ] && [ ! -e cut.h5.tmp ] || fail "cut.h5 written from a truncated gzip"
zstd -q -c a.jsonl | head -c 60 > cut.zst
run prepare --tokenizer "$TOK" --in cut.zst --out cut.h5
[ "$rc" -eq 2 ] && grep -q "cut.zst" err.txt || fail "truncated zstd: exit $rc"
{ printf '\x1f\x8b'; head -c 200 /dev/zero; } > bad.gz
run prepare --tokenizer "$TOK" --in bad.gz --out cut.h5
[ "$rc" -eq 2 ] && grep -q "bad.gz" err.txt || fail "corrupt gzip: exit $rc"

# 4. several --in and a glob: input order, then the sorted matches of each pattern
mkdir -p parts
split -l 3 -d a.jsonl parts/p.        # parts/p.00 p.01 p.02
gzip parts/p.01                       # mixed: plain, gzip, plain
run prepare --tokenizer "$TOK" --in 'parts/p.0[0-9]*' --out glob.h5
[ "$rc" -eq 0 ] || fail "glob: exit $rc"
check glob.h5 alpaca
grep -q "3 files" out.txt || fail "the summary does not count 3 files"
run prepare --tokenizer "$TOK" --in parts/p.00 --in parts/p.01.gz --in parts/p.02 --out multi.h5
[ "$rc" -eq 0 ] || fail "three --in: exit $rc"
same glob.h5 multi.h5
run prepare --tokenizer "$TOK" --in 'parts/nothing*.jsonl' --out none.h5
[ "$rc" -eq 2 ] && grep -q "no file matches" err.txt || fail "a glob without matches: exit $rc"

# 5. --map errors: usage (exit 2), a record missing a mapped field (exit 2 naming FILE:LINE and the field)
for bad in "question" "question=robot" "body=text,question=user" "sys=system" "q=user,q=assistant"; do
    run prepare --tokenizer "$TOK" --in "$FIX/map.jsonl" --out m.h5 --map "$bad"
    [ "$rc" -eq 2 ] && grep -q -- "--map" err.txt || fail "--map $bad: exit $rc"
done
printf '%s\n' '{"question": "q1", "answer": "a1"}' '{"question": "no answer"}' > half.jsonl
run prepare --tokenizer "$TOK" --in half.jsonl --out m.h5 --map question=user,answer=assistant
[ "$rc" -eq 2 ] && grep -q "half.jsonl:2: answer is missing" err.txt || fail "a missing mapped field: exit $rc"
[ ! -e m.h5 ] || fail "m.h5 written by a failed prepare"

echo "unit_prepare_formats: all checks passed"
