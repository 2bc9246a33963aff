#!/usr/bin/env bash
# export writes a complete HF directory (src/store/export_tokenizer.c): import records the HF directory's tokenizer
# (root attributes tokenizer / tokenizer_dir), export of the model and of a checkpoint trained from it (found
# through the checkpoint's deck: model.from) copies tokenizer.json byte for byte, writes tokenizer_config.json
# (ChatML template, eos/pad) and generation_config.json (eos = <|im_end|> and <|endoftext|>, pad), with the
# identity checked against the model's record and the training data's (a different --tokenizer is exit 2 naming
# both); --max-shard-size splits the weights (index + re-import bit for bit); the exported directory generates
# with its own tokenizer exactly as the model with --tokenizer; bad --max-shard-size is exit 2. Where transformers
# is installed, AutoTokenizer on the export encodes as qwen-ft does and its chat template renders --chat's prompt.
# Env: QWENFT, WORK, SRC.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
fail() { echo "FAIL: $*"; exit 1; }
wide_fixture
"$QWENFT" import --from wide --out m.h5 > import.out
ident="hf-tokenizer.json sha256:$(sha256sum wide/tokenizer.json | cut -d' ' -f1)"
h5dump -a /tokenizer m.h5 | grep -qF "$ident" || fail "import did not record the tokenizer identity $ident"
# 1. export of the imported model
"$QWENFT" export --from m.h5 --out hf1 > export1.out
grep -q "tokenizer: tokenizer.json (carried by m.h5, identity checked)" export1.out || fail "export1: $(cat export1.out)"
h5ls m.h5/hf_files | grep -q '^tokenizer.json ' || fail "import did not carry tokenizer.json in m.h5: $(h5ls m.h5)"
cmp -s wide/tokenizer.json hf1/tokenizer.json || fail "tokenizer.json not copied byte for byte"
python3 - hf1 <<'PY' || exit 1
import json, sys
d = sys.argv[1]
g = json.load(open(f"{d}/generation_config.json")); t = json.load(open(f"{d}/tokenizer_config.json"))
want = {"eos_token_id": [2002, 2000], "pad_token_id": 2000, "do_sample": False}
bad = [k for k, v in want.items() if g.get(k) != v]
if bad: print(f"FAIL generation_config.json: {g}"); sys.exit(1)
if t.get("eos_token") != "<|im_end|>" or t.get("pad_token") != "<|endoftext|>" or "<|im_start|>" not in t.get("chat_template", ""):
    print(f"FAIL tokenizer_config.json: {t}"); sys.exit(1)
print("export of the model: tokenizer.json copied, tokenizer_config.json and generation_config.json written")
PY
# 2. a checkpoint trained from it on data prepared with the same tokenizer: the tokenizer is found through its deck
printf '%s\n' '{"text": "the quick brown fox jumps over the lazy dog"}' '{"text": "hello there, general kenobi"}' \
  '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}]}' > data.jsonl
"$QWENFT" prepare --tokenizer wide --in data.jsonl --out train.h5 > /dev/null
cat > deck.cfg <<'DECK'
model = { from = "m.h5"; };
data = { train = "train.h5"; seq_len = 16; };
train_batch_size = 2; max_steps = 2;
optimizer = { type = "AdamW"; params = { lr = 1e-3; }; };
checkpoint = { dir = "ckpt"; };
eval = { every_steps = 0; };
log = { dir = "logs"; steps_per_print = 100; };
DECK
"$QWENFT" train deck.cfg > train.out 2>&1 || { tail train.out; fail "train"; }
"$QWENFT" export --from ckpt --out hf2 --max-shard-size 40KB > export2.out
grep -q "tokenizer: tokenizer.json (carried by ckpt/step-[0-9]*.h5, identity checked)" export2.out || fail "export2: $(cat export2.out)"
cmp -s wide/tokenizer.json hf2/tokenizer.json || fail "checkpoint export: tokenizer.json"
n=$(ls hf2/model-*-of-*.safetensors | wc -l)
[ "$n" -gt 2 ] && [ -f hf2/model.safetensors.index.json ] || fail "--max-shard-size 40KB gave $n shards"
python3 - hf2 40000 <<'PY' || exit 1
import collections, json, os, sys
d, cap = sys.argv[1], int(sys.argv[2])
per = collections.Counter(json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"].values())
for f, k in per.items():
    if os.path.getsize(f"{d}/{f}") > cap + 4096 and k > 1: print(f"FAIL: {f}: {k} tensors over {cap} bytes"); sys.exit(1)
PY
"$QWENFT" import --from hf2 --out back.h5 > /dev/null
h5dump -a /tokenizer back.h5 | grep -qF "$ident" || fail "re-import of the export: tokenizer identity"
echo "checkpoint export: tokenizer found through the deck, $n shards of <= 40KB (or one larger tensor)"
# 3. the exported directory generates with its own tokenizer as the checkpoint does with --tokenizer
a=$("$QWENFT" generate --model hf2 --chat --prompt "hello there" --max-new-tokens 12 --json)
b=$("$QWENFT" generate --model ckpt --tokenizer wide --chat --prompt "hello there" --max-new-tokens 12 --json)
[ "$a" = "$b" ] || fail "generate on the export ($a) != on the checkpoint ($b)"
# 4. identity: another tokenizer is refused, naming both identities
python3 - "$FIX/tokenizer/tokenizer.json" <<'PY'
import json, os, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
w = next(w for w, i in t["model"]["vocab"].items() if i == 84); t["model"]["vocab"][w] = 84  # same ids, other bytes
t["model"]["merges"] = t["model"]["merges"][:-1]
os.makedirs("other", exist_ok=True); json.dump(t, open("other/tokenizer.json", "w", encoding="utf-8"), ensure_ascii=False)
PY
set +e
"$QWENFT" export --from ckpt --out hf3 --tokenizer other > /dev/null 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "is not the one" err.txt && grep -qF "$ident" err.txt || { cat err.txt; fail "another tokenizer: exit $rc"; }
[ ! -e hf3 ] || fail "a refused export left hf3"
for bad in 0 -5 5XB abc; do
  set +e; "$QWENFT" export --from ckpt --out hf4 --max-shard-size "$bad" > /dev/null 2> err.txt; rc=$?; set -e
  [ $rc -eq 2 ] && grep -q -- "--max-shard-size" err.txt || fail "--max-shard-size $bad: exit $rc"
done
# the files travel inside the model: the HF directory may go
mv wide wide.moved
"$QWENFT" export --from m.h5 --out hf5 > export5.out
grep -q "tokenizer: tokenizer.json (carried by m.h5, identity checked)" export5.out || fail "moved tokenizer: $(cat export5.out)"
cmp -s wide.moved/tokenizer.json hf5/tokenizer.json || fail "moved tokenizer: hf5/tokenizer.json"
# a model that records a tokenizer nobody carries any more (made before the files travelled): exit 2, nothing left
cp m.h5 old.h5 && "$H5POKE" old.h5 unlink /hf_files
set +e; "$QWENFT" export --from old.h5 --out hf6 > /dev/null 2> err6.txt; rc=$?; set -e
[ $rc -eq 2 ] && grep -qF "old.h5 records the tokenizer $ident, but no file carries it" err6.txt && [ ! -e hf6 ] ||
  fail "a recorded tokenizer that is gone: exit $rc, $(cat err6.txt)"
mv wide.moved wide
echo "identity checked (another tokenizer: exit 2); the files travel in m.h5; a recorded tokenizer nothing carries: exit 2; bad --max-shard-size: exit 2"
# 5. Qwen v1: its qwen.tiktoken is copied and also written as an equivalent tokenizer.json (Qwen2TokenizerFast)
"$QWENFT" import --from "$FIX/qwen_v1/hf" --out v1.h5 > /dev/null
"$QWENFT" export --from v1.h5 --out hfv1 --tokenizer "$FIX/tokenizer/qwen.tiktoken" > exportv1.out
cmp -s "$FIX/tokenizer/qwen.tiktoken" hfv1/qwen.tiktoken && [ -s hfv1/tokenizer.json ] || fail "v1: $(ls hfv1)"
python3 -c "import json,sys; t = json.load(open('hfv1/tokenizer_config.json')); sys.exit(t['tokenizer_class'] != 'Qwen2Tokenizer')" || fail "v1 tokenizer_config"
# the same prompt through both tokenizers gives the same continuation on the widened model (vocabulary 2048)
for p in "the quick brown fox" "hello there, general kenobi" "caf\u00e9 123 456"; do
  a=$("$QWENFT" generate --model wide --tokenizer "$FIX/tokenizer/qwen.tiktoken" --prompt "$p" --max-new-tokens 8 --json)
  b=$("$QWENFT" generate --model wide --tokenizer hfv1/tokenizer.json --prompt "$p" --max-new-tokens 8 --json)
  [ "$a" = "$b" ] || fail "v1: the converted tokenizer.json encodes '$p' differently: $a vs $b"
done
# a v1 directory with its qwen.tiktoken: import carries it, export needs no --tokenizer
cp -r "$FIX/qwen_v1/hf" v1dir && cp "$FIX/tokenizer/qwen.tiktoken" v1dir/
"$QWENFT" import --from v1dir --out v1c.h5 > /dev/null && rm -rf v1dir
"$QWENFT" export --from v1c.h5 --out hfv1c > exportv1c.out
grep -q "tokenizer: qwen.tiktoken (carried by v1c.h5, identity checked)" exportv1c.out && cmp -s "$FIX/tokenizer/qwen.tiktoken" hfv1c/qwen.tiktoken &&
  cmp -s hfv1/tokenizer.json hfv1c/tokenizer.json || fail "v1 carried qwen.tiktoken: $(cat exportv1c.out; ls hfv1c)"
echo "Qwen v1: qwen.tiktoken copied and converted to tokenizer.json (same encoding)"
# 7. the files travel with the model, the data and the checkpoints: import carries the HF directory's
# generation_config.json (sampling settings, eos list), every export writes it as it was; prepare --tokenizer
# carries the tokenizer files in the dataset; a checkpoint carries both, and so does each checkpoint.export_hf folder
cp -r wide wideg
printf '%s\n' '{"bos_token_id": 2001, "do_sample": true, "eos_token_id": [2002, 2000], "pad_token_id": 2000,' \
  '"repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20, "top_p": 0.8, "transformers_version": "4.45.0"}' \
  > wideg/generation_config.json
"$QWENFT" import --from wideg --out mg.h5 > /dev/null
"$QWENFT" export --from mg.h5 --out hfg > /dev/null
cmp -s wideg/generation_config.json hfg/generation_config.json || fail "export rewrote the imported generation_config.json: $(cat hfg/generation_config.json)"
h5ls train.h5/hf_files | grep -q '^tokenizer.json ' || fail "prepare --tokenizer did not carry tokenizer.json: $(h5ls train.h5)"
h5ls train.h5/hf_files | grep -q '^generation_config.json ' && fail "the dataset carries a generation_config.json"
sed -e 's#from = "m.h5"#from = "mg.h5"#' -e 's#dir = "ckpt"#dir = "ckptg"; export_hf = true#' deck.cfg > deckg.cfg
"$QWENFT" train deckg.cfg --set log.dir=logsg > traing.out 2>&1 || { tail traing.out; fail "train from mg.h5"; }
mv wideg wideg.gone
"$QWENFT" export --from ckptg --out hfg2 > exportg2.out || fail "export of ckptg: $(cat exportg2.out)"
hfdir=$(ls -d ckptg/step-*-hf | tail -1)
for d in hfg2 "$hfdir"; do
  cmp -s wideg.gone/generation_config.json $d/generation_config.json || fail "$d: generation_config.json: $(cat $d/generation_config.json)"
  cmp -s wide/tokenizer.json $d/tokenizer.json && [ -s $d/tokenizer_config.json ] || fail "$d: tokenizer files: $(ls $d)"
done
# a model from random init, trained on data prepared with --tokenizer: the tokenizer comes from the data
mv wide wide.gone
cat > deckr.cfg <<'DECK'
model = { arch = "qwen2"; vocab_size = 2048; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 1;
          num_attention_heads = 4; num_key_value_heads = 2; };
data = { train = "train.h5"; seq_len = 16; };
train_batch_size = 2; max_steps = 1;
checkpoint = { dir = "ckptr"; };
log = { dir = "logsr"; };
DECK
"$QWENFT" train deckr.cfg > trainr.out 2>&1 || { tail trainr.out; fail "train from random init"; }
"$QWENFT" export --from ckptr --out hfr > exportr.out || fail "export of ckptr: $(cat exportr.out)"
grep -q "tokenizer: tokenizer.json (carried by ckptr/step-[0-9]*.h5" exportr.out || fail "ckptr: $(cat exportr.out)"
cmp -s wide.gone/tokenizer.json hfr/tokenizer.json || fail "hfr/tokenizer.json is not the data's tokenizer"
mv wide.gone wide; mv wideg.gone wideg
echo "generation_config.json kept from import through checkpoints and export_hf; tokenizer files carried by data and checkpoints"
# 6. transformers, where installed (CI: BUILD/pyref, tests/reference/requirements.txt)
PY=
for p in "${PYREF:-}" python3; do [ -n "$p" ] && "$p" -c "import transformers" 2>/dev/null && { PY=$p; break; }; done
if [ -n "$PY" ]; then
  "$PY" - "$QWENFT" hf2 <<'PY'
import json, subprocess, sys
from transformers import AutoTokenizer
q, d = sys.argv[1:3]
tok = AutoTokenizer.from_pretrained(d)
gen = lambda *a: json.loads(subprocess.run([q, "generate", "--model", d, "--max-new-tokens", "6", "--json", *a],
                                           capture_output=True, text=True, check=True).stdout)
for t in ["the quick brown fox", "hello there, general kenobi <|im_end|>", "\u00e9t\u00e9 caf\u00e9 \u4f60\u597d"]:
    assert gen("--prompt", t) == gen("--prompt-ids", ",".join(map(str, tok(t)["input_ids"]))), t
msgs = [{"role": "user", "content": "hello there"}]
text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
want = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n"
assert text == want, repr(text)
assert gen("--chat", "--prompt", "hello there") == gen("--prompt-ids", ",".join(map(str, tok(text)["input_ids"])))
print("transformers: AutoTokenizer loads the export; its chat template and encoding agree with qwen-ft")
PY
  "$PY" - "$hfdir" hfg2 <<'PY'
import sys
from transformers import AutoConfig, AutoTokenizer, GenerationConfig
for d in sys.argv[1:]:
    AutoConfig.from_pretrained(d); tok = AutoTokenizer.from_pretrained(d); g = GenerationConfig.from_pretrained(d)
    assert g.temperature == 0.7 and g.top_k == 20 and g.top_p == 0.8 and g.repetition_penalty == 1.05, (d, g)
    assert tok("hello there")["input_ids"], d
print("transformers: AutoConfig, AutoTokenizer and GenerationConfig load the checkpoint.export_hf folder and its export")
PY
else
  echo "transformers not installed (neither \$PYREF nor python3 has it): the AutoTokenizer check is not run here"
fi
echo PASS
