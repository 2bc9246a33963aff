#!/usr/bin/env bash
# Issue 14 D3-D6, D9 and the model items of D11-D15: every model config (deck, config.json, HDF5 attributes) passes
# the dimension limits before any size is formed from it; resume and model.from compare the config and every
# tensor's shape; safetensors shapes, overlaps and unknown tensors; checked number options. Each exit 2, named.
. "$SRC/tests/hardening_common.sh"
FIX="$SRC/tests/reference/fixtures/qwen2_tied"
# python3 edit of config.json: cfgset DIR KEY JSONVALUE
cfgset() { python3 -c 'import json,sys; p=sys.argv[1]+"/config.json"; c=json.load(open(p)); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(p,"w"))' "$@"; }
# D3: num_hidden_layers = 306783379 (the heap overflow in qf_param_specs) from config.json, the deck, an HDF5 attribute
cp -r "$FIX/hf" hf3; cfgset hf3 num_hidden_layers 306783379
expect 2 "D3 config.json num_hidden_layers" "hf3/config.json: num_hidden_layers = 306783379 exceeds the limit 1024" "$QWENFT" import --from hf3 --out m3.h5
[ -e m3.h5 ] || [ -e m3.h5.tmp ] && { echo "FAIL: import left a file"; fail=1; }
expect 2 "D3 deck num_hidden_layers" "num_hidden_layers = 306783379 exceeds the limit 1024" "$QWENFT" train d.cfg --set model.num_hidden_layers=306783379
expect 0 "import of the fixture" "import:" "$QWENFT" import --from "$FIX/hf" --out m.h5
"$QWENFT" prepare --in "$FIX/train.jsonl" --out g96.h5 --vocab-size 96 --eos-id 95 > /dev/null || { echo "FAIL: prepare g96"; exit 1; }
printf 'model = { from = "mt.h5"; };\ndata = { train = "g96.h5"; seq_len = 16; };\ntrain_batch_size = 2; max_steps = 1;\ncheckpoint = { dir = "ckt"; };\n' > mt.cfg
cp m.h5 m3.h5; "$H5POKE" m3.h5 attr num_layers 306783379
expect 2 "D3 HDF5 attribute num_layers" "m3.h5: model config attributes: num_hidden_layers = 306783379 exceeds the limit" \
  "$QWENFT" train mt.cfg --set model.from=m3.h5
# D4: vocab_size = 2^31-1: a message, no crash in the teardown
expect 2 "D4 vocab_size 2147483647" "vocab_size = 2147483647 exceeds the limit 16777216" "$QWENFT" train d.cfg --set model.vocab_size=2147483647
# D5: hidden_size = 2e9: estimate must not print a negative parameter count
expect 2 "D5 estimate hidden_size 2e9" "hidden_size = 2000000000 exceeds the limit 65536" "$QWENFT" estimate d.cfg --set model.hidden_size=2000000000
cp -r "$FIX/hf" hf5; cfgset hf5 hidden_size 2000000000
printf 'model = { from = "hf5"; };\ndata = { seq_len = 32; };\ntrain_batch_size = 4;\n' > e5.cfg
expect 2 "D5 estimate of a config.json with hidden_size 2e9" "hf5/config.json: hidden_size = 2000000000 exceeds" "$QWENFT" estimate e5.cfg
expect 2 "micro batch x seq_len overflow" "exceeds the limit of 2147483648 tokens per micro-batch" \
  "$QWENFT" estimate d.cfg --set train_micro_batch_size_per_gpu=2000000 --set train_batch_size=2000000 --set data.seq_len=2000000
# D6: a safetensors shape whose product overflows (checked before multiplying)
cp -r "$FIX/hf" hf6
python3 - hf6/model.safetensors <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["model.norm.weight"]["shape"] = [1 << 40, 1 << 40, 16]
hb = json.dumps(h).encode(); open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
expect 2 "D6 safetensors shape overflow" "model.safetensors: tensor model.norm.weight: bad shape \(each dimension an integer in 0..2\^40, at most 2\^44" \
  "$QWENFT" import --from hf6 --out m6.h5
# D15: overlapping data_offsets; an unknown extra tensor; rms_norm_eps = inf
cp -r "$FIX/hf" hfo
python3 - hfo/model.safetensors <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["model.norm.weight"]["data_offsets"] = h["model.layers.0.input_layernorm.weight"]["data_offsets"]
hb = json.dumps(h).encode(); open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
expect 2 "D15 overlapping safetensors offsets" "hfo/model.safetensors: tensors .* overlap in the data" "$QWENFT" import --from hfo --out mo.h5
cp -r "$FIX/hf" hfx
python3 - hfx/model.safetensors <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
h["model.layers.0.mlp.extra_proj.weight"] = {"dtype": "F32", "shape": [4], "data_offsets": [len(data), len(data) + 16]}
hb = json.dumps(h).encode(); open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data + bytes(16))
PY
expect 2 "D15 unknown extra tensor" "tensor model.layers.0.mlp.extra_proj.weight is not a parameter of the model config.json describes" \
  "$QWENFT" import --from hfx --out mx.h5
cp m.h5 minf.h5; "$H5POKE" minf.h5 attrf rms_norm_eps inf
expect 2 "D15 rms_norm_eps = inf (HDF5 attribute)" "minf.h5: attribute rms_norm_eps must be positive|minf.h5: model config attributes: rms_norm_eps must be positive and finite" \
  "$QWENFT" train mt.cfg --set model.from=minf.h5
# D9: resume under another model, model.from with another shape or rope_theta
expect 0 "a 4-head checkpoint" "^done: 1 steps" "$QWENFT" train d.cfg --set checkpoint.dir=ck4
expect 2 "D9 resume a 4-head checkpoint under a 2-head deck" "ck4/step-00000001.h5: the checkpoint was written for another model: num_attention_heads = 2 here, 4 there" \
  "$QWENFT" train d.cfg --set checkpoint.dir=ck4 --set max_steps=2 --set model.num_attention_heads=2
expect 2 "D9 resume under another rope_theta" "another model: rope_theta = 500000 here, 10000 there" \
  "$QWENFT" train d.cfg --set checkpoint.dir=ck4 --set max_steps=2 --set model.rope_theta=5e5
cp m.h5 mt.h5; "$H5POKE" mt.h5 reshape /params/model.embed_tokens.weight 32 96
expect 2 "D9 model.from with the embedding stored [32,96]" "mt.h5: dataset /params/model.embed_tokens.weight has shape \[32,96\], the model needs \[96,32\]" \
  "$QWENFT" train mt.cfg
expect 2 "D9 model.from with a contradicting rope_theta" "key 'model.rope_theta' = 500000 contradicts model.from \(m.h5 has 10000\)" \
  "$QWENFT" train mt.cfg --set model.from=m.h5 --set model.rope_theta=5e5
expect 0 "model.from m.h5 with its own shapes trains" "^done: 1 steps" "$QWENFT" train mt.cfg --set model.from=m.h5
# D15: checked numbers on the command line
expect 2 "D15 estimate --ranks 4294967300" "--ranks=4294967300: expected an integer in \\[1, 10000000\\]" "$QWENFT" estimate d.cfg --ranks 4294967300
expect 2 "D15 generate --max-new-tokens 99999999999" "--max-new-tokens=99999999999: expected an integer in \\[1, 16777216\\]" \
  "$QWENFT" generate --model m.h5 --prompt-ids 1,2,3 --max-new-tokens 99999999999
exit $fail
