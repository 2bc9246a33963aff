#!/usr/bin/env bash
# Issue 14 D11 (deck @include), D12 and D14-D15 (run state): an @include of a directory, of a missing file (also
# one level down) or by absolute path is exit 2 naming the deck file, line and include; a log that cannot be written stops the run (exit 3, naming the file), it
# never ends "done" with an empty metrics.jsonl; the /state a run resumes from is checked like any other input
# (data_row = -5, step = 2^62: exit 2 naming the attribute).
. "$SRC/tests/hardening_common.sh"
# D11: @include
mkdir -p inc/sub; printf 'max_steps = 1;\n' > inc/part.cfg; printf '@include "missing.cfg"\n' > inc/outer.cfg
for c in 'sub:inc/i.cfg:4: @include "sub": inc/sub is a directory' 'nope.cfg:inc/i.cfg:4: @include "nope.cfg": No such file or directory \(looked for inc/nope.cfg' \
         "$PWD/inc/part.cfg:inc/i.cfg:4: @include \"$PWD/inc/part.cfg\": absolute paths are not supported" \
         'outer.cfg:inc/outer.cfg:1: @include "missing.cfg": No such file'; do
  inc=${c%%:*}; pat=${c#*:}
  printf 'model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 1; num_attention_heads = 4; };\ndata = { train = "../g.h5"; seq_len = 32; };\ntrain_batch_size = 4;\n@include "%s"\n' "$inc" > inc/i.cfg
  expect 2 "D11 @include \"$inc\"" "$pat" "$QWENFT" estimate inc/i.cfg
done
sed -i 's|@include ".*"|@include "part.cfg"|' inc/i.cfg
expect 0 "D11 a good @include" "qwen-ft estimate" "$QWENFT" estimate inc/i.cfg
# D12: log.dir whose metrics.jsonl cannot take a byte (/dev/full: every write fails with ENOSPC, as a full disk)
mkdir -p lfull && ln -s /dev/full lfull/metrics.jsonl
expect 3 "D12 metrics.jsonl on a full disk" "log.dir/metrics.jsonl: writing failed: No space left on device" \
  "$QWENFT" train d.cfg --set log.dir=lfull --set checkpoint.dir=ck12 --set max_steps=2
grep -q '^done:' out.txt && { echo "FAIL: D12 says done"; fail=1; }
# D14: a checkpoint whose /state is out of range
expect 0 "a checkpoint to resume from" "^done: 1 steps" "$QWENFT" train d.cfg --set checkpoint.dir=ck
for a in "/state/data_row -5:data_row = -5 is outside \[0, 2\^40\]" "/state/step 4611686018427387904:step = 4611686018427387904 is outside \[0, 2\^40\]" \
         "/state/sched_step 7:sched_step is larger than step = 1"; do
  kv=${a%%:*}; pat=${a#*:}; rm -rf ckb; mkdir ckb; cp ck/step-00000001.h5 ck/latest ckb/
  "$H5POKE" ckb/step-00000001.h5 attr $kv || { echo "FAIL: poke $kv"; fail=1; }
  expect 2 "D14 resume with $kv" "ckb/step-00000001.h5: /state attribute $pat" "$QWENFT" train d.cfg --set checkpoint.dir=ckb --set max_steps=3
done
rm -rf ckb; mkdir ckb; cp ck/step-00000001.h5 ck/latest ckb/; "$H5POKE" ckb/step-00000001.h5 attrf /state/loss_scale nan
expect 2 "D14 resume with loss_scale = nan" "/state attribute loss_scale = nan must be positive and finite" "$QWENFT" train d.cfg --set checkpoint.dir=ckb --set max_steps=3
expect 0 "the untouched checkpoint resumes" "resuming at step 1 " "$QWENFT" train d.cfg --set checkpoint.dir=ck --set max_steps=2
exit $fail
