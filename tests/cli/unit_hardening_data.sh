#!/usr/bin/env bash
# Issue 14 D1, D2 and the dataset items of D15: a dataset is checked against the model once, when a run opens it
# (src/train/run.c open_data): eos/pad ids, every token (a scan that also checks the stored max_token_id) and the
# loss_mask values; each defect is exit 2 naming the file, the attribute or the element, before any step.
. "$SRC/tests/hardening_common.sh"
# D1: prepare's defaults without --vocab-size store eos = pad = 151643; a 320-token model must refuse it
"$QWENFT" prepare --in t.jsonl --out p.h5 > /dev/null || { echo "FAIL: prepare p.h5"; exit 1; }
expect 2 "D1 eval: default eos 151643 vs a 320-token model" "p.h5 \(data.valid\): attribute eos_token_id = 151643 is outside the model's vocabulary \(320\)" \
  "$QWENFT" eval d.cfg --set data.valid=p.h5
expect 2 "D1 train: default eos/pad" "p.h5 \(data.train\): attribute eos_token_id = 151643" "$QWENFT" train d.cfg --set data.train=p.h5
cp g.h5 eos.h5; "$H5POKE" eos.h5 attr eos_token_id 100000; "$H5POKE" eos.h5 attr vocab_size 0
expect 2 "D1 eos_token_id = 100000 alone" "eos.h5 \(data.train\): attribute eos_token_id = 100000" "$QWENFT" train d.cfg --set data.train=eos.h5
cp g.h5 pad.h5; "$H5POKE" pad.h5 attr pad_token_id 320; "$H5POKE" pad.h5 attr vocab_size 0
expect 2 "D1 pad_token_id = V" "pad.h5 \(data.train\): attribute pad_token_id = 320" "$QWENFT" train d.cfg --set data.train=pad.h5
# D2: the stored max_token_id is a claim; the scan finds the real ids
cp g.h5 big.h5; "$H5POKE" big.h5 u32 /tokens 5 100000; "$H5POKE" big.h5 attr max_token_id 256
expect 2 "D2 token 100000 behind max_token_id = 256" "big.h5 \(data.train\): token id 100000 at /tokens\[5\] is outside the model's vocabulary \(320\)" \
  "$QWENFT" train d.cfg --set data.train=big.h5
cp g.h5 huge.h5; "$H5POKE" huge.h5 u32 /tokens 1000 4000000000
expect 2 "D2 token 4e9 (exit 2 at open, not 3 mid-run)" "huge.h5 \(data.valid\): token id 4000000000 at /tokens\[1000\]" \
  "$QWENFT" eval d.cfg --set data.valid=huge.h5
cp g.h5 lie.h5; "$H5POKE" lie.h5 u32 /tokens 3 300; "$H5POKE" lie.h5 attr max_token_id 256
expect 2 "D2 max_token_id disagrees with /tokens" "lie.h5 \(data.train\): attribute max_token_id = 256, but the largest id in /tokens is 300 \(at \[3\]\)" \
  "$QWENFT" train d.cfg --set data.train=lie.h5
# D15: loss_mask values other than 0/1; a pad id of 2^40 (it used to become 0)
cp g.h5 mask.h5; "$H5POKE" mask.h5 u8 /loss_mask 9 7
expect 2 "D15 loss_mask value 7" "mask.h5 \(data.train\): /loss_mask\[9\] = 7 \(0 or 1 expected\)" "$QWENFT" train d.cfg --set data.train=mask.h5
cp g.h5 p40.h5; "$H5POKE" p40.h5 attr pad_token_id $((1 << 40))
expect 2 "D15 pad id 2^40" "p40.h5: pad_token_id = 1099511627776 is not a token id" "$QWENFT" train d.cfg --set data.train=p40.h5
[ -e ck ] && { echo "FAIL: a refused run left a checkpoint directory"; fail=1; }
# the unmodified file trains
expect 0 "good dataset trains" "^done: 1 steps" "$QWENFT" train d.cfg
exit $fail
