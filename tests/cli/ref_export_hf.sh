#!/usr/bin/env bash
# export: a trained checkpoint -> HF directory. Checks: (1) re-importing the export gives the checkpoint's fp32
# master weights bit for bit; (2) `eval` of the exported HF directory equals `eval` of the checkpoint; (3) when
# python has torch + transformers (the GPU machine, a dev venv: set PYTHON), transformers loads the export and its
# validation loss equals qwen-ft's to 1e-5 (skipped, and said so, without them); (4) bf16 export is half the size
# and re-imports; (5) refusing a non-empty --out.
set -euo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fx="$SRC/tests/reference/fixtures/${CASE:-qwen3_qknorm}"
"$QWENFT" import --from "$fx/hf" --out model.h5 > /dev/null
"$QWENFT" prepare --in "$fx/train.jsonl" --out train.h5 --vocab-size 96 --eos-id 95 --pad-id 0 > /dev/null
"$QWENFT" prepare --in "$fx/valid.jsonl" --out valid.h5 --vocab-size 96 --eos-id 95 --pad-id 0 > /dev/null
cp "$fx/deck.cfg" deck.cfg
"$QWENFT" train deck.cfg > train.out
"$QWENFT" export --from ckpt --out hf_out --dtype fp32 > export.out
cat export.out
[ -f hf_out/config.json ] && [ -f hf_out/model.safetensors ] || { echo "FAIL: export wrote no HF directory"; exit 1; }
"$QWENFT" import --from hf_out --out back.h5 > /dev/null
ck="ckpt/$(cat ckpt/latest)"
h5diff -r "$ck" back.h5 /master /params > diff.txt && echo "re-import: bit-identical to the checkpoint's master weights" ||
  { echo "FAIL: re-imported export differs from the checkpoint"; head diff.txt; exit 1; }
# one valid row holding every valid document as its own segment: the loss is the per-document sum
e1=$("$QWENFT" eval deck.cfg --set model.from=hf_out --set checkpoint.dir=none --set data.seq_len=1024 2>/dev/null)
e2=$("$QWENFT" eval deck.cfg --set model.from="$ck" --set checkpoint.dir=none --set data.seq_len=1024 2>/dev/null)
[ "$e1" = "$e2" ] || { echo "FAIL: eval of the export $e1 != eval of the checkpoint $e2"; exit 1; }
echo "eval of export == eval of checkpoint: $e1"
PY=${PYTHON:-python3}
if "$PY" -c "import torch, transformers" 2>/dev/null; then
  "$PY" - "$e1" "$fx/valid.jsonl" <<'PYEOF'
import json, sys, torch
from transformers import AutoModelForCausalLM
ours = json.loads(sys.argv[1])
m = AutoModelForCausalLM.from_pretrained("hf_out", torch_dtype=torch.float32).eval()
tot, cnt = 0.0, 0
for line in open(sys.argv[2]):
    r = json.loads(line); ids = r["input_ids"]
    mask = [l != -100 for l in r["labels"]] if "labels" in r else [bool(x) for x in r["loss_mask"]] if "loss_mask" in r else [True] * len(ids)
    with torch.no_grad():
        logits = m(torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits, -1)
    for t in range(len(ids) - 1):
        if mask[t + 1]:
            tot -= lp[t, ids[t + 1]].item(); cnt += 1
hf = tot / cnt
rel = abs(hf - ours["valid_loss"]) / hf
print(f"transformers on the export: valid_loss {hf:.9f} vs qwen-ft {ours['valid_loss']:.9f} (rel {rel:.1e}, tokens {cnt} vs {ours['tokens']})")
sys.exit(0 if rel < 1e-5 and cnt == ours["tokens"] else 1)
PYEOF
else
  echo "torch/transformers not available to $PY: the transformers load check is skipped (set PYTHON to a python that has them)"
fi
"$QWENFT" export --from ckpt --out hf_bf16 --dtype bf16 > /dev/null
"$QWENFT" import --from hf_bf16 --out back16.h5 > /dev/null
b32=$(stat -c %s hf_out/model.safetensors); b16=$(stat -c %s hf_bf16/model.safetensors)
python3 -c "import sys; a, b = int(sys.argv[1]), int(sys.argv[2]); sys.exit(0 if b < 0.6 * a else 1)" "$b32" "$b16" ||
  { echo "FAIL: bf16 export size $b16 vs fp32 $b32"; exit 1; }
echo "bf16 export: $b16 bytes (fp32: $b32), re-imports"
set +e
"$QWENFT" export --from ckpt --out hf_out 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "not empty" err.txt || { echo "FAIL: export over a non-empty directory: exit $rc"; cat err.txt; exit 1; }
echo PASS
