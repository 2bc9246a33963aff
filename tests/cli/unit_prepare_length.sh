#!/usr/bin/env bash
# The length policy of `qwen-ft prepare` (--max-len, else --seq-len; --truncate): by default a conversation longer
# than the limit is cut after its last assistant turn that fits (its ids then equal those of the conversation up to
# that turn), or to its first N tokens when not even the first answer fits; plain text longer than the limit is
# left whole (split across rows by the packing, as before); --truncate right / left keep the first / last N tokens
# of every record, drop leaves them out; the summary (also --check) counts each case; --truncate without a limit
# is exit 2. Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
. "$SRC/tests/prepare_common.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 not found"; exit 77; }
TOK="$SRC/tests/reference/fixtures/tokenizer/tokenizer.json"
A1='{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}'
A2='{"role": "user", "content": "and now a much longer question"}, {"role": "assistant", "content": "and a much, much longer answer to it"}'
{
  echo "{\"messages\": [$A1, $A2]}"
  echo '{"text": "a plain text record that is longer than the limit of this test, by some margin, and then by some more words on top of it"}'
  echo '{"messages": [{"role": "user", "content": "a question far too long to leave room for any of its answer"}, {"role": "assistant", "content": "the answer"}]}'
  echo '{"text": "short"}'
} > in.jsonl
echo "{\"messages\": [$A1]}" > a1.jsonl
# the lengths without a limit, and the length of the first exchange alone
run prepare --tokenizer "$TOK" --in in.jsonl --out full.h5; [ "$rc" -eq 0 ] || fail "prepare without a limit"
run prepare --tokenizer "$TOK" --in a1.jsonl --out a1.h5; [ "$rc" -eq 0 ] || fail "prepare of the first exchange"
for f in full a1; do dump_packed $f.h5; done
read -r nA nT nB nS n1 <<< "$(python3 -c '
import struct
def offs(f):
    b = open(f + ".h5.doc_offsets.bin", "rb").read(); o = struct.unpack("<%dQ" % (len(b) // 8), b)
    return [o[i + 1] - o[i] for i in range(len(o) - 1)]
print(*offs("full"), *offs("a1"))')"
L=$(( n1 + 2 ))
[ "$n1" -lt "$L" ] && [ "$L" -lt "$nA" ] && [ "$nT" -gt "$L" ] && [ "$nB" -gt "$L" ] && [ "$nS" -lt "$L" ] ||
  fail "the records do not straddle the limit as this test needs (A1 $n1, A $nA, text $nT, B $nB, short $nS, L $L)"
cat > check.py <<'PY'
import struct, sys
mode, h5, L = sys.argv[1], sys.argv[2], int(sys.argv[3])
def docs(f):
    b = open(f"{f}.doc_offsets.bin", "rb").read(); o = struct.unpack(f"<{len(b)//8}Q", b)
    t = open(f"{f}.tokens.bin", "rb").read(); t = struct.unpack(f"<{len(t)//4}I", t)
    m = open(f"{f}.loss_mask.bin", "rb").read()
    return [(t[o[i]:o[i + 1]], m[o[i]:o[i + 1]]) for i in range(len(o) - 1)]
full, a1, got = docs("full.h5"), docs("a1.h5"), docs(h5)
A, T, B, S = full
want = {"default": [a1[0], T, (B[0][:L], B[1][:L]), S],
        "right": [(d[0][:L], d[1][:L]) for d in full],
        "left": [(d[0][-L:], d[1][-L:]) for d in full],
        "drop": [S]}[mode]
assert got == want, (mode, [len(d[0]) for d in got], [len(d[0]) for d in want])
print(f"{mode}: {len(got)} documents as the policy says (limit {L})")
PY
check() { # MODE H5: the documents of H5 against full.h5 under MODE
  dump_packed "$2"
  python3 check.py "$1" "$2" "$L" || fail "$1: the documents are not what the policy says"
}
run prepare --tokenizer "$TOK" --in in.jsonl --out def.h5 --max-len "$L"; [ "$rc" -eq 0 ] || fail "default policy"
check default def.h5
grep -qF -- "--max-len $L: 3 records longer: 2 cut after the last assistant turn that fits (1 inside the first answer, none fitting whole) ($(( nA - n1 + nB - L )) tokens removed), 1 left whole" out.txt ||
  fail "the summary does not count the cuts"
# --seq-len is the limit when --max-len is not given; --check reports the same
run prepare --tokenizer "$TOK" --in in.jsonl --out seq.h5 --seq-len "$L"; [ "$rc" -eq 0 ] || fail "--seq-len"
check default seq.h5
run prepare --tokenizer "$TOK" --in in.jsonl --check --seq-len "$L"
[ "$rc" -eq 0 ] && grep -qF -- "--seq-len $L: 3 records longer: 2 cut after the last assistant turn" out.txt || fail "--check"
for mode in right left drop; do
  run prepare --tokenizer "$TOK" --in in.jsonl --out $mode.h5 --max-len "$L" --truncate $mode
  [ "$rc" -eq 0 ] || fail "--truncate $mode"
  [ $mode = drop ] || check $mode $mode.h5
done
check drop drop.h5
grep -qF -- "--max-len $L: 3 records longer: 3 dropped" out.txt || fail "--truncate drop: the summary"
# a --max-len larger than every record changes nothing
run prepare --tokenizer "$TOK" --in in.jsonl --out big.h5 --max-len 100000; [ "$rc" -eq 0 ] || fail "--max-len 100000"
cmp -s <(h5dump -d /tokens big.h5 | tail -n +4) <(h5dump -d /tokens full.h5 | tail -n +4) || fail "--max-len 100000 cut something"
# --truncate without a limit: exit 2
run prepare --tokenizer "$TOK" --in in.jsonl --out x.h5 --truncate left
[ "$rc" -eq 2 ] && grep -q "needs a limit: --max-len N or --seq-len T" err.txt || fail "--truncate without a limit: exit $rc"
echo "length policy: default cuts at assistant turn ends, right/left/drop, counted in the summary"
