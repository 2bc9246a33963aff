#!/usr/bin/env bash
# Bad input through the real binary: every case exits 2 with a message naming the file (and line / key), and
# leaves nothing behind (no checkpoint, no output file).
set -uo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fail=0
expect2() { # expect2 "what" "pattern in stderr" cmd...
  local what=$1 pat=$2; shift 2
  "$@" > out.txt 2> err.txt; local rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL: $what: exit $rc, expected 2"; cat err.txt; fail=1; return; fi
  if ! grep -qE -- "$pat" err.txt; then echo "FAIL: $what: stderr lacks /$pat/:"; cat err.txt; fail=1; return; fi
  echo "ok: $what -> $(head -c 160 err.txt | tr '\n' ' ')"
}
head -n 200 "$SRC/inputs/demo/train.jsonl" > t.jsonl
"$QWENFT" prepare --in t.jsonl --out t.h5 --vocab-size 320 --eos-id 256 > /dev/null || { echo "FAIL: prepare"; exit 1; }
cat > good.cfg <<'DECK'
model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 1; num_attention_heads = 4; };
data = { train = "t.h5"; seq_len = 32; };
train_batch_size = 4; train_micro_batch_size_per_gpu = 4; max_steps = 1;
checkpoint = { dir = "ck"; };
DECK
# deck errors: file:line: key
printf 'model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 1; num_attention_heads = 4; };\ndata = { train = "t.h5"; seq_len = 32; };\ntrain_batch_size = 4;\nzero_optimization = { stag = 2; };\n' > typo.cfg
expect2 "unknown deck key" "typo.cfg:4.*zero_optimization.stag.*did you mean.*zero_optimization.stage" "$QWENFT" train typo.cfg
sed 's/max_steps = 1;/max_steps = "ten";/' good.cfg > type.cfg
expect2 "wrong type" "type.cfg:3.*max_steps" "$QWENFT" train type.cfg
expect2 "bf16 and fp16" "bf16|fp16" "$QWENFT" train good.cfg --set bf16.enabled=true --set fp16.enabled=true
expect2 "unknown --set key" "--set.*optimizer.params.lrr" "$QWENFT" train good.cfg --set optimizer.params.lrr=1
expect2 "batch rule" "train_batch_size" "$QWENFT" train good.cfg --set gradient_accumulation_steps=3
expect2 "missing deck" "nope.cfg" "$QWENFT" train nope.cfg
# offload across keys: refused while the deck loads, so `train` starts nothing and `deck --from-ds` (which loads the
# JSON as a deck before translating it) refuses it too, naming the JSON's line
expect2 "offload_param below stage 3" \
  "--set 'zero_optimization.offload_param.device=cpu': key 'zero_optimization.offload_param.device': parameter offload needs zero_optimization.stage 3, got stage 0" \
  "$QWENFT" train good.cfg --set zero_optimization.offload_param.device=cpu
expect2 "offload_optimizer.ratio without the offload" \
  "--set 'zero_optimization.offload_optimizer.ratio=0.4': key 'zero_optimization.offload_optimizer.ratio': 0.4 .*needs zero_optimization.offload_optimizer.device = \"cpu\", got \"none\"" \
  "$QWENFT" train good.cfg --set zero_optimization.offload_optimizer.ratio=0.4
printf '{\n  "zero_optimization": {\n    "stage": 2,\n    "offload_param": { "device": "cpu" }\n  }\n}\n' > offp.json
expect2 "deck --from-ds: offload_param below stage 3" \
  "^qwen-ft deck: offp.json:4: key 'zero_optimization.offload_param.device': parameter offload needs zero_optimization.stage 3, got stage 2" \
  "$QWENFT" deck --from-ds offp.json
printf '{\n  "zero_optimization": {\n    "stage": 2,\n    "offload_optimizer": { "ratio": 0.4 }\n  }\n}\n' > ratio.json
expect2 "deck --from-ds: offload_optimizer.ratio without the offload" \
  "^qwen-ft deck: ratio.json:4: key 'zero_optimization.offload_optimizer.ratio': 0.4 .*device = \"cpu\", got \"none\"" \
  "$QWENFT" deck --from-ds ratio.json
[ -s out.txt ] && { echo "FAIL: deck --from-ds printed a translation of a refused JSON"; fail=1; }
expect2 "unknown option" "--frobnicate" "$QWENFT" train good.cfg --frobnicate
# data and model files
echo "not hdf5" > fake.h5
expect2 "dataset not HDF5" "fake.h5" "$QWENFT" train good.cfg --set data.train=fake.h5
expect2 "token outside vocab" "t.h5.*vocab" "$QWENFT" train good.cfg --set model.vocab_size=200
expect2 "model.from missing" "missing.h5" "$QWENFT" train good.cfg --set model.from=missing.h5
mkdir -p hf && echo '{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 32}' > hf/config.json
expect2 "HF config incomplete" "config.json" "$QWENFT" import --from hf --out m.h5
[ -e m.h5 ] && { echo "FAIL: import left m.h5 behind"; fail=1; }
printf '{"input_ids": [1, 2, 3]}\n{"input_ids": [1, 2, x]}\n' > bad.jsonl
expect2 "broken JSONL line" "bad.jsonl:2" "$QWENFT" prepare --in bad.jsonl --out bad.h5
[ -e bad.h5 ] && { echo "FAIL: prepare left bad.h5 behind"; fail=1; }
[ -e ck ] && { echo "FAIL: a failed run left a checkpoint directory"; fail=1; }
# and the good deck does run
"$QWENFT" train good.cfg > good.out 2>&1 || { echo "FAIL: good deck"; cat good.out; fail=1; }
exit $fail
