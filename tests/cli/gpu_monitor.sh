#!/usr/bin/env bash
# The monitoring figures on GPU ranks (src/train/monitor.c, docs/hpc.md "Monitoring a run"): the run header names NVML
# and the link rate measured at the start; every "train" line of metrics.jsonl has the GPU utilisation in [0, 1]
# (min <= mean), the link's peaks (1 to 300 GB/s), the step's PCIe bytes (with optimizer offload on one GPU at least
# the gradients down and the parameters up, at most twice that plus 64 MiB, fp32) and pcie_gbs = bytes / step time;
# the progress line shows them. With 2 GPUs (ZeRO-3 over NCCL) the compute stream's stall share behind NCCL is in
# [0, 1] on every step and on the progress line. Skipped (77) without a GPU or without the CUDA backend.
set -euo pipefail
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then echo "no GPU: skipped"; exit 77; fi
if "$QWENFT" report 2>&1 | grep -q '^CUDA backend: not compiled in'; then
  echo "qwen-ft was built without the CUDA backend: skipped"; exit 77
fi
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
. "$SRC/tests/mpi_common.sh"
export QWENFT_BACKEND=cuda
fails=0
run g1 1 --set max_steps=12 --set train_micro_batch_size_per_gpu=24 --set zero_optimization.stage=2 \
  --set zero_optimization.offload_optimizer.device=cpu || fails=$((fails + 1))
params=$("$QWENFT" estimate deck.cfg --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["params"])')
grep -Eq "^monitor \(rank 0\): GPU utilisation from NVML; link [0-9.]+ GB/s host -> device, [0-9.]+ back" g1.out ||
  { echo "FAIL: the run header's monitor line: $(grep '^monitor' g1.out)"; fails=$((fails + 1)); }
grep -q "^monitor: step 1: rank 0's GPU utilisation" g1.out || { echo "FAIL: no note of the utilisation's source"; fails=$((fails + 1)); }
grep -Eq "\| GPU [0-9]+% \(min [0-9]+%\) \| host [0-9.]+ GiB \([+-][0-9.]+/[0-9]+\) \| PCIe [0-9.]+ GB/s of [0-9.]+ \| comm [0-9]+%" g1.out ||
  { echo "FAIL: progress line: $(grep -m1 '^step' g1.out)"; fails=$((fails + 1)); }
if [ "$ngpu" -ge 2 ]; then
  run g2 2 --set max_steps=12 --set train_micro_batch_size_per_gpu=6 --set gradient_accumulation_steps=2 \
    --set zero_optimization.stage=3 --set bf16.enabled=true || fails=$((fails + 1))
  grep -Eq "\| comm [0-9]+% \(GPU stalled [0-9]+%\)" g2.out || { echo "FAIL: 2 GPUs: no stall share on the progress line"; fails=$((fails + 1)); }
fi
python3 - "$params" <<'PY' || fails=$((fails + 1))
import json, os, sys
n = int(sys.argv[1]); bad = 0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)
def rows(path):
    return [json.loads(l) for l in open(path) if '"train"' in l]
for o in rows("g1/l/metrics.jsonl"):
    s = o["step"]
    if not (o["gpu_util_mean"] is not None and 0 <= o["gpu_util_min"] <= o["gpu_util_mean"] <= 1): fail(f"step {s}: utilisation {o}")
    for k in ("pcie_peak_h2d_gbs", "pcie_peak_d2h_gbs"):
        if not (o[k] is not None and 1 < o[k] < 300): fail(f"step {s}: {k} = {o[k]}")
    # fp32: 4 bytes a parameter each way; the updated parameters go up during the NEXT step's forward (the
    # overlapped offload step), so step 1 uploads only its batch
    for k in ("pcie_h2d_bytes", "pcie_d2h_bytes") if s > 1 else ("pcie_d2h_bytes",):
        if not (4 * n <= o[k] <= 8 * n + (64 << 20)): fail(f"step {s}: {k} = {o[k]} for {n} parameters")
    want = (o["pcie_h2d_bytes"] + o["pcie_d2h_bytes"]) / o["step_time_s"] / 1e9
    if abs(o["pcie_gbs"] - want) > 1e-6 * max(1, want) + 1e-9: fail(f"step {s}: pcie_gbs {o['pcie_gbs']} vs {want}")
    if not (0 <= o["comm_exposed"] <= o["comm_exposed_max"] <= 1): fail(f"step {s}: exposed {o}")
    if o["comm_stall_gpu"] is not None and not (0 <= o["comm_stall_gpu"] <= o["comm_stall_gpu_max"] <= 1): fail(f"step {s}: stall {o}")
last = rows("g1/l/metrics.jsonl")[-1]
print(f"1 GPU: util {last['gpu_util_mean']:.2f}, PCIe {last['pcie_h2d_bytes']}/{last['pcie_d2h_bytes']} bytes for {n} params, "
      f"{last['pcie_gbs']:.2f} GB/s of {last['pcie_peak_h2d_gbs']:.1f}/{last['pcie_peak_d2h_gbs']:.1f}, exposed {last['comm_exposed']:.2f}")
if os.path.exists("g2/l/metrics.jsonl"):
    for o in rows("g2/l/metrics.jsonl"):
        s = o["step"]
        if not (o["comm_stall_gpu"] is not None and 0 <= o["comm_stall_gpu"] <= o["comm_stall_gpu_max"] <= 1): fail(f"2 GPUs step {s}: stall {o}")
        if not (o["gpu_util_mean"] is not None and 0 <= o["gpu_util_min"] <= o["gpu_util_mean"] <= 1): fail(f"2 GPUs step {s}: utilisation {o}")
    last = rows("g2/l/metrics.jsonl")[-1]
    print(f"2 GPUs: util {last['gpu_util_min']:.2f}/{last['gpu_util_mean']:.2f}, stall {last['comm_stall_gpu']:.3f} "
          f"(max {last['comm_stall_gpu_max']:.3f}), exposed {last['comm_exposed']:.3f}")
sys.exit(1 if bad else 0)
PY
[ "$fails" -eq 0 ] && echo PASS || { echo "FAIL: $fails"; exit 1; }
