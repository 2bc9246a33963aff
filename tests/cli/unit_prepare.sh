#!/usr/bin/env bash
# `qwen-ft prepare`: good pre-tokenized input (labels, loss_mask, plain ids) -> dataset with the right token count;
# a broken line -> exit 2 naming FILE:LINE and no output file; --skip-bad -> exit 0 and a summary of 1 skipped;
# --valid-fraction -> two files whose documents add up; text records -> exit 2 mentioning the tokenizer;
# usage errors -> exit 2 with the usage text.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
. "$SRC/tests/prepare_common.sh"

# dims DATASET FILE: the length of a 1-D dataset, from h5dump's header
dims() { h5dump -H -d "$1" "$2" | sed -n 's/.*DATASPACE *SIMPLE { ( \([0-9]*\) ).*/\1/p'; }

command -v h5dump >/dev/null || { echo "SKIP: h5dump not found (hdf5-tools)"; exit 77; }

# 1. good input: labels (HF, -100 = not a target), loss_mask, plain ids, blank lines; 3 + 4 + 2 = 9 tokens
cat > good.jsonl <<'EOF'
{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}

{"input_ids": [4, 5, 6, 7], "loss_mask": [1, 0, 1, 1]}
{"input_ids": [8, 9]}
EOF
run prepare --in good.jsonl --out good.h5 --vocab-size 100 --eos-id 0
[ "$rc" -eq 0 ] || fail "prepare of good input exited $rc"
[ -f good.h5 ] || fail "good.h5 was not written"
[ ! -e good.h5.tmp ] || fail "good.h5.tmp left behind"
n=$(dims /tokens good.h5)
[ "$n" = 9 ] || fail "/tokens has '$n' elements, expected 9"
n=$(dims /doc_offsets good.h5)
[ "$n" = 4 ] || fail "/doc_offsets has '$n' elements, expected 4 (3 documents + 1)"
h5dump -d /loss_mask good.h5 | tr -d ' \n' | grep -q '(0):0,1,1,1,0,1,1,1,1' ||
    fail "/loss_mask is not 0,1,1,1,0,1,1,1,1: $(h5dump -d /loss_mask good.h5)"
h5dump -A good.h5 | grep -q '"qwen-ft-packed"' || fail "format attribute missing"
grep -q "9 tokens" out.txt || fail "summary does not mention 9 tokens"

# 2. invalid JSON on line 3: exit 2, message names file.jsonl:3, no output file
printf '%s\n' '{"input_ids": [1, 2]}' '{"input_ids": [3]}' '{"input_ids": [4, ' '{"input_ids": [5]}' > file.jsonl
run prepare --in file.jsonl --out broken.h5
[ "$rc" -eq 2 ] || fail "invalid JSON: exit $rc, expected 2"
grep -q "file.jsonl:3" err.txt || fail "stderr does not name file.jsonl:3"
[ ! -e broken.h5 ] || fail "broken.h5 exists after a failed prepare"
[ ! -e broken.h5.tmp ] || fail "broken.h5.tmp left behind"

# 3. the same with --skip-bad: exit 0, 3 documents, a summary saying 1 line was skipped (and where)
run prepare --in file.jsonl --out skipped.h5 --skip-bad
[ "$rc" -eq 0 ] || fail "--skip-bad: exit $rc, expected 0"
grep -q "skipped 1 bad line" out.txt || fail "summary does not say 1 line was skipped"
grep -q "file.jsonl:3" out.txt || fail "summary does not name file.jsonl:3"
n=$(dims /doc_offsets skipped.h5)
[ "$n" = 4 ] || fail "--skip-bad kept $((n - 1)) documents, expected 3"

# 4. --valid-fraction 0.25 on 8 documents: two files whose documents add up to 8 (the choice is a hash of each
#    record's content: tests/cli/unit_prepare_split.sh checks the rule itself)
for i in 0 1 2 3 4 5 6 7; do echo "{\"input_ids\": [$i, $((i + 10))]}"; done > eight.jsonl
run prepare --in eight.jsonl --out split.h5 --valid-fraction 0.25 --seed 7
[ "$rc" -eq 0 ] || fail "--valid-fraction: exit $rc"
[ -f split.h5 ] && [ -f split.valid.h5 ] || fail "expected split.h5 and split.valid.h5"
nt=$(( $(dims /doc_offsets split.h5) - 1 ))
nv=$(( $(dims /doc_offsets split.valid.h5) - 1 ))
[ $((nt + nv)) -eq 8 ] || fail "train $nt + valid $nv documents != 8"
[ "$nv" -ge 1 ] && [ "$nt" -ge 1 ] || fail "valid has $nv documents and train $nt, expected at least 1 each"
run prepare --in eight.jsonl --out split2.h5 --valid-fraction 0.25 --seed 7 --valid-out v2.h5
[ "$rc" -eq 0 ] && [ -f v2.h5 ] || fail "--valid-out v2.h5 not written"
cmp -s <(h5dump -d /tokens split.valid.h5 | grep -A3 DATA) <(h5dump -d /tokens v2.h5 | grep -A3 DATA) ||
    fail "the same seed chose different validation documents"

# 5. a plain-text record needs the tokenizer: exit 2, naming the line and the tokenizer; no output
printf '%s\n' '{"input_ids": [1]}' '{"text": "hello world"}' > text.jsonl
run prepare --in text.jsonl --out text.h5
[ "$rc" -eq 2 ] || fail "text record: exit $rc, expected 2"
grep -qi "tokenizer" err.txt || fail "stderr does not mention the tokenizer"
grep -q "text.jsonl:2" err.txt || fail "stderr does not name text.jsonl:2"
[ ! -e text.h5 ] || fail "text.h5 exists after a failed prepare"

# 6. usage and path errors: exit 2
run prepare --out x.h5
[ "$rc" -eq 2 ] && grep -q "usage" err.txt || fail "missing --in: exit $rc or no usage text"
run prepare --in good.jsonl --out x.h5 --no-such-option
[ "$rc" -eq 2 ] && grep -q "no-such-option" err.txt || fail "unknown option: exit $rc"
run prepare --in missing.jsonl --out x.h5
[ "$rc" -eq 2 ] && grep -q "missing.jsonl" err.txt || fail "missing input: exit $rc or not named"
mkfifo pipe.jsonl
run prepare --in pipe.jsonl --out x.h5
[ "$rc" -eq 2 ] && grep -q "pipe.jsonl: is not a regular file" err.txt || fail "a pipe as input: exit $rc or not said"
run prepare --in good.jsonl --out no_such_dir/x.h5
[ "$rc" -eq 2 ] && grep -q "no_such_dir/x.h5" err.txt || fail "unwritable output: exit $rc or not named"
run prepare --help
[ "$rc" -eq 0 ] && grep -q -- "--valid-fraction" out.txt || fail "--help: exit $rc or no option list"
[ ! -e x.h5 ] || fail "x.h5 written by a failing command"

echo "unit_prepare: all checks passed"
