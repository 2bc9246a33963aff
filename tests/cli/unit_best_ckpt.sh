#!/usr/bin/env bash
# Best checkpoints: checkpoint.keep_best = true checkpoints each evaluation that improves valid_loss and names it in
# checkpoint.dir/best, outside the checkpoint.keep rotation (as HF's load_best_model_at_end); train --resume-from
# best|step-N resumes from it; export --from DIR --step N|best exports it (the same bytes as --from its file); a
# step that is not there is exit 2 naming the checkpoints there.
source "$SRC/tests/mpi_common.sh"
fail() { echo "FAIL: $*"; exit 1; }
# a validation set the model cannot do well on (random bytes): every evaluation on it is worse than on valid.h5
python3 -c '
import json, random
r = random.Random(5)
for _ in range(60): print(json.dumps({"input_ids": [r.randrange(256) for _ in range(40)]}))' > noise.jsonl
"$QWENFT" prepare --in noise.jsonl --out noise.h5 --vocab-size 320 --eos-id 256 > /dev/null
cat > best.cfg <<'DECK'
model = { arch = "qwen3"; vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 2;
          num_attention_heads = 4; num_key_value_heads = 2; head_dim = 8; init_seed = 7; tie_word_embeddings = true; };
data = { train = "train.h5"; valid = "valid.h5"; seq_len = 32; };
train_batch_size = 4; max_steps = 4;
optimizer = { params = { lr = 3e-3; }; };
checkpoint = { dir = "ck"; every_steps = 2; keep = 1; keep_best = true; };
eval = { every_steps = 2; };
log = { dir = "lg"; steps_per_print = 1000; };
DECK
timeout 120 "$QWENFT" train best.cfg > a.out 2>&1 || { tail a.out; fail "run 1"; }
grep -q '^best: step 4 ' a.out || fail "run 1: step 4 is not the best: $(grep -E '^(best|eval)' a.out)"
[ "$(cat ck/best)" = step-00000004.h5 ] || fail "ck/best: $(cat ck/best 2>&1)"
# run 2 evaluates on the noise: no evaluation improves, the rotation (keep = 1) goes on, the best stays
timeout 120 "$QWENFT" train best.cfg --set max_steps=8 --set data.valid=noise.h5 > b.out 2>&1 || { tail b.out; fail "run 2"; }
grep -q '^best: ' b.out && fail "run 2 found a better evaluation on noise: $(grep '^best' b.out)"
[ "$(cat ck/best)" = step-00000004.h5 ] && [ -f ck/step-00000004.h5 ] || fail "the best checkpoint was rotated away: $(ls ck)"
[ "$(cat ck/latest)" = step-00000008.h5 ] && [ ! -e ck/step-00000006.h5 ] || fail "rotation: $(ls ck)"
# export --step best / 4 / latest
"$QWENFT" export --from ck --step best --out hf_best > /dev/null || fail "export --step best"
"$QWENFT" export --from ck/step-00000004.h5 --out hf_file > /dev/null || fail "export of the file"
cmp -s hf_best/model.safetensors hf_file/model.safetensors || fail "export --step best differs from the step's file"
"$QWENFT" export --from ck --step 4 --out hf_4 > /dev/null && cmp -s hf_4/model.safetensors hf_file/model.safetensors ||
  fail "export --step 4"
"$QWENFT" export --from ck --step latest --out hf_l > /dev/null && ! cmp -s hf_l/model.safetensors hf_file/model.safetensors ||
  fail "export --step latest is not step 8"
set +e; "$QWENFT" export --from ck --step 5 --out hf_5 > /dev/null 2> e5.txt; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "no checkpoint of step 5 .*checkpoints there: .*step-00000004.h5" e5.txt && [ ! -e hf_5 ] ||
  fail "export --step 5: exit $rc, $(cat e5.txt)"
# train --resume-from best: from step 4, on valid.h5 again
timeout 120 "$QWENFT" train best.cfg --resume-from best --set max_steps=6 --set checkpoint.dir=ck \
  --set log.dir=lg2 > c.out 2>&1 || { tail c.out; fail "--resume-from best"; }
grep -q '^resuming at step 4 ' c.out || fail "--resume-from best did not resume at step 4: $(grep -i resum c.out)"
grep -q '^done: 6 steps' c.out || fail "--resume-from best: $(tail -2 c.out)"
set +e; "$QWENFT" train best.cfg --resume-from step-99 > d.out 2>&1; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "train --resume-from step-99: ck: no checkpoint of step 99" d.out || fail "--resume-from step-99: exit $rc, $(cat d.out)"
# without keep_best: no best pointer
timeout 120 "$QWENFT" train best.cfg --set checkpoint.keep_best=false --set checkpoint.dir=nb > e.out 2>&1 || fail "keep_best = false"
[ ! -e nb/best ] && ! grep -q '^best: ' e.out || fail "keep_best = false wrote a best checkpoint"
set +e; "$QWENFT" export --from nb --step best --out hf_nb > /dev/null 2> enb.txt; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "no best checkpoint" enb.txt || fail "export --step best without one: exit $rc, $(cat enb.txt)"
echo "PASS: keep_best keeps step 4 through a rotation of keep = 1; --resume-from best; export --step best/4/latest; missing steps exit 2"
