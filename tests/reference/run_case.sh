#!/usr/bin/env bash
# run_case.sh CASE — the [foundation] acceptance path on one HF golden fixture, as a new user would run it:
#   import hf/ -> prepare train/valid JSONL -> eval -> train 5 steps -> eval
# then compare every per-step loss, lr, grad_norm and both validation losses with transformers +
# torch.optim.AdamW (golden.json) to 2e-4 relative. Env: QWENFT (binary), SRC (source dir), WORK (scratch).
set -euo pipefail
case_name=$1
fx="$SRC/tests/reference/fixtures/$case_name"
[ -d "$fx" ] || { echo "missing fixture $fx"; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['config']['vocab_size'])" "$fx/golden.json")
"$QWENFT" import --from "$fx/hf" --out model.h5
"$QWENFT" prepare --in "$fx/train.jsonl" --out train.h5 --vocab-size "$vocab" --eos-id $((vocab - 1)) --pad-id 0
"$QWENFT" prepare --in "$fx/valid.jsonl" --out valid.h5 --vocab-size "$vocab" --eos-id $((vocab - 1)) --pad-id 0
cp "$fx/deck.cfg" deck.cfg
"$QWENFT" eval deck.cfg > eval_before.json
cat eval_before.json
"$QWENFT" train deck.cfg
"$QWENFT" eval deck.cfg > eval_after.json
cat eval_after.json
python3 "$SRC/tests/reference/compare.py" "$fx/golden.json" logs/metrics.jsonl eval_before.json eval_after.json --rtol 2e-4
