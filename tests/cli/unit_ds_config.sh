#!/usr/bin/env bash
# `deepspeed = "ds_config.json"`: a DeepSpeed JSON config written as users write it ("auto", 2e8-style integers,
# nested offload sections, comments) trains on 2 CPU ranks bit for bit as its libconfig translation (`qwen-ft deck
# --from-ds`) does, with the same resolved deck; the header gives every key's fate; bad JSON names file:line (exit 2);
# the three guide configs of inputs/ds/ run `qwen-ft estimate` next to a deck that names only model and data.
source "$SRC/tests/mpi_common.sh"
fail() { echo "FAIL: $*"; exit 1; }
MODEL='model = { arch = "qwen3"; vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 3;
          num_attention_heads = 4; num_key_value_heads = 2; head_dim = 16; init_seed = 7; tie_word_embeddings = true; };
data = { train = "train.h5"; valid = "valid.h5"; seq_len = 32; shuffle = true; seed = 3; };
max_steps = 4;'
cat > ds.json <<'JSON'
{
  // the HF Trainer fills "auto"; qwen-ft fills it from the deck (or the Trainer's defaults)
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 0.5,
  "optimizer": { "type": "AdamW",
                 "params": { "lr": "auto", "betas": [0.9, 0.95], "eps": "auto", "weight_decay": 0.1 } },
  "scheduler": { "type": "WarmupDecayLR",
                 "params": { "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": 2,
                             "total_num_steps": "auto" } },
  "bf16": { "enabled": "auto" },
  "fp16": { "enabled": "auto", "loss_scale_window": 500, "hysteresis": 2 },
  "zero_optimization": {
    "stage": 2,
    "offload_optimizer": { "device": "cpu", "pin_memory": true, "buffer_count": 4 },
    "allgather_partitions": true,
    "allgather_bucket_size": 2e8,
    "overlap_comm": true,
    "reduce_scatter": true,
    "reduce_bucket_size": "auto",
    "contiguous_gradients": true,
    "round_robin_gradients": true
  },
  "steps_per_print": 1000,   # DeepSpeed's top-level name of log.steps_per_print
  "wall_clock_breakdown": false
}
JSON
# the deck names the model and data, and overrides the JSON's "auto" lr and micro batch
cat > ds.cfg <<DECK
$MODEL
train_micro_batch_size_per_gpu = 3;
optimizer = { params = { lr = 5e-3; }; };
deepspeed = "ds.json";
DECK
"$QWENFT" deck --from-ds ds.json > translated.body || fail "deck --from-ds exited non-zero"
{ echo "$MODEL"; cat translated.body; } > translated.cfg
grep -q 'allgather_partitions = true;  # accepted, no effect here' translated.cfg || fail "translation lacks the fate comment"
# run_deck NAME DECK [--set ...]: 2 ranks, checkpoints NAME/ck, metrics NAME/l
run_deck() {
  local name=$1 deck=$2; shift 2
  timeout 120 "$MPIRUN" -np 2 "$QWENFT" train "$deck" --set checkpoint.dir="$name/ck" --set log.dir="$name/l" "$@" \
    > "$name.out" 2>&1 || { tail -20 "$name.out"; fail "$name ($deck $*) exited non-zero"; }
}
run_deck ds ds.cfg
run_deck tr translated.cfg --set optimizer.params.lr=5e-3 --set train_micro_batch_size_per_gpu=3
# the resolved deck of a run's header, its own paths (checkpoint.dir, log.dir) made alike
resolved() { sed -n '/^---- resolved deck ----$/,/^-----------------------$/p' "$1" | grep -v '^# qwen-ft deck, resolved' |
  sed -e 's#"ds/#"RUN/#' -e 's#"tr/#"RUN/#'; }
resolved ds.out > ds.deck; resolved tr.out > tr.deck
[ -s ds.deck ] || fail "no resolved deck in the header"
grep -q 'stage = 2;' ds.deck && grep -q 'lr = 0.005;' ds.deck && grep -q 'gradient_accumulation_steps = 2;' ds.deck ||
  fail "the resolved deck lacks the JSON's values:"$'\n'"$(cat ds.deck)"
grep -q 'train_batch_size = 12;' ds.deck || fail "batch rule: micro 3 x accumulation 2 x 2 ranks should be 12"
diff ds.deck tr.deck || fail "ds_config.json and its translation resolve to different decks"
compare ds tr 0
python3 - ds tr <<'PY' || fail "losses differ"
import json, sys
l = [[json.loads(x)["loss"] for x in open(f"{n}/l/metrics.jsonl") if '"loss"' in x] for n in sys.argv[1:]]
sys.exit(0 if l[0] == l[1] and len(l[0]) == 4 else 1)
PY
for want in "deck keys from the DeepSpeed config ds.json: " "the deck overrides ds.json for: train_micro_batch_size_per_gpu, optimizer.params.lr" \
            "accepted, no effect here: zero_optimization.allgather_partitions (" \
            "accepted, no effect here: zero_optimization.round_robin_gradients (" \
            "accepted, no effect here: zero_optimization.offload_optimizer.buffer_count (" \
            "accepted, no effect here: fp16.loss_scale_window (fp16.enabled is false)" \
            "accepted, no effect here: zero_optimization.reduce_scatter ("; do
  grep -qF "$want" ds.out || fail "header lacks: $want"
done
# bad JSON: file and line, exit 2
printf '{\n  "zero_optimization": {\n    "stage": 2\n    "overlap_comm": true\n  }\n}\n' > bad.json
printf 'model = { preset = "qwen3-0.6b"; };\ndeepspeed = "bad.json";\n' > bad.cfg
rc=0; "$QWENFT" estimate bad.cfg > bad.out 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "bad.json:4: column .*not valid JSON.*(key 'deepspeed' at bad.cfg:2)" bad.out || fail "bad JSON: rc $rc, $(cat bad.out)"
# a wrong value: file, line and key
printf '{\n  "zero_optimization": {\n    "stage": "three"\n  }\n}\n' > bad2.json
printf 'model = { preset = "qwen3-0.6b"; };\ndeepspeed = "bad2.json";\n' > bad2.cfg
rc=0; "$QWENFT" estimate bad2.cfg > bad2.out 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "bad2.json:3: key 'zero_optimization.stage'" bad2.out || fail "bad value: rc $rc, $(cat bad2.out)"
# a DeepSpeed feature qwen-ft does not have
printf '{\n  "pipeline": { "stages": 2 }\n}\n' > pipe.json
set +e
printf 'model = { preset = "qwen3-0.6b"; };\n' > pipe.cfg
"$QWENFT" estimate pipe.cfg --set deepspeed=pipe.json > pipe.out 2>&1; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "pipe.json:2: key 'pipeline'.*pipeline parallelism" pipe.out || fail "pipeline: rc $rc, $(cat pipe.out)"
# the guide configs, next to a deck that names only the model and data, run `estimate` (Qwen2.5-14B on 8 GPUs)
# and `train` (the small model, 2 CPU ranks) without an edit
for j in ds_config_zero2 ds_config_zero3 ds_config_zero3_offload; do
  cp "$SRC/inputs/ds/$j.json" .
  printf 'model = { preset = "qwen2.5-14b"; };\ndata = { train = "train.h5"; };\ndeepspeed = "%s.json";\n' $j > $j.cfg
  "$QWENFT" estimate $j.cfg --ranks 8 --device gpu > $j.est 2>&1 || fail "estimate $j: $(cat $j.est)"
  grep -q '\*$' $j.est || fail "estimate $j marks no choice: $(cat $j.est)"
  { echo "$MODEL" | sed 's/max_steps = 4/max_steps = 2/'; echo "deepspeed = \"$j.json\";"; } > $j.train.cfg
  run_deck $j $j.train.cfg
  grep -q "deck keys from the DeepSpeed config $j.json: " $j.out || fail "$j: the header does not name the JSON's keys"
  grep -q "accepted, no effect here: zero_optimization.contiguous_gradients (" $j.out || fail "$j: fates missing"
  [ "$(grep -c '"loss"' $j/l/metrics.jsonl)" -eq 2 ] || fail "$j: expected 2 steps"
done
# the bundled deck that names only the model and the data (its JSON relative to the deck's directory)
"$QWENFT" estimate "$SRC/inputs/ds/qwen14b_zero3.cfg" --set model.from= --set model.preset=qwen2.5-14b --ranks 8 \
  --device gpu > bundled.est 2>&1 || fail "inputs/ds/qwen14b_zero3.cfg: $(cat bundled.est)"
grep -q "^3      optimizer+param .*\*$" ds_config_zero3_offload.est || fail "the offload config is not the estimate's choice"
echo "PASS: ds_config.json == its translated deck (resolved deck and losses bit for bit); fates listed; errors name file:line"
