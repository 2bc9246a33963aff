#!/usr/bin/env bash
# `qwen-ft prepare --check`: on a clean file exit 0, nothing written, and a summary that counts records per kind,
# turns, empty turns, conversations ending with a user turn, tokens (equal to the golden's), the length histogram,
# records truncated to --seq-len, exact duplicates (after normalisation: key order, whitespace, layout); on a
# file with broken lines exit 2 naming each FILE:LINE (also in the summary), exit 0 with --skip-bad; a normal
# prepare prints the same summary; --check works without --tokenizer (structure, no tokens); on a terminal a progress line (bytes, records/s, MB/s, ETA), not in a file.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
. "$SRC/tests/prepare_common.sh"

has() { grep -qF -- "$1" out.txt || fail "the summary lacks '$1'"; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }

FIX="$SRC/tests/reference/fixtures"
TOK="$FIX/tokenizer/tokenizer.json"

# 1. a clean file: the chat fixture (10 records), the Alpaca fixture (7), and three copies of one conversation
#    written differently (ShareGPT, messages with other key order and spacing, Alpaca): 2 duplicates of 1 content
cat "$FIX/chat/input.jsonl" "$FIX/formats/alpaca.jsonl" > clean.jsonl
cat >> clean.jsonl <<'EOF'
{"conversations": [{"from": "human", "value": "Is MPI fast?"}, {"from": "gpt", "value": "Yes, on a good network."}]}
{"messages": [{"content": "  Is MPI   fast? ", "role": "user"}, {"role": "assistant", "content": "Yes, on a good\nnetwork."}]}
{"instruction": "Is MPI fast?", "output": "Yes, on a good network.", "input": ""}
{"messages": [{"role": "user", "content": "A question nobody answered"}]}
EOF
run prepare --tokenizer "$TOK" --in clean.jsonl --check --seq-len 64
[ "$rc" -eq 0 ] || fail "--check of a clean file: exit $rc"
[ -z "$(ls ./*.h5 2>/dev/null)" ] || fail "--check wrote $(ls ./*.h5)"
has "21 records (pre-tokenized 1, text 2, conversations 5, messages 5, alpaca 8), 0 broken lines"
has "exact duplicates: 2 records repeat 1 content"
has "conversations ending with a user turn 1"
has "length histogram"
# tokens and the empty turns, from the goldens (+ the 4 records above, rendered by prepare); without --seq-len no
# record is cut (the length policy has its own test, unit_prepare_length.sh)
run prepare --tokenizer "$TOK" --in clean.jsonl --out clean.h5
[ "$rc" -eq 0 ] || fail "prepare of the clean file: exit $rc"
cp out.txt prepare.txt
h5dump -d /doc_offsets -b LE -o off.bin clean.h5 > /dev/null
python3 - "$FIX" off.bin prepare.txt <<'PY' || fail "the summary disagrees with the datasets"
import json, struct, sys, re
fix, offs, txt = sys.argv[1:4]
b = open(offs, "rb").read(); off = struct.unpack(f"<{len(b)//8}Q", b)
lens = [off[i + 1] - off[i] for i in range(len(off) - 1)]
chat = json.load(open(f"{fix}/chat/golden.json"))["runs"]["qwen"]["docs"]
alp = json.load(open(f"{fix}/formats/golden.json"))["runs"]["alpaca"]["docs"]
gold = [len(d["ids"]) for d in chat + alp]
assert lens[:len(gold)] == gold, (lens, gold)
s = open(txt).read()
want = f"tokens {sum(lens)},"
assert want in s, want
print(f"summary: {sum(lens)} tokens, equal to the datasets")
PY
grep -q "prepare: summary: 1 file" prepare.txt || fail "a normal prepare does not print the summary"
# empty turns: the chat fixture's record 5 (two empty values) and its empty system? (system is not a turn)
grep -qE "turns [0-9]+ \(empty 2;" prepare.txt || fail "the summary does not count 2 empty turns"

# 2. broken lines on 2 and 5 of one file and line 1 of another: exit 2 naming them, also in the summary
printf '%s\n' '{"text": "ok"}' '{"text": ' '{"text": "ok too"}' '' '[1, 2]' > broken.jsonl
printf '%s\n' '{"conversations": [{"from": "bot", "value": "x"}]}' '{"text": "fine"}' > broken2.jsonl
run prepare --tokenizer "$TOK" --in broken.jsonl --in broken2.jsonl --check
[ "$rc" -eq 2 ] || fail "--check of broken lines: exit $rc, expected 2"
has "3 broken lines (broken.jsonl:2, broken.jsonl:5, broken2.jsonl:1)"
grep -q "broken.jsonl:2: invalid JSON" err.txt || fail "stderr does not explain broken.jsonl:2"
grep -q "broken2.jsonl:1: conversations\[0\].from: unknown role" err.txt || fail "stderr does not explain broken2.jsonl:1"
run prepare --tokenizer "$TOK" --in broken.jsonl --in broken2.jsonl --check --skip-bad
[ "$rc" -eq 0 ] || fail "--check --skip-bad: exit $rc, expected 0"
has "3 records (text 3), 3 broken lines"

# a line over the 16 MiB limit (QF_JSONL_MAX_LINE) is a broken line: exit 2 naming it, or skipped with --skip-bad
python3 -c '
import sys
with open("long_line.jsonl", "w") as f:
    f.write("{\"text\": \"before\"}\n{\"text\": \"" + "a" * (65 << 20) + "\"}\n{\"text\": \"after\"}\n")'
run prepare --tokenizer "$TOK" --in long_line.jsonl --out long.h5
[ "$rc" -eq 2 ] && grep -q "long_line.jsonl:2: the line is longer than" err.txt || fail "a 65 MiB line: exit $rc"
run prepare --tokenizer "$TOK" --in long_line.jsonl --out long.h5 --skip-bad
[ "$rc" -eq 0 ] && grep -q "2 records (text 2), 1 broken line (long_line.jsonl:2)" out.txt ||
    fail "a 65 MiB line with --skip-bad: exit $rc"
rm -f long_line.jsonl

# 3. --check needs no --out, and an --out given is not written
run prepare --tokenizer "$TOK" --in broken2.jsonl --check --skip-bad --out never.h5
[ "$rc" -eq 0 ] && [ ! -e never.h5 ] || fail "--check with --out: exit $rc or never.h5 written"

# 4. --check without --tokenizer: the structure of text and chat records (counts, turns, duplicates, broken lines),
#    no tokens; a normal prepare of the same file still needs the tokenizer
run prepare --in clean.jsonl --check --seq-len 64
[ "$rc" -eq 0 ] || fail "--check without --tokenizer: exit $rc"
has "21 records (pre-tokenized 1, text 2, conversations 5, messages 5, alpaca 8), 0 broken lines"
has "exact duplicates: 2 records repeat 1 content"
has "20 text and chat records not tokenized (no --tokenizer)"
has "--seq-len 64: not computed"
printf '%s\n' '{"conversations": [{"from": "gpt", "value": "only an assistant turn"}]}' >> clean.jsonl
run prepare --in clean.jsonl --check
[ "$rc" -eq 2 ] && grep -q "clean.jsonl:22: conversations: no user or assistant turn" err.txt ||
    fail "--check without --tokenizer misses a conversation with nothing to train"
run prepare --in clean.jsonl --out notok.h5
[ "$rc" -eq 2 ] && grep -q -- "--tokenizer" err.txt || fail "prepare without --tokenizer: exit $rc"

# 5. the progress line on a terminal (script(1) gives prepare a pty); not when stderr is a file (above)
if command -v script >/dev/null; then
    python3 -c '
import json
with open("long.jsonl", "w") as f:
    for i in range(6000): f.write(json.dumps({"text": " ".join(f"word{j % 97} {i}" for j in range(400))}) + "\n")'
    script -qc "$QWENFT prepare --tokenizer $TOK --in long.jsonl --check" /dev/null > tty.txt 2>&1 || true
    tr '\r' '\n' < tty.txt | grep -qE "^prepare: [0-9.]+/[0-9.]+ MB \([0-9]+%\), [0-9]+ records, [0-9]+ records/s, [0-9.]+ MB/s, ETA [0-9]+:[0-9]{2}" ||
        fail "no progress line on a terminal: $(tr '\r' '\n' < tty.txt | head -3)"
    grep -q $'\r' err.txt && fail "a progress line went to a file"
else
    echo "(script(1) not found: the progress line on a terminal is not checked)"
fi

echo "unit_prepare_check: all checks passed"
