#!/usr/bin/env bash
# The seed's monitoring figures on a CPU run (src/train/monitor.c, docs/hpc.md "Monitoring a run"): every "train"
# line of metrics.jsonl carries them; on CPU ranks the GPU utilisation and the link's peak are null, no PCIe byte
# moves, host memory is the node's (MemTotal - MemAvailable, plausible against /proc/meminfo), its change spans the
# last up to 99 steps and equals used(step) - used(step - window) from the lines themselves (the 100-value ring),
# the exposed communication share lies in [0, 1] (the GPU stall share null: no NCCL); the progress line says
# "GPU n/a" and the same figures; with
# optimizer offload (the offload waits count) the share is still in [0, 1]; on 2 ranks (ZeRO-3) every step spends
# some of it in MPI. The warning logic: tests/unit/test_monitor.c.
set -uo pipefail
. "$SRC/tests/unit_common.sh"
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
demo_h5 200 t.jsonl t.h5
cat > m.cfg <<'DECK'
model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 2; num_attention_heads = 4; };
data = { train = "t.h5"; seq_len = 32; };
train_batch_size = 4; train_micro_batch_size_per_gpu = 2; max_steps = 110; steps_per_print = 50;
checkpoint = { dir = "ck"; at_end = false; };
log = { dir = "lg"; };
DECK
"$QWENFT" train m.cfg > train.out 2>&1 || { echo "FAIL: train"; tail -20 train.out; exit 1; }
"$QWENFT" train m.cfg --set max_steps=12 --set log.dir=lg_off --set checkpoint.dir=ck_off \
  --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu > off.out 2>&1 ||
  { echo "FAIL: train with offload_optimizer"; tail -20 off.out; exit 1; }
grep -q "^monitor (rank 0): CPU ranks: GPU utilisation n/a, no PCIe copies$" train.out ||
  { echo "FAIL: the run header's monitor line: $(grep '^monitor' train.out)"; exit 1; }
# two ranks on one node (when mpirun is there): both ranks' shares are gathered, and the MPI collectives take time
if [ -n "${MPIEXEC:-}" ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -np 2 --oversubscribe \
    "$QWENFT" train m.cfg --set max_steps=12 --set log.dir=lg_np2 --set checkpoint.dir=ck_np2 \
    --set zero_optimization.stage=3 > np2.out 2>&1 || { echo "FAIL: train on 2 ranks"; tail -20 np2.out; exit 1; }
fi
python3 - <<'PY'
import json, re, sys
bad = 0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)
mem = {l.split(":")[0]: int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.split()[0] in ("MemTotal:", "MemAvailable:")}
total_gib = mem["MemTotal"] / 2**30
used_now_gib = (mem["MemTotal"] - mem["MemAvailable"]) / 2**30
keys = ("gpu_util_min", "gpu_util_mean", "host_mem_used_gib", "host_mem_change_gib", "host_mem_window_steps",
        "pcie_h2d_bytes", "pcie_d2h_bytes", "pcie_gbs", "pcie_peak_h2d_gbs", "pcie_peak_d2h_gbs",
        "comm_exposed", "comm_exposed_max", "comm_stall_gpu", "comm_stall_gpu_max")
def check_lines(path, n):
    rows = [json.loads(l) for l in open(path) if '"train"' in l]
    if len(rows) != n: fail(f"{path}: {len(rows)} train lines, want {n}")
    for o in rows:
        miss = [k for k in keys if k not in o]
        if miss: fail(f"{path} step {o.get('step')}: no {miss}"); continue
        if o["gpu_util_min"] is not None or o["gpu_util_mean"] is not None: fail(f"CPU ranks have no GPU utilisation: {o}")
        if o["pcie_peak_h2d_gbs"] is not None or o["pcie_peak_d2h_gbs"] is not None: fail(f"CPU ranks have no link: {o}")
        if o["comm_stall_gpu"] is not None or o["comm_stall_gpu_max"] is not None: fail(f"CPU ranks have no NCCL: {o}")
        if o["pcie_h2d_bytes"] != 0 or o["pcie_d2h_bytes"] != 0 or o["pcie_gbs"] != 0: fail(f"CPU ranks move no PCIe byte: {o}")
        if not (0 <= o["comm_exposed"] <= o["comm_exposed_max"] <= 1): fail(f"exposed share out of [0, 1]: {o}")
        u = o["host_mem_used_gib"]
        # the node's used memory: positive, below MemTotal, and of the order of what /proc/meminfo says now
        # (other processes on the machine come and go: within half of MemTotal)
        if not (isinstance(u, float) and 0 < u < total_gib and abs(u - used_now_gib) < 0.5 * total_gib):
            fail(f"host_mem_used_gib {u} against MemTotal {total_gib:.2f} GiB, used now {used_now_gib:.2f} GiB")
        if o["host_mem_window_steps"] != min(o["step"] - 1, 99): fail(f"step {o['step']}: window {o['host_mem_window_steps']}")
        if "nonfinite" in o: fail(f"a monitoring figure is flagged non-finite: {o}")
    return rows
rows = check_lines("lg/metrics.jsonl", 110)
used = {o["step"]: o["host_mem_used_gib"] for o in rows}
for o in rows:  # the change is the ring's: newest - oldest of the last min(step, 100) values
    s, w = o["step"], o["host_mem_window_steps"]
    want = used[s] - used[s - w]
    if abs(o["host_mem_change_gib"] - want) > 1e-9: fail(f"step {s}: change {o['host_mem_change_gib']}, want {want} (window {w})")
off = check_lines("lg_off/metrics.jsonl", 12)
import os
if os.path.exists("lg_np2/metrics.jsonl"):
    np2 = check_lines("lg_np2/metrics.jsonl", 12)
    if not all(o["comm_exposed"] > 0 for o in np2): fail(f"2 ranks, ZeRO-3: a step without any time in MPI: {np2}")
    print(f"2 ranks: exposed {np2[-1]['comm_exposed']:.3f} (max {np2[-1]['comm_exposed_max']:.3f})")
else:
    print("SKIP (part): no mpirun (MPIEXEC unset): the 2-rank run")
out = open("train.out").read()
prog = [l for l in out.splitlines() if l.startswith("step ")]
if [l.split()[1] for l in prog] != ["1/110", "50/110", "100/110", "110/110"]: fail(f"progress lines: {prog}")
pat = r"\| GPU n/a \| host \d+\.\d\d GiB \([+-]\d+\.\d\d/(\d+)\) \| PCIe 0\.00 GB/s of n/a \| comm \d+%$"
for l in prog:
    m = re.search(pat, l)
    if not m: fail(f"progress line without the monitoring figures: {l}")
    elif int(m.group(1)) != min(int(l.split()[1].split("/")[0]) - 1, 99): fail(f"progress window: {l}")
if re.search(r"^warning: .*GPU utilisation", out, re.M): fail("a GPU utilisation warning on CPU ranks")
print(f"monitor: {len(rows)} + {len(off)} train lines; host used {rows[-1]['host_mem_used_gib']:.2f} GiB "
      f"(change {rows[-1]['host_mem_change_gib']:+.4f} over {rows[-1]['host_mem_window_steps']} steps); exposed "
      f"{rows[-1]['comm_exposed']:.3f}, with offload {off[-1]['comm_exposed']:.3f}")
sys.exit(1 if bad else 0)
PY
