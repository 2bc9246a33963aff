#!/usr/bin/env bash
# Datasets as people have them (prepare): a JSON array file (`[ {...}, {...} ]`, pretty-printed over many lines,
# plain or gzip) gives the dataset its records give as JSONL, read record by record (also on 2 ranks: the array
# is one rank's), and its errors name FILE:LINE (a missing ',' or ']', data after it, an invalid record: the line
# it starts on, skippable with --skip-bad); ShareGPT with a top-level "system" equals the record with a system turn;
# Alpaca "history" becomes earlier turns; a record with none of the known fields is exit 2 listing its fields and
# suggesting --map; ambiguous records are refused with exit 2 naming FILE:LINE (issue 22): a key given twice,
# text beside messages, input_ids beside text, unless --map says which field to read; --template: an unknown name,
# or auto without a template beside the tokenizer, is exit 2 listing the names (also generate's --template).
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree), MPIEXEC.
. "$SRC/tests/prepare_common.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 not found"; exit 77; }
TOK="$SRC/tests/reference/fixtures/tokenizer/tokenizer.json"
same() { # A.h5 B.h5: the same three datasets
  local d
  for d in tokens loss_mask doc_offsets; do
    cmp -s <(h5dump -d /$d "$1" | tail -n +4) <(h5dump -d /$d "$2" | tail -n +4) || fail "$1 and $2 differ in /$d"
  done
}
bad() { # WHAT PATTERN ARGS...: exit 2 with PATTERN on stderr
  local what=$1 pat=$2; shift 2
  run "$@"
  [ "$rc" -eq 2 ] && grep -qE -- "$pat" err.txt || fail "$what: exit $rc, expected 2 and /$pat/"
}
python3 - <<'PY'
import json
recs = [
    {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello, [friend] {x}"}], "system": "Be kind."},
    {"instruction": "Add", "input": "1 + 1", "output": "2", "history": [["And 2 + 2?", "4"], ["3 + 3?", "6"]]},
    {"messages": [{"role": "user", "content": "a \"quoted\" ] brace }"}, {"role": "assistant", "content": "ok"}]},
    {"text": "plain text, with a comma"},
    {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]},
]
with open("recs.jsonl", "w") as f:
    for r in recs: f.write(json.dumps(r) + "\n")
json.dump(recs, open("recs.json", "w"), indent=2)
# the ShareGPT record's system as a system turn, the Alpaca history as turns: what they mean
eq = [{"conversations": [{"from": "system", "value": "Be kind."}, {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello, [friend] {x}"}]},
      {"messages": [{"role": "user", "content": "And 2 + 2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "3 + 3?"},
                    {"role": "assistant", "content": "6"}, {"role": "user", "content": "Add\n1 + 1"}, {"role": "assistant", "content": "2"}]}]
with open("eq.jsonl", "w") as f:
    for r in eq + recs[2:]: f.write(json.dumps(r) + "\n")
PY
run prepare --tokenizer "$TOK" --in recs.jsonl --out l.h5; [ "$rc" -eq 0 ] || fail "prepare of the JSONL"
run prepare --tokenizer "$TOK" --in recs.json --out a.h5; [ "$rc" -eq 0 ] || fail "prepare of the JSON array"
grep -q "1 plain, 0 gzip, 0 zstd; 1 JSON array), 5 lines, 5 records" out.txt || fail "the JSON array's records are not counted"
same l.h5 a.h5
gzip -c recs.json > recs.json.gz
run prepare --tokenizer "$TOK" --in recs.json.gz --out g.h5; [ "$rc" -eq 0 ] || fail "prepare of the gzip JSON array"
same l.h5 g.h5
run prepare --tokenizer "$TOK" --in eq.jsonl --out e.h5; [ "$rc" -eq 0 ] || fail "prepare of the equivalents"
same l.h5 e.h5
if command -v "${MPIEXEC:-mpirun}" > /dev/null; then
  export OMPI_MCA_rmaps_base_oversubscribe=1
  rc=0; timeout 300 "${MPIEXEC:-mpirun}" -np 2 "$QWENFT" prepare --tokenizer "$TOK" --in recs.json --in recs.jsonl --out m.h5 > out.txt 2> err.txt || rc=$?
  [ "$rc" -eq 0 ] || fail "2 ranks: exit $rc"
  run prepare --tokenizer "$TOK" --in recs.json --in recs.jsonl --out m1.h5; [ "$rc" -eq 0 ] || fail "1 rank"
  same m.h5 m1.h5
fi
# broken arrays: FILE:LINE
printf '[\n  {"text": "a"},\n  {"text": "b"}\n  {"text": "c"}\n]\n' > nocomma.json
bad "a missing comma" "nocomma.json:4: expected ',' or ']' after a record" prepare --tokenizer "$TOK" --in nocomma.json --out x.h5
printf '[\n  {"text": "a"},\n  {"text": "b"}\n' > open.json
bad "an unclosed array" "open.json:4: the file ends inside the JSON array" prepare --tokenizer "$TOK" --in open.json --out x.h5
printf '[{"text": "a"}]\n{"text": "b"}\n' > after.json
bad "data after the array" "after.json:2: data after the end of the JSON array" prepare --tokenizer "$TOK" --in after.json --out x.h5
printf '[{"text": "a"},\n]\n' > trailing.json
bad "a trailing comma" "trailing.json:2: a ',' before the JSON array's closing" prepare --tokenizer "$TOK" --in trailing.json --out x.h5
printf '[{"text": "a"},\n {"text":\n   nope},\n {"text": "c"}]\n' > inner.json
bad "an invalid record" "inner.json:2: invalid JSON at line 2" prepare --tokenizer "$TOK" --in inner.json --out x.h5
run prepare --tokenizer "$TOK" --in inner.json --out x.h5 --skip-bad
[ "$rc" -eq 0 ] && grep -q "2 documents" out.txt && grep -q "skipping inner.json:2" err.txt || fail "--skip-bad in an array"
# a record of other fields: its fields and --map
echo '{"question": "q", "answer": "a"}' > other.jsonl
bad "unknown fields" "other.jsonl:1: .*its fields: question, answer; --map FIELD=ROLE" prepare --tokenizer "$TOK" --in other.jsonl --out x.h5
run prepare --tokenizer "$TOK" --in other.jsonl --out x.h5 --map question=user,answer=assistant
[ "$rc" -eq 0 ] || fail "--map reads the other fields"
# ambiguous records (issue 22): refused with FILE:LINE unless --map says which field
printf '%s\n' '{"text": "a"}' '{"text": "a", "text": "b"}' > dup.jsonl
bad "a duplicate key" "dup.jsonl:2: duplicate object key .*a key given twice is ambiguous" prepare --tokenizer "$TOK" --in dup.jsonl --out x.h5
printf '%s\n' '{"text": "a"}' '{"text": "a", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}' > two.jsonl
bad "text beside messages" "two.jsonl:2: the record has both text and messages: .*ambiguous .*--map" prepare --tokenizer "$TOK" --in two.jsonl --out x.h5
echo '{"input_ids": [1, 2], "text": "a"}' > ids.jsonl
bad "input_ids beside text" "ids.jsonl:1: the record has both input_ids and text" prepare --tokenizer "$TOK" --in ids.jsonl --out x.h5
run prepare --tokenizer "$TOK" --in two.jsonl --out x.h5 --map text=text
[ "$rc" -eq 0 ] && grep -q "2 documents" out.txt || fail "--map text=text reads the ambiguous record"
[ -e recs.jsonl ] && [ ! -e x.valid.h5 ] || fail "a refusal touched the inputs"
# --template
bad "an unknown --template" "--template qwen9: unknown \(auto, or one of qwen1, chatml, qwen2.5, qwen3, qwen2.5-base\)" prepare --tokenizer "$TOK" --in recs.jsonl --out x.h5 --template qwen9
bad "--template auto without a template" "--template auto: .* has no chat template" prepare --tokenizer "$TOK" --in recs.jsonl --out x.h5 --template auto
bad "generate --template" "--template qwen9: unknown" generate --model preset:qwen2.5-0.5b --prompt hi --template qwen9
run prepare --tokenizer "$TOK" --in recs.jsonl --out t.h5 --template qwen1
[ "$rc" -eq 0 ] && grep -q "chat template qwen1 (--template)" out.txt || fail "--template qwen1"
same l.h5 t.h5
echo '{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "tools": "[{\"name\": \"f\"}]"}' > tools.jsonl
bad "tools under qwen1" "tools.jsonl:1: conversations: tools: template qwen1 has no tools" prepare --tokenizer "$TOK" --in tools.jsonl --out x.h5
# qwen-ft's own export carries a chat template that auto recognises (chatml), in prepare and in generate
python3 "$SRC/tests/reference/widen_fixture.py" "$SRC/tests/reference/fixtures/qwen2_gqa_untied/hf" wide
cp "$TOK" wide/
run import --from wide --out m.h5; [ "$rc" -eq 0 ] || fail "import"
run export --from m.h5 --out hf; [ "$rc" -eq 0 ] || fail "export"
run prepare --tokenizer hf --in recs.jsonl --out h.h5
[ "$rc" -eq 0 ] && grep -q "chat template chatml (recognised in hf/tokenizer_config.json)" out.txt || fail "the export's template"
run generate --model hf --chat --prompt hi --max-new-tokens 2 --json; [ "$rc" -eq 0 ] || fail "generate --chat on the export"
bad "generate --template auto without a template" "--template auto: wide has no chat template" generate --model wide --chat --prompt hi --max-new-tokens 2 --template auto
run generate --model wide --chat --prompt hi --max-new-tokens 2 --json --template qwen3; [ "$rc" -eq 0 ] || fail "generate --template qwen3"
echo "datasets: JSON arrays (plain, gzip, 2 ranks), ShareGPT system, Alpaca history, --map hint, ambiguous records refused"
