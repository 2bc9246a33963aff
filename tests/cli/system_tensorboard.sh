#!/usr/bin/env bash
# TensorBoard reads what qwen-ft writes: a 2-rank run with log.tensorboard = true, stopped and resumed (two event
# files in log.dir), is read back with TensorBoard's own EventAccumulator (what `tensorboard --logdir` uses); every
# step's train/loss, train/lr, train/grad_norm and perf/tokens_per_s, and eval/valid_loss, equal metrics.jsonl's
# values (as float32). Needs the tensorboard Python package (.ci/system-setup.sh installs it; else exit 77).
PY=
for p in python3 "${QWENFT_CI_VENV:-/opt/qwen-ft-ci/venv}/bin/python"; do
  if "$p" -c 'import tensorboard' 2> /dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "SKIP: no Python with the tensorboard package (pip install tensorboard, or run .ci/system-setup.sh as root)"; exit 77; }
. "$SRC/tests/mpi_common.sh"
run tb 2 --set log.tensorboard=true --set max_steps=3
run tb 2 --set log.tensorboard=true --set max_steps=6 --set eval.every_steps=2
n=$(find tb/l -name 'events.out.tfevents.*' | wc -l)
[ "$n" -eq 2 ] || { echo "FAIL: expected 2 event files in tb/l, found $n"; ls -la tb/l; exit 1; }
"$PY" - tb/l <<'PY'
import json, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
d = sys.argv[1]
ea = EventAccumulator(d, size_guidance={"scalars": 0})
ea.Reload()
tags = set(ea.Tags()["scalars"])
want = {"train/loss", "train/lr", "train/grad_norm", "train/loss_scale", "perf/tokens_per_s", "perf/mfu",
        "perf/peak_host_mem_gib", "eval/valid_loss", "eval/valid_ppl"}
if not want <= tags:
    sys.exit(f"FAIL: missing tags {sorted(want - tags)} (have {sorted(tags)})")
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
lines = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
bad = 0
for tag, key, kind in [("train/loss", "loss", "loss"), ("train/lr", "lr", "loss"), ("train/grad_norm", "grad_norm", "loss"),
                       ("perf/tokens_per_s", "tokens_per_s", "loss"), ("eval/valid_loss", "valid_loss", "valid_loss")]:
    ref = {o["step"]: o[key] for o in lines if kind in o}
    got = {e.step: e.value for e in ea.Scalars(tag)}
    if sorted(got) != sorted(ref):
        print(f"FAIL: {tag}: steps {sorted(got)} vs metrics.jsonl {sorted(ref)}"); bad += 1; continue
    for s, v in ref.items():
        tol = 0.051 if key == "tokens_per_s" else 1e-6 * max(1.0, abs(v))  # metrics.jsonl prints tokens/s as %.1f
        if abs(got[s] - f32(v)) > tol:
            print(f"FAIL: {tag} step {s}: {got[s]} vs {v}"); bad += 1
    print(f"{tag}: steps {sorted(got)} match metrics.jsonl")
sys.exit(1 if bad else 0)
PY
echo PASS
