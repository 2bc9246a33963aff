#!/usr/bin/env bash
# An interrupted export leaves nothing behind (kernels/base/out_file.h, issue 22): export writes into
# HF_DIR.tmp-PID-RANDOM (and, for a model that carries its tokenizer, a private directory of those files under
# $TMPDIR); SIGINT, SIGTERM or SIGHUP while it writes (QWENFT_INJECT_FAULT=0:1:stall holds it after its first
# safetensors file, docs/testing.md) ends it by that signal with neither directory, no HF_DIR and no lock file left;
# a second export to the same HF_DIR then succeeds. A checkpoint's temporary is named step-N.h5.tmp-PID-RANDOM
# too (issue 22: the pid alone could be another container's), and a failed write leaves none. Env: QWENFT, WORK, SRC.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
fail() { echo "FAIL: $*"; exit 1; }
wide_fixture
"$QWENFT" import --from wide --out m.h5 > /dev/null
TD=$(mktemp -d /tmp/qfsig.XXXXXX) # short: export uses $TMPDIR for carried files only when under 36 characters
trap 'rm -rf "$TD"' EXIT
for sig in INT TERM HUP; do
  rm -rf out.log
  set -m # job control: a background job of a script otherwise starts with SIGINT ignored
  TMPDIR="$TD" QWENFT_INJECT_FAULT=0:1:stall "$QWENFT" export --from m.h5 --out hf --max-shard-size 40KB > out.log 2>&1 &
  pid=$!
  set +m
  for _ in $(seq 1 200); do # until the first file is in the temporary and the export waits
    ls hf.tmp-*/model-00001-of-*.safetensors > /dev/null 2>&1 && ls -d "$TD"/qwen-ft-carried-* > /dev/null 2>&1 && break
    sleep 0.05
  done
  ls -d hf.tmp-* > /dev/null 2>&1 || { kill -9 $pid; fail "SIG$sig: no temporary directory appeared: $(cat out.log)"; }
  ls -d "$TD"/qwen-ft-carried-* > /dev/null 2>&1 || { kill -9 $pid; fail "SIG$sig: the carried tokenizer files were not written out under TMPDIR"; }
  kill -s "$sig" $pid
  set +e
  wait $pid; rc=$?
  set -e
  want=$((128 + $(kill -l "$sig")))
  [ "$rc" -eq "$want" ] || fail "SIG$sig: exit $rc, expected $want (death by the signal)"
  left=$(ls -a | grep -E '^hf' || true)
  [ -z "$left" ] || fail "SIG$sig left: $left"
  ! ls -d "$TD"/qwen-ft-carried-* > /dev/null 2>&1 || fail "SIG$sig left carried files: $(ls -A "$TD")"
  echo "SIG$sig: exit $rc, no hf.tmp-*, no hf, no hf.lock, no carried files"
done
"$QWENFT" export --from m.h5 --out hf > out.log || fail "export after the interruptions: $(cat out.log)"
[ -f hf/config.json ] && [ -f hf/tokenizer.json ] || fail "export after the interruptions: $(ls hf)"
echo "an interrupted export leaves nothing; the next one writes HF_DIR"
# checkpoint temporaries are CKPT.tmp-PID-RANDOM like every output's (the write fails here, on purpose, so that the
# message names the temporary), and nothing of them is left
demo_h5 100 t.jsonl g.h5
cat > d.cfg <<'DECK'
model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 1; num_attention_heads = 4; };
data = { train = "g.h5"; seq_len = 32; };
train_batch_size = 2; max_steps = 2;
checkpoint = { dir = "ck"; every_steps = 1; };
eval = { every_steps = 0; };
DECK
set +e
QWENFT_INJECT_FAULT=0:2:h5write "$QWENFT" train d.cfg > tr.out 2>&1; rc=$?
set -e
[ $rc -eq 3 ] && grep -qE "ck/step-00000002\.h5\.tmp-[0-9]+-[0-9a-f]{8}: writing dataset" tr.out ||
  { tail -5 tr.out; fail "checkpoint temporary: exit $rc, or not named CKPT.tmp-PID-RANDOM"; }
[ "$(cat ck/latest)" = "step-00000001.h5" ] && [ -z "$(ls ck | grep tmp)" ] || fail "after the failed checkpoint: $(ls ck)"
echo "checkpoint temporaries: step-N.h5.tmp-PID-RANDOM, removed when the write fails; latest untouched"
