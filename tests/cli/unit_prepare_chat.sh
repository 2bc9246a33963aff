#!/usr/bin/env bash
# `qwen-ft prepare --tokenizer` on text and conversation records (ShareGPT conversations and messages, system
# turns, multi-turn, unicode, empty values, a leading assistant turn, special tokens inside values, a pre-tokenized
# record in between): /tokens, /loss_mask and /doc_offsets equal, element for element, what Qwen's finetune.py
# `preprocess` gives with transformers' tokenizer (tests/reference/fixtures/chat/golden.json, made by
# tests/reference/make_chat_golden.py) for --mask qwen, --mask assistant and --system TEXT; the attributes say the
# tokenizer's vocabulary, <|endoftext|> and identity. Bad input: text / conversations without --tokenizer (exit 2
# naming FILE:LINE and --tokenizer, not skippable), unknown role and other malformed turns (exit 2 naming the line
# and the key; --skip-bad skips them), --vocab-size below the tokenizer's, a missing tokenizer.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
. "$SRC/tests/prepare_common.sh"

command -v h5dump >/dev/null || { echo "SKIP: h5dump not found (hdf5-tools)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }

FIX="$SRC/tests/reference/fixtures"
TOK="$FIX/tokenizer/tokenizer.json"
GOLD="$FIX/chat/golden.json"
IN="$FIX/chat/input.jsonl"

# check FILE.h5 RUN: the three datasets (dumped raw with h5dump -b) and the attributes against golden run RUN
check() {
    local h5=$1 name=$2
    dump_packed "$h5"
    h5dump -A "$h5" > "$h5.attrs.txt"
    PYTHONPATH="$SRC/tests/reference" python3 - "$GOLD" "$name" "$h5" <<'PY' || fail "$h5 differs from golden run '$name'"
import json, re, sys
from packed_golden import mismatches, read_dumped
gold, name, h5 = sys.argv[1], sys.argv[2], sys.argv[3]
g = json.load(open(gold, encoding="utf-8"))
docs = g["runs"][name]["docs"]
tok, mask, off = read_dumped(h5)
bad = mismatches(docs, tok, mask, off)
attrs = open(f"{h5}.attrs.txt", encoding="utf-8").read()
def attr(k):
    m = re.search(r'ATTRIBUTE "%s" \{.*?DATA \{\s*\(0\): ("?)(.*?)\1\s*\}' % k, attrs, re.S)
    return m.group(2) if m else None
for k, v in (("vocab_size", str(g["vocab_size"])), ("eos_token_id", str(g["eos_token_id"])),
             ("pad_token_id", str(g["eos_token_id"]))):
    if attr(k) != v: print(f"attribute {k} = {attr(k)}, expected {v}"); bad += 1
t = attr("tokenizer") or ""
if not re.fullmatch(r"hf-tokenizer\.json sha256:[0-9a-f]{64}", t):
    print(f"attribute tokenizer = '{t}', expected 'hf-tokenizer.json sha256:<hex>'"); bad += 1
print(f"{h5}: {len(docs)} documents, {len(tok)} tokens, {sum(mask)} mask ones vs golden '{name}': "
      + ("equal" if not bad else f"{bad} mismatches"))
sys.exit(1 if bad else 0)
PY
}

# 1. the three golden runs (args from golden.json), the tokenizer given as a file
for name in qwen assistant system; do
    mapfile -t args < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["runs"][sys.argv[2]]["args"]))' "$GOLD" "$name")
    run prepare --tokenizer "$TOK" --in "$IN" --out "$name.h5" "${args[@]}"
    [ "$rc" -eq 0 ] || fail "prepare ($name) exited $rc"
    check "$name.h5" "$name"
done
# --mask qwen is the default; the tokenizer may be an HF model directory holding tokenizer.json
mkdir -p hfdir && cp "$TOK" hfdir/
run prepare --tokenizer hfdir --in "$IN" --out default.h5
[ "$rc" -eq 0 ] || fail "prepare with --tokenizer DIR exited $rc"
check default.h5 qwen
grep -q "10 documents" out.txt || fail "summary does not say 10 documents"

# 2. --eos-id ends text records with that id; --vocab-size may be larger than the tokenizer's
printf '%s\n' '{"text": "hello world"}' > one.jsonl
run prepare --tokenizer "$TOK" --in one.jsonl --out eos.h5 --eos-id 2002 --vocab-size 4096
[ "$rc" -eq 0 ] || fail "--eos-id 2002: exit $rc"
h5dump -d /tokens eos.h5 | tr -d ' \n' | grep -q ',2002}' || fail "the text record does not end with --eos-id 2002: $(h5dump -d /tokens eos.h5)"
h5dump -a /vocab_size eos.h5 | grep -q '(0): 4096' || fail "vocab_size is not 4096"

# 3. text / conversations without --tokenizer: exit 2 naming FILE:LINE and --tokenizer, also with --skip-bad
printf '%s\n' '{"input_ids": [1]}' '{"text": "hello"}' > text.jsonl
printf '%s\n' '{"input_ids": [1]}' '{"input_ids": [2]}' '{"messages": [{"role": "user", "content": "hi"}]}' > chat.jsonl
for f in text.jsonl:2 chat.jsonl:3; do
    for skip in "" --skip-bad; do
        run prepare --in "${f%%:*}" --out nt.h5 $skip
        [ "$rc" -eq 2 ] || fail "${f%%:*} without --tokenizer $skip: exit $rc, expected 2"
        grep -q "$f" err.txt || fail "the error does not name $f"
        grep -q -- "--tokenizer" err.txt || fail "the error does not say to pass --tokenizer"
        [ ! -e nt.h5 ] && [ ! -e nt.h5.tmp ] || fail "nt.h5 written by a failed prepare"
    done
done

# 4. malformed conversations: line 2 of a file, exit 2 naming FILE:2 and the key; nothing written
n_bad=0
while IFS=$'\t' read -r key rec; do
    printf '%s\n%s\n' '{"text": "good"}' "$rec" > bad.jsonl
    run prepare --tokenizer "$TOK" --in bad.jsonl --out bad.h5
    [ "$rc" -eq 2 ] || fail "$rec: exit $rc, expected 2"
    grep -q "bad.jsonl:2" err.txt || fail "$rec: the error does not name bad.jsonl:2"
    grep -qF -- "$key" err.txt || fail "$rec: the error does not name '$key'"
    grep -q -- "--skip-bad" err.txt || fail "$rec: the error does not mention --skip-bad"
    [ ! -e bad.h5 ] && [ ! -e bad.h5.tmp ] || fail "$rec: bad.h5 written by a failed prepare"
    echo "$rec" >> allbad.jsonl
    n_bad=$((n_bad + 1))
done <<'EOF'
conversations[1].from	{"conversations": [{"from": "user", "value": "hi"}, {"from": "bot", "value": "beep"}]}
unknown role "bot"	{"conversations": [{"from": "user", "value": "hi"}, {"from": "bot", "value": "beep"}]}
messages[0].role	{"messages": [{"role": "robot", "content": "x"}]}
messages[1].content	{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": 42}]}
conversations[0].value	{"conversations": [{"from": "user"}]}
conversations[0].from	{"conversations": [{"role": "user", "content": "hi"}]}
conversations is empty	{"conversations": []}
conversations is an object	{"conversations": {"from": "user", "value": "hi"}}
messages[1]	{"messages": [{"role": "user", "content": "hi"}, "assistant: hello"]}
messages[2].role: a system turn may only come first	{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "system", "content": "c"}]}
no user or assistant turn	{"messages": [{"role": "system", "content": "only a system turn"}]}
no user or assistant turn	{"conversations": [{"from": "gpt", "value": "only an assistant turn, which finetune.py drops"}]}
text is an integer	{"text": 7}
EOF

# 5. --skip-bad skips every one of them: the good records of the golden input, then all the bad ones
cat "$IN" allbad.jsonl > mixed.jsonl
run prepare --tokenizer "$TOK" --in mixed.jsonl --out mixed.h5 --skip-bad
[ "$rc" -eq 0 ] || fail "--skip-bad: exit $rc"
grep -q "skipped $n_bad bad lines" out.txt || fail "the summary does not say $n_bad lines were skipped"
grep -q "mixed.jsonl:11" out.txt || fail "the summary does not name mixed.jsonl:11 (the first bad line)"
check mixed.h5 qwen

# 6. options: --vocab-size below the tokenizer's, a tokenizer that does not exist, --mask with another value
run prepare --tokenizer "$TOK" --in "$IN" --out v.h5 --vocab-size 1000
[ "$rc" -eq 2 ] && grep -q "vocab-size" err.txt || fail "--vocab-size 1000 < 2003: exit $rc"
run prepare --tokenizer no/such/tokenizer.json --in "$IN" --out v.h5
[ "$rc" -eq 2 ] && grep -q "no/such/tokenizer.json" err.txt || fail "missing tokenizer: exit $rc or not named"
run prepare --tokenizer "$TOK" --in "$IN" --out v.h5 --mask everything
[ "$rc" -eq 2 ] && grep -q -- "--mask" err.txt || fail "--mask everything: exit $rc"
[ ! -e v.h5 ] || fail "v.h5 written by a failing command"
run prepare --help
[ "$rc" -eq 0 ] && grep -q -- "--mask=qwen|assistant" out.txt && grep -q "conversations" out.txt || fail "--help"

echo "unit_prepare_chat: all checks passed"
