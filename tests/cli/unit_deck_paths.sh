#!/usr/bin/env bash
# Deck ergonomics: a deck's relative paths (model.from, data.*, checkpoint.dir, log.dir) are relative to the deck's
# directory, --set paths to the working directory; a missing input names the deck's file and line; --set max_steps
# replaces the deck's epochs and --set epochs its max_steps; model.preset beside model.from is checked against the
# file; a schedule that ends before the run warns at start; eval prints its JSON line and one stderr line unless
# --verbose; `estimate` runs on every shipped deck (inputs/*.cfg, inputs/ds/*.cfg) before the weights exist.
source "$SRC/tests/mpi_common.sh"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p runs/sub
MODEL='model = { arch = "qwen3"; vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 2;
          num_attention_heads = 4; num_key_value_heads = 2; head_dim = 8; init_seed = 7; tie_word_embeddings = true; };'
cat > runs/sub/d.cfg <<DECK
$MODEL
data = { train = "../../train.h5"; valid = "../../valid.h5"; seq_len = 32; };
train_batch_size = 4;
epochs = 1;
checkpoint = { dir = "ck"; };
log = { dir = "lg"; steps_per_print = 1000; };
DECK
# 1. --set max_steps over the deck's epochs; the paths are the deck's directory's
timeout 120 "$QWENFT" train runs/sub/d.cfg --set max_steps=2 > a.out 2>&1 || { tail a.out; fail "--set max_steps on a deck with epochs"; }
grep -q '^done: 2 steps' a.out || fail "max_steps=2 did not give 2 steps: $(tail -3 a.out)"
[ -f runs/sub/ck/latest ] && [ -f runs/sub/lg/metrics.jsonl ] || fail "checkpoint.dir / log.dir are not under the deck's directory: $(find runs)"
grep -q '^data: runs/sub/../../train.h5: ' a.out || fail "data.train was not resolved against the deck: $(grep ^data a.out)"
# --set paths: the working directory's
timeout 120 "$QWENFT" train runs/sub/d.cfg --set max_steps=1 --set checkpoint.dir=here/ck --set log.dir=here/lg > b.out 2>&1 ||
  { tail b.out; fail "--set checkpoint.dir"; }
[ -f here/ck/latest ] && [ ! -e runs/sub/here ] || fail "a --set path is not the working directory's"
# 2. --set epochs over a deck's max_steps
sed 's/^epochs = 1;/max_steps = 50;/' runs/sub/d.cfg > runs/sub/m.cfg
timeout 120 "$QWENFT" train runs/sub/m.cfg --set epochs=1 --set checkpoint.dir=ep/ck --set log.dir=ep/lg > c.out 2>&1 ||
  { tail c.out; fail "--set epochs on a deck with max_steps"; }
grep -q '^epochs = 1.0;' c.out && ! grep -q '^max_steps = ' c.out || fail "the resolved deck does not run by epochs"
# 3. a missing input: the deck's file and line, the rule in words
printf '%s\nmodel.from = "../x.h5";\n' "data = { train = \"../../train.h5\"; };" > runs/sub/x.cfg
sed -i 's/^model.from = "..\/x.h5";/model = { from = "..\/x.h5"; };/' runs/sub/x.cfg
set +e; "$QWENFT" train runs/sub/x.cfg > x.out 2>&1; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "runs/sub/x.cfg:2: key 'model.from': runs/sub/../x.h5 does not exist (a deck's relative paths are relative to the deck's directory)" x.out ||
  fail "missing model.from: exit $rc, $(cat x.out)"
set +e; "$QWENFT" train runs/sub/d.cfg --set data.train=nope.h5 > y.out 2>&1; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "\-\-set 'data.train=nope.h5': key 'data.train': nope.h5 does not exist (--set paths are relative to the working directory)" y.out ||
  fail "missing --set data.train: exit $rc, $(cat y.out)"
# 4. model.preset beside model.from: the architecture, checked against the file
"$QWENFT" export --from runs/sub/ck --out hfm > /dev/null
"$QWENFT" import --from hfm --out m.h5 > /dev/null
printf 'model = { from = "m.h5"; preset = "qwen3-0.6b"; };\ndata = { train = "train.h5"; seq_len = 32; };\nmax_steps = 1;\n' > p.cfg
set +e; "$QWENFT" train p.cfg > p.out 2>&1; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "p.cfg:1: key 'model.preset' does not match model.from m.h5: preset \"qwen3-0.6b\" has vocab_size 151936, the file 320" p.out ||
  fail "a preset the file contradicts: exit $rc, $(cat p.out)"
"$QWENFT" estimate p.cfg > p.est 2>&1 && fail "estimate accepted a preset the file contradicts"
rm m.h5
"$QWENFT" estimate p.cfg > p.est 2>&1 || fail "estimate of a deck whose model.from is not there yet: $(cat p.est)"
grep -q '0.596 B parameters' p.est || fail "estimate did not plan the preset's architecture: $(head -2 p.est)"
# 5. the schedule ends before the run: a warning at start
timeout 120 "$QWENFT" train runs/sub/d.cfg --set max_steps=4 --set checkpoint.dir=w/ck --set log.dir=w/lg \
  --set scheduler.type=WarmupDecayLR --set scheduler.params.total_num_steps=2 --set scheduler.params.warmup_num_steps=1 > w.out 2>&1 ||
  { tail w.out; fail "the run with a short schedule"; }
grep -q '^warning: scheduler.params.total_num_steps = 2 ends the schedule before the run.s 4 steps: steps 3..4 train at lr 0, i.e. do not train' w.out ||
  fail "no warning for the short schedule: $(grep -i warn w.out)"
grep -q '^warning: scheduler' a.out && fail "a warning without a schedule"
# 6. eval: the JSON line on stdout, one line on stderr; --verbose: the header
"$QWENFT" eval runs/sub/d.cfg > ev.json 2> ev.err || fail "eval: $(cat ev.err)"
python3 -c 'import json,sys; o=json.load(open("ev.json")); sys.exit(0 if set(o) == {"valid_loss","valid_ppl","tokens"} else 1)' ||
  fail "eval stdout: $(cat ev.json)"
[ "$(wc -l < ev.err)" -le 3 ] || fail "eval wrote $(wc -l < ev.err) lines on stderr: $(cat ev.err)"
"$QWENFT" eval runs/sub/d.cfg --verbose > /dev/null 2> evv.err || fail "eval --verbose"
grep -q '^---- resolved deck ----' evv.err || fail "eval --verbose has no header"
# 7. estimate on every shipped deck, as shipped (no weights, no data here)
n=0
for deck in "$SRC"/inputs/*.cfg "$SRC"/inputs/ds/*.cfg; do
  case $(basename "$deck") in demo.cfg) r=2 ;; a100.cfg) r=4 ;; *) r=8 ;; esac # the ranks of its Slurm script
  "$QWENFT" estimate "$deck" --ranks $r --device gpu > est.out 2>&1 || fail "estimate $deck: $(cat est.out)"
  grep -q '\*$' est.out || fail "estimate $deck marks no choice: $(cat est.out)"
  n=$((n + 1))
done
[ $n -ge 5 ] || fail "only $n shipped decks"
# 8. docs/deck.md's error list is what the binary prints, line for line
mkdir -p errs/common errs/sub && cd errs
set +e # every command here fails, on purpose
P='model = { preset = "qwen3-0.6b"; };'
msg() { printf '%s\n' "$P" "$@" > run.cfg; "$QWENFT" estimate run.cfg 2>&1 | head -1 | sed 's/^qwen-ft: //'; }
{
  msg 'zero_optimization = { stag = 2; };'
  msg 'gradient_accumulation_steps = 2.5;'
  msg 'zero_optimization = { offload_optimizer = { device = "nvme"; }; };'
  msg 'scheduler = { type = "WarmupDecay"; };'
  msg 'bf16 = { enabled = true; };' 'fp16 = { enabled = true; };'
  msg 'scheduler = { type = "WarmupDecayLR"; };'
  msg 'max_steps = 10;' 'epochs = 2;'
  msg 'train_batch_size = 32;' 'train_micro_batch_size_per_gpu = 2;' 'gradient_accumulation_steps = 3;'
  msg 'pipeline = { stages = 2; };'
  printf 'zero_optimization = { stagee = 3; };\n' > common/zero3.cfg; msg '@include "common/zero3.cfg"'
  "$QWENFT" estimate nope.cfg 2>&1 | head -1 | sed 's/^qwen-ft: //'
  printf "%s\n" "$P" > run.cfg; "$QWENFT" estimate run.cfg --set zero_optimization.stag=2 2>&1 | head -1 | sed 's/^qwen-ft: //'
  printf 'data = { train = "t.h5"; };\nmodel = { from = "../x.h5"; };\n' > sub/run.cfg
  "$QWENFT" train sub/run.cfg 2>&1 | head -1 | sed 's/^qwen-ft: //'
  printf 'model = { preset = "qwen3-0.6b"; };\n' > run.cfg
  "$QWENFT" train run.cfg --set data.train=nope.h5 2>&1 | head -1 | sed 's/^qwen-ft: //'
} > printed.txt
set -e
cd ..
sed -n '/^## Errors$/,/^## /p' "$SRC/docs/deck.md" | sed -n '/^```$/,/^```$/p' | grep -v '^```$' > documented.txt
diff documented.txt errs/printed.txt || fail "docs/deck.md's error list differs from what the binary prints (< docs, > binary)"
echo "PASS: docs/deck.md error list true; deck-relative paths, file:line on a missing input, --set replaces epochs/max_steps, preset checked, short-schedule warning, quiet eval, estimate on $n shipped decks"
