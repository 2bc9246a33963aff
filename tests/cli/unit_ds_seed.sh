#!/usr/bin/env bash
# `seed` acts: it is the value of model.init_seed and data.seed when they are not given (HF's `seed`, with
# `data_seed` defaulting to it). A run with seed = 11 equals, bit for bit, the run that sets both to 11, and differs
# from seed = 12; a seed given next to model.init_seed and data.seed changes nothing.
source "$SRC/tests/mpi_common.sh"
fail() { echo "FAIL: $*"; exit 1; }
base='model = { arch = "qwen3"; vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 2;
          num_attention_heads = 4; num_key_value_heads = 2; head_dim = 16; INIT };
data = { train = "train.h5"; seq_len = 32; shuffle = true; DSEED };
train_batch_size = 8; max_steps = 3; optimizer = { params = { lr = 5e-3; }; }; log = { steps_per_print = 100; };
SEED'
mk() { echo "$base" | sed -e "s/INIT/$2/" -e "s/DSEED/$3/" -e "s/SEED/$4/" > "$1.cfg"; }
mk seed11 "" "" "seed = 11;"
mk explicit11 "init_seed = 11;" "seed = 11;" ""
mk seed12 "" "" "seed = 12;"
mk both "init_seed = 11;" "seed = 11;" "seed = 99;"
for n in seed11 explicit11 seed12 both; do
  timeout 120 "$QWENFT" train $n.cfg --set checkpoint.dir=$n/ck --set log.dir=$n/l > $n.out 2>&1 || { cat $n.out; fail "$n"; }
done
grep -q "random init, seed 11" seed11.out || fail "seed = 11 did not seed the init: $(grep 'parameters from' seed11.out)"
compare explicit11 seed11 0 > /dev/null || fail "seed = 11 differs from init_seed = data.seed = 11"
[ "$(losses seed11)" = "$(losses explicit11)" ] || fail "not bit for bit"
[ "$(losses seed11)" != "$(losses seed12)" ] || fail "seed = 12 trains like seed = 11: the seed does nothing"
[ "$(losses both)" = "$(losses explicit11)" ] || fail "seed overrode explicit model.init_seed / data.seed"
echo "PASS: seed seeds the init and the shuffle when they are not set, and only then"
