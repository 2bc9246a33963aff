#!/usr/bin/env bash
# fp8 training on the GPU (fp8.enabled, kernels/cuda/matmul_fp8.cu) on a tiny Qwen2 model whose linear layers all
# take fp8 (hidden 128, intermediate 256, head_dim 64, 1024 tokens per micro-batch: multiples of 16; the policy's
# minimum width, QF_FP8_MIN_DIM = 1024, is lowered to 0 with the test hook QWENFT_FP8_MIN_DIM), 80 steps on the
# demo corpus, against the same run in bf16 (ref) and, as the yardstick of this tiny model's training noise, a bf16
# run from another init seed (ctl: a 2-layer model at lr 3e-3 is chaotic: a rounding difference moved single steps
# by 10-15% on the H200, both ways):
#   A  tensorwise: the run header names the fp8 table; the loss falls (last 10 steps' mean below 85% of the first
#      step's); fp8 really ran (some loss differs from bf16's); the means of 10-step windows from step 11 on are
#      within max(4%, 1.5 x ctl's deviation) of ref's, and the last window within max(2%, 1.5 x ctl's) (the issue's
#      7B target, 1.5% per step over 300 steps on real text, is bench/fp8_bench.sh's).
#   B  rowwise: the same; where cuBLASLt has no outer-vector fp8 kernel (cuBLASLt 13.1 on sm_90) the per-row scales
#      are applied after a unit-scale GEMM, and the backend line says so. A refusal (exit 2 naming fp8.enabled and
#      the reason) fails the test on compute capability 8.9 and newer.
#   C  current scaling recomputes exactly: activation_checkpointing = "full" gives bit-identical losses to A (a
#      weight's scale is fixed per parameter version, so the recomputed forward quantizes as the original did).
#      Checked only where the bf16 run is itself exact under recomputation on this GPU (the control).
#   E  delayed scaling of the weights (fp8.amax_history_len = 16): the header says so; the loss checks of A; not
#      bit-identical to A (the scales differ: fp8 with a history really ran); with full recomputation bit-identical
#      to itself without (the history advances once per parameter version, not per forward).
#   F  fp8.save_inputs (the forward's fp8 x^T kept for the wgrad): bit-identical losses to A, and the header says so.
#   D  checkpoints stay bf16/fp32: the fp8 run's final checkpoint loads into `qwen-ft eval` in plain bf16.
# On a GPU of compute capability < 8.9 the test instead checks that train refuses fp8 (exit 2, naming
# fp8.enabled and the compute capability), then exits 77 (nothing to train in fp8).
# Skipped (77) without a GPU or with a binary built without the CUDA backend.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
gpu_prologue
export QWENFT_FP8_MIN_DIM=0 # the test hook: the tiny model's narrow layers in fp8 too
fail() { echo "FAIL: $*"; exit 1; }
demo_h5 2000 train.jsonl train.h5
tiny_gpu_deck 80 'bf16 = { enabled = true; };' 'checkpoint = { every_steps = 80; };' > deck.cfg
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i "$(d=${CUDA_VISIBLE_DEVICES:-0}; echo "${d%%,*}")" 2>/dev/null | head -1 || true)
[ -n "$cc" ] || cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
cc10=$(awk -v c="$cc" 'BEGIN { split(c, a, "."); print a[1] * 10 + a[2] }')
echo "GPU compute capability $cc"
if [ "$cc10" -lt 89 ]; then
  if gpu_train old --set fp8.enabled=true; then fail "fp8 trained on compute capability $cc"; fi
  grep -q "^qwen-ft: key 'fp8.enabled' (fp8.recipe \"tensorwise\"): GPU .* has compute capability $cc; fp8 tensor cores need 8.9" old.out \
    || { cat old.out; fail "compute capability $cc: fp8 not refused with the expected message"; }
  echo "ok: compute capability $cc refuses fp8 with exit 2: $(head -1 old.out)"
  echo "no fp8 tensor cores (compute capability $cc < 8.9): nothing to train in fp8: skipped"; exit 77
fi

gpu_train_must ref
gpu_train_must ctl --set model.init_seed=6
gpu_train_must A --set fp8.enabled=true
grep -q '^backend: cuda.*fp8 tensorwise linear layers' A.out || { grep '^backend' A.out; fail "A did not select the fp8 table"; }
grep -q '^precision: fp8.enabled: .*recipe tensorwise' A.out || { grep '^precision' A.out; fail "A's run header does not say fp8"; }

# compare.py RUN REF CTL: the loss checks of A/B against the bf16 run, with the seed control's deviation as the
# yardstick of this model's training noise
cat > compare.py <<'PY'
import json, sys
run, ref, ctl = sys.argv[1], sys.argv[2], sys.argv[3]
loss = lambda name: [json.loads(l)["loss"] for l in open(f"{name}/l/metrics.jsonl") if '"loss"' in l]
la, lr, lc = loss(run), loss(ref), loss(ctl)
fails = []
if len(la) != 80 or len(lr) != 80 or len(lc) != 80: fails.append(f"expected 80 steps, got {len(la)}, {len(lr)}, {len(lc)}")
if la == lr: fails.append("fp8 losses are bit-identical to bf16: the fp8 GEMMs did not run")
win = lambda l: [sum(l[i:i + 10]) / 10 for i in range(10, 80, 10)] # steps 11-20, ..., 71-80
wa, wr, wc = win(la), win(lr), win(lc)
dev = lambda w: [abs(x - y) / y for x, y in zip(w, wr)]
da, dc = dev(wa), dev(wc)
bound = max(0.04, 1.5 * max(dc))
worst = max(range(len(da)), key=lambda i: da[i])
if da[worst] > bound:
    fails.append(f"steps {11 + 10 * worst}-{20 + 10 * worst}: mean loss {wa[worst]:.5f} vs bf16 {wr[worst]:.5f} "
                 f"({100 * da[worst]:.2f}% > {100 * bound:.2f}%; the seed control's largest: {100 * max(dc):.2f}%)")
lb = max(0.02, 1.5 * dc[-1])
if da[-1] > lb: fails.append(f"last 10 steps: mean {wa[-1]:.5f} vs bf16 {wr[-1]:.5f} ({100 * da[-1]:.2f}% > {100 * lb:.2f}%)")
if not wa[-1] < 0.85 * la[0]: fails.append(f"the loss did not fall: first {la[0]:.4f}, last-10 mean {wa[-1]:.4f}")
for f in fails: print(f"FAIL: {run}: {f}")
if fails: sys.exit(1)
print(f"ok {run}: 10-step windows within {100 * max(da):.2f}% of bf16 (seed control {100 * max(dc):.2f}%), last 10 "
      f"{wa[-1]:.4f} vs {wr[-1]:.4f} ({100 * (wa[-1] - wr[-1]) / wr[-1]:+.2f}%; control {100 * dc[-1]:.2f}%), loss "
      f"{la[0]:.3f} -> {la[-1]:.3f}")
PY
python3 compare.py A ref ctl

# B
if gpu_train B --set fp8.enabled=true --set fp8.recipe=rowwise; then
  grep -q '^backend: cuda.*fp8 rowwise linear layers' B.out || { grep '^backend' B.out; fail "B did not select the rowwise table"; }
  grep '^backend' B.out
  python3 compare.py B ref ctl
else
  head -3 B.out
  fail "B: rowwise refused on compute capability $cc (the unit-scale GEMM + scale form should run wherever tensorwise does)"
fi

# C
gpu_train_must ref_full --set activation_checkpointing=full
gpu_train_must A_full --set fp8.enabled=true --set activation_checkpointing=full
losses() { python3 -c "import json,sys; print([json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"loss\"' in l])" "$1/l/metrics.jsonl"; }
if [ "$(losses ref)" != "$(losses ref_full)" ]; then
  echo "skip C: the bf16 run is not bit-exact under full recomputation on this GPU (the control), so neither can fp8 be"
else
  [ "$(losses A)" = "$(losses A_full)" ] || fail "C: fp8 with activation_checkpointing = full differs from fp8 without"
  echo "ok C: fp8 losses bit-identical with and without full recomputation (bf16 control likewise)"
fi

# E
gpu_train_must E --set fp8.enabled=true --set fp8.amax_history_len=16
grep -q '^precision: fp8.enabled: .*scaling: weights delayed (fp8.amax_history_len = 16' E.out || { grep '^precision' E.out; fail "E's run header does not name delayed scaling"; }
grep -q '^precision: fp8.enabled: .*scaling: current (fp8.amax_history_len = 0' A.out || { grep '^precision' A.out; fail "A's run header does not name current scaling"; }
python3 compare.py E ref ctl
[ "$(losses E)" != "$(losses A)" ] || fail "E: delayed scaling gave A's losses bit for bit (the history did not act)"
if [ "$(losses ref)" = "$(losses ref_full)" ]; then
  gpu_train_must E_full --set fp8.enabled=true --set fp8.amax_history_len=16 --set activation_checkpointing=full
  [ "$(losses E)" = "$(losses E_full)" ] || fail "E: delayed scaling with activation_checkpointing = full differs from without"
  echo "ok E: delayed scaling recomputes exactly"
fi

# F
gpu_train_must F --set fp8.enabled=true --set fp8.save_inputs=true
grep -q '^precision: fp8.enabled: .*fp8.save_inputs: the forward keeps' F.out || { grep '^precision' F.out; fail "F's run header does not name fp8.save_inputs"; }
[ "$(losses F)" = "$(losses A)" ] || fail "F: fp8.save_inputs changed the losses (the saved copies must be the backward's own values)"
echo "ok F: fp8.save_inputs gives A's losses bit for bit"

# D
ls A/ck/step-00000080.h5 > /dev/null || fail "D: the fp8 run wrote no checkpoint at step 80"
"$QWENFT" eval deck.cfg --set model.from=A/ck --set data.valid=train.h5 --verbose > D.out 2>&1 || { tail -20 D.out; fail "D: eval of the fp8 run's checkpoint in bf16"; }
# plain bf16: the bf16 table, no fp8 precision line, no fp8 table on the backend line (--verbose lists every deck
# key, fp8.enabled = false among them: the word alone proves nothing)
grep -q '^precision: the cuda backend stores bf16' D.out && ! grep -q '^precision: fp8' D.out &&
  ! grep -q '^backend: .*fp8' D.out || { grep '^precision\|^backend\|fp8' D.out | head; fail "D: eval did not run in plain bf16"; }
grep -q '"valid_loss"' D.out || fail "D: eval printed no valid_loss"
echo "ok D: the fp8 run's checkpoint evaluates in plain bf16: $(grep '"valid_loss"' D.out)"
echo "PASS: fp8 training follows bf16 (tensorwise; rowwise where supported), recomputes exactly, checkpoints plain"
