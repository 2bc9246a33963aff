#!/usr/bin/env bash
# The leakage rule of `qwen-ft prepare --valid-fraction`: 400 records made of 100 contents, each repeated 1-7 times
# in different layouts (ShareGPT, messages with other key order, Alpaca, other spacing), shuffled. No validation
# document also sits in train; another shuffle of the input gives the same documents on each side (as multisets);
# another --seed another choice; the summary says across train/valid 0 and counts the duplicates; --dedup keeps
# exactly one document per content (spacing variants included), the first, in input order.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
. "$SRC/tests/prepare_common.sh"

command -v h5dump >/dev/null || { echo "SKIP: h5dump not found (hdf5-tools)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
TOK="$SRC/tests/reference/fixtures/tokenizer/tokenizer.json"

# corpus SEED FILE: the 400 records, shuffled with SEED
corpus() { python3 - "$1" "$2" <<'PY'
import json, random, sys
seed, path = int(sys.argv[1]), sys.argv[2]
recs = []
for i in range(100):
    q, a = f"Question {i}: how many ranks for job {i * 7}?", f"Answer {i}: use {i % 8 + 1} ranks, then check."
    forms = [
        {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]},
        {"messages": [{"content": q, "role": "user"}, {"role": "assistant", "content": a}], "id": i},
        {"instruction": q, "input": "", "output": a},
        {"messages": [{"role": "user", "content": "  " + q.replace(" ", "   ")}, {"role": "assistant", "content": a + "\n"}]},
    ]
    for k in range(1 + i % 7):
        recs.append(forms[k % 4])
recs += [{"text": f"padding record {j}"} for j in range(400 - len(recs))]
random.Random(seed).shuffle(recs)
with open(path, "w") as f:
    for r in recs: f.write(json.dumps(r) + "\n")
print(len(recs), "records")
PY
}
# docs FILE.h5: the documents as token tuples, one per line (for comparing as multisets)
docs() {
    h5dump -d /tokens -b LE -o "$1.t.bin" "$1" > /dev/null && h5dump -d /doc_offsets -b LE -o "$1.o.bin" "$1" > /dev/null
    python3 - "$1" <<'PY'
import struct, sys
t = open(sys.argv[1] + ".t.bin", "rb").read(); o = open(sys.argv[1] + ".o.bin", "rb").read()
t = struct.unpack(f"<{len(t)//4}I", t); o = struct.unpack(f"<{len(o)//8}Q", o)
for i in range(len(o) - 1): print(",".join(map(str, t[o[i]:o[i + 1]])))
PY
}

corpus 1 a.jsonl > /dev/null
corpus 2 b.jsonl > /dev/null
cmp -s a.jsonl b.jsonl && fail "the two shuffles are the same file"

# 1. no validation document in train (the issue's 400 records with repeats, --valid-fraction 0.1)
run prepare --tokenizer "$TOK" --in a.jsonl --out a.h5 --valid-fraction 0.1
[ "$rc" -eq 0 ] || fail "prepare a: exit $rc"
grep -q "across train/valid 0)" out.txt || fail "the summary does not say 0 contents across train/valid"
grep -q "exact duplicates: 295 records repeat 85 contents" out.txt || fail "the summary miscounts the duplicates"
docs a.h5 | sort > a.train; docs a.valid.h5 | sort > a.valid
[ -s a.valid ] && [ -s a.train ] || fail "an empty side"
both=$(comm -12 <(sort -u a.train) <(sort -u a.valid) | wc -l)
[ "$both" -eq 0 ] || fail "$both documents are in both train and valid"
[ $(( $(wc -l < a.train) + $(wc -l < a.valid) )) -eq 400 ] || fail "train + valid != 400 documents"

# 2. independent of order: the other shuffle puts the same documents on each side
run prepare --tokenizer "$TOK" --in b.jsonl --out b.h5 --valid-fraction 0.1
[ "$rc" -eq 0 ] || fail "prepare b: exit $rc"
docs b.valid.h5 | sort > b.valid; docs b.h5 | sort > b.train
cmp -s a.valid b.valid || fail "another input order chose other validation documents"
cmp -s a.train b.train || fail "another input order gave other train documents"

# 3. another seed: another choice (still with nothing on both sides)
run prepare --tokenizer "$TOK" --in a.jsonl --out s.h5 --valid-fraction 0.1 --seed 7
[ "$rc" -eq 0 ] || fail "prepare --seed 7: exit $rc"
docs s.valid.h5 | sort > s.valid; docs s.h5 | sort > s.train
cmp -s a.valid s.valid && fail "--seed 7 chose the same validation documents as seed 42"
[ "$(comm -12 <(sort -u s.train) <(sort -u s.valid) | wc -l)" -eq 0 ] || fail "--seed 7: documents on both sides"

# 4. --dedup: one document per content: 100 conversations + 5 padding texts, spacing variants included
run prepare --tokenizer "$TOK" --in a.jsonl --out d.h5 --valid-fraction 0.1 --dedup
[ "$rc" -eq 0 ] || fail "--dedup: exit $rc"
grep -q -- "--dedup dropped 295" out.txt || fail "--dedup did not drop 295 records"
n=$(( $(docs d.h5 | wc -l) + $(docs d.valid.h5 | wc -l) ))
[ "$n" -eq 105 ] || fail "--dedup kept $n documents, expected 105 (100 conversations + 5 texts)"
# the first occurrence is kept, in input order: the dedup'd train is a subsequence of the full train
docs d.h5 > d.train.seq; docs a.h5 > a.train.seq
python3 - d.train.seq a.train.seq <<'PY' || fail "--dedup changed the order of the documents"
import sys
d = open(sys.argv[1]).read().split("\n"); a = iter(open(sys.argv[2]).read().split("\n"))
sys.exit(0 if all(x in a for x in d) else 1)
PY

echo "unit_prepare_split: all checks passed"
