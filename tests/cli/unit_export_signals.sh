#!/usr/bin/env bash
# An interrupted export leaves nothing behind (kernels/base/out_file.h, issue 22): export writes into
# HF_DIR.tmp-PID-RANDOM (and, for a model that carries its tokenizer, a private directory of those files under
# $TMPDIR); SIGINT, SIGTERM or SIGHUP while it writes (QWENFT_INJECT_FAULT=0:1:stall holds it after its first
# safetensors file, docs/testing.md) ends it by that signal with neither directory, no HF_DIR and no lock file left;
# a second export to the same HF_DIR then succeeds. Env: QWENFT, WORK, SRC.
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
