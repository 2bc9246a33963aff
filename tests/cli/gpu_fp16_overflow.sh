#!/usr/bin/env bash
# fp16 on the GPU ("cuda-f16" table, fp32 master weights, DeepSpeed's dynamic loss scaling) on a tiny Qwen2 model with
# head_dim 64 (so attention runs the fp16 tensor-core kernels):
#   A  fp16 with initial_scale_power = 40 and hysteresis = 2: a loss scale of 2^40 overflows the fp16 gradients for
#      real, so the first steps are skipped ("skipped": true), the first overflow only uses up the hysteresis and
#      the following ones halve the scale; every logged loss_scale must equal DeepSpeed's DynamicLossScaler fed with
#      the run's own skipped flags; the lr of every step must be the schedule at the number of steps taken before it
#      (skipped steps do not advance the scheduler), read from a reference run in fp32 that skips nothing; once the
#      scale has come down, training goes on with finite and decreasing losses.
#   B  the same run with QWENFT_INJECT_FAULT="0:K:nan" at a step K after the overflow phase: step K is skipped (A's
#      step K was not), the scale halves (the hysteresis was used up in the overflow phase), the lr holds, and the
#      run goes on to exit 0.
#   C  B's fault under ZeRO-3 with optimizer and parameter offload, the gradient shard on the device (C_dev) and in
#      host memory (C_host: offload_optimizer.gradients = host, one micro-batch, so the reduced gradients land in
#      the node copy's range): both skip exactly the overflow steps and K, and C_host's losses follow C_dev's
#      (the gradient norm is summed on the host there: rounding-level differences only) — a skipped step whose
#      node copy kept the gradients would train on them as parameters.
# Skipped (77) without a GPU or with a binary built without the CUDA backend.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
gpu_prologue
demo_h5 2000 train.jsonl train.h5
tiny_gpu_deck 70 'fp16 = { enabled = true; initial_scale_power = 40; loss_scale_window = 15; hysteresis = 2; };' > deck.cfg
gpu_train_must ref --set fp16.enabled=false
gpu_train_must A
grep -q '^backend: cuda.*fp16' A.out || { echo "FAIL: A did not select the fp16 table"; grep '^backend' A.out; exit 1; }

# checks.py MODE RUN REF [K]: MODE a (run A) or b (run B with the fault at step K; A's metrics for comparison)
cat > checks.py <<'PY'
import json, math, sys
mode, run, ref = sys.argv[1], sys.argv[2], sys.argv[3]
steps = lambda name: [json.loads(l) for l in open(f"{name}/l/metrics.jsonl") if '"loss"' in l]
rows, ref_rows = steps(run), steps(ref)
lr_ref = [r["lr"] for r in ref_rows]
fails = []
close = lambda a, b: abs(a - b) <= 1e-5 * abs(b)  # metrics.jsonl prints loss_scale with 6 significant digits
def check(ok, msg):
    if not ok: fails.append(msg)
check(len(rows) == 70 and [r["step"] for r in rows] == list(range(1, 71)), f"{run}: expected steps 1..70, got {len(rows)}")
check(len(ref_rows) == 70 and not any(r["skipped"] for r in ref_rows), "reference run: expected 70 steps, none skipped")
skipped = [bool(r["skipped"]) for r in rows]
scale = [r["loss_scale"] for r in rows]
# DeepSpeed's DynamicLossScaler.update_scale (fp16/loss_scaler.py), fed with the run's skipped flags
s, hyst, last_of, it, sim = 2.0 ** 40, 2, -1, 0, []
for of in skipped:
    if of:
        if hyst == 1: s = max(s / 2, 1.0)
        else: hyst -= 1
        last_of = it
    elif (it - last_of) % 15 == 0:
        hyst, s = 2, s * 2
    it += 1
    sim.append(s)
bad = [(i + 1, a, b) for i, (a, b) in enumerate(zip(scale, sim)) if not close(a, b)]
check(not bad, f"{run}: logged loss_scale differs from DeepSpeed's scaler at (step, logged, expected): {bad[:5]}")
# the scheduler advances only on steps taken: step i uses schedule(number of steps taken before it)
taken, bad = 0, []
for r, sk in zip(rows, skipped):
    if taken >= len(lr_ref) or abs(r["lr"] - lr_ref[taken]) > 1e-12 * lr_ref[taken]: bad.append((r["step"], r["lr"], taken))
    taken += not sk
check(not bad, f"{run}: lr is not the schedule at the number of steps taken at (step, lr, taken): {bad[:5]}")
check(all(r["loss"] is not None and math.isfinite(r["loss"]) for r in rows), f"{run}: a loss is not finite")
good = [r for r in rows if not r["skipped"]]
check(all(r["grad_norm"] is not None and math.isfinite(r["grad_norm"]) for r in good), f"{run}: a step taken has a non-finite grad_norm")
check(all(r["grad_norm"] is None for r in rows if r["skipped"]), f"{run}: a skipped step reports a finite grad_norm")
n0 = next((i for i, sk in enumerate(skipped) if not sk), len(skipped))  # leading overflow phase
if mode == "a":
    # 2^40 overflows: step 1 uses up the hysteresis (scale stays 2^40), step 2 halves it, and so on
    check(n0 >= 2 and close(scale[0], 2.0 ** 40) and close(scale[1], 2.0 ** 39), f"A: expected steps 1, 2 skipped with scales 2^40, 2^39; got {skipped[:3]} {scale[:3]}")
    check(n0 < 45, f"A: the overflow phase did not end ({n0} skipped steps)")
    check(lr_ref[1] > lr_ref[0] and all(r["lr"] == lr_ref[0] for r in rows[:n0 + 1]), "A: the lr moved during the overflow phase")
    check(len(good) >= 20, f"A: only {len(good)} steps taken")
    if len(good) >= 20:
        first, last = sum(r["loss"] for r in good[:5]) / 5, sum(r["loss"] for r in good[-5:]) / 5
        check(last < 0.85 * first, f"A: loss did not decrease (first 5 taken steps {first:.4f}, last 5 {last:.4f})")
    later = [i + 1 for i in range(n0, len(skipped)) if skipped[i]]
    print(f"A: {n0} overflow steps, scale 2^40 -> 2^{math.log2(scale[max(n0 - 1, 0)]):.0f}; later skips (after window "
          f"doublings) at steps {later}; "
          f"loss {good[0]['loss']:.4f} -> {good[-1]['loss']:.4f}")
    with open("K", "w") as f:  # B's fault step: 5 steps taken after the overflow phase, before the first doubling
        print(n0 + 6, file=f)
else:
    K = int(sys.argv[4])
    a = steps("A")
    check(not a[K - 1]["skipped"], f"A's step {K} was skipped already: choose another K")
    check(skipped[K - 1], f"B: step {K} (injected NaN) was not skipped")
    check(all(not sk for sk in skipped[n0:K - 1]), f"B: a step between the overflow phase and {K} was skipped")
    check(close(scale[K - 1], scale[K - 2] / 2), f"B: the scale did not halve at step {K}: {scale[K - 2]} -> {scale[K - 1]}")
    check(rows[K]["lr"] == rows[K - 1]["lr"], f"B: the lr advanced over the skipped step {K}")
    check(not skipped[K] and math.isfinite(rows[K]["loss"]), f"B: step {K + 1} after the injected NaN was not taken")
    print(f"B: step {K} skipped, scale {scale[K - 2]:g} -> {scale[K - 1]:g}, lr held at {rows[K - 1]['lr']:.6g}; "
          f"final loss {rows[-1]['loss']:.4f}")
for f in fails: print("FAIL:", f)
sys.exit(1 if fails else 0)
PY
python3 checks.py a A ref
K=$(cat K)
QWENFT_INJECT_FAULT="0:$K:nan" gpu_train_must B
python3 checks.py b B ref "$K"
off=(--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu
     --set zero_optimization.offload_param.device=cpu --set train_micro_batch_size_per_gpu=16 --set max_steps=$((K + 10)))
QWENFT_INJECT_FAULT="0:$K:nan" gpu_train_must C_dev "${off[@]}" --set zero_optimization.offload_optimizer.gradients=device
QWENFT_INJECT_FAULT="0:$K:nan" gpu_train_must C_host "${off[@]}" --set zero_optimization.offload_optimizer.gradients=host
grep -q "gradient shard lives in host memory, in the node copy's range" C_host.out ||
  { echo "FAIL: C_host: gradients not in the node copy"; grep "gradient shard" C_host.out; exit 1; }
python3 - "$K" <<'PY'
import json, math, sys
K = int(sys.argv[1])
st = lambda n: [json.loads(l) for l in open(f"{n}/l/metrics.jsonl") if '"loss"' in l]
d, h = st("C_dev"), st("C_host")
sd, sh = [r["step"] for r in d if r["skipped"]], [r["step"] for r in h if r["skipped"]]
worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(d, h))
ok = sd == sh and K in sh and len(d) == len(h) == K + 10 and worst < 2e-2 and all(math.isfinite(r["loss"]) for r in h)
print(f"C: skipped {sh} (device shard: {sd}); losses host vs device max rel diff {worst:.2e}")
sys.exit(0 if ok else 1)
PY
echo PASS
